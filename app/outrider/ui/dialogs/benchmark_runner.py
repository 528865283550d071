"""The benchmark's runner: interleaved plain/speculative generations through the engine bridge, one at a time,
each prompt's row computed by ``outrider.engine.measure.bench`` (the same maths as ``outrider bench``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any, Protocol

from PySide6.QtCore import QObject, Signal

from outrider.engine.measure.bench import bench_row, stats_dict
from outrider.engine.params import ChatMessage, DraftParams, SamplingParams, TextRequest
from outrider.ui.bridges.engine_bridge import describe_error


class EngineBridgeLike(Protocol):
    """What the benchmark needs from ``outrider.ui.bridges.engine_bridge.QtEngineBridge`` (signals are SignalInstances).

    ``generation_finished`` carries a ``DoneEvent`` (``stop_reason``, ``stats``); ``error`` and ``crashed`` an
    exception.
    """

    generation_finished: Any
    error: Any
    crashed: Any

    def generate(self, request: Any) -> None: ...

    def cancel(self) -> None: ...


class RunState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    CANCELLING = "cancelling"


@dataclasses.dataclass(frozen=True)
class _Job:
    prompt_index: int
    mode: str  # "plain" or "spec"


class BenchmarkRunner(QObject):
    """Drives the interleaved plain/speculative generations through the bridge, one at a time.

    Signals:
        progressed(int, int): generations done, generations in all.
        row_finished(object): one prompt's row (the dict ``outrider bench --json`` prints).
        finished(object): every row, in prompt order.
        failed(str): the engine failed or crashed; the run stopped.
        cancelled(): the user stopped the run (rows finished so far were already reported).
    """

    progressed = Signal(int, int)
    row_finished = Signal(object)
    finished = Signal(object)
    failed = Signal(str)
    cancelled = Signal()

    def __init__(self, bridge: EngineBridgeLike, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.state = RunState.IDLE
        self.rows: list[dict[str, Any]] = []
        self._prompts: list[tuple[str, str]] = []
        self._jobs: list[_Job] = []
        self._done = 0
        self._total = 0
        self._runs: dict[int, dict[str, list[dict[str, Any]]]] = {}
        self._runs_per_prompt = 0
        self._max_tokens = 128
        self._draft = DraftParams()
        self._connected = False

    @property
    def running(self) -> bool:
        return self.state is not RunState.IDLE

    def start(self, prompts: Sequence[tuple[str, str]], *, runs: int = 2, max_tokens: int = 128,
              draft: DraftParams | None = None) -> None:
        """Benchmark ``(label, prompt)`` pairs; ``runs`` rounds of plain then speculative per prompt."""
        if self.running:
            raise RuntimeError("a benchmark is already running")
        if not prompts or runs < 1:
            raise ValueError("nothing to benchmark: choose at least one prompt and one run")
        self._prompts = list(prompts)
        self._runs_per_prompt = runs
        self._max_tokens = max_tokens
        self._draft = draft or DraftParams()
        self._jobs = [_Job(i, mode) for i in range(len(self._prompts)) for _ in range(runs)
                      for mode in ("plain", "spec")]
        self._jobs.reverse()  # pop() from the end
        self._runs = {i: {"plain": [], "spec": []} for i in range(len(self._prompts))}
        self.rows = []
        self._done, self._total = 0, len(self._jobs)
        self.state = RunState.RUNNING
        self._connect(True)
        self.progressed.emit(0, self._total)
        self._next()

    def cancel(self) -> None:
        """Stop at the next step of the running generation; ``cancelled`` follows when the engine confirms."""
        if self.state is RunState.RUNNING:
            self.state = RunState.CANCELLING
            self.bridge.cancel()

    def request_for(self, prompt: str, mode: str) -> TextRequest:
        """Greedy, so plain and speculative produce the same text and the timing compares like with like."""
        return TextRequest(messages=(ChatMessage("user", prompt),), max_tokens=self._max_tokens,
                           sampling=SamplingParams(temperature=0.0, seed=0), draft=self._draft,
                           plain=mode == "plain")

    # -- internals ----------------------------------------------------------------------------------------------
    def _connect(self, on: bool) -> None:
        pairs = ((self.bridge.generation_finished, self._on_bridge_generation_finished),
                 (self.bridge.error, self._on_bridge_error), (self.bridge.crashed, self._on_bridge_error))
        if on and not self._connected:
            for signal, slot in pairs:
                signal.connect(slot)
        elif not on and self._connected:
            for signal, slot in pairs:
                signal.disconnect(slot)
        self._connected = on

    def _next(self) -> None:
        if not self._jobs:
            self._end()
            self.finished.emit(list(self.rows))
            return
        job = self._jobs[-1]
        self.bridge.generate(self.request_for(self._prompts[job.prompt_index][1], job.mode))

    def _on_bridge_generation_finished(self, done: Any) -> None:
        if self.state is RunState.CANCELLING:
            self._end()
            self.cancelled.emit()
            return
        if self.state is not RunState.RUNNING or not self._jobs:
            return
        job = self._jobs.pop()
        if getattr(done, "stop_reason", "") == "cancelled":  # someone else stopped it: stop the run
            self._end()
            self.cancelled.emit()
            return
        runs = self._runs[job.prompt_index]
        runs[job.mode].append(stats_dict(done.stats))
        self._done += 1
        self.progressed.emit(self._done, self._total)
        if len(runs["spec"]) == self._runs_per_prompt and len(runs["plain"]) == self._runs_per_prompt:
            label, prompt = self._prompts[job.prompt_index]
            row = bench_row(label, prompt, runs)
            self.rows.append(row)
            self.row_finished.emit(row)
        self._next()

    def _on_bridge_error(self, exc: object) -> None:
        if self.state is RunState.IDLE:
            return
        was_cancelling = self.state is RunState.CANCELLING
        self._end()
        if was_cancelling:
            self.cancelled.emit()
        else:
            self.failed.emit(describe_failure(exc))

    def _end(self) -> None:
        self.state = RunState.IDLE
        self._jobs = []
        self._connect(False)


def describe_failure(exc: object) -> str:
    """An engine failure in one line (the bridge's wording for an exception)."""
    return describe_error(exc) if isinstance(exc, BaseException) else str(exc)
