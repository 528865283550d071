"""How many llama.cpp threads: every usable CPU on a quiet machine, fewer when other processes keep CPUs busy.

Why not always every CPU: llama.cpp splits each pass over its threads and waits at a barrier until all of them
are done, so one thread the kernel has descheduled for another process stalls the whole pass. On a 2-core machine
with other load, plain decoding of SmolLM2-135M with 2 threads fell to 1.5-11 tok/s (40-120 quiet); with one
thread it keeps a core to itself. (llama.cpp's own default, 4 threads, is worse still on 2 cores.)

What is free is measured, not guessed: the CPU time the whole machine spent (``/proc/stat``) less what this process
spent itself (``time.process_time``, all its threads), over an interval — at load a short probe (``PROBE_S``),
before each reply the time since the previous reading. Where ``/proc/stat`` is missing, the 1-minute load
average stands in. An explicit thread count (``--threads N``, the settings) is never overridden.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

QUIET_BUSY = 0.5  # CPUs' worth of other processes' work below which the machine counts as quiet
PROBE_S = 0.1  # the load-time probe (jiffies are 10 ms: 0.1 s resolves a busy CPU to about 10%)
MIN_INTERVAL_S = 1.0  # a shorter interval between replies says too little to change the thread count
STAT_PATH = "/proc/stat"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; the CPU count where there is none), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def choose_threads(cpus: int, busy: float) -> int:
    """Threads for ``cpus`` usable CPUs while other processes keep ``busy`` CPUs' worth of them busy.

    Quiet (``busy`` < QUIET_BUSY): every CPU. Busy: the CPUs left free, rounded, and at most one fewer than the
    CPUs (a thread sharing a core with another process stalls every pass), at least 1. E.g. 2 CPUs with one other
    busy process: 1; 8 CPUs with 3 busy: 5.
    """
    cpus = max(1, cpus)
    if busy < QUIET_BUSY:
        return cpus
    return max(1, min(cpus - 1, int(cpus - busy + 0.5)))


def machine_busy_seconds(path: str = STAT_PATH) -> float | None:
    """CPU seconds the whole machine has spent on anything but idling since boot (``/proc/stat``'s ``cpu``
    line: user, nice, system, irq, softirq, steal; idle and iowait left out), or None where unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 5 or fields[0] != "cpu":
        return None
    try:
        values = [int(v) for v in fields[1:9]]
    except ValueError:
        return None
    values += [0] * (8 - len(values))
    user, nice, system, _idle, _iowait, irq, softirq, steal = values
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class _Reading:
    wall: float
    machine: float
    own: float


class OtherLoadMeter:
    """CPUs' worth of work done by other processes over an interval (``busy_since_last``, ``probe``).

    ``machine`` returns the machine's busy CPU seconds (None: unknown, the load average is used), ``own`` this
    process's CPU seconds, ``clock`` wall seconds; injectable for tests.
    """

    def __init__(self, machine: Callable[[], float | None] = machine_busy_seconds,
                 own: Callable[[], float] = time.process_time, clock: Callable[[], float] = time.monotonic,
                 load_average: Callable[[], float] = lambda: os.getloadavg()[0]) -> None:
        self._machine, self._own, self._clock, self._load_average = machine, own, clock, load_average
        self._last: _Reading | None = None

    def _read(self) -> _Reading | None:
        machine = self._machine()
        return None if machine is None else _Reading(self._clock(), machine, self._own())

    def busy_since_last(self, min_interval: float = MIN_INTERVAL_S) -> float | None:
        """Other processes' busy CPUs since the previous reading; None when the interval is shorter than
        ``min_interval`` (the previous reading is then kept) or nothing is readable. The first call only reads."""
        now = self._read()
        if now is None:
            return None
        last = self._last
        if last is not None and now.wall - last.wall < min_interval:
            return None
        self._last = now
        if last is None:
            return None
        wall = now.wall - last.wall
        others = (now.machine - last.machine) - (now.own - last.own)
        return max(0.0, others / wall) if wall > 0 else None

    def probe(self, seconds: float = PROBE_S, sleep: Callable[[float], None] = time.sleep) -> float:
        """Other processes' busy CPUs over the next ``seconds`` (this process sleeps meanwhile)."""
        self._last = None
        self.busy_since_last()
        sleep(seconds)
        busy = self.busy_since_last(min_interval=0.0)
        return busy if busy is not None else (self._fallback() or 0.0)

    def _fallback(self) -> float | None:
        """The 1-minute load average (runnable processes, this one's threads included when it runs)."""
        try:
            return max(0.0, self._load_average())
        except OSError:
            return None
