"""A first-in, first-out queue of replies in front of one engine: requests wait their turn, never interleave.

The engine process runs one reply at a time (``EngineClient`` serialises its requests). The HTTP server receives
requests concurrently, so ``EngineScheduler`` puts each reply in a queue (``submit`` returns a ``Job`` at once) and
one thread of its own runs them in arrival order, handing every event of a job to that job's ``deliver``
callback. The GUI's chat generations go through the same ``EngineClient``; its lock orders them against the
server's jobs (one reply at a time, whoever asked).

Invariants:
    * at most one job runs at a time; jobs start in submission order;
    * every job that was accepted gets exactly one final event: its ``DoneEvent`` (stop / length / cancelled) or a
      ``JobFailed`` — a cancelled job that never ran gets ``DoneEvent("cancelled")`` with empty statistics;
    * ``Job.cancel()`` returns at once: a queued job leaves the queue there and then (its ``--max-queued`` slot is
      free for the next request, its final event delivered on the cancelling thread), a running one is cancelled
      within one engine step (``Generation.cancel``, which targets that reply only).

Qt-free and asyncio-free: callbacks run on the scheduler's thread (the server hops them onto its event loop).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from outrider.engine.events import DoneEvent, StepBatch
from outrider.engine.params import TextRequest
from outrider.engine.stats import GenerationStats

DEFAULT_MAX_QUEUED = 16  # jobs waiting (the running one not counted)


class GenerationLike(Protocol):
    """What the scheduler needs from one running reply (``outrider.worker.generation.Generation``)."""

    def __iter__(self) -> Iterator[Any]: ...

    def __next__(self) -> Any: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


class EngineLike(Protocol):
    """What the scheduler needs from the engine (``outrider.worker.client.EngineClient``)."""

    def generate(self, request: Any) -> Any: ...


@dataclasses.dataclass(frozen=True)
class JobFailed:
    """The final event of a job the engine could not finish: ``error`` is the typed exception (``WorkerError``
    subclasses from the engine client, or whatever ``prepare`` raised)."""

    error: BaseException


JobEvent = StepBatch | DoneEvent | JobFailed


class JobState(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


class QueueFull(Exception):
    """``submit`` refused a job: ``max_queued`` jobs are already waiting."""

    def __init__(self, max_queued: int) -> None:
        super().__init__(f"{max_queued} requests are already waiting for the engine; try again later")
        self.max_queued = max_queued


class SchedulerClosed(Exception):
    """``submit`` after ``close``."""


class Job:
    """One queued reply. ``deliver(event)`` receives its ``StepBatch`` events and one final ``DoneEvent`` or
    ``JobFailed``, on the scheduler's thread. ``finished`` is set after the final event was delivered."""

    def __init__(self, request: TextRequest, deliver: Callable[[JobEvent], None], number: int) -> None:
        self.request = request
        self.number = number
        self._deliver = deliver
        self._lock = threading.Lock()
        self._cancelled = False
        self._generation: GenerationLike | None = None
        self._withdraw: Callable[[Job], None] | None = None  # the scheduler's: takes a queued job out of its queue
        self.state = JobState.QUEUED
        self.result: DoneEvent | JobFailed | None = None
        self.finished = threading.Event()

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel`` was called (the reply may still have finished normally just before)."""
        return self._cancelled

    def cancel(self) -> None:
        """Stop this job: out of the queue at once if still queued, cancelled within one engine step if running.
        Never waits."""
        with self._lock:
            self._cancelled = True
            generation = self._generation
            withdraw = self._withdraw
        if generation is not None:
            generation.cancel()
        elif withdraw is not None:
            withdraw(self)

    def _attach(self, generation: GenerationLike) -> bool:
        """Note the running reply; False (and it is cancelled) when the job was cancelled meanwhile."""
        with self._lock:
            self._generation = generation
            cancelled = self._cancelled
        if cancelled:
            generation.cancel()
        return not cancelled

    def _emit(self, event: JobEvent) -> None:
        if isinstance(event, DoneEvent | JobFailed):
            self.result = event
        self._deliver(event)


class EngineScheduler:
    """Runs submitted replies one at a time, in order, on its own thread (started by the first ``submit``).

    ``prepare()``, when given, runs before each job on the scheduler's thread (the CLI server reloads its pair
    there after an engine crash); what it raises fails that job as ``JobFailed``. ``on_finished(job)`` is called
    after each job's final event (tests and the GUI's request counter use it).
    """

    def __init__(self, engine: EngineLike, *, max_queued: int = DEFAULT_MAX_QUEUED,
                 prepare: Callable[[], None] | None = None,
                 on_finished: Callable[[Job], None] | None = None) -> None:
        if max_queued < 0:
            raise ValueError(f"max_queued must be >= 0, got {max_queued}")
        self._engine = engine
        self.max_queued = max_queued
        self._prepare = prepare
        self._on_finished = on_finished
        self._cond = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._running: Job | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._submitted = 0
        self.completed = 0  # jobs whose final event was delivered

    @property
    def waiting(self) -> int:
        """Jobs queued behind the running one."""
        with self._cond:
            return len(self._queue)

    def queued_jobs(self) -> list[Job]:
        """The jobs waiting behind the running one, in order (a snapshot)."""
        with self._cond:
            return list(self._queue)

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._running is not None or bool(self._queue)

    def submit(self, request: TextRequest, deliver: Callable[[JobEvent], None]) -> Job:
        """Queue a reply; returns at once. Raises ``QueueFull`` or ``SchedulerClosed``."""
        with self._cond:
            if self._closed:
                raise SchedulerClosed("the server is shutting down")
            if len(self._queue) >= self.max_queued and self._running is not None:
                raise QueueFull(self.max_queued)
            self._submitted += 1
            job = Job(request, deliver, self._submitted)
            job._withdraw = self._withdraw
            self._queue.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="outrider-server-scheduler", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return job

    def close(self, timeout: float = 10.0) -> None:
        """Cancel every job (queued ones end ``cancelled`` without running) and stop the thread. Idempotent."""
        with self._cond:
            self._closed = True
            pending = list(self._queue)
            running = self._running
            self._cond.notify_all()
        for job in pending:
            job.cancel()
        if running is not None:
            running.cancel()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _withdraw(self, job: Job) -> None:
        """A queued job was cancelled: out of the queue now, finished with ``DoneEvent("cancelled")`` here (a job
        the scheduler's thread has already taken is left to it)."""
        with self._cond:
            try:
                self._queue.remove(job)
            except ValueError:
                return
        self._finish(job, lambda: job._emit(DoneEvent("cancelled", GenerationStats(), "")))

    def _finish(self, job: Job, run: Callable[[], None]) -> None:
        """``run`` (which delivers the job's final event), then the bookkeeping every finished job gets."""
        try:
            run()
        except Exception:  # a deliver callback that raised: its job still ends, the queue goes on
            pass
        finally:
            with self._cond:
                if self._running is job:
                    self._running = None
                self.completed += 1
            job.state = JobState.FINISHED
            job.finished.set()
            if self._on_finished is not None:
                self._on_finished(job)

    # -- the scheduler thread ---------------------------------------------------------------------------------
    def _next_job(self) -> Job | None:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            job = self._queue.popleft()
            self._running = job
            return job

    def _loop(self) -> None:
        while (job := self._next_job()) is not None:
            self._finish(job, functools.partial(self._run, job))

    def _run(self, job: Job) -> None:
        if job.cancelled:
            job._emit(DoneEvent("cancelled", GenerationStats(), ""))
            return
        job.state = JobState.RUNNING
        try:
            if self._prepare is not None:
                self._prepare()
            generation = self._engine.generate(job.request)
        except Exception as exc:
            job._emit(JobFailed(exc))
            return
        final: DoneEvent | JobFailed | None = None
        try:
            job._attach(generation)
            for event in generation:
                if isinstance(event, DoneEvent):
                    final = event
                elif isinstance(event, StepBatch):
                    job._emit(event)
        except Exception as exc:
            final = JobFailed(exc)
        finally:
            generation.close()  # frees the engine for the next job, whatever happened above
        job._emit(final if final is not None else JobFailed(RuntimeError("the reply ended without a result")))
