"""The CLI's engine errors: bad settings are one line with exit 2, a stopped engine is noticed, Ctrl-C is prompt,
template notes are shown, failed runs leave no log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import bad_models
from support.processes import WAIT_LIMIT_S, engine_of, release
from support.tiny_gguf import Family


def outrider(*args: str, env_home: Path, timeout: float = 120,
             extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONIOENCODING="utf-8", OUTRIDER_HOME=str(env_home), **(extra_env or {}))
    return subprocess.run([sys.executable, "-m", "outrider.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--seed", "-1"], "seed must be >= 0, got -1"),
        (["--threads", "100000"], f"threads must be between 0 and {os.cpu_count()} (this machine's CPU count)"),
        (["--threads", "5000"], f"threads must be between 0 and {os.cpu_count()} (this machine's CPU count)"),
        (["--threads", "-1"], "threads must be between 0 and"),
    ],
)
def test_bad_engine_settings_are_one_line_exit_2(tiny_family: Family, tmp_path: Path, extra: list[str],
                                                 words: str) -> None:
    t0 = time.monotonic()
    r = outrider("generate", "--target", str(tiny_family.target), "--prompt", "the", "--max-tokens", "4",
                 "--temperature", "1", *extra, env_home=tmp_path)
    assert r.returncode == 2, r.stderr
    assert words in one_line(r)
    assert time.monotonic() - t0 < 20


def test_models_check_refuses_a_negative_context(tiny_family: Family, tmp_path: Path) -> None:
    r = outrider("models", "check", str(tiny_family.target), str(tiny_family.draft), "--ctx", "-5",
                 env_home=tmp_path)
    assert r.returncode == 2
    assert "--ctx" in one_line(r) and "must be at least 1, got -5" in r.stderr


def test_a_context_below_llamas_minimum_is_raised_with_a_note(tiny_family: Family, tmp_path: Path) -> None:
    r = outrider("generate", "--target", str(tiny_family.target), "--prompt", "the", "--max-tokens", "4",
                 "--ctx", "64", "--json", env_home=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == ["note: context raised to 256 tokens (llama.cpp's minimum)"]


def test_a_hostile_chat_template_is_replaced_with_a_note(tmp_path: Path) -> None:
    model = bad_models.small_model(tmp_path / "hostile.gguf", chat_template="{{ 'A'*10**9 }}")
    t0 = time.monotonic()
    r = outrider("generate", "--target", str(model), "--chat", "hi", "--max-tokens", "4", "--json",
                 env_home=tmp_path)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 30
    notes = [line for line in r.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1, r.stderr
    assert notes[0].startswith("note: the model's chat template") and notes[0].endswith(
        "— using the built-in template")


def test_a_failed_run_leaves_no_engine_log(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"<html>not a model</html>")
    r = outrider("generate", "--target", str(junk), "--prompt", "x", env_home=tmp_path)
    assert r.returncode == 2 and "not a GGUF file" in one_line(r)
    assert not list((tmp_path / "logs").glob("engine-*.log"))


# -- a stopped engine --------------------------------------------------------------------------------------------
@pytest.fixture()
def stopped_engines() -> Iterator[list[int]]:
    """Engines the test stopped: killed afterwards whatever happened (never left stopped on a shared machine)."""
    pids: list[int] = []
    yield pids
    release(pids)


def _start_long_generation(target: Path, home: Path, extra_env: dict[str, str]) -> subprocess.Popen[str]:
    """A reply of 8000 tokens whatever the generated model does with the prompt (``--ignore-eos``): the tests
    stop the engine inside the reply, not after a reply the model ended early."""
    env = dict(os.environ, PYTHONIOENCODING="utf-8", OUTRIDER_HOME=str(home), **extra_env)
    return subprocess.Popen([sys.executable, "-m", "outrider.cli", "generate", "--target", str(target), "--prompt",
                             "the of and", "--max-tokens", "8000", "--ctx", "8192", "--ignore-eos", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_sigstop_of_the_engine_exits_3_with_one_line(tiny_family: Family, tmp_path: Path,
                                                     stopped_engines: list[int]) -> None:
    cli = _start_long_generation(tiny_family.target, tmp_path, {"OUTRIDER_ENGINE_HEARTBEAT_TIMEOUT": "1.5"})
    assert cli.stdout is not None
    assert '"event": "step"' in cli.stdout.readline()
    engine = engine_of(cli.pid)
    os.kill(engine, signal.SIGSTOP)
    stopped_engines.append(engine)
    t0 = time.monotonic()
    try:
        _, err = cli.communicate(timeout=WAIT_LIMIT_S)
    finally:
        cli.kill()
    # 1.5 s of silence and a grace of at most 1 s (~2.7 s in all); the bug, waiting for the default 30 s
    # heartbeat timeout, is still caught with room for a loaded machine.
    assert time.monotonic() - t0 < 25
    assert cli.returncode == 3, err
    assert err.strip().splitlines() == ["outrider: error: engine stopped responding (the engine process was "
                                        "stopped; no heartbeat for 1.5 s) while generating"]


def test_ctrl_c_with_a_stopped_engine_exits_130_promptly(tiny_family: Family, tmp_path: Path,
                                                         stopped_engines: list[int]) -> None:
    cli = _start_long_generation(tiny_family.target, tmp_path, {})
    assert cli.stdout is not None and cli.stderr is not None
    assert '"event": "step"' in cli.stdout.readline()
    # Its output read as it comes: the command is then waiting for the engine when Ctrl-C arrives, inside the
    # reply (a full stdout pipe would leave it blocked in a write, outside it, and hide a reply that waits).
    drain = threading.Thread(target=cli.stdout.read, daemon=True)
    drain.start()
    engine = engine_of(cli.pid)
    os.kill(engine, signal.SIGSTOP)
    stopped_engines.append(engine)
    time.sleep(0.5)
    cli.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    try:
        cli.wait(timeout=WAIT_LIMIT_S)
        err = cli.stderr.read()
    finally:
        cli.kill()
    # Killed, not waited for: waiting is the 20 s cancel grace or the 30 s heartbeat timeout; the kill takes
    # ~0.3 s, and 10 s leaves a loaded machine room without missing the bug.
    assert time.monotonic() - t0 < 10, time.monotonic() - t0
    assert cli.returncode == 130, err
    assert err.strip().splitlines()[-1] == "outrider: interrupted"
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):  # the stopped engine was killed, not left behind
        os.kill(engine, 0)
