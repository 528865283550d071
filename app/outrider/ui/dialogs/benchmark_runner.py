"""The benchmark's runner: interleaved plain/speculative generations through the engine bridge, one at a time,
each prompt's row computed by ``outrider.engine.measure.bench`` (the same maths as ``outrider bench``).
``BridgeRun`` is the loop it shares with the exactness check (``verify_panel.VerifyRunner``).
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


class BridgeRun(QObject):
    """A fixed list of generations run through the engine bridge one at a time, cancellable, with progress.

    The benchmark and the exactness check are both this; a subclass says what to ask (``_request``), what to
    keep of each finished generation (``_record``) and what the whole run gives (``_result``). The bridge's
    signals are connected only while a run is going, so two runners can share one bridge.

    Signals:
        progressed(int, int): generations done, generations in all.
        finished(object): ``_result()``, once every generation is done.
        failed(str): the engine failed or crashed (one line); the run stopped.
        cancelled(): the run stopped early (``cancel``, or the generation was cancelled elsewhere); what was
            reported before stays reported.

    Attributes:
        state: idle, running, or cancelling (waiting for the engine to confirm).
        done: generations finished in this run.
        total: generations in this run.
    """

    progressed = Signal(int, int)
    finished = Signal(object)
    failed = Signal(str)
    cancelled = Signal()

    def __init__(self, bridge: EngineBridgeLike, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.state = RunState.IDLE
        self.done = 0
        self.total = 0
        self._connected = False

    @property
    def running(self) -> bool:
        return self.state is not RunState.IDLE

    def cancel(self) -> None:
        """Stop at the next step of the running generation; ``cancelled`` follows when the engine confirms."""
        if self.state is RunState.RUNNING:
            self.state = RunState.CANCELLING
            self.bridge.cancel()

    # -- what a subclass provides -------------------------------------------------------------------------------
    def _request(self, index: int) -> TextRequest:
        """The request of generation ``index`` (0-based)."""
        raise NotImplementedError

    def _record(self, index: int, done: Any) -> None:
        """Keep what generation ``index`` gave: its ``DoneEvent`` (``stats``) and whatever streamed before it."""
        raise NotImplementedError

    def _result(self) -> object:
        """What ``finished`` carries."""
        raise NotImplementedError

    def _bridge_slots(self) -> list[tuple[Any, Any]]:
        """The bridge signals followed while running, with their slots."""
        return [(self.bridge.generation_finished, self._on_bridge_generation_finished),
                (self.bridge.error, self._on_bridge_error), (self.bridge.crashed, self._on_bridge_error)]

    # -- the loop -----------------------------------------------------------------------------------------------
    def _begin(self, total: int) -> None:
        """Start ``total`` generations (the subclass has checked and stored its inputs)."""
        self.done, self.total = 0, total
        self.state = RunState.RUNNING
        self._connect(True)
        self.progressed.emit(0, total)
        self._next()

    def _connect(self, on: bool) -> None:
        if on != self._connected:
            for signal, slot in self._bridge_slots():
                (signal.connect if on else signal.disconnect)(slot)
        self._connected = on

    def _next(self) -> None:
        if self.done >= self.total:
            self._end()
            self.finished.emit(self._result())
            return
        self.bridge.generate(self._request(self.done))

    def _on_bridge_generation_finished(self, done: Any) -> None:
        if self.state is RunState.IDLE:
            return
        if self.state is RunState.CANCELLING or getattr(done, "stop_reason", "") == "cancelled":
            self._end()  # cancelled here, or by someone else: the run stops either way
            self.cancelled.emit()
            return
        index = self.done
        self.done += 1
        self.progressed.emit(self.done, self.total)
        self._record(index, done)
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
        self._connect(False)


@dataclasses.dataclass(frozen=True)
class _Job:
    prompt_index: int
    mode: str  # "plain" or "spec"


class BenchmarkRunner(BridgeRun):
    """Interleaved plain/speculative generations of each prompt; a prompt's row as soon as its runs are done.

    Signals (besides ``BridgeRun``'s):
        row_finished(object): one prompt's row (the dict ``outrider bench --json`` prints).
        finished(object): every row, in prompt order.
    """

    row_finished = Signal(object)

    def __init__(self, bridge: EngineBridgeLike, parent: QObject | None = None) -> None:
        super().__init__(bridge, parent)
        self.rows: list[dict[str, Any]] = []
        self._prompts: list[tuple[str, str]] = []
        self._jobs: list[_Job] = []
        self._runs: dict[int, dict[str, list[dict[str, Any]]]] = {}
        self._runs_per_prompt = 0
        self._max_tokens = 128
        self._draft = DraftParams()

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
        self._runs = {i: {"plain": [], "spec": []} for i in range(len(self._prompts))}
        self.rows = []
        self._begin(len(self._jobs))

    def request_for(self, prompt: str, mode: str) -> TextRequest:
        """Greedy, so plain and speculative produce the same text and the timing compares like with like."""
        return TextRequest(messages=(ChatMessage("user", prompt),), max_tokens=self._max_tokens,
                           sampling=SamplingParams(temperature=0.0, seed=0), draft=self._draft,
                           plain=mode == "plain")

    def _request(self, index: int) -> TextRequest:
        job = self._jobs[index]
        return self.request_for(self._prompts[job.prompt_index][1], job.mode)

    def _record(self, index: int, done: Any) -> None:
        job = self._jobs[index]
        runs = self._runs[job.prompt_index]
        runs[job.mode].append(stats_dict(done.stats))
        if len(runs["spec"]) == self._runs_per_prompt and len(runs["plain"]) == self._runs_per_prompt:
            label, prompt = self._prompts[job.prompt_index]
            row = bench_row(label, prompt, runs)
            self.rows.append(row)
            self.row_finished.emit(row)

    def _result(self) -> object:
        return list(self.rows)


def describe_failure(exc: object) -> str:
    """An engine failure in one line (the bridge's wording for an exception)."""
    return describe_error(exc) if isinstance(exc, BaseException) else str(exc)
