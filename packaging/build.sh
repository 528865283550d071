#!/usr/bin/env bash
# Build the one-folder app into dist/outrider/ with PyInstaller (packaging/outrider.spec) and print its size.
#   packaging/build.sh                 uses .venv/bin/python (override: PYTHON=...)
#   OUTRIDER_BUNDLE_DEMO=0 packaging/build.sh   without the 98 MB offline demo model
# Needs pyinstaller in that environment (.venv/bin/pip install 'pyinstaller>=6.10').
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
NAME="${OUTRIDER_BUNDLE_NAME:-outrider}"
if ! "$PYTHON" -c "import PyInstaller" 2>/dev/null; then
  echo "build.sh: PyInstaller is not installed in $PYTHON's environment: $PYTHON -m pip install 'pyinstaller>=6.10'" >&2
  exit 1
fi
# Qt's X11 (xcb) platform plugin links system libraries (libxcb-icccm4, libxcb-keysyms1, libxcb-cursor0, …) that a
# minimal system lacks. PyInstaller then only warns that they are unresolved and builds a bundle that aborts on a
# desktop ("Could not load the Qt platform plugin xcb"): stop here instead, with the packages to install.
if [[ "$(uname -s)" == Linux ]]; then
  qxcb=$("$PYTHON" -c "import pathlib, PySide6; print(pathlib.Path(PySide6.__file__).parent / 'Qt/plugins/platforms/libqxcb.so')")
  unresolved=$(ldd "$qxcb" "$(dirname "$qxcb")/../../lib/libQt6XcbQpa.so.6" 2>/dev/null | awk '/not found/ {print $1}' | sort -u)
  if [[ -n "$unresolved" ]]; then
    echo "build.sh: Qt's xcb platform plugin needs libraries this machine lacks: $(echo $unresolved)" >&2
    echo "build.sh: install them first (Debian/Ubuntu, README.md: System packages for the desktop):" \
         "sudo apt-get install libx11-xcb1 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0" \
         "libxcb-randr0 libxcb-shape0 libxcb-cursor0 libxcb-xkb1 libxcb-xfixes0 libxcb-sync1 libxcb-shm0" \
         "libxcb-render0 libxcb-util1 libxkbcommon-x11-0" >&2
    exit 1
  fi
fi
start=$(date +%s)
"$PYTHON" -m PyInstaller --noconfirm --clean --log-level "${PYINSTALLER_LOG_LEVEL:-WARN}" \
  --distpath dist --workpath build/pyinstaller packaging/outrider.spec
bundle="dist/$NAME"
# linux/: install.sh and uninstall.sh with the files they install, so an unpacked bundle can add its menu entry.
if [[ "$(uname -s)" == Linux ]]; then
  rm -rf "$bundle/linux"
  mkdir -p "$bundle/linux/resources/linux" "$bundle/linux/resources/icons"
  cp packaging/linux/install.sh packaging/linux/uninstall.sh "$bundle/linux/"
  cp resources/linux/io.github.outrider.Outrider.desktop resources/linux/io.github.outrider.Outrider.metainfo.xml \
     "$bundle/linux/resources/linux/"
  cp -r resources/icons/hicolor resources/icons/outrider.svg "$bundle/linux/resources/icons/"
fi
elapsed=$(( $(date +%s) - start ))
size=$(du -sh "$bundle" | cut -f1)
bytes=$(du -sb "$bundle" 2>/dev/null | cut -f1 || echo "?")
echo "build.sh: built $bundle in ${elapsed}s; size $size ($bytes bytes)"
