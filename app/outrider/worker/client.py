"""EngineClient: runs the engine in its own process and talks to it (thread-safe; used by the CLI and the GUI).

    with EngineClient() as client:                 # start() ... stop()
        info = client.load(PairSpec(target, draft))  # LoadedPair
        with client.generate(TextRequest(prompt="Hello", max_tokens=64)) as gen:
            for event in gen:                        # StepBatch ... DoneEvent (outrider.engine.events)
                ...

Failures are exceptions (``errors.py``): ``EngineRequestError`` (bad model file, incompatible pair, context
overflow, bad settings: the engine process is still alive and usable) and ``EngineCrashed`` (the process died:
signal, abort, OOM kill, or a load that never finished; what was streamed is the consumer's). After a crash
the next ``load`` starts a fresh process. An engine that goes silent — no heartbeat for ``heartbeat_timeout``
seconds (stopped with SIGSTOP, frozen) — is killed and reported as ``EngineUnresponsive`` (an ``EngineCrashed``).
The reply iterator is ``generation.py``; starting the process, its command line and logs are ``launch.py``.
This module never imports llama_cpp.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from outrider import paths
from outrider.engine.events import ErrorKind, LoadedPair, LoadProgress, ProtocolError, loaded_from_wire
from outrider.engine.params import PairSpec, TextRequest
from outrider.worker.errors import (
    EngineCrashed,
    EngineIgnoredCancel,
    EngineNotRunning,
    EngineRequestError,
    EngineStuck,
    EngineUnresponsive,
    WorkerError,
    request_error,
    signal_name,
)
from outrider.worker.generation import Generation
from outrider.worker.launch import heartbeat_timeout_from_env, is_stopped, new_log_file, read_tail, spawn
from outrider.worker.protocol import (
    MAX_REQUEST_BYTES,
    PROTOCOL_VERSION,
    FramedPipe,
    decode,
    encode,
    request_to_wire,
    spec_to_wire,
)
from outrider.worker.registry import UnsafeModels

DEFAULT_START_TIMEOUT = 60.0
DEFAULT_LOAD_TIMEOUT = 600.0
# Seconds a reply may go on after Stop. A cancel lands within one step or one n_batch chunk of a prompt (llama.cpp's
# abort callback also cuts a CPU graph short); one step of a 70B model partly on the CPU takes a few seconds. Past
# this, llama.cpp is blocked where no cancel reaches (an RPC worker stopped without closing its connection).
DEFAULT_CANCEL_GRACE = 20.0
# Only these signals are the model's doing (a crash inside llama.cpp): a kill -9 from outside, the OOM killer or
# a timeout does not make a model unsafe.
MODEL_FAULT_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE})

class _Dead:
    """Inbox sentinel: the process is gone."""

    def __init__(self, error: EngineCrashed | None) -> None:
        self.error = error



class EngineClient:
    """Starts, talks to and stops one engine process. All methods are thread-safe.

    Requests are serialised: ``load``/``unload``/``generate`` wait for the previous request (a
    Generation holds the engine until it is exhausted or closed; call ``cancel()`` first to switch models
    mid-reply). ``cancel`` and ``stop`` never wait.
    """

    def __init__(self, *, log_dir: Path | None = None, unsafe_models: UnsafeModels | None = None,
                 start_timeout: float = DEFAULT_START_TIMEOUT, heartbeat_timeout: float | None = None,
                 cancel_grace: float = DEFAULT_CANCEL_GRACE, heartbeat_interval: float | None = None) -> None:
        """``heartbeat_timeout``: seconds of silence after which the engine is declared unresponsive (default
        ``$OUTRIDER_ENGINE_HEARTBEAT_TIMEOUT`` or 30); the engine beats every ``heartbeat_interval`` seconds
        (default a quarter of the timeout, at most once a second).
        ``cancel_grace``: seconds a reply may go on after ``cancel`` before the engine is killed."""
        self._log_dir = log_dir
        self.unsafe_models = unsafe_models if unsafe_models is not None else UnsafeModels()
        self.start_timeout = start_timeout
        self.heartbeat_timeout = heartbeat_timeout if heartbeat_timeout is not None else heartbeat_timeout_from_env()
        self.cancel_grace = cancel_grace
        self.heartbeat_interval = heartbeat_interval or min(1.0, self.heartbeat_timeout / 4)
        self._cancel_deadline: float | None = None  # when a cancelled reply must have ended (monotonic seconds)
        self._last_heard = time.monotonic()
        self._state = threading.RLock()
        self._send_lock = threading.Lock()
        self._busy = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._pipe: FramedPipe | None = None
        self._reader: threading.Thread | None = None
        self._inbox: queue.Queue[dict[str, Any] | _Dead] = queue.Queue()
        self._next_id = 0
        self._current: int | None = None
        self._phase = "idle"
        self._loading_path: str | None = None
        self._stopping = False
        self.log_path: str | None = None
        self.loaded: LoadedPair | None = None
        self.backend: dict[str, Any] = {}
        self.pid: int | None = None
        self.last_exitcode: int | None = None
        self.last_crash: EngineCrashed | None = None

    # -- lifetime -------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        with self._state:
            return self._proc is not None and self._proc.poll() is None and not self._stopping

    @property
    def last_heard(self) -> float:
        """When the engine was last heard from (``time.monotonic()`` seconds; heartbeats count)."""
        return self._last_heard

    def start(self) -> None:
        """Start the engine process (no-op if running) and wait for its hello."""
        with self._state:
            if self._proc is not None:
                if self._proc.poll() is None:
                    return
                self._reap()
            log_path = new_log_file(self._log_dir or paths.log_dir())
            self._inbox = queue.Queue()
            self._stopping = False
            self._phase = "starting"
            self.loaded = None
            self.log_path = log_path
            proc = spawn(log_path, heartbeat=self.heartbeat_interval)
            assert proc.stdin is not None and proc.stdout is not None
            pipe = FramedPipe(proc.stdout.fileno(), proc.stdin.fileno())
            self._proc, self._pipe, self.pid = proc, pipe, proc.pid
            self._last_heard = time.monotonic()
            self._reader = threading.Thread(target=self._read_loop, args=(proc, pipe, self._inbox),
                                            name="engine-reader", daemon=True)
            self._reader.start()
            try:
                hello = self._next_message(None, self.start_timeout)
            except EngineStuck:
                raise
            if hello.get("type") != "hello" or hello.get("version") != PROTOCOL_VERSION:
                self._kill()
                raise WorkerError(f"engine process speaks protocol {hello.get('version')!r}, "
                                  f"expected {PROTOCOL_VERSION}")
            backend = hello.get("backend")
            self.backend = backend if isinstance(backend, dict) else {}
            self._phase = "idle"

    def stop(self, timeout: float = 10.0) -> int | None:
        """Shut the engine down (models freed, exit 0 expected); kill it if it does not exit in ``timeout``.

        Returns the exit code (None if no process was running). Never waits for a request to finish: a running
        generation is cancelled.
        """
        with self._state:
            proc = self._proc
            if proc is None:
                return None
            self._stopping = True
            code: int | None = None
            if is_stopped(proc.pid):  # a stopped engine cannot act on shutdown or SIGTERM: no point waiting
                proc.kill()
            else:
                self._send_quiet({"type": "shutdown"})
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    code = proc.wait(min(2.0, max(0.2, timeout)))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
            self._reap()
            if code == 0 and self.log_path:
                with contextlib.suppress(OSError):
                    os.unlink(self.log_path)
            return code

    shutdown = stop

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5.0)

    def _reap(self) -> None:
        """Forget a finished process (joined, so no zombie), its pipe and its reader thread."""
        proc, reader = self._proc, self._reader
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            self.last_exitcode = proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if reader is not None and reader is not threading.current_thread():
            reader.join(2.0)
        self._proc = self._pipe = self._reader = None
        self.pid = None
        self.loaded = None

    def __enter__(self) -> EngineClient:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- the reader thread ----------------------------------------------------------------------------------
    def _read_loop(self, proc: subprocess.Popen[bytes], pipe: FramedPipe,
                   inbox: queue.Queue[dict[str, Any] | _Dead]) -> None:
        error: EngineCrashed | None = None
        try:
            while True:
                data = pipe.recv()
                self._last_heard = time.monotonic()
                msg = decode(data)
                if msg["type"] == "heartbeat":
                    continue
                if msg["type"] == "load_progress":
                    self._loading_path = str(msg.get("path"))
                if msg["type"] == "bye":
                    continue
                inbox.put(msg)
        except (EOFError, OSError, ProtocolError) as exc:
            if not self._stopping:  # read without the state lock: stop() holds it while joining this thread
                if isinstance(exc, ProtocolError | OSError) and proc.poll() is None:
                    proc.kill()  # a pipe that breaks the protocol (or overflows) means the engine is not healthy
                try:
                    exitcode: int | None = proc.wait(1.0)
                except subprocess.TimeoutExpired:  # closed its pipe but lives on: not usable any more
                    proc.kill()
                    exitcode = proc.wait()
                error = self._crash_error(exitcode)
                if isinstance(exc, ProtocolError):
                    error = EngineCrashed(f"protocol error: {exc}", error.phase, error.model,
                                          exitcode=error.exitcode, log_tail=error.log_tail, log_path=self.log_path)
        inbox.put(_Dead(error))

    def _crash_error(self, exitcode: int | None) -> EngineCrashed:
        phase = self._phase
        model = self._loading_path if phase == "loading" else None
        error = EngineCrashed(signal_name(exitcode), phase, model, exitcode=exitcode,
                              log_tail=read_tail(self.log_path), log_path=self.log_path)
        self.last_crash = error
        if phase == "loading" and model and exitcode is not None and -exitcode in MODEL_FAULT_SIGNALS:
            with contextlib.suppress(OSError):
                self.unsafe_models.mark(model, str(error))
        return error

    def _protocol_violation(self, why: str) -> EngineCrashed:
        self._kill()
        return EngineCrashed(f"protocol error: {why}", self._phase, self._loading_path,
                             log_tail=read_tail(self.log_path), log_path=self.log_path)

    # -- plumbing -------------------------------------------------------------------------------------------
    def _send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        if len(data) > MAX_REQUEST_BYTES:
            raise EngineRequestError(ErrorKind.INPUT_TOO_LONG, f"request is {len(data):,} bytes; the limit is "
                                     f"{MAX_REQUEST_BYTES:,}")
        pipe = self._pipe
        if pipe is None:
            raise EngineNotRunning("the engine is not running")
        with self._send_lock:
            try:
                pipe.send(data)
            except (OSError, ValueError) as exc:
                raise EngineNotRunning(f"the engine is not running: {exc}") from exc

    def _send_quiet(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(WorkerError):
            self._send(message)

    def _next_message(self, rid: int | None, timeout: float | None) -> dict[str, Any]:
        """The next message for request ``rid`` (stale ones skipped); raises EngineCrashed if the process died,
        EngineStuck after ``timeout`` and EngineUnresponsive after ``heartbeat_timeout`` of total silence."""
        deadline = None if timeout is None else time.monotonic() + timeout
        watch = self._phase != "starting"  # the heartbeat starts with the hello
        poll = max(0.02, min(1.0, self.heartbeat_timeout / 8))
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait = remaining
            if watch:
                wait = poll if remaining is None else min(poll, remaining)
            cancel_deadline = self._cancel_deadline if rid is not None and rid == self._current else None
            if cancel_deadline is not None:
                wait = min(poll, wait) if wait is not None else poll
            try:
                item = self._inbox.get(timeout=wait)
            except queue.Empty:
                if cancel_deadline is not None and time.monotonic() > cancel_deadline:
                    self._ignored_cancel()
                if remaining is None or (wait is not None and remaining > wait):
                    if watch and time.monotonic() - self._last_heard > self.heartbeat_timeout:
                        self._unresponsive()
                    continue
                phase, model = self._phase, self._loading_path
                self._kill()
                raise EngineStuck(phase, model if phase == "loading" else None, timeout or 0.0,
                                  log_tail=read_tail(self.log_path), log_path=self.log_path) from None
            if isinstance(item, _Dead):
                self._inbox.put(item)  # every later waiter sees it too
                if item.error is None or self._stopping:
                    raise EngineNotRunning("the engine was stopped")
                raise item.error
            if rid is None or item.get("id") == rid:
                return item

    def _ignored_cancel(self) -> None:
        """Stop was asked ``cancel_grace`` seconds ago and the reply goes on (or is silent while the heartbeat
        still comes): llama.cpp is blocked where no cancel reaches it. Kill the engine and raise."""
        with self._state:
            proc = self._proc
            phase = self._phase
            if proc is None or proc.poll() is not None:
                return  # it died meanwhile: the reader reports that
            self._stopping = True  # the reader must not report the kill below as a crash of its own
            self._kill()
            error = EngineIgnoredCancel(phase, None, self.cancel_grace, exitcode=proc.returncode,
                                        log_tail=read_tail(self.log_path), log_path=self.log_path)
            self.last_crash = error
            self._reap()
        raise error

    def _unresponsive(self) -> None:
        """Silence for longer than ``heartbeat_timeout``: after a short grace (a reader thread that has not run
        yet, e.g. right after this process itself was stopped and resumed), kill the engine and raise."""
        grace = time.monotonic() + min(1.0, self.heartbeat_timeout / 2)
        while time.monotonic() < grace:
            if time.monotonic() - self._last_heard <= self.heartbeat_timeout or not self._inbox.empty():
                return
            time.sleep(0.02)
        with self._state:
            proc = self._proc
            phase, model = self._phase, self._loading_path
            stopped = is_stopped(proc.pid if proc is not None else None)
            if proc is None or proc.poll() is not None:
                return  # it died meanwhile: the reader reports that
            self._stopping = True  # the reader must not report the kill below as a crash of its own
            self._kill()
            error = EngineUnresponsive(phase, model if phase == "loading" else None, self.heartbeat_timeout,
                                       stopped=stopped, exitcode=proc.returncode,
                                       log_tail=read_tail(self.log_path), log_path=self.log_path)
            self.last_crash = error
            self._reap()
        raise error

    def _begin(self, phase: str, timeout: float | None) -> int:
        if not self._busy.acquire(timeout=-1 if timeout is None else timeout):
            raise WorkerError("the engine is busy with another request")
        with self._state:
            if self._proc is None or self._proc.poll() is not None or self._stopping:
                self._busy.release()
                raise EngineNotRunning("the engine is not running; load a model first")
            self._next_id += 1
            self._current = self._next_id
            self._phase = phase
            self._cancel_deadline = None
            return self._next_id

    def _release(self, rid: int) -> None:
        with self._state:
            if self._current == rid:
                self._current = None
                self._phase = "idle"
                self._cancel_deadline = None
                self._busy.release()

    # -- requests -------------------------------------------------------------------------------------------
    def load(self, spec: PairSpec, *, timeout: float | None = DEFAULT_LOAD_TIMEOUT, refuse_unsafe: bool = False,
             draft_fallback: bool = False,
             on_progress: Callable[[LoadProgress], None] | None = None) -> LoadedPair:
        """Load a pair; starts the process if needed.

        ``refuse_unsafe`` (for automatic loads) refuses a model that crashed the engine before. A load that
        takes longer than ``timeout`` seconds kills the process (EngineStuck). ``draft_fallback`` loads the
        target alone when the draft is not compatible (the reason is the first of ``LoadedPair.notes``).
        ``on_progress(LoadProgress)`` is called before each model file is handed to llama.cpp.
        """
        try:
            return self._load(spec_to_wire(spec), timeout, refuse_unsafe, on_progress)
        except EngineRequestError as exc:
            if not draft_fallback or exc.kind is not ErrorKind.INCOMPATIBLE_PAIR:
                raise
            wire = {**spec_to_wire(spec), "draft": None, "lookup": False, "mtp": False, "mtp_head": None}
            info = self._load(wire, timeout, refuse_unsafe, on_progress)
            note = f"draft model not compatible — running without draft ({exc.message})"
            info = dataclasses.replace(info, notes=(note, *info.notes))
            self.loaded = info
            return info

    def _load(self, wire: dict[str, Any], timeout: float | None, refuse_unsafe: bool,
              on_progress: Callable[[LoadProgress], None] | None) -> LoadedPair:
        if refuse_unsafe:
            for path in (wire.get("target"), wire.get("draft"), wire.get("mtp_head")):
                reason = self.unsafe_models.reason(str(path)) if path else None
                if path and reason:
                    raise EngineRequestError(ErrorKind.UNSAFE_MODEL, f"{Path(path).name} is not loaded automatically: "
                                             f"it crashed the engine before ({reason})", details={"path": path})
        if not self.running:
            self.start()
        rid = self._begin("loading", timeout)
        self._loading_path = str(wire.get("target"))
        try:
            self._send({"type": "load", "id": rid, "spec": wire})
            while True:
                msg = self._next_message(rid, timeout)
                if msg["type"] == "load_progress":
                    if on_progress is not None:
                        on_progress(LoadProgress(str(msg.get("stage")), str(msg.get("path"))))
                elif msg["type"] == "loaded":
                    info = loaded_from_wire(msg.get("info"))
                    self.loaded = info
                    for path in (wire.get("target"), wire.get("draft"), wire.get("mtp_head")):
                        if path:
                            with contextlib.suppress(OSError):
                                self.unsafe_models.clear(path)
                    return info
                elif msg["type"] == "error":
                    self.loaded = None
                    raise request_error(msg)
        finally:
            self._release(rid)

    def generate(self, request: TextRequest) -> Generation:
        """Start a reply; iterate the result."""
        wire = request_to_wire(request)
        rid = self._begin("generating", None)
        try:
            self._send({"type": "generate", "id": rid, "request": wire})
        except BaseException:
            self._release(rid)
            raise
        return Generation(_Channel(self), rid)

    def cancel(self) -> None:
        """Cancel the running generation, if any (thread-safe, returns at once). A reply that has not ended
        ``cancel_grace`` seconds later is blocked inside llama.cpp: the engine is killed (``EngineIgnoredCancel``)."""
        with self._state:
            rid = self._current if self._phase == "generating" else None
        if rid is not None:
            self._cancel_request(rid)

    def _cancel_request(self, rid: int) -> None:
        """Send a cancel for request ``rid`` and, if it is the one running, start its ``cancel_grace``."""
        with self._state:
            if rid == self._current and self._cancel_deadline is None:
                self._cancel_deadline = time.monotonic() + self.cancel_grace
        self._send_quiet({"type": "cancel", "target": rid})

    def unload(self, *, timeout: float | None = 60.0) -> None:
        """Free the loaded models (GPU memory included); the process stays up."""
        if not self.running:
            return
        self._simple("unloading", {"type": "unload"}, timeout)
        self.loaded = None

    def score(self, request: TextRequest, tokens: Sequence[int], *,
              timeout: float | None = 120.0) -> list[tuple[float, ...]]:
        """The target's (mass ranked before, probability, top probability) of each of ``tokens`` continuing
        ``request``'s prompt (``Engine.score``): what ``outrider verify`` tests sampled tokens against."""
        value = self._simple("scoring", {"type": "score", "request": request_to_wire(request),
                                         "tokens": [int(t) for t in tokens]}, timeout)
        return [tuple(float(x) for x in row) for row in value]

    def bench(self, n_tokens: int, tokens_per_step: int = 1) -> Generation:
        """Synthetic steps at full speed, to measure the protocol alone."""
        rid = self._begin("generating", None)
        self._send({"type": "bench", "id": rid, "n_tokens": n_tokens, "tokens_per_step": tokens_per_step})
        return Generation(_Channel(self), rid)

    def _simple(self, phase: str, message: dict[str, Any], timeout: float | None) -> Any:
        rid = self._begin(phase, timeout)
        try:
            self._send({**message, "id": rid})
            msg = self._next_message(rid, timeout)
            if msg["type"] == "error":
                raise request_error(msg)
            return msg.get("value")
        finally:
            self._release(rid)


class _Channel:
    """One generation's view of its client (``generation.RequestChannel``), over the client's own methods."""

    def __init__(self, client: EngineClient) -> None:
        self._client = client

    def next_message(self, rid: int, timeout: float | None) -> dict[str, Any]:
        return self._client._next_message(rid, timeout)

    def protocol_violation(self, why: str) -> EngineCrashed:
        return self._client._protocol_violation(why)

    def release(self, rid: int) -> None:
        self._client._release(rid)

    def cancel_request(self, rid: int) -> None:
        self._client._cancel_request(rid)
