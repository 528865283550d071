"""The engine-process protocol: typed dataclasses <-> JSON messages over a pipe.

One message is one JSON object (ASCII-escaped, so lone surrogates survive) framed by a 4-byte length
(``FramedPipe``) on the engine process's stdin (requests) and its original stdout (events). JSON, not pickle,
in both directions: the engine process parses untrusted model files, and a compromised engine must not be
able to run code in the app by sending a crafted pickle.

Requests (app -> engine), each with an ``id``:
    load(spec), generate(request), cancel(target id), unload, shutdown, bench(n_tokens).
Events (engine -> app):
    hello(version, pid, backend), load_progress(stage, path), loaded(info), steps(batch of steps + stats),
    note(text), done(stop_reason, stats, text), result(value), error(kind, message, log_tail, details), and
    heartbeat (no id: sent every ``--heartbeat`` seconds by its own thread, so the app can tell a stopped or
    frozen engine from a slow one).

This module is pure data: it never imports llama_cpp (the app process must not load it). Requests use the
engine's own pure-data types from ``outrider.engine.params``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from outrider.engine.params import ChatMessage as ChatMessage
from outrider.engine.params import ContextSettings as ContextSettings
from outrider.engine.params import DraftParams as DraftParams
from outrider.engine.params import LookupSettings as LookupSettings
from outrider.engine.params import ModelSettings as ModelSettings
from outrider.engine.params import PairSpec as PairSpec
from outrider.engine.params import Role as Role
from outrider.engine.params import SamplingParams as SamplingParams
from outrider.engine.params import TextRequest as TextRequest
from outrider.engine.text import clean_text as clean_text

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a longer message from the engine is a protocol violation
MAX_REQUEST_BYTES = 48 * 1024 * 1024  # requests above this are refused before being sent

# Requests use the engine's own pure-data types (outrider.engine.params never imports llama_cpp).


# -- events ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """Facts about one loaded model (mirror of ``outrider.engine.backend.ModelFacts``). Sizes in bytes."""

    path: str = ""
    architecture: str = "unknown"
    description: str = ""
    n_params: int = 0
    size_bytes: int = 0
    n_layer: int = 0
    n_embd: int = 0
    n_vocab: int = 0
    n_ctx_train: int = 0
    has_chat_template: bool = False
    quantisation: str = "unknown"
    gpu_layers_offloaded: int = 0


@dataclasses.dataclass(frozen=True)
class LoadedInfo:
    """The ``loaded`` event (mirror of ``outrider.engine.session.LoadedPair``); ``raw`` is the full dict."""

    target: ModelInfo
    draft: ModelInfo | None
    draft_mode: str
    n_ctx: int
    backend: str
    gpu_offload: bool
    chat_template: str
    target_kv_bytes: int
    draft_kv_bytes: int
    notes: tuple[str, ...]
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)


@dataclasses.dataclass(frozen=True)
class Stats:
    """Generation statistics: the fields and derived numbers of ``outrider.engine.stats.GenerationStats``,
    exactly as the engine computed them (docs/metrics.md); nothing here is recomputed on the app side.

    ``speedup`` is measured in the reply itself, against the plain steps the decoder interleaves (None until one
    was measured); ``speedup_error`` is its standard error (None below two plain measurements). Unknown keys
    from another engine version are ignored, missing ones keep these defaults.
    """

    prompt_tokens: int = 0
    prompt_tokens_reused: int = 0
    prompt_s: float = 0.0
    generated: int = 0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0
    passes: int = 0
    pass_tokens: int = 0
    k_sum: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    decode_s: float = 0.0
    step_s: float = 0.0
    ttft_s: float | None = None
    plain_steps: int = 0
    plain_s: float = 0.0
    plain_sq_s2: float = 0.0
    plain_equiv_s: float = 0.0
    draft_mode: str = "none"
    acceptance_rate: float | None = None
    token_acceptance: float | None = None
    tokens_per_pass: float | None = None
    k_mean: float | None = None
    decode_tps: float | None = None
    prompt_tps: float | None = None
    other_s: float = 0.0
    plain_tps: float | None = None
    speedup: float | None = None
    speedup_error: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class StepEvent:
    """Tokens of one speculative step, their provenance (True = accepted draft token) and the safe text.

    ``stats`` is the snapshot sent with the batch this step arrived in (steps are batched on the wire).
    """

    tokens: list[int]
    drafted: list[bool]
    text: str
    k: int
    stats: Stats
    pieces: list[str] = dataclasses.field(default_factory=list)  # per-token text (provenance colouring)


@dataclasses.dataclass(frozen=True)
class DoneEvent:
    """The end of a reply: ``stop_reason`` is ``stop``, ``length`` or ``cancelled``; ``text`` is the whole reply."""

    stop_reason: str
    stats: Stats
    text: str


@dataclasses.dataclass(frozen=True)
class LoadProgress:
    """The engine started loading a model: ``stage`` is ``target`` or ``draft``."""

    stage: str
    path: str


class ProtocolError(Exception):
    """A message that does not follow this protocol (from a buggy or compromised engine process)."""


# -- encoding -------------------------------------------------------------------------------------------------
def encode(message: Mapping[str, Any]) -> bytes:
    """One message to bytes. ``ensure_ascii`` keeps lone surrogates representable."""
    return json.dumps(message, separators=(",", ":"), allow_nan=True).encode("ascii")


def decode(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not a JSON message: {exc}") from exc
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ProtocolError("a message must be a JSON object with a 'type'")
    return value


def _as_dict(obj: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"expected a dataclass or a mapping, got {type(obj).__name__}")


def spec_to_wire(spec: Any) -> dict[str, Any]:
    """A PairSpec (this module's or the engine's) to a JSON-able dict."""
    data = _as_dict(spec)
    for key in ("target", "draft"):
        if data.get(key) is not None:
            data[key] = str(data[key])
    return data


def request_to_wire(request: Any) -> dict[str, Any]:
    """A TextRequest (this module's or the engine's) to a JSON-able dict, with all text cleaned."""
    data = _as_dict(request)
    if data.get("prompt") is not None:
        data["prompt"] = clean_text(str(data["prompt"]))
    if data.get("messages") is not None:
        data["messages"] = [
            {"role": str(m["role"]), "content": clean_text(str(m["content"]))} for m in data["messages"]
        ]
    data["stop"] = [clean_text(str(s)) for s in data.get("stop", ())]
    return data


def _known(cls: type[Any], data: Any) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ProtocolError(f"{cls.__name__}: expected an object")
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names and k != "raw"}


def stats_from_wire(data: Any) -> Stats:
    return Stats(**_known(Stats, data))


def loaded_from_wire(data: Any) -> LoadedInfo:
    fields = _known(LoadedInfo, data)
    try:
        fields["target"] = ModelInfo(**_known(ModelInfo, fields.get("target")))
        draft = fields.get("draft")
        fields["draft"] = ModelInfo(**_known(ModelInfo, draft)) if draft is not None else None
        fields["notes"] = tuple(str(n) for n in fields.get("notes", ()))
        return LoadedInfo(**fields, raw=dict(data))
    except TypeError as exc:
        raise ProtocolError(f"bad 'loaded' event: {exc}") from exc


def steps_from_wire(message: Mapping[str, Any]) -> list[StepEvent]:
    """A ``steps`` message to StepEvents. Each step is ``[tokens, drafted, text, k, pieces]``."""
    stats = stats_from_wire(message.get("stats", {}))
    steps = message.get("steps")
    if not isinstance(steps, list):
        raise ProtocolError("'steps' must be a list")
    out = []
    for step in steps:
        if not isinstance(step, list) or len(step) not in (4, 5) or not isinstance(step[2], str):
            raise ProtocolError("a step is [tokens, drafted, text, k, pieces]")
        pieces = step[4] if len(step) == 5 else [step[2]]
        if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
            raise ProtocolError("step pieces must be a list of strings")
        out.append(StepEvent(step[0], step[1], step[2], int(step[3]), stats, pieces))
    return out


def done_from_wire(message: Mapping[str, Any]) -> DoneEvent:
    text = message.get("text", "")
    if not isinstance(text, str):
        raise ProtocolError("'done' text must be a string")
    return DoneEvent(str(message.get("stop_reason", "")), stats_from_wire(message.get("stats", {})), text)


def messages_of(data: Sequence[Any]) -> tuple[ChatMessage, ...]:
    return tuple(ChatMessage(m["role"], m["content"]) for m in data)


# -- transport ------------------------------------------------------------------------------------------------
_HEADER = struct.Struct("<I")


class FramedPipe:
    """Length-prefixed messages over a pair of raw pipe file descriptors (portable: plain ``os.read/write``).

    One reader thread at a time; ``send`` is thread-safe (a lock keeps each frame whole: a heartbeat sent by
    another thread can never land inside a message).
    """

    def __init__(self, read_fd: int | None, write_fd: int | None, *, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.max_bytes = max_bytes
        self._write_lock = threading.Lock()

    def send(self, data: bytes) -> None:
        frame = _HEADER.pack(len(data)) + data
        with self._write_lock:
            if self.write_fd is None:
                raise OSError("pipe closed")
            view = memoryview(frame)
            while view:
                n = os.write(self.write_fd, view)
                view = view[n:]

    def _read_exactly(self, n: int) -> bytes:
        if self.read_fd is None:
            raise EOFError("pipe closed")
        chunks = []
        while n > 0:
            chunk = os.read(self.read_fd, min(n, 1 << 20))
            if not chunk:
                raise EOFError("end of pipe")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv(self) -> bytes:
        (n,) = _HEADER.unpack(self._read_exactly(_HEADER.size))
        if n > self.max_bytes:
            raise ProtocolError(f"message of {n:,} bytes exceeds the limit of {self.max_bytes:,}")
        return self._read_exactly(n)
