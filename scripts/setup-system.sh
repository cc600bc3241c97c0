#!/usr/bin/env bash
# Installs the system packages the tests need, only where they are missing:
#   - lavapipe (Mesa's software Vulkan driver) from bookworm-backports: Dawn rejects bookworm's own 22.x
#   - Chromium (Debian's package): the browser for the Playwright tests, and SwiftShader's Vulkan ICD
#   - Firefox ESR (Debian's firefox-esr): WebGPU through wgpu on lavapipe, for scripts/firefox-test.mjs
# On Debian 12 as root it installs them; anywhere else it says exactly what is missing and exits non-zero.
#   bash scripts/setup-system.sh             lavapipe and chromium
#   bash scripts/setup-system.sh lavapipe chromium firefox   all three
#   bash scripts/setup-system.sh lavapipe    only the Vulkan driver (Node needs nothing else)
set -euo pipefail
wanted=${*:-lavapipe chromium}

LVP_ICD=/usr/share/vulkan/icd.d/lvp_icd.json
CHROMIUM=${CHROMIUM_PATH:-/usr/bin/chromium}
FIREFOX=${FIREFOX_PATH:-/usr/bin/firefox-esr}

need=()
mesa_version=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)
if [[ " $wanted " == *" lavapipe "* ]] && { [ ! -f "$LVP_ICD" ] || ! dpkg --compare-versions "${mesa_version:-0}" ge 25; }; then need+=(lavapipe); fi
if [[ " $wanted " == *" chromium "* ]] && [ ! -x "$CHROMIUM" ]; then need+=(chromium); fi
if [[ " $wanted " == *" firefox "* ]] && [ ! -x "$FIREFOX" ]; then need+=(firefox); fi
# CJK glyphs for the demo's attention-map labels ("我 爱 自然 语言 处理") in browser screenshots.
if [[ " $wanted " == *" chromium "* ]] && ! dpkg -s fonts-wqy-zenhei >/dev/null 2>&1; then need+=(cjk-font); fi

if [ ${#need[@]} -eq 0 ]; then
  echo "setup-system: present: $wanted (mesa ${mesa_version:-none}$([[ " $wanted " == *" chromium "* ]] && echo ", $CHROMIUM")$([[ " $wanted " == *" firefox "* ]] && echo ", $FIREFOX"))"
  exit 0
fi

if [ "$(id -u)" != 0 ] || ! grep -q 'VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
  echo "setup-system: missing: ${need[*]}" >&2
  echo "  lavapipe: Mesa's Vulkan driver >= 25 (Debian 12: apt-get install -t bookworm-backports mesa-vulkan-drivers)" >&2
  echo "  chromium: a Chromium with WebGPU (Debian: apt-get install chromium), or set CHROMIUM_PATH" >&2
  echo "  firefox:  Firefox with WebGPU (Debian: apt-get install firefox-esr), or set FIREFOX_PATH" >&2
  echo "  cjk-font: CJK glyphs for the demo's screenshots (Debian: apt-get install fonts-wqy-zenhei)" >&2
  echo "  This script installs them itself only on Debian 12 as root." >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
if [[ " ${need[*]} " == *" lavapipe "* ]] && ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/bookworm-backports.list
fi
echo "setup-system: installing ${need[*]} ..."
apt-get update -qq
for n in "${need[@]}"; do
  case $n in
    lavapipe) apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libvulkan1 ;;
    chromium) apt-get install -y -qq chromium ;;
    firefox) apt-get install -y -qq firefox-esr ;;
    cjk-font) apt-get install -y -qq fonts-wqy-zenhei ;;
  esac
done
echo "setup-system: done"
