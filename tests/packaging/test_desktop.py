"""The desktop entry, the AppStream metainfo, the icons, and packaging/linux/install.sh + uninstall.sh."""

from __future__ import annotations

import os
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests.packaging.conftest import APP_ID, PACKAGING, ROOT

LINUX = ROOT / "resources" / "linux"
ICONS = ROOT / "resources" / "icons"
DESKTOP = LINUX / f"{APP_ID}.desktop"
METAINFO = LINUX / f"{APP_ID}.metainfo.xml"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="desktop integration is Linux-only")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian: apt-get install desktop-file-utils appstream)")
    return path


def _desktop_keys(path: Path) -> dict[str, str]:
    keys = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            keys[k] = v
    return keys


def test_desktop_template_validates() -> None:
    r = subprocess.run([_tool("desktop-file-validate"), str(DESKTOP)], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "error" not in r.stdout, r.stdout + r.stderr
    keys = _desktop_keys(DESKTOP)
    assert keys["Icon"] == APP_ID and keys["Exec"] == "@EXEC@" and keys["Terminal"] == "false"


def test_metainfo_validates() -> None:
    r = subprocess.run([_tool("appstreamcli"), "validate", "--no-net", "--pedantic", str(METAINFO)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    text = METAINFO.read_text(encoding="utf-8")
    assert f"<id>{APP_ID}</id>" in text and f'<launchable type="desktop-id">{APP_ID}.desktop</launchable>' in text


def test_metainfo_release_matches_the_project_version() -> None:
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert f'<release version="{version}"' in METAINFO.read_text(encoding="utf-8")


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_icons_are_rendered_from_the_master() -> None:
    master = ROOT / "app" / "outrider" / "ui" / "resources" / "outrider.svg"
    assert (ICONS / "outrider.svg").read_bytes() == master.read_bytes(), \
        "the SVG master changed: run .venv/bin/python packaging/render_icons.py and commit resources/icons"
    for size in SIZES:
        assert _png_size(ICONS / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png") == (size, size)
    ico = (ICONS / "outrider.ico").read_bytes()
    assert struct.unpack("<HHH", ico[:6]) == (0, 1, 7)
    icns = (ICONS / "outrider.icns").read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)


# --- install.sh / uninstall.sh ------------------------------------------------------------------------------------


def _fake_app(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "outrider"
    exe.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _sh(script: str, data: Path, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_DATA_HOME": str(data)}
    if home is not None:
        env.pop("XDG_DATA_HOME")
        env["HOME"] = str(home)
    return subprocess.run(["bash", str(PACKAGING / "linux" / script), *args], capture_output=True, text=True,
                          env=env, check=False, timeout=60)


def _installed(data: Path) -> list[str]:
    return sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file() and APP_ID in p.name)


@needs_linux
def test_install_and_uninstall_in_xdg_data_home(tmp_path: Path) -> None:
    exe = _fake_app(tmp_path / "bundle")
    data = tmp_path / "data"
    r = _sh("install.sh", data, "--exec", str(exe))
    assert r.returncode == 0, r.stderr
    files = _installed(data)
    assert f"applications/{APP_ID}.desktop" in files and f"metainfo/{APP_ID}.metainfo.xml" in files
    assert f"icons/hicolor/scalable/apps/{APP_ID}.svg" in files
    assert all(f"icons/hicolor/{s}x{s}/apps/{APP_ID}.png" in files for s in SIZES)
    desktop = data / "applications" / f"{APP_ID}.desktop"
    keys = _desktop_keys(desktop)
    assert keys["Exec"] == str(exe) and keys["TryExec"] == str(exe)
    if shutil.which("desktop-file-validate"):
        v = subprocess.run(["desktop-file-validate", str(desktop)], capture_output=True, text=True, check=False)
        assert v.returncode == 0, v.stdout

    assert _sh("install.sh", data, "--exec", str(exe)).returncode == 0  # again: updates in place
    assert _installed(data) == files

    r = _sh("uninstall.sh", data)
    assert r.returncode == 0, r.stderr
    assert _installed(data) == []
    assert _sh("uninstall.sh", data).returncode == 0  # nothing left: still fine


@needs_linux
def test_install_defaults_to_home_local_share(tmp_path: Path) -> None:
    exe = _fake_app(tmp_path / "bundle")
    home = tmp_path / "home"
    assert _sh("install.sh", tmp_path / "unused", "--exec", str(exe), home=home).returncode == 0
    assert (home / ".local" / "share" / "applications" / f"{APP_ID}.desktop").is_file()
    assert _sh("uninstall.sh", tmp_path / "unused", home=home).returncode == 0
    assert _installed(home / ".local" / "share") == []


@needs_linux
def test_paths_with_spaces_are_quoted(tmp_path: Path) -> None:
    exe = _fake_app(tmp_path / "My Apps" / "Outrider")
    data = tmp_path / "data"
    assert _sh("install.sh", data, f"--exec={exe}").returncode == 0
    keys = _desktop_keys(data / "applications" / f"{APP_ID}.desktop")
    assert keys["Exec"] == f'"{exe}"' and keys["TryExec"] == str(exe)


@needs_linux
@pytest.mark.parametrize("bad", ["dollar$dir", "per%cent", 'quo"te'])
def test_unsafe_paths_are_refused(tmp_path: Path, bad: str) -> None:
    exe = _fake_app(tmp_path / bad)
    data = tmp_path / "data"
    r = _sh("install.sh", data, "--exec", str(exe))
    assert r.returncode == 1 and "cannot hold" in r.stderr
    assert _installed(data) == []


@needs_linux
def test_missing_program_is_refused(tmp_path: Path) -> None:
    r = _sh("install.sh", tmp_path / "data", "--exec", str(tmp_path / "nope" / "outrider"))
    assert r.returncode == 1 and "not an executable" in r.stderr
    r = _sh("install.sh", tmp_path / "data", "--bogus")
    assert r.returncode == 2
