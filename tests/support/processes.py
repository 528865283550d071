"""Finding the engine process a command started (Linux ``/proc``), for tests that signal it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

# Limits of the waits below: a poll returns as soon as its event happens, so a generous limit costs nothing on a
# quiet machine, while a loaded 2-core CI machine took 10-25 s to start a command's engine (30 s failed there).
WAIT_LIMIT_S = 180.0


def engine_of(parent_pid: int, within: float = WAIT_LIMIT_S) -> int:
    """The pid of the engine process (``outrider.worker.engine_process``) whose parent is ``parent_pid``.

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
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent_pid and b"outrider.worker.engine_process" in cmdline:
                return int(entry)
        time.sleep(0.05)
    raise AssertionError(f"no engine process under pid {parent_pid}")


def cpu_seconds(pid: int) -> float:
    """CPU time the process has run so far, all its threads, in seconds (``/proc/PID/task/*/schedstat``: the
    scheduler's nanosecond count, not ``stat``'s clock ticks, which sample short bursts on a loaded machine as 0).
    Threads that have exited are not counted."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def wait_for_cpu(pid: int, seconds: float, within: float = WAIT_LIMIT_S) -> None:
    """Return once process ``pid`` has run ``seconds`` of CPU time: an event (it got that far in its work), not a
    wall-clock guess of how long it needs. Raises ``AssertionError`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while cpu_seconds(pid) < seconds:
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} ran under {seconds} s of CPU in {within} s")
        time.sleep(0.05)


def release(pids: list[int]) -> None:
    """Continue and kill processes a test stopped (never leave one stopped on a shared machine)."""
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
