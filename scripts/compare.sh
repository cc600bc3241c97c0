#!/usr/bin/env bash
# The main job, from a fresh machine: installs lavapipe if missing and the npm packages, then runs one
# layer on WebGPU and on the CPU reference and prints the difference and the timings.
#   npm run compare -- --seq 512 --embed 512 --heads 8 --causal
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-system.sh lavapipe >&2
[ -d node_modules/vite ] || PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund >&2
exec node scripts/run-ts.mjs scripts/compare.ts "$@"
