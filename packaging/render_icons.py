"""Render the app icon from its SVG master: ``resources/icons/hicolor/<N>x<N>/apps/<id>.png``, ``outrider.ico``
(Windows) and ``outrider.icns`` (macOS). Run after changing the SVG and commit the results::

    .venv/bin/python packaging/render_icons.py          # write
    .venv/bin/python packaging/render_icons.py --check  # exit 1 when a committed file is out of date

The master is ``app/outrider/ui/resources/outrider.svg`` (the window icon the app loads through
``importlib.resources``); ``resources/icons/outrider.svg`` is a copy kept next to the renders for the desktop
integration (``packaging/linux/install.sh`` installs it as the scalable icon).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MASTER = ROOT / "app" / "outrider" / "ui" / "resources" / "outrider.svg"
ICONS = ROOT / "resources" / "icons"
APP_ID = "io.github.outrider.Outrider"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# icns element types holding PNG data, by pixel size (the @2x types reuse the larger renders).
ICNS_TYPES = ((b"icp4", 16), (b"icp5", 32), (b"icp6", 64), (b"ic07", 128), (b"ic08", 256), (b"ic09", 512),
              (b"ic11", 32), (b"ic12", 64), (b"ic13", 256), (b"ic14", 512))


def render_png(svg: bytes, size: int) -> bytes:
    """The SVG rendered to a ``size`` x ``size`` PNG with a transparent background (antialiased)."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(QByteArray(svg))
    if not renderer.isValid():
        raise ValueError("the SVG master is not valid")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buf, "PNG"):  # type: ignore[call-overload]  # PySide6 6.12 stubs say bytes; only str works
        raise RuntimeError(f"could not encode a {size} px PNG")
    return bytes(buf.data().data())


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """A multi-size ICO file whose entries are PNG images (Windows Vista and later)."""
    header = struct.pack("<HHH", 0, 1, len(pngs))
    offset = 6 + 16 * len(pngs)
    entries, data = b"", b""
    for size, png in sorted(pngs.items()):
        dim = 0 if size >= 256 else size  # 0 means 256
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(png), offset + len(data))
        data += png
    return header + entries + data


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    body = b"".join(kind + struct.pack(">I", 8 + len(pngs[size])) + pngs[size] for kind, size in ICNS_TYPES)
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def outputs() -> dict[Path, bytes]:
    """Every generated file and its expected content."""
    svg = MASTER.read_bytes()
    pngs = {size: render_png(svg, size) for size in SIZES}
    files = {ICONS / "outrider.svg": svg}
    for size, png in pngs.items():
        files[ICONS / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"] = png
    files[ICONS / "outrider.ico"] = ico_bytes({s: pngs[s] for s in ICO_SIZES})
    files[ICONS / "outrider.icns"] = icns_bytes(pngs)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only compare with the committed files")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # QImage encoders want an application
    stale = []
    for path, content in outputs().items():
        if path.is_file() and path.read_bytes() == content:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
