#!/usr/bin/env bash
# Install Outrider's menu entry, icons and AppStream metainfo for the current user (no root needed):
#   $XDG_DATA_HOME (default ~/.local/share)/applications/io.github.outrider.Outrider.desktop
#   $XDG_DATA_HOME/icons/hicolor/{16x16..512x512,scalable}/apps/io.github.outrider.Outrider.{png,svg}
#   $XDG_DATA_HOME/metainfo/io.github.outrider.Outrider.metainfo.xml
#
# Usage: install.sh [--exec PATH]
#   PATH: the program the menu entry starts. Default: the bundle this script belongs to (dist/outrider/outrider
#   when run from a checkout, ../outrider when run from a bundle's linux/ folder). A virtual environment's
#   .venv/bin/outrider works too. Running it again updates the entry; uninstall.sh removes it.
set -euo pipefail

APP_ID=io.github.outrider.Outrider
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec_path=""
while (($#)); do
  case "$1" in
    --exec) exec_path="${2:?--exec needs a path}"; shift 2 ;;
    --exec=*) exec_path="${1#--exec=}"; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

# Resources: a checkout (packaging/linux/../../resources) or a bundle (linux/resources, copied by build.sh).
if [[ -f "$here/../../resources/linux/$APP_ID.desktop" ]]; then
  res="$(cd "$here/../../resources" && pwd)"
  default_exec="$(cd "$here/../.." && pwd)/dist/outrider/outrider"
elif [[ -f "$here/resources/linux/$APP_ID.desktop" ]]; then
  res="$here/resources"
  default_exec="$(cd "$here/.." && pwd)/outrider"
else
  echo "install.sh: cannot find the desktop file template next to $here" >&2
  exit 1
fi
exec_path="${exec_path:-$default_exec}"
if [[ "$exec_path" != /* ]]; then
  exec_path="$(cd "$(dirname "$exec_path")" && pwd)/$(basename "$exec_path")"
fi
if [[ ! -x "$exec_path" ]]; then
  echo "install.sh: $exec_path is not an executable (build the bundle with packaging/build.sh, or pass --exec)" >&2
  exit 1
fi
# Characters the desktop-entry Exec key would need escaped twice over: refuse rather than risk a broken entry.
if [[ "$exec_path" == *[\"\`\$\\%]* || "$exec_path" == *$'\n'* ]]; then
  echo "install.sh: the path $exec_path contains a character a menu entry cannot hold (\" \` \$ \\ %)" >&2
  exit 1
fi
exec_field="$exec_path"
if [[ "$exec_path" =~ [[:space:]\'\>\<\~\|\&\;\*\?\#\(\)] ]]; then
  exec_field="\"$exec_path\""
fi

data="${XDG_DATA_HOME:-$HOME/.local/share}"
apps="$data/applications"
icons="$data/icons/hicolor"
meta="$data/metainfo"
mkdir -p "$apps" "$meta" "$icons/scalable/apps"

desktop="$apps/$APP_ID.desktop"
tmp="$(mktemp "$apps/.$APP_ID.XXXXXX")"
while IFS= read -r line || [[ -n "$line" ]]; do
  line="${line//@EXEC@/$exec_field}"
  line="${line//@TRYEXEC@/$exec_path}"
  printf '%s\n' "$line"
done < "$res/linux/$APP_ID.desktop" > "$tmp"
chmod 644 "$tmp"
mv -f "$tmp" "$desktop"

for dir in "$res"/icons/hicolor/*x*; do
  size="$(basename "$dir")"
  mkdir -p "$icons/$size/apps"
  install -m 644 "$dir/apps/$APP_ID.png" "$icons/$size/apps/$APP_ID.png"
done
install -m 644 "$res/icons/outrider.svg" "$icons/scalable/apps/$APP_ID.svg"
install -m 644 "$res/linux/$APP_ID.metainfo.xml" "$meta/$APP_ID.metainfo.xml"

# Refresh the caches when the tools exist (menus pick the entry up without them too, a little later).
touch "$icons" 2>/dev/null || true
if command -v update-desktop-database >/dev/null 2>&1; then update-desktop-database -q "$apps" 2>/dev/null || true; fi
if command -v gtk-update-icon-cache >/dev/null 2>&1 && [[ -f "$icons/index.theme" ]]; then
  gtk-update-icon-cache -q -t -f "$icons" 2>/dev/null || true
fi
echo "Installed $desktop (starts $exec_path)"
