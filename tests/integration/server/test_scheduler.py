"""``EngineScheduler`` with a scripted engine (no model): first in, first out, never two replies at once, every job
ends with exactly one final event, cancellation of queued and running jobs, failures contained, bounded queue."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from server_helpers import at_once

from outrider.engine.events import DoneEvent, StepBatch, StepEvent
from outrider.engine.params import TextRequest
from outrider.engine.stats import GenerationStats
from outrider.server.scheduler import EngineScheduler, JobEvent, JobFailed, QueueFull, SchedulerClosed


class FakeGeneration:
    def __init__(self, engine: FakeEngine, request: TextRequest) -> None:
        self.engine, self.request = engine, request
        self.cancelled = threading.Event()
        self._steps = self._run()

    def _run(self) -> Iterator[Any]:
        prompt = self.request.prompt or ""
        with self.engine.lock:
            self.engine.active += 1
            self.engine.max_active = max(self.engine.max_active, self.engine.active)
            self.engine.started.append(prompt)
        try:
            for i in range(self.engine.steps):
                if self.cancelled.is_set():
                    yield DoneEvent("cancelled", GenerationStats(generated=i), "")
                    return
                time.sleep(self.engine.step_s)
                yield StepBatch((StepEvent([i], [False], [f"{prompt}{i} "], 0),), GenerationStats(generated=i + 1))
            yield DoneEvent("length", GenerationStats(generated=self.engine.steps), "")
        finally:
            with self.engine.lock:
                self.engine.active -= 1

    def __iter__(self) -> FakeGeneration:
        return self

    def __next__(self) -> Any:
        return next(self._steps)

    def cancel(self) -> None:
        self.cancelled.set()

    def close(self) -> None:
        self.cancel()
        for _ in self._steps:
            pass


class FakeEngine:
    def __init__(self, steps: int = 3, step_s: float = 0.01) -> None:
        self.steps, self.step_s = steps, step_s
        self.lock = threading.Lock()
        self.active = self.max_active = 0
        self.started: list[str] = []
        self.fail_on: str | None = None

    def generate(self, request: TextRequest) -> FakeGeneration:
        if request.prompt == self.fail_on:
            raise RuntimeError("refused")
        return FakeGeneration(self, request)


class Collector:
    def __init__(self) -> None:
        self.events: list[JobEvent] = []

    def __call__(self, event: JobEvent) -> None:
        self.events.append(event)


def req(prompt: str) -> TextRequest:
    return TextRequest(prompt=prompt, max_tokens=8)


def test_jobs_run_one_at_a_time_in_submission_order() -> None:
    engine = FakeEngine(steps=4, step_s=0.005)
    scheduler = EngineScheduler(engine)
    collectors = [Collector() for _ in range(6)]
    jobs = [scheduler.submit(req(f"p{i}"), c) for i, c in enumerate(collectors)]
    for job in jobs:
        assert job.finished.wait(10)
    assert engine.started == [f"p{i}" for i in range(6)]
    assert engine.max_active == 1
    for i, c in enumerate(collectors):
        texts = [e.text for e in c.events if isinstance(e, StepBatch)]
        assert texts == [f"p{i}{n} " for n in range(4)]
        assert sum(isinstance(e, DoneEvent | JobFailed) for e in c.events) == 1
        assert isinstance(c.events[-1], DoneEvent) and c.events[-1].stop_reason == "length"
    scheduler.close()


def test_submissions_from_many_threads_never_interleave() -> None:
    engine = FakeEngine(steps=3, step_s=0.002)
    scheduler = EngineScheduler(engine, max_queued=64)
    jobs = at_once([functools.partial(scheduler.submit, req(f"t{i}"), Collector()) for i in range(20)])
    assert all(j.finished.wait(10) for j in jobs)
    assert engine.max_active == 1 and sorted(engine.started) == sorted(f"t{i}" for i in range(20))
    assert engine.started == [j.request.prompt for j in sorted(jobs, key=lambda j: j.number)]
    scheduler.close()


def test_a_cancelled_queued_job_never_reaches_the_engine() -> None:
    engine = FakeEngine(steps=20, step_s=0.01)
    scheduler = EngineScheduler(engine)
    first = scheduler.submit(req("first"), Collector())
    second_events = Collector()
    second = scheduler.submit(req("second"), second_events)
    second.cancel()
    assert first.finished.wait(10) and second.finished.wait(10)
    assert engine.started == ["first"]
    assert isinstance(second.result, DoneEvent) and second.result.stop_reason == "cancelled"
    assert second_events.events == [second.result]
    scheduler.close()


def test_cancelling_a_running_job_cancels_its_generation() -> None:
    engine = FakeEngine(steps=1000, step_s=0.005)
    scheduler = EngineScheduler(engine)
    seen = threading.Event()

    def deliver(event: JobEvent) -> None:
        seen.set()

    job = scheduler.submit(req("long"), deliver)
    assert seen.wait(10)
    job.cancel()
    assert job.finished.wait(10)
    assert isinstance(job.result, DoneEvent) and job.result.stop_reason == "cancelled"
    assert job.result.stats.generated < 1000
    scheduler.close()


def test_a_failure_is_the_job_s_final_event_and_the_next_job_runs() -> None:
    engine = FakeEngine()
    engine.fail_on = "bad"
    scheduler = EngineScheduler(engine)
    bad = scheduler.submit(req("bad"), Collector())
    good = scheduler.submit(req("good"), Collector())
    assert bad.finished.wait(10) and good.finished.wait(10)
    assert isinstance(bad.result, JobFailed) and str(bad.result.error) == "refused"
    assert isinstance(good.result, DoneEvent) and good.result.stop_reason == "length"
    scheduler.close()


def test_prepare_runs_before_each_job_and_its_error_fails_that_job() -> None:
    calls: list[int] = []

    def prepare() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("could not reload")

    scheduler = EngineScheduler(FakeEngine(), prepare=prepare)
    a = scheduler.submit(req("a"), Collector())
    b = scheduler.submit(req("b"), Collector())
    assert a.finished.wait(10) and b.finished.wait(10)
    assert isinstance(a.result, JobFailed) and isinstance(b.result, DoneEvent) and len(calls) == 2
    scheduler.close()


def test_the_queue_is_bounded_and_closing_cancels_everything() -> None:
    engine = FakeEngine(steps=1000, step_s=0.005)
    scheduler = EngineScheduler(engine, max_queued=2)
    started = threading.Event()
    running = scheduler.submit(req("r"), lambda e: started.set())
    assert started.wait(10)
    queued = [scheduler.submit(req(f"q{i}"), Collector()) for i in range(2)]
    with pytest.raises(QueueFull):
        scheduler.submit(req("one too many"), Collector())
    scheduler.close()
    for job in (running, *queued):
        assert job.finished.is_set()
        assert isinstance(job.result, DoneEvent) and job.result.stop_reason == "cancelled"
    assert engine.started == ["r"]
    with pytest.raises(SchedulerClosed):
        scheduler.submit(req("late"), Collector())


def test_a_deliver_callback_that_raises_does_not_stop_the_queue() -> None:
    def broken(event: JobEvent) -> None:
        raise RuntimeError("listener gone")

    scheduler = EngineScheduler(FakeEngine())
    first = scheduler.submit(req("a"), broken)
    second = scheduler.submit(req("b"), Collector())
    assert first.finished.wait(10) and second.finished.wait(10)
    assert isinstance(second.result, DoneEvent) and second.result.stop_reason == "length"
    scheduler.close()
