"""Starting an engine process: its command line (``python -m`` or a frozen app's flag), environment, log file
(and the rotation of the log folder), the heartbeat timeout setting, and what ``/proc`` and the log tell after.

Everything here is plain process plumbing; ``EngineClient`` (``client.py``) decides when to call it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import outrider

DEFAULT_HEARTBEAT_TIMEOUT = 30.0  # no message at all from the engine for this long: it is stopped or frozen
HEARTBEAT_TIMEOUT_ENV = "OUTRIDER_ENGINE_HEARTBEAT_TIMEOUT"
LOGS_KEPT = 20  # engine logs kept in the log folder (crashes and failed runs); older ones are deleted
WORKER_FLAG = "--outrider-engine-process"


def heartbeat_timeout_from_env() -> float:
    """``$OUTRIDER_ENGINE_HEARTBEAT_TIMEOUT`` in seconds (30 when unset, not a number or not positive)."""
    try:
        value = float(os.environ.get(HEARTBEAT_TIMEOUT_ENV, DEFAULT_HEARTBEAT_TIMEOUT))
    except ValueError:
        return DEFAULT_HEARTBEAT_TIMEOUT
    return value if value > 0 else DEFAULT_HEARTBEAT_TIMEOUT


def worker_command() -> list[str]:
    """The command line that starts an engine process (``OUTRIDER_WORKER_CMD`` is not consulted: no injection)."""
    if getattr(sys, "frozen", False):  # a packaged app: its entry point must call run_worker_if_requested()
        return [sys.executable, WORKER_FLAG]
    return [sys.executable, "-X", "utf8", "-m", "outrider.worker.engine_process"]


def run_worker_if_requested(argv: list[str] | None = None) -> None:
    """For frozen builds: call first thing in the app's entry point; runs the engine and exits if asked to."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [WORKER_FLAG]:
        from outrider.worker.engine_process import child_main

        child_main(args[1:])


def child_env() -> dict[str, str]:
    """The app's environment, with this ``outrider`` package importable first (editable or not)."""
    env = dict(os.environ)
    root = str(Path(outrider.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONFAULTHANDLER", "1")
    env.setdefault("GGML_NO_BACKTRACE", "1")  # ggml would spend seconds attaching gdb before aborting
    return env


def new_log_file(log_dir: Path) -> str:
    """Rotate ``log_dir`` (``prune_logs``) and create the next engine log in it (``engine-*.log``); its path."""
    log_dir.mkdir(parents=True, exist_ok=True)
    prune_logs(log_dir)
    fd, log_path = tempfile.mkstemp(prefix="engine-", suffix=".log", dir=log_dir)
    os.close(fd)
    return log_path


def prune_logs(log_dir: Path, keep: int = LOGS_KEPT) -> None:
    """Keep only the newest ``keep`` engine logs (a clean exit deletes its own; crashes, kills and failed runs
    leave theirs, so the folder is rotated here, before each engine start)."""
    def mtime(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    with contextlib.suppress(OSError):
        logs = sorted(log_dir.glob("engine-*.log"), key=mtime, reverse=True)
        for old in logs[max(0, keep):]:
            with contextlib.suppress(OSError):
                old.unlink()


def spawn(log_path: str, heartbeat: float) -> subprocess.Popen[bytes]:
    """Start the engine process: requests on its stdin, events on its stdout, its stderr (and, once it has moved
    its descriptors, everything llama.cpp prints) in ``log_path``; a heartbeat every ``heartbeat`` seconds."""
    with open(log_path, "ab") as log:  # startup errors land in the log too
        return subprocess.Popen(
            [*worker_command(), "--log", log_path, "--heartbeat", f"{heartbeat:g}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            env=child_env(), close_fds=True, bufsize=0,
        )


def is_stopped(pid: int | None) -> bool:
    """The process is stopped (SIGSTOP/SIGTSTP: state T), as far as /proc tells (False where there is none)."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def read_tail(path: str | None, n_lines: int = 60) -> tuple[str, ...]:
    """The last non-blank lines of an engine log (at most the last 64 KiB read); () if there is none."""
    if not path:
        return ()
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            data = f.read()
    except OSError:
        return ()
    lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return tuple(lines[-n_lines:])
