"""The automatic llama.cpp thread count: every CPU when quiet, fewer when other processes keep CPUs busy."""

from __future__ import annotations

import subprocess
import sys

import pytest

from outrider.engine.threads import OtherLoadMeter, choose_threads, machine_busy_seconds, usable_cpus


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
