"""The engine process: receives protocol requests on a pipe, drives ``outrider.engine`` and streams events back.

Four threads:
    * the main thread runs one request at a time (load, generate, unload, bench) on the Engine;
    * a reader thread receives requests; ``cancel`` and ``shutdown`` act at once (``Engine.cancel`` is thread-safe),
      and end-of-file on the pipe (the app died) ends this process immediately, so it is never orphaned;
    * a sender thread drains the outgoing queue and packs every step waiting in it into one ``steps`` message,
      so a fast generation costs one pipe write per batch, and a slow one has no added latency;
    * a heartbeat thread writes a tiny ``heartbeat`` message every ``--heartbeat`` seconds (the pipe's writer is
      locked, so it never lands inside another frame): an app that hears nothing for much longer knows the
      engine is stopped (SIGSTOP) or frozen, not just busy.

stdout and stderr (file descriptors 1 and 2) go to a log file the app names: llama.cpp's log lines are echoed
there synchronously, as are ``GGML_ASSERT`` messages and faulthandler tracebacks, so the app can show the tail
after a crash. Only this module's functions import ``outrider.engine`` (and so llama_cpp), lazily: the app
imports this module to name the process entry point without loading llama.cpp itself.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import faulthandler
import os
import queue
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from outrider.engine.events import (
    DoneEvent,
    ErrorKind,
    done_to_wire,
    error_kind_of,
    loaded_to_wire,
    step_to_wire,
    steps_to_wire,
)
from outrider.worker.protocol import PROTOCOL_VERSION, FramedPipe, ProtocolError, decode, encode

if TYPE_CHECKING:
    from outrider.engine.engine import Engine
    from outrider.engine.params import PairSpec, TextRequest

MIN_INPUT_CHARS = 65_536
DEFAULT_HEARTBEAT_S = 1.0
MAX_THREADS = 1024  # llama.cpp segfaults creating ~100,000 threads; the app's settings allow up to this
CHARS_PER_TOKEN_LIMIT = 32  # no tokenizer averages more characters per token than this on real text


class _BadRequest(Exception):
    """A request that does not describe a valid load or generation (fields, types, values)."""


class _InputTooLong(Exception):
    def __init__(self, n_chars: int, n_ctx: int) -> None:
        super().__init__(f"message is {n_chars:,} characters, far more than this model's context of {n_ctx} tokens")
        self.n_chars = n_chars
        self.n_ctx = n_ctx


def child_main(argv: list[str] | None = None) -> None:
    """Entry point of the engine process: ``python -m outrider.worker.engine_process [--log PATH]``.

    The protocol runs on the stdin/stdout pipes the app created; both are moved to private descriptors first,
    then stdin reads /dev/null and stdout/stderr go to the log, so nothing llama.cpp prints can corrupt it.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    log_path = args[args.index("--log") + 1] if "--log" in args else None
    heartbeat = DEFAULT_HEARTBEAT_S
    if "--heartbeat" in args:
        with contextlib.suppress(ValueError, IndexError):
            heartbeat = min(60.0, max(0.05, float(args[args.index("--heartbeat") + 1])))
    in_fd, out_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _redirect_output(log_path)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    parent = os.getppid()
    process = _EngineProcess(FramedPipe(in_fd, out_fd), heartbeat)
    threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()
    code = process.serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: every llama.cpp object is already freed explicitly


def _redirect_output(log_path: str | None) -> None:
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    os.dup2(2, 1)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _watch_parent(parent: int) -> None:
    """Backstop to the pipe's end-of-file: exit if the app process is gone (re-parented)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


def _log(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))


class _EngineProcess:
    """The engine process's request loop: commands in from the pipe, the engine's events out (one reply at a
    time), the heartbeat between them. Not a "server": that word is the HTTP server's (``outrider.server``)."""

    def __init__(self, pipe: FramedPipe, heartbeat: float = DEFAULT_HEARTBEAT_S) -> None:
        self.pipe = pipe
        self.heartbeat = heartbeat
        self.out: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.commands: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lock = threading.Lock()
        self.current_id: int | None = None
        self.cancelled: set[int] = set()
        self.engine: Engine | None = None

    # -- threads --------------------------------------------------------------------------------------------
    def serve(self) -> int:
        threading.Thread(target=self._send_loop, name="sender", daemon=True).start()
        from outrider.engine.engine import Engine
        from outrider.engine.llama.runtime import Backend

        engine = Engine(Backend(echo_log=_log), on_load_stage=self._on_load_stage)
        self.engine = engine
        info = engine.backend.info
        self.emit({"type": "hello", "version": PROTOCOL_VERSION, "pid": os.getpid(),
                   "backend": {"name": info.name, "gpu_offload": info.gpu_offload,
                               "system_info": info.system_info}}, wait=True)
        threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
        threading.Thread(target=self._read_loop, name="reader", daemon=True).start()
        while True:
            msg = self.commands.get()
            kind = msg.get("type")
            rid = msg.get("id")
            if kind == "shutdown":
                break
            try:
                self._handle(kind, rid, msg)
            except BaseException as exc:  # every failure becomes an error event
                self.emit(_error_message(rid, exc), wait=True)
            finally:
                with self.lock:
                    self.current_id = None
        engine.unload()
        _log("outrider: engine process shut down cleanly")
        self.emit({"type": "bye"}, wait=True)
        return 0

    def _read_loop(self) -> None:
        while True:
            try:
                data = self.pipe.recv()
            except (EOFError, OSError, ProtocolError):
                _log("outrider: the app closed the pipe; exiting")
                os._exit(0)
            try:
                msg = decode(data)
            except ProtocolError as exc:
                _log(f"outrider: ignoring a malformed request: {exc}")
                continue
            kind = msg["type"]
            if kind == "cancel":
                target = msg.get("target")
                with self.lock:
                    if isinstance(target, int):
                        self.cancelled.add(target)
                    if self.current_id is not None and (target is None or target == self.current_id):
                        self._cancel_engine()
            elif kind == "shutdown":
                self._cancel_engine()
                self.commands.put(msg)
            else:
                self.commands.put(msg)

    def _cancel_engine(self) -> None:
        if self.engine is not None:
            self.engine.cancel()

    def emit(self, message: dict[str, Any], *, wait: bool = False) -> None:
        """Queue a message; ``wait`` returns only once everything queued so far is written to the pipe."""
        self.out.put(("msg", message))
        if wait:
            self.out.join()

    def _heartbeat_loop(self) -> None:
        """A small message every ``heartbeat`` seconds, written directly (the pipe's lock keeps frames whole)."""
        beat = encode({"type": "heartbeat"})
        while True:
            time.sleep(self.heartbeat)
            try:
                self.pipe.send(beat)
            except (OSError, ValueError):
                return  # the app is gone: the reader thread ends the process

    def _send_loop(self) -> None:
        while True:
            batch = [self.out.get()]
            while True:
                try:
                    batch.append(self.out.get_nowait())
                except queue.Empty:
                    break
            try:
                for message in _pack(batch):
                    self.pipe.send(encode(message))
            except (OSError, ValueError):
                os._exit(0)  # the app is gone
            finally:
                for _ in batch:
                    self.out.task_done()

    # -- requests -------------------------------------------------------------------------------------------
    def _on_load_stage(self, stage: str, path: str) -> None:
        """The engine is about to hand ``path`` to llama.cpp: tell the app (to name the file after a crash)."""
        _log(f"outrider: loading {stage} {path}")
        self.emit({"type": "load_progress", "id": self.current_id, "stage": stage, "path": path}, wait=True)

    def _handle(self, kind: Any, rid: Any, msg: dict[str, Any]) -> None:
        engine = self.engine
        assert engine is not None
        with self.lock:
            self.current_id = rid if isinstance(rid, int) else None
        if kind == "load":
            info = engine.load(_build_spec(msg.get("spec")))
            self.emit({"type": "loaded", "id": rid, "info": loaded_to_wire(info)}, wait=True)
        elif kind == "generate":
            self._generate(rid, _build_request(msg.get("request")))
        elif kind == "unload":
            engine.unload()
            self.emit({"type": "result", "id": rid, "value": None}, wait=True)
        elif kind == "score":
            tokens = msg.get("tokens")
            if not isinstance(tokens, list) or not all(isinstance(t, int) and t >= 0 for t in tokens):
                raise _BadRequest("score needs a list of token ids")
            scores = engine.score(_build_request(msg.get("request")), tokens)
            self.emit({"type": "result", "id": rid, "value": [list(s) for s in scores]}, wait=True)
        elif kind == "bench":
            self._bench(rid, int(msg.get("n_tokens", 10_000)), int(msg.get("tokens_per_step", 1)))
        else:
            raise _BadRequest(f"unknown request {kind!r}")

    def _is_cancelled(self, rid: Any) -> bool:
        with self.lock:
            return rid in self.cancelled

    def _generate(self, rid: Any, request: TextRequest) -> None:
        from outrider.engine.stats import GenerationStats

        engine = self.engine
        assert engine is not None
        if engine.info is None:
            from outrider.engine.errors import EngineError

            raise EngineError("no model is loaded")
        request = _limit_input(request, engine.info.n_ctx)
        if self._is_cancelled(rid):
            self.emit({**done_to_wire(DoneEvent("cancelled", GenerationStats(), "")), "id": rid}, wait=True)
            return
        events = engine.run(request)  # the chat template has rendered: say if it was replaced
        for note in engine.take_chat_notes():
            self.emit({"type": "note", "id": rid, "text": str(note)})
        first = True
        for event in events:
            if first:
                first = False
                if self._is_cancelled(rid):  # a cancel that raced the start of the generation
                    engine.cancel()
            if isinstance(event, DoneEvent):
                self.emit({**done_to_wire(event), "id": rid}, wait=True)
            else:
                self.out.put(("step", rid, step_to_wire(event), copy.copy(event.stats)))

    def _bench(self, rid: Any, n_tokens: int, per_step: int) -> None:
        """Synthetic steps at full speed: measures the protocol alone (``tests/benchmarks/bench_protocol.py``)."""
        from outrider.engine.stats import GenerationStats

        stats = GenerationStats(prompt_tokens=8, draft_mode="model")
        t0 = time.perf_counter()
        texts = []
        step = max(1, per_step)
        for i in range(0, n_tokens, step):
            n = min(step, n_tokens - i)
            tokens = [(i + j) % 1000 + 3 for j in range(n)]
            text = " tok" * n
            texts.append(text)
            stats.generated += n
            stats.passes += 1
            stats.pass_tokens += n
            stats.decode_s = time.perf_counter() - t0
            # step_to_wire(StepEvent(tokens, flags, pieces, n - 1)), built directly: this measures the protocol alone
            self.out.put(("step", rid, [tokens, [j < n - 1 for j in range(n)], n - 1, [" tok"] * n, []],
                          copy.copy(stats)))
        self.emit({**done_to_wire(DoneEvent("length", stats, "".join(texts))), "id": rid}, wait=True)


def _pack(batch: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Queued items to messages: consecutive steps of one request become one ``steps`` message."""
    messages: list[dict[str, Any]] = []
    steps: list[Any] = []
    step_id: Any = None
    last_stats: Any = None

    def flush() -> None:
        nonlocal steps
        if steps:
            messages.append({**steps_to_wire(steps, last_stats), "id": step_id})
            steps = []

    for item in batch:
        if item[0] == "step":
            _, rid, step, stats = item
            if steps and rid != step_id:
                flush()
            step_id, last_stats = rid, stats
            steps.append(step)
        else:
            flush()
            messages.append(item[1])
    flush()
    return messages


def _build_spec(data: Any) -> PairSpec:
    from outrider.engine.params import ContextSettings, LookupSettings, ModelSettings, PairSpec

    try:
        if not isinstance(data, dict):
            raise TypeError("spec must be an object")
        fields = dict(data)
        fields["target_settings"] = ModelSettings(**fields.get("target_settings", {}))
        fields["draft_settings"] = ModelSettings(**fields.get("draft_settings", {}))
        fields["context"] = ContextSettings(**fields.get("context", {}))
        fields["lookup_settings"] = LookupSettings(**fields.get("lookup_settings", {}))
        if fields["context"].flash_attention not in ("auto", "on", "off"):
            raise ValueError(f"flash attention must be auto, on or off, got {fields['context'].flash_attention!r}")
        if not 16 <= fields["context"].n_ctx <= 1 << 24 or not 1 <= fields["context"].n_batch <= 1 << 20:
            raise ValueError("context size or batch size out of range")
        if not 0 <= fields["context"].threads <= MAX_THREADS:
            raise ValueError(f"threads must be between 0 and {MAX_THREADS}, got {fields['context'].threads}")
        return PairSpec(**fields)
    except (TypeError, ValueError, KeyError) as exc:
        raise _BadRequest(f"invalid model settings: {exc}") from exc


def _build_request(data: Any) -> TextRequest:
    from outrider.engine.params import ChatMessage, DraftParams, GrammarSpec, SamplingParams, TextRequest

    try:
        if not isinstance(data, dict):
            raise TypeError("request must be an object")
        fields = dict(data)
        if fields.get("messages") is not None:
            messages = []
            for m in fields["messages"]:
                if m["role"] not in ("system", "user", "assistant", "tool") or not isinstance(m["content"], str):
                    raise ValueError(f"bad chat message role {m['role']!r}")
                extra = {k: str(m[k]) for k in ("tool_calls", "tool_call_id") if m.get(k) is not None}
                messages.append(ChatMessage(m["role"], m["content"], **extra))
            fields["messages"] = tuple(messages)
        if fields.get("prompt") is not None and not isinstance(fields["prompt"], str):
            raise TypeError("prompt must be text")
        fields["sampling"] = SamplingParams(**fields.get("sampling", {}))
        fields["draft"] = DraftParams(**fields.get("draft", {}))
        fields["stop"] = tuple(str(s) for s in fields.get("stop", ()))
        if fields.get("continue_tokens") is not None:
            ids = fields["continue_tokens"]
            if not isinstance(ids, list | tuple) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                    for t in ids):
                raise TypeError("continue_tokens must be a list of token ids")
            fields["continue_tokens"] = tuple(ids)
        if fields.get("grammar") is not None:
            fields["grammar"] = GrammarSpec(**fields["grammar"])
        return TextRequest(**fields)
    except (TypeError, ValueError, KeyError) as exc:
        raise _BadRequest(f"invalid request: {exc}") from exc


def _limit_input(request: TextRequest, n_ctx: int) -> TextRequest:
    """Refuse text that cannot fit before tokenising it; pre-trim very long histories by characters."""
    limit = max(MIN_INPUT_CHARS, n_ctx * CHARS_PER_TOKEN_LIMIT)
    if request.prompt is not None:
        if len(request.prompt) > limit:
            raise _InputTooLong(len(request.prompt), n_ctx)
        return request
    messages = list(request.messages or ())
    if not messages:
        return request
    if len(messages[-1].content) > limit:
        raise _InputTooLong(len(messages[-1].content), n_ctx)
    system = messages[:1] if messages[0].role == "system" and len(messages) > 1 else []
    rest = messages[len(system):]
    total = sum(len(m.content) for m in system + rest)
    if not request.trim:  # nothing may be dropped: far too long is refused as it is, whole
        if total > 2 * limit:
            raise _InputTooLong(total, n_ctx)
        return request
    while total > 2 * limit and len(rest) > 1:
        total -= len(rest.pop(0).content)
    if len(rest) + len(system) == len(messages):
        return request
    return dataclasses.replace(request, messages=tuple(system + rest))


def _error_message(rid: Any, exc: BaseException) -> dict[str, Any]:
    kind, details = error_kind_of(exc)
    tail: tuple[str, ...] = tuple(getattr(exc, "log_tail", ()) or ())
    message = str(exc) or type(exc).__name__
    if isinstance(exc, _InputTooLong):
        kind, details = ErrorKind.INPUT_TOO_LONG, {"n_chars": exc.n_chars, "n_ctx": exc.n_ctx}
    elif isinstance(exc, _BadRequest):
        kind = ErrorKind.BAD_REQUEST
    elif kind is ErrorKind.OUT_OF_MEMORY and isinstance(exc, MemoryError):
        message = "not enough memory for this request"
    elif kind is ErrorKind.INTERNAL:
        tail = tuple(traceback.format_exception(exc)[-8:])
        message = f"internal engine error: {type(exc).__name__}: {exc}"
    _log(f"outrider: request {rid} failed ({kind}): {message}")
    return {"type": "error", "id": rid, "kind": str(kind), "message": message, "log_tail": list(tail),
            "details": details}


if __name__ == "__main__":
    child_main()
