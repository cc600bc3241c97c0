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
# A stage that failed is named again at the very end (a log's tail is what CI shows).
failed_stages=()
fail() { status=1; failed_stages+=("${1:-$stage_name}"); }
begin "lint and format (Biome)"
npx biome check . || fail
stage
begin "type check, and the API reference (TypeDoc from the TSDoc comments; a warning fails) beside it"
typedoc_log=$(mktemp)
npx typedoc --treatWarningsAsErrors --logLevel Warn > "$typedoc_log" 2>&1 &
typedoc_pid=$!
npx tsc --noEmit -p . || fail "type check"
wait "$typedoc_pid" || { echo "typedoc failed:"; fail "API reference (TypeDoc)"; }
cat "$typedoc_log"
rm -f "$typedoc_log"
stage
begin "import cycles (type-only included) in src/"
node scripts/check-cycles.mjs || fail
stage
begin "unit tests (vitest, Node, WebGPU through Dawn on lavapipe)"
npx vitest run --reporter=default --reporter=json --outputFile.json=test-reports/vitest.json || fail
stage
begin "browser tests (Playwright, Chromium's WebGPU)"
PLAYWRIGHT_JSON_OUTPUT_NAME=test-reports/playwright.json npx playwright test --reporter=list,json || fail
stage
# Firefox, Deno and the package test run side by side: each spends most of its time in one process
# compiling shaders (LLVM) or installing, so on two cores together they take about the longest of them;
# each one's output is kept and printed whole when it ends, with its own wall time.
begin "build (dist/: what the Deno stage runs and the package test packs)"
npm run build || fail
stage
side_start=$SECONDS
side() { # side LOG COMMAND...: runs COMMAND, its output to LOG, then its rc and wall time to LOG.rc
  local log=$1 t0=$SECONDS rc=0
  shift
  "$@" > "$log" 2>&1 || rc=$?
  printf '%s %s\n' "$rc" "$((SECONDS - t0))" > "$log.rc"
}
side_dir=$(mktemp -d "${TMPDIR:-/tmp}/webgpu-attention-stages-XXXXXX")
names=(
  "Firefox (WebGPU through wgpu on lavapipe: the browser correctness cases and the demo's correctness panel)"
  "Deno (the built package on Deno's WebGPU, wgpu on lavapipe: each subgroup-free kernel variant, f32 and f16; q4_0 and q8_0 weights)"
  "package test (npm pack into a throwaway Node script and Vite app)"
)
echo "== ${names[0]}, ${names[1]%% (*} and the ${names[2]%% (*}, side by side"
side "$side_dir/firefox" node scripts/run-ts.mjs scripts/firefox-test.ts &
firefox_pid=$!
side "$side_dir/deno" node scripts/deno-test.mjs &
deno_pid=$!
wait "$firefox_pid" || true
side "$side_dir/pack" node scripts/pack-test.mjs --dev --no-build # after Firefox: two at a time
wait "$deno_pid" || true
i=0
for job in firefox deno pack; do
  read -r rc secs < "$side_dir/$job.rc" || { rc=1; secs=0; }
  echo "== ${names[$i]}"
  cat "$side_dir/$job"
  [ "$rc" = 0 ] || { echo "(exit status $rc)"; fail "${names[$i]%% (*}"; }
  stages+=("$(printf '%5ds  %s' "$secs" "${names[$i]} (side by side)")")
  i=$((i + 1))
done
rm -rf "$side_dir"
stages+=("$(printf '%5ds  %s' "$((SECONDS - side_start))" "the three above, side by side")")
echo "== summary"
echo "wall time of each stage (${SECONDS}s since the start, set-up and npm ci included):"
printf '%s\n' "${stages[@]}"
node scripts/summarise-tests.mjs test-reports/vitest.json test-reports/playwright.json || status=1
if [ ${#failed_stages[@]} -gt 0 ]; then
  echo "FAILED stages (their output is above, under == NAME):"
  printf '  %s\n' "${failed_stages[@]}"
fi
exit $status
