"""Finding the engine process a command started (Linux ``/proc``), for tests that signal it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def engine_of(parent_pid: int, within: float = 30.0) -> int:
    """The pid of the engine process (``outrider.worker.server``) whose parent is ``parent_pid``.

    Raises ``AssertionError`` when none appears ``within`` seconds.
    """
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent_pid and b"outrider.worker.server" in cmdline:
                return int(entry)
        time.sleep(0.05)
    raise AssertionError(f"no engine process under pid {parent_pid}")


def release(pids: list[int]) -> None:
    """Continue and kill processes a test stopped (never leave one stopped on a shared machine)."""
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
