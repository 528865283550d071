"""packaging/build.sh refuses to build a bundle whose X11 (xcb) platform plugin could not load: with a library of
the plugin unresolved on the build machine, it names it and the Debian/Ubuntu packages, and exits 1 before
PyInstaller runs (which would only warn, and ship a bundle that aborts on a desktop)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.packaging.conftest import PACKAGING, ROOT

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb plugin is Linux-only")


def _build(tmp_path: Path, ldd_output: str) -> subprocess.CompletedProcess[str]:
    """build.sh with an ``ldd`` that reports ``ldd_output`` and a PyInstaller that records that it ran."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ldd").write_text(f"#!/bin/sh\nprintf '%s\\n' '{ldd_output}'\n", encoding="utf-8")
    (fake / "ldd").chmod(0o755)
    ran = tmp_path / "pyinstaller-ran"
    python = fake / "python"  # the venv's python, except that `-m PyInstaller` only leaves a mark
    python.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ] && [ "$2" = "PyInstaller" ]; then touch {ran}; exit 1; fi\n'
                      f'exec {sys.executable} "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "PYTHON": str(python)}
    return subprocess.run(["bash", str(PACKAGING / "build.sh")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)


@needs_linux
def test_an_unresolved_xcb_library_stops_the_build_with_the_packages_to_install(tmp_path: Path) -> None:
    proc = _build(tmp_path, "\tlibxcb-icccm.so.4 => not found")
    assert proc.returncode == 1
    assert "libxcb-icccm.so.4" in proc.stderr and "sudo apt-get install" in proc.stderr
    assert "libxcb-icccm4" in proc.stderr and "libxcb-keysyms1" in proc.stderr
    assert not (tmp_path / "pyinstaller-ran").exists()


@needs_linux
def test_with_every_library_found_the_build_goes_on_to_pyinstaller(tmp_path: Path) -> None:
    proc = _build(tmp_path, "\tlibxcb-icccm.so.4 => /lib/x86_64-linux-gnu/libxcb-icccm.so.4 (0x1)")
    assert (tmp_path / "pyinstaller-ran").exists(), proc.stderr  # the fake PyInstaller then fails: status 1
    assert "lacks" not in proc.stderr
