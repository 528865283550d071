"""The first `make run` / `make test` shows what it is doing (packaging/progress.py). Before: `pip --quiet` printed
nothing for the ~20 minutes llama-cpp-python compiles, and a newcomer could not tell a build from a hang."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.packaging.conftest import PACKAGING, ROOT

_spec = importlib.util.spec_from_file_location("setup_progress", PACKAGING / "progress.py")
assert _spec is not None and _spec.loader is not None
progress = importlib.util.module_from_spec(_spec)  # packaging/ holds scripts, not a package
_spec.loader.exec_module(progress)


def test_stages_and_compile_progress_are_shown_throttled() -> None:
    now = [0.0]
    lines = ["Collecting llama-cpp-python==0.3.36", "  some noise", "Building wheel for llama-cpp-python"]
    lines += [f"[{i}/300] Building CXX object vendor/llama.cpp/src/llama-{i}.cpp.o" for i in range(1, 301)]
    lines += ["Successfully installed llama-cpp-python-0.3.36"]

    def clock() -> float:
        now[0] += 0.5  # each line half a second later
        return now[0]

    shown = list(progress.condense(lines, "installing", every=10.0, clock=clock))
    assert any("Collecting llama-cpp-python" in s for s in shown)
    assert any("Building wheel for llama-cpp-python" in s for s in shown)
    assert shown[-1].endswith("Successfully installed llama-cpp-python-0.3.36")
    compiling = [s for s in shown if "compiling llama.cpp" in s]
    assert 10 <= len(compiling) <= 20  # 150 s of compiling, a line per 10 s, not per object
    assert "%" in compiling[-1] and "llama-" in compiling[-1] and "m" in compiling[-1].split("]")[0]
    assert not any("noise" in s for s in shown)


def test_cmake_percent_lines_are_read() -> None:
    assert progress._compile_fraction("[ 45%] Building CXX object ggml/src/ggml.c.o") == "45%"
    assert progress._compile_fraction("[120/300] Building C object x.c.o") == "40%"
    assert progress._compile_fraction("-- Configuring done") is None


def _fake_build(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "build.py"
    script.write_text(textwrap.dedent(body), encoding="utf-8")
    return script


def test_a_silent_step_gets_a_heartbeat_within_seconds(tmp_path: Path) -> None:
    script = _fake_build(tmp_path, """
        import time
        print("Collecting something", flush=True)
        time.sleep(3.5)
        print("Successfully installed something", flush=True)
    """)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(PACKAGING / "progress.py"), "--label", "installing", "--every", "1",
                        "--", sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("==> installing")  # at once: never minutes of silence
    assert any("still working" in line for line in out)
    assert out[-1].startswith("==> installing: done in")
    assert time.monotonic() - t0 < 50


def test_a_failure_shows_the_error_and_passes_the_exit_status_on(tmp_path: Path) -> None:
    script = _fake_build(tmp_path, """
        import sys
        for i in range(200):
            print(f"line {i}")
        print("CMake Error: no compiler found")
        sys.exit(3)
    """)
    r = subprocess.run([sys.executable, str(PACKAGING / "progress.py"), "--label", "building", "--",
                        sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    assert "building FAILED (exit 3)" in r.stdout and "CMake Error: no compiler found" in r.stdout
    assert "line 100" not in r.stdout  # the tail, not everything


def test_the_makefile_installs_through_the_progress_wrapper() -> None:
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    install = [line for line in make.splitlines() if "pip install" in line and ".[dev]" in line]
    assert install and all("--quiet" not in line for line in install)
    assert "packaging/progress.py" in make and "$(PROGRESS)" in make
