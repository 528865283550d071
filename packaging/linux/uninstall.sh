#!/usr/bin/env bash
# Remove what install.sh installed from $XDG_DATA_HOME (default ~/.local/share): the menu entry, the icons and the
# metainfo. The app's own data (chats, models, logs) is left alone.
set -euo pipefail

APP_ID=io.github.outrider.Outrider
data="${XDG_DATA_HOME:-$HOME/.local/share}"
apps="$data/applications"
icons="$data/icons/hicolor"
removed=0
remove() {
  if [[ -e "$1" || -L "$1" ]]; then rm -f -- "$1"; removed=$((removed + 1)); fi
}
remove "$apps/$APP_ID.desktop"
remove "$data/metainfo/$APP_ID.metainfo.xml"
for f in "$icons"/*/apps/"$APP_ID".png "$icons"/*/apps/"$APP_ID".svg; do
  [[ -e "$f" ]] && remove "$f"
done
if [[ -d "$icons" ]]; then touch "$icons" 2>/dev/null || true; fi
if [[ -d "$apps" ]] && command -v update-desktop-database >/dev/null 2>&1; then
  update-desktop-database -q "$apps" 2>/dev/null || true
fi
echo "Removed $removed file(s) from $data"
