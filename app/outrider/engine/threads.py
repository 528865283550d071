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


# -- within a reply ---------------------------------------------------------------------------------------------
# A load that starts mid-reply is the case the per-reply choice misses: on a 2-core machine, one CPU-bound process
# that starts while llama.cpp runs 2 threads makes every other pass wait a scheduler tick (about 4 ms) at the
# barrier for the descheduled thread — measured on the speed-up benchmark's 8 x 512 family target: one-token passes
# went from 2.2 ms to alternating 2.3 / 6.5 ms (about 5 ms on average, with stalls of 80 ms), where one thread
# under the same load ran steady 3.2 ms passes. So the decoder steps down a thread as soon as its threads are seen
# waiting for a CPU, and steps back up when the other processes' load has gone.
CONTENTION_WINDOW_S = 0.03  # seconds: one window of the waiting-for-a-CPU measure (ns-precise, unlike /proc/stat)
CONTENDED_SHARE = 0.25  # this process's threads waiting for a CPU this share of a window's wall time: contended
CONTENDED_WINDOWS = 3  # windows in a row before a step down: a burst of another process shorter than a window
# (a `ps`, a cron job's start) touches two of them at most
RECHECK_S = 1.0  # seconds between checks of the other processes' load (/proc/stat: 10 ms jiffies need about 1 s)
TASKS_DIR = "/proc/self/task"


def own_wait_seconds(tasks_dir: str = TASKS_DIR) -> float | None:
    """Seconds this process's threads, summed, have spent runnable but waiting for a CPU (the second field of each
    thread's ``schedstat``, nanoseconds), or None where the kernel does not keep it. A thread that ended is gone
    from the sum, which only makes a window read less contended than it was."""
    try:
        tids = os.listdir(tasks_dir)
    except OSError:
        return None
    waited = 0
    for tid in tids:
        try:
            with open(f"{tasks_dir}/{tid}/schedstat", encoding="ascii") as f:
                fields = f.read().split()
            waited += int(fields[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended between the listing and the read
    return waited / 1e9


class ThreadGovernor:
    """Re-chooses llama.cpp's thread count between the passes of a reply (automatic threads only).

    Down: when this process's threads spent more than ``CONTENDED_SHARE`` of the wall time waiting for a CPU for
    ``CONTENDED_WINDOWS`` windows' worth of time in a row (a window lasts at least ``CONTENTION_WINDOW_S``; one that
    a long pass stretched counts as the windows it spans) — another process has taken a core the threads need —
    one thread fewer, down to 1: a thread that keeps its core beats two that wait for each other at every pass's
    barrier. Up (or down) to ``choose_threads`` of the other processes' load measured over the last ``RECHECK_S``:
    fewer threads wait for nothing, so only the machine-wide measure can tell that the load has gone.

    ``wait`` returns the waiting seconds (``own_wait_seconds``), ``clock`` wall seconds; injectable for tests.
    """

    def __init__(self, cpus: int, load: OtherLoadMeter, *, wait: Callable[[], float | None] = own_wait_seconds,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cpus = max(1, cpus)
        self._load, self._wait, self._clock = load, wait, clock
        self._window: tuple[float, float] | None = None  # (wall, waited) at the window's start
        self._contended = 0  # contended windows in a row
        self._window_passes = 0  # passes since the window's start
        self._run_passes = 0  # passes in the contended windows in a row
        # Set by a step down (0 otherwise): how many of the latest passes ran in the contended windows that led to
        # it, on the old count. They ran under the load, at a cost no plain pass of the reply has measured: the
        # speed-up estimate gives them a stretch of their own (``PlainRateMeter.mark_contended``).
        self.contended_passes = 0
        self._checked = clock()

    def start_reply(self) -> None:
        """A reply starts: windows restart (the time between replies is no evidence of contention)."""
        self._window = self._reading()
        self._contended = self._window_passes = self._run_passes = self.contended_passes = 0
        self._checked = self._clock()

    def after_pass(self, threads: int) -> int:
        """The thread count for the next pass, given the current ``threads``."""
        now = self._clock()
        self.contended_passes = 0
        self._window_passes += 1
        if now - self._checked >= RECHECK_S:
            self._checked = now
            busy = self._load.busy_since_last(min_interval=RECHECK_S)
            if busy is not None:
                self._contended = self._window_passes = self._run_passes = 0
                self._window = self._reading()
                return choose_threads(self.cpus, busy)
        if threads <= 1 or self._window is None:
            if self._window is None:
                self._window, self._window_passes = self._reading(), 0
            return threads
        start_wall, start_waited = self._window
        if now - start_wall < CONTENTION_WINDOW_S:
            return threads
        reading = self._reading()
        if reading is None:
            return threads
        share = (reading[1] - start_waited) / (reading[0] - start_wall)
        self._window = reading
        # A window is as long as the passes in it: one slow pass that waited throughout (a 9-token verify pass
        # at 60 ms quiet took 330 ms beside a new load) is that many windows of contention, not one — the rule is
        # "contended for CONTENDED_WINDOWS windows' worth of time in a row", which a 15 ms burst never is.
        windows = max(1, int((reading[0] - start_wall) / CONTENTION_WINDOW_S))
        if share > CONTENDED_SHARE:
            self._contended += windows
            self._run_passes += self._window_passes
        else:
            self._contended = self._run_passes = 0
        self._window_passes = 0
        if self._contended < CONTENDED_WINDOWS:
            return threads
        self.contended_passes = self._run_passes
        self._contended = self._run_passes = 0
        return threads - 1

    def _reading(self) -> tuple[float, float] | None:
        waited = self._wait()
        return None if waited is None else (self._clock(), waited)
