#!/usr/bin/env bash
# `npm run bench`, from a fresh machine: installs the npm packages if missing, then runs the headless
# benchmark (scripts/bench.ts; arguments go to it, --help). bench.ts reads its arguments first and only
# then, for a run, installs the system packages it needs (scripts/setup-system.sh: lavapipe, and
# Chromium unless --node), so --help and a bad argument never touch the system.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules/vite ] || PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund >&2
exec node scripts/run-ts.mjs scripts/bench.ts "$@"
