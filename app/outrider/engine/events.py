"""The engine's events and facts, one set of types on both sides of the process boundary, with their wire form.

Pure data: no llama_cpp, no Qt. The engine yields ``StepEvent``/``DoneEvent`` and reports ``LoadedPair``; the
worker process encodes them with the ``*_to_wire`` functions and the app decodes them with ``*_from_wire`` into
these very classes, so the app reads ``GenerationStats`` properties (docs/metrics.md) exactly as the engine
computes them: only the counters matter on the wire, derived figures are recomputed (they are properties).

Wire tolerance: unknown keys (a newer engine) are ignored, missing ones keep their defaults, wrong shapes raise
``ProtocolError`` (the engine process is untrusted: it parses model files).

Steps travel in batches: a ``steps`` message holds ``[tokens, drafted, k, pieces, origins]`` per step (then
``logprobs`` when asked for) and one statistics snapshot (the running totals after the last step); it decodes to
one ``StepBatch``. A step's text is its ``pieces`` joined: it travels once (protocol version 2; version 1 also
sent the joined text, for readers of an earlier version that the hello's version check turns away anyway).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from outrider.engine.errors import (
    ContextOverflowError,
    DecodeError,
    EngineError,
    FimUnsupported,
    GrammarError,
    IncompatiblePairError,
    ModelLoadError,
    TemplateError,
)
from outrider.engine.stats import DrafterCounts, GenerationStats

TARGET = "target"  # a token the target chose itself (not a drafted one)
DRAFTED = "draft"  # a drafted token whose drafter the engine did not say (an engine of an earlier version)
PROVENANCE = (TARGET, "lookup", "history", "model", "mtp", DRAFTED)
"""Where a token came from: the target, prompt lookup (``lookup``), history lookup, a draft model, MTP heads."""


# Bounds of what a step may carry: a vocabulary is far below 2^31 tokens, and a draft length far below 2^16.
_MAX_TOKEN_ID = 1 << 31
_MAX_K = 1 << 16


class ProtocolError(Exception):
    """A message that does not follow the protocol (from a buggy or compromised engine process)."""


class ErrorKind(enum.StrEnum):
    """Why the engine refused a request (``error`` events, ``EngineRequestError.kind``; docs/process.md)."""

    # a model file (``ModelLoadError.kind`` / ``GGUFHeaderError.kind``)
    MISSING = "missing"
    IS_DIRECTORY = "is_directory"
    PERMISSION = "permission"
    NOT_GGUF = "not_gguf"
    BAD_VERSION = "bad_version"
    TRUNCATED_HEADER = "truncated_header"
    BAD_METADATA = "bad_metadata"
    INCOMPLETE = "incomplete"
    UNSUPPORTED_ARCH = "unsupported_arch"
    UNSUPPORTED_MEMORY = "unsupported_memory"
    OUT_OF_MEMORY = "out_of_memory"
    LOAD_FAILED = "load_failed"
    # llama.cpp RPC workers of the target (``outrider.engine.llama.rpc``; docs/rpc.md)
    RPC_UNREACHABLE = "rpc_unreachable"
    RPC_BUSY = "rpc_busy"
    RPC_VERSION = "rpc_version"
    RPC_UNAVAILABLE = "rpc_unavailable"  # this llama.cpp was built without GGML_RPC
    BAD_SPLIT = "bad_split"
    # a pair, a request
    INCOMPATIBLE_PAIR = "incompatible_pair"
    CONTEXT_OVERFLOW = "context_overflow"
    INPUT_TOO_LONG = "input_too_long"
    DECODE = "decode"
    TEMPLATE = "template"
    BAD_REQUEST = "bad_request"
    UNSAFE_MODEL = "unsafe_model"  # the app's own refusal: the file crashed the engine before
    ENGINE = "engine"  # any other engine error (also: a kind this version does not know)
    INTERNAL = "internal"  # a bug in the engine process

    @classmethod
    def parse(cls, value: object) -> ErrorKind:
        """The kind named ``value``; ``ENGINE`` for one this version does not know."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.ENGINE


# -- model facts ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """Facts about one loaded model (the ``loaded`` event). Sizes in bytes."""

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
    # Where the weights went: (llama.cpp buffer name, e.g. "RPC0[10.0.0.2:50052]" or "CPU_Mapped", bytes).
    buffers: tuple[tuple[str, int], ...] = ()
    # RPC workers' devices: (device name, endpoint, free bytes, total bytes) as reported after the load.
    remote_devices: tuple[tuple[str, str, int, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class LoadedPair:
    """Facts reported when a pair is loaded (the ``loaded`` event). Memory in bytes."""

    target: ModelFacts
    draft: ModelFacts | None
    draft_mode: str
    n_ctx: int
    backend: str
    gpu_offload: bool
    chat_template: str  # model, chatml or plain
    target_kv_bytes: int
    draft_kv_bytes: int
    notes: tuple[str, ...]
    threads: int = 0  # llama.cpp CPU threads at load (``--threads``, or chosen from the CPUs free: engine/threads.py)
    # Recurrent states of hybrid/recurrent models as llama.cpp allocated them: the target's own with its rollback
    # snapshots, the draft model's own with its checkpoint (0 for attention-only models).
    target_recurrent_bytes: int = 0
    draft_recurrent_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def uses_rpc(self) -> bool:
        """True when the target's layers live (partly) on llama.cpp RPC workers (docs/rpc.md)."""
        return bool(self.target.remote_devices)

    def placement_text(self) -> str:
        """Where the pair's weights live, in one line (the CLI's load note and the GUI's status bar).

        E.g. "target: RPC0[10.0.0.2:50052] 1.9 GiB, RPC1[10.0.0.3:50052] 1.9 GiB, CPU_Mapped 0.2 GiB; draft on this
        machine; workers' memory: 10.0.0.2:50052 11.2 GiB free of 15.6 GiB, …"
        """
        target = ", ".join(f"{name} {_size_text(size)}" for name, size in self.target.buffers) or "on this machine"
        draft = "; draft on this machine" if self.draft is not None else ""
        remote = ", ".join(f"{endpoint} {_size_text(free)} free of {_size_text(total)}"
                           for _, endpoint, free, total in self.target.remote_devices)
        return f"target: {target}{draft}" + (f"; workers' memory: {remote}" if remote else "")


def _size_text(n: int) -> str:
    """Bytes as GiB (one decimal) from 1 GiB up, else MiB."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


@dataclasses.dataclass(frozen=True)
class LoadProgress:
    """The engine started loading a model file: ``stage`` is ``target`` or ``draft``."""

    stage: str
    path: str


# -- generation events ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class StepEvent:
    """Tokens emitted by one step with their provenance (True = accepted draft token) and the safe text.

    ``pieces[i]`` is the text that ``tokens[i]`` released (possibly empty: a held partial UTF-8 character or
    stop-string prefix); ``text == "".join(pieces)``. A final step may carry only held-back text (no tokens).
    ``stats`` is the engine's live running totals in the engine's own process; steps decoded from the wire carry
    None (their ``StepBatch`` holds the snapshot). ``origins[i]`` says who proposed ``tokens[i]`` (``PROVENANCE``:
    ``TARGET`` exactly where ``drafted[i]`` is False); empty when not known (``provenance`` then derives it).
    """

    tokens: list[int]
    drafted: list[bool]
    pieces: list[str]
    k: int
    stats: GenerationStats | None = None
    origins: list[str] = dataclasses.field(default_factory=list)
    # per token, when the request asked: [text, bytes, logprob, [[text, bytes, logprob], ...]] (llama/text.py)
    logprobs: list[Any] = dataclasses.field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def provenance(self) -> list[str]:
        """``origins``, or from ``drafted`` alone (``DRAFTED`` / ``TARGET``) when the engine did not send them."""
        if len(self.origins) == len(self.drafted):
            return self.origins
        return [DRAFTED if d else TARGET for d in self.drafted]


@dataclasses.dataclass(frozen=True, slots=True)
class StepBatch:
    """Consecutive steps of one reply and the statistics after the last of them (one ``steps`` message)."""

    steps: tuple[StepEvent, ...]
    stats: GenerationStats

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.steps)

    @property
    def n_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.steps)

    @property
    def k(self) -> int | None:
        """The draft length of the last step (None for an empty batch)."""
        return self.steps[-1].k if self.steps else None


@dataclasses.dataclass(frozen=True)
class DoneEvent:
    """The end of a reply: ``stop_reason`` is ``stop``, ``length`` or ``cancelled``; ``text`` is the whole reply."""

    stop_reason: str
    stats: GenerationStats
    text: str


# -- wire -----------------------------------------------------------------------------------------------------
_STAT_TYPES: dict[str, str] = {f.name: str(f.type) for f in dataclasses.fields(GenerationStats)}


def _number(name: str, value: Any, kind: str) -> Any:
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"stats.{name} must be an integer")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise ProtocolError(f"stats.{name} must be a string")
        return value
    if value is None and "None" in kind:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f"stats.{name} must be a number")
    return float(value)


def stats_to_wire(stats: GenerationStats) -> dict[str, Any]:
    """The counters and, for readers of the raw JSON, the derived figures (``GenerationStats.to_dict``)."""
    return stats.to_dict()


def stats_from_wire(data: Any) -> GenerationStats:
    """The counters of ``data``; derived figures and unknown keys are ignored (the properties recompute them).
    A ``speedup`` without its interval (an older engine's, valued from one or two plain probes) is dropped."""
    if not isinstance(data, Mapping):
        raise ProtocolError("stats: expected an object")
    fields = {k: _number(k, v, _STAT_TYPES[k]) for k, v in data.items() if k in _STAT_TYPES and k != "by_drafter"}
    stats = GenerationStats(**fields, by_drafter=_by_drafter_from_wire(data.get("by_drafter", {})))
    if stats.speedup_low is None or stats.speedup_high is None:
        stats.speedup = stats.speedup_low = stats.speedup_high = None
    return stats


def _by_drafter_from_wire(data: Any) -> dict[str, DrafterCounts]:
    """``{kind: {drafted, accepted, steps}}`` (unknown keys ignored, missing ones 0)."""
    if not isinstance(data, Mapping):
        raise ProtocolError("stats.by_drafter: expected an object")
    out: dict[str, DrafterCounts] = {}
    names = ("drafted", "accepted", "steps")
    for kind, counts in data.items():
        if not isinstance(kind, str) or not isinstance(counts, Mapping):
            raise ProtocolError("stats.by_drafter: expected {kind: {drafted, accepted, steps}}")
        out[kind] = DrafterCounts(**{n: _number(f"by_drafter.{n}", counts[n], "int") for n in names if n in counts})
    return out


def _facts_from_wire(data: Any) -> ModelFacts:
    if not isinstance(data, Mapping):
        raise ProtocolError("model facts: expected an object")
    names = ModelFacts.__dataclass_fields__
    fields = {k: v for k, v in data.items() if k in names}
    for key in ("buffers", "remote_devices"):  # JSON lists back to tuples
        fields[key] = tuple(tuple(row) for row in fields.get(key, ()))
    return ModelFacts(**fields)


def loaded_to_wire(info: LoadedPair) -> dict[str, Any]:
    return info.to_dict()


def loaded_from_wire(data: Any) -> LoadedPair:
    if not isinstance(data, Mapping):
        raise ProtocolError("LoadedPair: expected an object")
    fields = {k: v for k, v in data.items() if k in LoadedPair.__dataclass_fields__}
    try:
        fields["target"] = _facts_from_wire(fields.get("target"))
        draft = fields.get("draft")
        fields["draft"] = _facts_from_wire(draft) if draft is not None else None
        fields["notes"] = tuple(str(n) for n in fields.get("notes", ()))
        return LoadedPair(**fields)
    except TypeError as exc:
        raise ProtocolError(f"bad 'loaded' event: {exc}") from exc


def step_to_wire(step: StepEvent) -> list[Any]:
    """``[tokens, drafted, k, pieces, origins]``, then ``logprobs`` when the step has them."""
    wire = [step.tokens, step.drafted, step.k, step.pieces, step.origins]
    return [*wire, step.logprobs] if step.logprobs else wire


def steps_to_wire(steps: list[list[Any]], stats: GenerationStats) -> dict[str, Any]:
    """A ``steps`` message (without ``id``) from wire steps (``step_to_wire``) and the snapshot after them."""
    return {"type": "steps", "steps": steps, "stats": stats_to_wire(stats)}


def batch_from_wire(message: Mapping[str, Any]) -> StepBatch:
    """A ``steps`` message to a StepBatch. Each step is ``[tokens, drafted, k, pieces, origins]`` or
    ``[..., origins, logprobs]``; elements after those (a newer engine) are ignored. Anything else, or lists that
    do not align with the tokens, raises ``ProtocolError``."""
    stats = stats_from_wire(message.get("stats", {}))
    steps = message.get("steps")
    if not isinstance(steps, list):
        raise ProtocolError("'steps' must be a list")
    return StepBatch(tuple(_step_from_wire(step) for step in steps), stats)


def _step_from_wire(step: Any) -> StepEvent:
    if not isinstance(step, list) or len(step) < 5:
        raise ProtocolError("a step is [tokens, drafted, k, pieces, origins]")
    tokens, drafted, k, pieces, origins = step[:5]
    if not isinstance(tokens, list) or not isinstance(drafted, list):
        raise ProtocolError("step tokens and flags must be lists")
    if not all(type(t) is int and 0 <= t < _MAX_TOKEN_ID for t in tokens):
        raise ProtocolError("step tokens must be token ids (integers)")
    if len(drafted) != len(tokens) or not all(type(d) is bool for d in drafted):
        raise ProtocolError("step flags must be one true/false per token")
    if type(k) is not int or not 0 <= k <= _MAX_K:
        raise ProtocolError(f"step k must be a whole number from 0 to {_MAX_K}")
    if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
        raise ProtocolError("step pieces must be a list of strings")
    if tokens and len(pieces) != len(tokens):
        raise ProtocolError("step pieces must be one per token (a step without tokens carries held-back text)")
    if not isinstance(origins, list) or not all(isinstance(o, str) for o in origins) or (
            origins and len(origins) != len(drafted)):
        raise ProtocolError("step origins must be a list of strings, one per token")
    logprobs = step[5] if len(step) >= 6 else []
    if not isinstance(logprobs, list) or (logprobs and len(logprobs) != len(tokens)):
        raise ProtocolError("step logprobs must be one entry per token")
    return StepEvent(tokens, drafted, pieces, k, None, origins, logprobs)


def done_to_wire(done: DoneEvent) -> dict[str, Any]:
    """A ``done`` message (without ``id``)."""
    return {"type": "done", "stop_reason": done.stop_reason, "stats": stats_to_wire(done.stats), "text": done.text}


def done_from_wire(message: Mapping[str, Any]) -> DoneEvent:
    text = message.get("text", "")
    if not isinstance(text, str):
        raise ProtocolError("'done' text must be a string")
    return DoneEvent(str(message.get("stop_reason", "")), stats_from_wire(message.get("stats", {})), text)


def error_kind_of(exc: BaseException) -> tuple[ErrorKind, dict[str, Any]]:
    """The kind and details of an engine exception (``outrider.engine.errors``); ``INTERNAL`` for anything else."""
    if isinstance(exc, ModelLoadError):
        return ErrorKind.parse(exc.kind), {"path": exc.path}
    if isinstance(exc, IncompatiblePairError):
        return ErrorKind.INCOMPATIBLE_PAIR, {"rule": exc.rule}
    if isinstance(exc, ContextOverflowError):
        return ErrorKind.CONTEXT_OVERFLOW, {"n_tokens": exc.n_tokens, "n_ctx": exc.n_ctx, "reserved": exc.reserved}
    if isinstance(exc, DecodeError):
        return ErrorKind.DECODE, {"status": exc.status}
    if isinstance(exc, TemplateError):
        return ErrorKind.TEMPLATE, {}
    if isinstance(exc, GrammarError):
        return ErrorKind.BAD_REQUEST, {"grammar": True}
    if isinstance(exc, FimUnsupported):
        return ErrorKind.BAD_REQUEST, {"suffix": True}
    if isinstance(exc, EngineError):
        return ErrorKind.ENGINE, {}
    if isinstance(exc, MemoryError):
        return ErrorKind.OUT_OF_MEMORY, {}
    return ErrorKind.INTERNAL, {}
