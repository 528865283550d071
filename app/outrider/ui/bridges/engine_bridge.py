"""Qt adapter over ``outrider.worker.client.EngineClient``: blocking engine calls on one worker thread, signals out.

The engine client is blocking (a load takes seconds, a generation is an iterator that blocks between steps), so
every request runs on this bridge's own ``QThread``, one at a time, in the order asked (one dedicated inference
thread: llama.cpp's calls are not made from two threads at once, and the GUI thread never blocks on one).
The GUI thread only calls the public methods, which return at once, and receives results as signals.
``cancel()`` is the exception: ``EngineClient.cancel`` is thread-safe and returns at once, so it is called
directly and cuts a running reply short within one step.

Everything the worker has to say goes through ONE ordered buffer: each item an ``_Out`` kind and its payload
(the client yields each wire message as one ``StepBatch``, ``outrider.engine.events``; then the reply's
``DoneEvent``, a failure, a load's progress and result, busy or not). The worker emits a wake-up only when the
buffer goes from empty to non-empty; the GUI thread drains the whole buffer in one slot and emits the bridge's
signals in the order the items were made, so a reply's last steps always come before its end or its crash, and a
reply's end before anything of the next. Steps are coalesced (a repaint per token would
cost more than the token): consecutive batches become one
``step_received`` (joined, when the GUI fell behind). A slow reply therefore arrives step by step with no added
latency, and a fast one in batches sized by how busy the GUI thread is — never one repaint per token.

Errors travel on their own signals, typed at the source (the words are chosen only
at the UI boundary), never through the token stream.
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Iterator
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal, Slot

from outrider.engine.events import DoneEvent, ErrorKind, LoadedPair, LoadProgress, StepBatch
from outrider.engine.params import PairSpec, TextRequest
from outrider.worker.client import EngineClient
from outrider.worker.errors import EngineCrashed, EngineRequestError, WorkerError

__all__ = ["EngineCrashed", "EngineRequestError", "QtEngineBridge", "StepBatch", "WorkerError"]


class _Out(enum.Enum):
    """The kinds of what the worker reports; each becomes the bridge signal of the same meaning."""

    STEPS = "steps"  # StepBatch
    FINISHED = "finished"  # DoneEvent
    CRASHED = "crashed"  # EngineCrashed while generating or unloading
    FAILED = "failed"  # any other exception of a request
    LOADED = "loaded"  # LoadedPair
    LOAD_FAILED = "load_failed"  # the exception of a failed load
    LOAD_PROGRESS = "load_progress"  # LoadProgress
    UNLOADED = "unloaded"  # None
    BUSY = "busy"  # bool


class _EngineWorker(QObject):
    """Lives on the bridge's thread; its slots run the blocking client calls. Never touches a widget.

    What it has to report goes into one buffer, in order (``_push``; thread-safe: the client reports load
    progress from its reader thread); ``output_ready`` wakes the GUI thread when the buffer stops being empty.
    """

    output_ready = Signal()

    def __init__(self, client: EngineClient) -> None:
        super().__init__()
        self.client = client
        self._lock = threading.Lock()
        self._buffer: list[tuple[_Out, Any]] = []
        self.closing = False
        # This bridge's own reply (the local server's replies share the client: cancel must never reach them).
        self._generation: Any = None
        self._starting = False  # a generate is waiting for the engine (e.g. behind a reply of the local server)
        self._cancel_pending = False

    def take_output(self) -> list[tuple[_Out, Any]]:
        """Everything reported since the last call, oldest first."""
        with self._lock:
            items, self._buffer = self._buffer, []
        return items

    def _push(self, kind: _Out, payload: Any = None) -> None:
        with self._lock:
            wake = not self._buffer
            self._buffer.append((kind, payload))
        if wake:
            self.output_ready.emit()

    @contextlib.contextmanager
    def _job(self, *, busy: bool = True, failure: _Out | None = None) -> Iterator[None]:
        """Run one request: busy while it runs; every failure reaches the GUI (``CRASHED`` when the engine died,
        else ``FAILED`` — or ``failure`` for both), never once the bridge is closing."""
        if busy:
            self._push(_Out.BUSY, True)
        try:
            yield
        except EngineCrashed as exc:
            if not self.closing:
                self._push(failure or _Out.CRASHED, exc)
        except Exception as exc:
            if not self.closing:
                self._push(failure or _Out.FAILED, exc)
        finally:
            if busy:
                self._push(_Out.BUSY, False)

    @Slot(object, float, bool)
    def do_load(self, spec: PairSpec, timeout: float, refuse_unsafe: bool) -> None:
        if self.closing:
            return
        with self._job(failure=_Out.LOAD_FAILED):
            extra = {"refuse_unsafe": True} if refuse_unsafe else {}
            info = self.client.load(spec, timeout=timeout, draft_fallback=False,
                                    on_progress=lambda progress: self._push(_Out.LOAD_PROGRESS, progress), **extra)
            self._push(_Out.LOADED, info)

    @Slot(object)
    def do_generate(self, request: TextRequest) -> None:
        if self.closing:
            return
        with self._lock:
            self._starting, self._cancel_pending = True, False
        try:
            with self._job(), self.client.generate(request) as generation:
                with self._lock:
                    self._generation, self._starting = generation, False
                    cancel = self._cancel_pending
                if cancel:  # Stop was pressed while the reply waited for the engine
                    generation.cancel()
                for event in generation:
                    if isinstance(event, StepBatch):
                        self._push(_Out.STEPS, event)
                    elif isinstance(event, DoneEvent):
                        self._push(_Out.FINISHED, event)
        finally:
            with self._lock:
                self._generation, self._starting = None, False

    def cancel(self) -> None:
        """Cancel this bridge's reply, running or still waiting for the engine (thread-safe, returns at once)."""
        with self._lock:
            generation = self._generation
            if generation is None and self._starting:
                self._cancel_pending = True
        if generation is not None:
            generation.cancel()

    @Slot()
    def do_unload(self) -> None:
        if self.closing:
            return
        with self._job(busy=False):
            self.client.unload()
            self._push(_Out.UNLOADED)


class QtEngineBridge(QObject):
    """The GUI's handle on the engine process.

    All methods return at once; requests run one at a time on the bridge's thread, in call order.

    Signals:
        loaded(LoadedPair): a pair is loaded and ready.
        load_failed(Exception): a load failed; ``EngineRequestError`` (``kind``, ``message``: bad file,
            ``incompatible_pair``, …; the engine is alive) or ``EngineCrashed`` (it died while loading).
        load_progress(LoadProgress): llama.cpp started reading a model file.
        step_received(StepBatch): streamed steps of the running reply (coalesced, see the module docstring).
        generation_finished(DoneEvent): the reply ended (``stop_reason`` stop / length / cancelled).
        crashed(EngineCrashed): the engine process died while generating (every batch read before it was
            delivered as ``step_received`` first). The next ``load`` starts a fresh process.
        error(Exception): any other failure of a request (``EngineRequestError``: context overflow, …).
        busy_changed(bool): a request started (True) or ended (False).
        unloaded(): the models were freed.

    Attributes:
        client: the ``EngineClient`` (for its read-only facts: ``pid``, ``backend``, ``loaded``, ``log_path``).
    """

    loaded = Signal(object)
    load_failed = Signal(object)
    load_progress = Signal(object)
    step_received = Signal(object)
    generation_finished = Signal(object)
    crashed = Signal(object)
    error = Signal(object)
    busy_changed = Signal(bool)
    unloaded = Signal()

    _load_requested = Signal(object, float, bool)
    _generate_requested = Signal(object)
    _unload_requested = Signal()

    def __init__(self, client: EngineClient | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.client = client if client is not None else EngineClient()
        self._thread = QThread()
        self._thread.setObjectName("outrider-engine")
        self._worker = _EngineWorker(self.client)
        self._worker.moveToThread(self._thread)
        self._busy = False
        self._shut_down = False

        self._load_requested.connect(self._worker.do_load)
        self._generate_requested.connect(self._worker.do_generate)
        self._unload_requested.connect(self._worker.do_unload)

        self._worker.output_ready.connect(self._on_worker_output_ready)
        self._signals: dict[_Out, Any] = {
            _Out.FINISHED: self.generation_finished, _Out.CRASHED: self.crashed, _Out.FAILED: self.error,
            _Out.LOADED: self.loaded, _Out.LOAD_FAILED: self.load_failed, _Out.LOAD_PROGRESS: self.load_progress,
        }
        self._thread.start()

    # -- requests ---------------------------------------------------------------------------------------------
    def load(self, spec: PairSpec, timeout: float = 600.0, *, refuse_unsafe: bool = False) -> None:
        """Load a ``PairSpec`` (starts the engine process if needed).

        ``refuse_unsafe`` (automatic loads, at start-up): a model whose load crashed the engine before is not
        loaded; ``load_failed`` then carries ``EngineRequestError("unsafe_model")`` with the reason.
        """
        self._load_requested.emit(spec, float(timeout), bool(refuse_unsafe))

    def generate(self, request: TextRequest) -> None:
        """Start a reply to a ``TextRequest``; steps arrive on ``step_received``."""
        self._generate_requested.emit(request)

    def cancel(self) -> None:
        """Stop this bridge's reply at the next step (not a reply of the local server sharing the engine);
        ``generation_finished`` follows."""
        self._worker.cancel()

    def unload(self) -> None:
        self._unload_requested.emit()

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def pid(self) -> int | None:
        return self.client.pid

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the engine process and the thread (flag → cancel → stop → quit → wait). Idempotent."""
        if self._shut_down:
            return
        self._shut_down = True
        self._worker.closing = True
        self.client.cancel()
        self.client.stop(timeout)
        self._thread.quit()
        self._thread.wait()
        # WORKAROUND: queued signals still posted to this object would otherwise be destroyed during interpreter
        # finalisation, which aborts PySide6 6.12 ("bool_dealloc … refcount error"); drop them while Python lives.
        QCoreApplication.removePostedEvents(self)

    # -- the worker's output (GUI thread) ---------------------------------------------------------------------
    @Slot()
    def _on_worker_output_ready(self) -> None:
        """Emit what the worker reported, in order; consecutive step batches as one ``step_received``."""
        steps: list[StepBatch] = []
        for kind, payload in self._worker.take_output():
            if kind is _Out.STEPS:
                steps.append(payload)
                continue
            self._emit_steps(steps)
            steps = []
            if kind is _Out.BUSY:
                self._set_busy(payload)
            elif kind is _Out.UNLOADED:
                self.unloaded.emit()
            else:
                self._signals[kind].emit(payload)
        self._emit_steps(steps)

    def _emit_steps(self, batches: list[StepBatch]) -> None:
        if len(batches) == 1:
            self.step_received.emit(batches[0])
        elif batches:
            self.step_received.emit(StepBatch(tuple(s for b in batches for s in b.steps), batches[-1].stats))

    def _set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            self.busy_changed.emit(busy)


def describe_error(exc: BaseException) -> str:
    """One line for the user, from a typed engine error (the mapping lives at the Qt boundary)."""
    if isinstance(exc, EngineRequestError):
        if exc.kind is ErrorKind.INCOMPATIBLE_PAIR:
            return f"These two models cannot be paired: {exc.message}"
        if exc.kind is ErrorKind.UNSAFE_MODEL:
            return f"{exc.message} (choose the pair again to try anyway)"
        if exc.kind is ErrorKind.CONTEXT_OVERFLOW:
            return f"The conversation no longer fits in the context: {exc.message}"
        return exc.message
    if isinstance(exc, EngineCrashed):
        detail = f" — {exc.detail}" if exc.detail else ""
        return f"{exc}{detail}"
    return str(exc) or type(exc).__name__


__all__ += ["ErrorKind", "LoadProgress", "LoadedPair", "describe_error"]
