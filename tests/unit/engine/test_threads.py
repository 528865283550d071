"""The automatic llama.cpp thread count: every CPU when quiet, fewer when other processes keep CPUs busy."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

from outrider.engine.threads import (
    CONTENDED_SHARE,
    CONTENDED_WINDOWS,
    CONTENTION_WINDOW_S,
    RECHECK_S,
    OtherLoadMeter,
    ThreadGovernor,
    choose_threads,
    machine_busy_seconds,
    own_wait_seconds,
    usable_cpus,
)


@pytest.mark.parametrize(("cpus", "busy", "threads"), [
    (2, 0.0, 2), (2, 0.3, 2),  # quiet: every CPU
    (2, 1.0, 1), (2, 0.6, 1), (2, 9.0, 1),  # the 2-core machine with other load: one fewer, at least 1
    (8, 3.0, 5), (8, 1.0, 7), (8, 0.5, 7),
    (1, 5.0, 1), (1, 0.0, 1),
])
def test_threads_follow_the_cpus_left_free(cpus: int, busy: float, threads: int) -> None:
    """Broken once on purpose (busy ignored: always every CPU): the busy rows failed."""
    assert choose_threads(cpus, busy) == threads


class _Clock:
    def __init__(self) -> None:
        self.wall = 0.0
        self.machine = 0.0
        self.own = 0.0


def _meter(clock: _Clock) -> OtherLoadMeter:
    return OtherLoadMeter(machine=lambda: clock.machine, own=lambda: clock.own, clock=lambda: clock.wall)


def test_other_processes_work_is_the_machines_less_this_ones() -> None:
    """Over 2 s the machine ran 3.6 CPU-seconds and this process 1.6 of them: others kept 1.0 CPU busy. A
    reading sooner than MIN_INTERVAL_S after the last says nothing and keeps the interval open."""
    clock = _Clock()
    meter = _meter(clock)
    assert meter.busy_since_last() is None  # the first reading only starts an interval
    clock.wall, clock.machine, clock.own = 0.5, 0.9, 0.4
    assert meter.busy_since_last() is None  # too short: the interval goes on from 0
    clock.wall, clock.machine, clock.own = 2.0, 3.6, 1.6
    assert meter.busy_since_last() == pytest.approx(1.0)
    clock.wall, clock.machine, clock.own = 4.0, 5.6, 3.6  # only this process worked
    assert meter.busy_since_last() == pytest.approx(0.0)


def test_the_probe_falls_back_to_the_load_average_without_proc_stat() -> None:
    meter = OtherLoadMeter(machine=lambda: None, load_average=lambda: 1.7)
    assert meter.probe(0.0, sleep=lambda _s: None) == pytest.approx(1.7)
    assert meter.busy_since_last() is None  # between replies: no guess from the load average


@pytest.mark.skipif(machine_busy_seconds() is None, reason="needs /proc/stat")
def test_a_real_busy_process_is_measured() -> None:
    """One CPU-bound process: the probe sees at least most of a CPU busy (more when the machine is shared: this
    asserts a lower bound only), while this process sleeps and counts nothing of its own."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        meter = OtherLoadMeter()
        meter.probe(0.3)  # the burner is running by now
        busy = meter.probe(0.5)
    finally:
        burner.kill()
        burner.wait()
    assert busy >= 0.8
    assert choose_threads(usable_cpus(), busy) <= max(1, usable_cpus() - 1)


class _Waits:
    """A scripted process: wall seconds and its threads' seconds spent waiting for a CPU."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.waited = 0.0

    def passes(self, seconds: float, waiting_share: float) -> None:
        self.wall += seconds
        self.waited += seconds * waiting_share


def _governor(waits: _Waits, load: OtherLoadMeter | None = None, cpus: int = 2) -> ThreadGovernor:
    load = load or OtherLoadMeter(machine=lambda: None, own=lambda: 0.0, clock=lambda: waits.wall)
    governor = ThreadGovernor(cpus, load, wait=lambda: waits.waited, clock=lambda: waits.wall)
    governor.start_reply()
    return governor


def _run_passes(governor: ThreadGovernor, waits: _Waits, threads: int, n: int, waiting_share: float) -> int:
    for _ in range(n):
        waits.passes(0.005, waiting_share)
        threads = governor.after_pass(threads)
    return threads


def test_threads_waiting_for_a_cpu_step_down_one_at_a_time_to_one() -> None:
    """Contended (the threads wait half the time) for CONTENDED_WINDOWS windows: one thread fewer; the next
    windows, one fewer again, never below 1. Broken once on purpose (a step on the first contended window): the
    burst test below failed; (no step at all): this one did."""
    waits = _Waits()
    governor = _governor(waits, cpus=4)
    per_window = math.ceil(CONTENTION_WINDOW_S / 0.005) + 1  # float sums: one pass to spare
    threads = _run_passes(governor, waits, 4, per_window * CONTENDED_WINDOWS, 0.5)
    assert threads == 3
    threads = _run_passes(governor, waits, threads, per_window * CONTENDED_WINDOWS * 4, 0.5)
    assert threads == 1


def test_a_short_burst_of_another_process_keeps_the_threads() -> None:
    """A 15 ms burst of another process (e.g. a `ps`) between quiet stretches: at most one contended window, no
    step."""
    waits = _Waits()
    governor = _governor(waits)
    per_window = math.ceil(CONTENTION_WINDOW_S / 0.005) + 1  # float sums: one pass to spare
    threads = 2
    for passes, share in ((per_window, 0.0), (3, 0.9), (per_window, 0.0), (3, 0.9), (per_window, 0.0)):
        threads = _run_passes(governor, waits, threads, passes, share)
    assert threads == 2
    assert _run_passes(governor, waits, threads, per_window * 2, CONTENDED_SHARE / 2) == 2


def test_one_long_pass_that_waited_throughout_steps_down_at_once() -> None:
    """A 9-token verify pass that a new load stretched from 60 to 330 ms, its threads waiting half of it, is 11
    windows of contention: the next pass runs on one thread fewer (a 24-token reply has no three passes left to
    wait for). A 330 ms pass with a 15 ms burst in it is not contended. Broken once on purpose (a window counted
    once, whatever its length): the first assertion failed with 2 threads."""
    waits = _Waits()
    governor = _governor(waits)
    waits.passes(0.33, 0.5)
    assert governor.after_pass(2) == 1
    waits = _Waits()
    governor = _governor(waits)
    waits.passes(0.33, 0.015 / 0.33)
    assert governor.after_pass(2) == 2


def test_a_step_down_tells_how_many_passes_ran_contended() -> None:
    """The speed-up estimate values the passes that led to a step down as a stretch of their own: the governor
    counts them. A quiet window (one 40 ms pass), then 11 ms passes waiting half the time: three windows of three
    passes each, so 9 passes ran contended on 2 threads. Only the step down reports them, once. Broken once on
    purpose (the quiet window's passes counted too): 10."""
    waits = _Waits()
    governor = _governor(waits)
    waits.passes(0.04, 0.0)
    assert governor.after_pass(2) == 2 and governor.contended_passes == 0
    threads = 2
    for _ in range(CONTENDED_WINDOWS * 3):
        assert threads == 2
        waits.passes(0.011, 0.5)
        threads = governor.after_pass(threads)
    assert threads == 1 and governor.contended_passes == CONTENDED_WINDOWS * 3
    waits.passes(0.011, 0.5)
    assert governor.after_pass(1) == 1 and governor.contended_passes == 0


def test_the_threads_come_back_when_the_other_load_has_gone() -> None:
    """At 1 thread nothing waits whatever the load: only the machine-wide measure, every RECHECK_S, tells. Busy
    others keep 1 thread; once they stop, every CPU again."""
    waits = _Waits()
    machine = {"busy": 0.0, "own": 0.0}
    load = OtherLoadMeter(machine=lambda: machine["busy"], own=lambda: machine["own"], clock=lambda: waits.wall)
    load.busy_since_last()  # the reading before the reply
    governor = _governor(waits, load)
    threads = 1
    for _ in range(int(RECHECK_S / 0.005) + 1):  # a second with another process on the other CPU
        waits.passes(0.005, 0.0)
        machine["busy"] += 0.005 * 2
        machine["own"] += 0.005
        threads = governor.after_pass(threads)
        assert threads == 1
    for _ in range(int(RECHECK_S / 0.005) + 10):  # a second alone
        waits.passes(0.005, 0.0)
        machine["busy"] += 0.005
        machine["own"] += 0.005
        threads = governor.after_pass(threads)
    assert threads == 2


def test_without_schedstat_the_threads_stay() -> None:
    waits = _Waits()
    load = OtherLoadMeter(machine=lambda: None, own=lambda: 0.0, clock=lambda: waits.wall)
    governor = ThreadGovernor(2, load, wait=lambda: None, clock=lambda: waits.wall)
    governor.start_reply()
    assert _run_passes(governor, waits, 2, 100, 1.0) == 2


@pytest.mark.skipif(own_wait_seconds() is None, reason="needs /proc/self/task/*/schedstat")
def test_a_real_thread_waiting_for_a_cpu_is_measured() -> None:
    """Two CPU-bound processes per usable CPU beside this one's spinning thread: it waits for a CPU a good share
    of the time (a lower bound only: the machine may be busier still)."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * usable_cpus())]
    try:
        time.sleep(0.3)
        start_wall, start_waited = time.monotonic(), own_wait_seconds()
        while time.monotonic() - start_wall < 0.5:
            pass
        waited = own_wait_seconds()
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert start_waited is not None and waited is not None
    assert (waited - start_waited) / 0.5 > CONTENDED_SHARE
