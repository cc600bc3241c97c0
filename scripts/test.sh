#!/usr/bin/env bash
# Every test, from a fresh machine: system packages (lavapipe, Chromium, Firefox), npm ci, lint, type check,
# import cycles, the API reference, unit tests in Node on real WebGPU (Dawn on lavapipe), browser tests in Chromium (SwiftShader),
# the correctness cases in Firefox (wgpu on lavapipe), the built package in Deno (wgpu on lavapipe), the package test.
# GPU tests never skip: without an adapter they fail and say what to install.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-system.sh lavapipe chromium firefox
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1   # Playwright uses the system Chromium; it cannot download its own here
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}  # quiets Dawn's warning
# One Mesa (lavapipe) shader cache for this run, empty at the start and deleted at the end: the unit
# tests' files (test/global-setup.ts otherwise makes one per vitest run) and the package test's Node
# forward compile each kernel once between them; nothing carries over to the next run.
if [ -z "${MESA_SHADER_CACHE_DIR:-}${MESA_SHADER_CACHE_DISABLE:-}" ]; then
  MESA_SHADER_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/webgpu-attention-mesa-XXXXXX")
  export MESA_SHADER_CACHE_DIR
  trap 'rm -rf "$MESA_SHADER_CACHE_DIR"' EXIT
fi
npm ci --no-audit --no-fund

mkdir -p test-reports
rm -f test-reports/*.json
status=0
# Each stage's wall time, printed with the summary (where CI's time goes).
stages=()
stage() { stages+=("$(printf '%5ds  %s' "$((SECONDS - stage_start))" "$stage_name")"); }
begin() { stage_name=$1; stage_start=$SECONDS; echo "== $1"; }
begin "lint and format (Biome)"
npx biome check . || status=1
stage
begin "type check"
npx tsc --noEmit -p . || status=1
stage
begin "import cycles (type-only included) in src/"
node scripts/check-cycles.mjs || status=1
stage
begin "API reference (TypeDoc from the TSDoc comments; a warning fails)"
npx typedoc --treatWarningsAsErrors --logLevel Warn || status=1
stage
begin "unit tests (vitest, Node, WebGPU through Dawn on lavapipe)"
npx vitest run --reporter=default --reporter=json --outputFile.json=test-reports/vitest.json || status=1
stage
begin "browser tests (Playwright, Chromium's WebGPU)"
PLAYWRIGHT_JSON_OUTPUT_NAME=test-reports/playwright.json npx playwright test --reporter=list,json || status=1
stage
begin "Firefox (WebGPU through wgpu on lavapipe: the browser correctness cases and the demo's correctness panel)"
node scripts/run-ts.mjs scripts/firefox-test.ts || status=1
stage
begin "Deno (the built package on Deno's WebGPU, wgpu on lavapipe: each subgroup-free kernel variant, f32 and f16; q4_0 and q8_0 weights)"
node scripts/deno-test.mjs || status=1
stage
begin "package test (npm pack into a throwaway Node script and Vite app)"
node scripts/pack-test.mjs --dev || status=1
stage
echo "== summary"
echo "wall time of each stage (${SECONDS}s since the start, set-up and npm ci included):"
printf '%s\n' "${stages[@]}"
node scripts/summarise-tests.mjs test-reports/vitest.json test-reports/playwright.json || status=1
exit $status
