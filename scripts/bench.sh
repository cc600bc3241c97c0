#!/usr/bin/env bash
# `npm run bench`, from a fresh machine: installs Chromium (and lavapipe) if missing and the npm
# packages, then runs the headless benchmark (scripts/bench.ts). Arguments go to bench.ts (--help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-system.sh lavapipe chromium >&2
[ -d node_modules/vite ] || PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund >&2
exec node scripts/run-ts.mjs scripts/bench.ts "$@"
