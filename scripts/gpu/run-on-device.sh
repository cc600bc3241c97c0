#!/usr/bin/env bash
# Runs ON the GPU machine (the device tool's `run`), from the repo root, after scripts/gpu/prepare.sh
# filled scripts/gpu/carry/ here and the call carried it (scripts/gpu/README.md has the exact call):
#   1. checks the carried bundle, Node and the `webgpu` package (Dawn), and that the bundle was built
#      from the sources in this tree;
#   2. sets up Vulkan as the device README says: the loader from carried .debs when `ldconfig -p` has
#      no libvulkan.so.1, the NVIDIA ICD from /usr/local/nvidia when the loader's usual folders lack it;
#   3. probes the adapter (an NVIDIA one is required; with loader diagnostics when there is none);
#   4. runs bench-gpu (B=4 S=4096 E=1024 H=16, f32 and f16, causal and not, gate first) writing
#      $OUT/bench-h200.json and $OUT/bench-h200.log, and prints the summary.
#
#   bash scripts/gpu/run-on-device.sh [extra bench-gpu options, e.g. --shapes 4x4096x1024x16,1x8192x1024x16]
# Environment (all optional):
#   OUT                   where results go (the device tool sets it; default bench-results/device-<date>)
#   EXPECT_ADAPTER        text the adapter must contain (default nvidia; empty: any adapter, for tests here)
#   BENCH_TIME_LIMIT_S    bench-gpu's own time limit (default 360): it skips what is left past it
#   BENCH_TIMEOUT_S       hard stop for bench-gpu (default 420; the JSON written so far stays)
#   KERNEL_TIMINGS        1 (default): a few profiled forwards per configuration too; 0: none
#   ALLOW_STALE           1: run a bundle whose sources differ from this tree's (not recommended)
#   BENCH_WORK            scratch folder (default /tmp/webgpu-bench)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
CARRY=$ROOT/scripts/gpu/carry
WORK=${BENCH_WORK:-/tmp/webgpu-bench}
OUT=${OUT:-$ROOT/bench-results/device-$(date -u +%Y%m%dT%H%M%SZ)}
EXPECT_ADAPTER=${EXPECT_ADAPTER-nvidia}
T0=$(date +%s)
mkdir -p "$OUT" "$WORK" || { echo "run-on-device: ERROR: cannot create $OUT or $WORK" >&2; exit 1; }
SETUP_LOG=$OUT/setup.log
: >"$SETUP_LOG"
say() { echo "[run-on-device +$(( $(date +%s) - T0 ))s] $*" | tee -a "$SETUP_LOG"; }
die() {
  echo "run-on-device: ERROR: $*" | tee -a "$SETUP_LOG" >&2
  echo "run-on-device: nothing was benchmarked; $SETUP_LOG has the setup log" >&2
  exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }
# ld.so's cache, read once into a variable (grep -q on a pipe would SIGPIPE ldconfig, and pipefail
# would turn a match into a failure).
LDCACHE=""
ldcache() { LDCACHE=$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true); }
cached() { grep -q -- "$1" <<<"$LDCACHE"; }
where_cached() { grep -- "$1" <<<"$LDCACHE" | head -1 | sed 's/.*=> //'; }

# Decompress an .xz file to stdout, with xz or, failing that, Python's lzma.
unxz_to() {
  if have xz; then xz -dc "$1" >"$2"
  elif have python3; then python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  else return 1; fi
}

say "machine: $(uname -srm); $(nproc) CPUs; user $(id -un); repo $ROOT; results $OUT"
[ "$(uname -m)" = x86_64 ] || say "WARNING: this machine is $(uname -m); the carried Node and Dawn are x86-64"

# ------------------------------------------------------------------------------------------------
# 1. The bundle, Node, Dawn.
MODE=bundle
if [ ! -f "$CARRY/bench-gpu.mjs" ]; then
  if [ -d node_modules/vite ] && [ -f node_modules/webgpu/dist/linux-x64/dawn.node ]; then
    MODE=run-ts
    say "no $CARRY/bench-gpu.mjs, but node_modules/vite and node_modules/webgpu are here: running scripts/gpu/bench-gpu.ts through scripts/run-ts.mjs"
  else
    die "scripts/gpu/carry/bench-gpu.mjs is missing. On the machine you call from, run 'bash scripts/gpu/prepare.sh' and name scripts/gpu/carry in the run call's carry list (scripts/gpu/README.md)."
  fi
fi

if [ "$MODE" = bundle ]; then
  if have sha256sum; then
    if ! sha256sum -c --quiet "$CARRY/sources.sha256" >"$WORK/stale.txt" 2>&1; then
      sed 's/^/  /' "$WORK/stale.txt" | tee -a "$SETUP_LOG"
      if [ "${ALLOW_STALE:-0}" = 1 ]; then say "WARNING: the bundle is older than these sources (ALLOW_STALE=1: running it anyway)"
      else die "the bundle was built from other sources than this tree's (listed above): rerun 'bash scripts/gpu/prepare.sh' right before the run call (or ALLOW_STALE=1)"; fi
    else
      say "bundle: built from this tree's sources ($(wc -l <"$CARRY/sources.sha256") files); $(tr -d '\n ' <"$CARRY/BUILD-INFO.json" 2>/dev/null | cut -c1-200)"
    fi
  else
    say "WARNING: no sha256sum here; not checking that the bundle matches the sources"
  fi
fi

NODE=""
if [ -f "$CARRY/node.xz" ]; then
  mkdir -p "$WORK/bin"
  if [ ! -x "$WORK/bin/node" ] || [ "$CARRY/node.xz" -nt "$WORK/bin/node" ]; then
    unxz_to "$CARRY/node.xz" "$WORK/bin/node.tmp" || die "cannot decompress $CARRY/node.xz (no xz and no python3 here)"
    chmod +x "$WORK/bin/node.tmp" && mv "$WORK/bin/node.tmp" "$WORK/bin/node"
  fi
  if "$WORK/bin/node" --version >/dev/null 2>&1; then NODE=$WORK/bin/node
  else say "WARNING: the carried Node does not start here: $("$WORK/bin/node" --version 2>&1 | head -3)"; fi
fi
if [ -z "$NODE" ] && have node; then
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$major" -ge 20 ] 2>/dev/null; then NODE=$(command -v node)
  else say "the Node on the PATH is $(node --version 2>&1), older than 20"; fi
fi
[ -n "$NODE" ] || die "no usable Node 20+: none on the PATH and none carried (scripts/gpu/carry/node.xz; prepare.sh makes it unless SKIP_NODE=1)"
say "node: $NODE $("$NODE" --version)"

if [ "$MODE" = bundle ]; then
  [ -f "$CARRY/webgpu.tar.xz" ] || die "scripts/gpu/carry/webgpu.tar.xz is missing: rerun 'bash scripts/gpu/prepare.sh' (it trims node_modules/webgpu, 132 MiB, to its linux-x64 part)"
  rm -rf "$WORK/node_modules"
  unxz_to "$CARRY/webgpu.tar.xz" "$WORK/webgpu.tar" && tar -xf "$WORK/webgpu.tar" -C "$WORK" && rm -f "$WORK/webgpu.tar" \
    || die "cannot unpack $CARRY/webgpu.tar.xz into $WORK"
  cp "$CARRY/bench-gpu.mjs" "$WORK/bench-gpu.mjs"
  DAWN=$WORK/node_modules/webgpu/dist/linux-x64/dawn.node
  BENCH=("$NODE" "$WORK/bench-gpu.mjs")
else
  DAWN=$ROOT/node_modules/webgpu/dist/linux-x64/dawn.node
  BENCH=("$NODE" "$ROOT/scripts/run-ts.mjs" "$ROOT/scripts/gpu/bench-gpu.ts")
fi
[ -f "$DAWN" ] || die "Dawn (dawn.node) is missing at $DAWN"
say "webgpu: $("$NODE" -p "require('$(dirname "$(dirname "$(dirname "$DAWN")")")/package.json').version" 2>/dev/null || echo '?'), dawn.node $(( $(stat -c %s "$DAWN") / 1048576 )) MiB"
if have ldd; then
  missing=$(ldd "$DAWN" 2>&1 | grep 'not found' || true)
  [ -z "$missing" ] || { echo "$missing" | tee -a "$SETUP_LOG"; die "dawn.node needs libraries this machine lacks (above)"; }
fi

# ------------------------------------------------------------------------------------------------
# 2. Vulkan: the loader, the NVIDIA ICD, the driver's libraries.
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
if have nvidia-smi; then
  nvidia-smi >>"$SETUP_LOG" 2>&1 || true
  say "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
else
  say "WARNING: no nvidia-smi on the PATH"
fi

# The device README unpacks its list (libvulkan1 and glvnd, whose libGLdispatch the NVIDIA ICD
# library needs) in every run; here only when one of the two is missing, so a newer loader stays.
ldcache
if cached 'libvulkan\.so\.1 ' && cached 'libGLdispatch\.so\.0 '; then
  say "vulkan loader: $(where_cached 'libvulkan\.so\.1 '); glvnd: $(where_cached 'libGLdispatch\.so\.0 ')"
else
  debs=("$CARRY"/gl/*.deb)
  [ -f "${debs[0]}" ] || die "no libvulkan.so.1 or libGLdispatch.so.0 here and no carried loader: prepare.sh downloads it into scripts/gpu/carry/gl (apt-get download libvulkan1 …); rerun it where apt works"
  have dpkg || die "no libvulkan.so.1 here and no dpkg to unpack scripts/gpu/carry/gl/*.deb"
  for f in "${debs[@]}"; do dpkg -x "$f" / || die "dpkg -x $f / failed"; done
  ldconfig || /sbin/ldconfig
  ldcache
  cached 'libvulkan\.so\.1 ' || die "unpacked $(basename -a "${debs[@]}" | tr '\n' ' ') but ldconfig still has no libvulkan.so.1"
  say "vulkan loader: unpacked from the carried .debs: $(where_cached 'libvulkan\.so\.1 '); glvnd: $(where_cached 'libGLdispatch\.so\.0 ')"
fi

# The driver's own libraries (the ICD library and what it loads), if not in ld.so's cache.
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  if [ -d "$d" ] && ! cached " => $d/"; then
    export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    say "LD_LIBRARY_PATH += $d"
  fi
done

# The NVIDIA ICD: the loader looks in /etc/vulkan/icd.d, /usr/share/vulkan/icd.d, /usr/local/share/vulkan/icd.d.
find_icd() {
  local f
  for f in /etc/vulkan/icd.d/nvidia*.json /usr/share/vulkan/icd.d/nvidia*.json /usr/local/share/vulkan/icd.d/nvidia*.json; do
    [ -f "$f" ] && { echo "standard $f"; return; }
  done
  for f in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/icd.d/nvidia_icd.json; do
    [ -f "$f" ] && { echo "extra $f"; return; }
  done
  f=$(find /usr/local/nvidia /usr/lib/nvidia /opt/nvidia -maxdepth 6 -name 'nvidia_icd*.json' 2>/dev/null | head -1)
  [ -n "$f" ] && echo "extra $f"
}
if [ -n "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
  ICD=${VK_DRIVER_FILES:-$VK_ICD_FILENAMES}
  say "vulkan ICD: given: $ICD"
else
  read -r where ICD <<<"$(find_icd)"
  if [ -z "${ICD:-}" ]; then
    say "WARNING: no nvidia_icd.json found (looked in the loader's folders and /usr/local/nvidia); trying the loader's defaults"
  elif [ "$where" = extra ]; then
    export VK_DRIVER_FILES=$ICD VK_ICD_FILENAMES=$ICD
    say "vulkan ICD: $ICD (VK_DRIVER_FILES and VK_ICD_FILENAMES set: not in the loader's usual folders)"
  else
    say "vulkan ICD: $ICD"
  fi
fi
if [ -n "${ICD:-}" ] && [ -f "${ICD%%:*}" ]; then
  cat "${ICD%%:*}" >>"$SETUP_LOG"
  lib=$(sed -n 's/.*"library_path"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "${ICD%%:*}" | head -1)
  if [ -n "$lib" ]; then
    if [[ "$lib" = /* ]]; then [ -f "$lib" ] && say "ICD library: $lib" || say "WARNING: the ICD's library $lib does not exist"
    elif cached "$lib"; then say "ICD library: $lib ($(where_cached "$lib"))"
    else
      found=""
      IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}"
      for d in "${dirs[@]}"; do [ -n "$d" ] && [ -e "$d/$lib" ] && found=$d/$lib && break; done
      [ -n "$found" ] && say "ICD library: $found (through LD_LIBRARY_PATH)" || say "WARNING: the ICD's library $lib is neither in ldconfig's cache nor on LD_LIBRARY_PATH"
    fi
  fi
fi

# ------------------------------------------------------------------------------------------------
# 3. The adapter.
probe() { "${BENCH[@]}" --probe ${EXPECT_ADAPTER:+--expect-adapter "$EXPECT_ADAPTER"} >"$OUT/adapter.json" 2>"$WORK/probe.err"; }
if ! probe; then
  cat "$WORK/probe.err" | tee -a "$SETUP_LOG"
  say "no suitable adapter at first try; again with the loader's diagnostics (VK_LOADER_DEBUG=error,warn,driver)"
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json VK_ICD_FILENAMES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    say "  (and with VK_DRIVER_FILES=$VK_DRIVER_FILES, as the device README suggests)"
  fi
  if ! VK_LOADER_DEBUG=error,warn,driver probe; then
    cp "$WORK/probe.err" "$OUT/loader-debug.log"
    { grep -iE 'error|warn|fail|not found|icd|\.json|\.so|nvidia|bench-gpu' "$WORK/probe.err" | grep -v 'artificially reduced' | grep -v '^bench-gpu' | head -n 80; grep '^bench-gpu' "$WORK/probe.err"; } | tee -a "$SETUP_LOG"
    die "Dawn found no ${EXPECT_ADAPTER:-WebGPU} adapter (loader diagnostics above, all of them in $OUT/loader-debug.log; $OUT/adapter.json has what was found)"
  fi
fi
say "adapter: $("$NODE" -e 'const a = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).adapter; console.log([a.info.vendor, a.info.architecture, a.info.description].filter(Boolean).join(" ") + "; shader-f16 " + a.features.includes("shader-f16") + ", timestamp-query " + a.features.includes("timestamp-query") + ", maxStorageBufferBindingSize " + a.limits.maxStorageBufferBindingSize)' "$OUT/adapter.json")"

# ------------------------------------------------------------------------------------------------
# 4. The benchmark.
ARGS=(--out "$OUT/bench-h200.json" --time-limit-s "${BENCH_TIME_LIMIT_S:-360}")
[ -n "$EXPECT_ADAPTER" ] && ARGS+=(--expect-adapter "$EXPECT_ADAPTER")
[ "${KERNEL_TIMINGS:-1}" = 1 ] && ARGS+=(--kernel-timings)
say "bench: ${BENCH[*]##*/} ${ARGS[*]} $*"
export BENCH_BUILD_INFO=$CARRY/BUILD-INFO.json
timeout -k 10 "${BENCH_TIMEOUT_S:-420}" "${BENCH[@]}" "${ARGS[@]}" "$@" 2>&1 | grep --line-buffered -v 'artificially reduced' | tee "$OUT/bench-h200.log"
rc=${PIPESTATUS[0]}
case $rc in
  0) say "bench: done, every gate and check passed" ;;
  124|137) say "bench: STOPPED at the ${BENCH_TIMEOUT_S:-420} s hard limit; the JSON holds what finished" ;;
  1) say "bench: finished with a failed gate, check or run (see above)" ;;
  *) say "bench: exit status $rc" ;;
esac
if [ -f "$OUT/bench-h200.json" ]; then
  echo
  echo "===== summary ($OUT/bench-h200.json) ====="
  "$NODE" "${BENCH[@]:1}" --summarize "$OUT/bench-h200.json" 2>/dev/null || true
  "$NODE" -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const best = (p, mode) => Math.max(0, ...r.runs.filter((x) => x.precision === p && x.mode === mode && x.tflops).map((x) => x.tflops));
    const targets = { f32: 15, f16: 30 };
    for (const p of ["f32", "f16"]) {
      const g = best(p, "gpu"), e = best(p, "e2e");
      const f = (x) => (x >= 1 ? x.toFixed(2) : x.toPrecision(3));
      if (g || e) console.log(`${p}: highest median rate ${f(g)} TFLOP/s GPU-resident, ${f(e)} end-to-end; target ${targets[p]} TFLOP/s (GPU-resident): ${g >= targets[p] ? "met" : "not met"}`);
    }
    console.log(`finished: ${r.finished}; wall ${r.wallSeconds} s; errors: ${r.errors.length}`);
  ' "$OUT/bench-h200.json" || true
fi
say "results: $(ls "$OUT" | tr '\n' ' ')"
exit "$rc"
