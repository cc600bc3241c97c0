#!/usr/bin/env bash
# `npm start`, from a fresh machine: installs the npm packages if missing, then scripts/start.mjs sets
# up the system packages (scripts/setup-system.sh: lavapipe, Chromium), builds the demo page and serves
# it on 127.0.0.1 (PORT, default 4173), printing the URL. Open it in a browser with WebGPU (Chromium
# on Linux: --enable-unsafe-webgpu).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules/vite ] || PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund >&2
exec node scripts/start.mjs "$@"
