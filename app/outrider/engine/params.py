"""The engine's request and settings types: pure data, importable without llama_cpp.

The app process (GUI, CLI client, worker protocol) builds these and sends them to the engine process; the engine
uses the very same classes. Each validates itself on construction, so bad input is refused at its source.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclasses.dataclass(frozen=True)
class ChatMessage:
    """One turn. ``tool_calls``: the calls an assistant turn made (OpenAI's ``tool_calls`` array as JSON text);
    ``tool_call_id``: the call a ``tool`` turn answers."""

    role: Role
    content: str
    tool_calls: str | None = None
    tool_call_id: str | None = None


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """How to load one model. ``gpu_layers=-1`` offloads every layer (ignored by a CPU-only build).

    ``cpu_extra_buffers`` enables llama.cpp's CPU extra buffer types (weight repacking, AMX): they make batched
    verification much cheaper (3-token pass of an F16 12x1024 model: 26 ms with, 32 ms without, here).
    ``None`` (auto) enables them except for a model with AMX-quantised tensors on a CPU with AMX — WORKAROUND:
    in the llama.cpp of llama-cpp-python 0.3.36, ggml_backend_amx_mul_mat segfaults at the first decode of
    Q4_0, Q4_1 and Q8_0 models (SmolLM2-135M-Instruct Q4_1 included) on such CPUs (seen here, in
    llama-cpp-python's own high-level API too).
    """

    gpu_layers: int = -1
    use_mmap: bool = True
    cpu_extra_buffers: bool | None = None
    rpc: tuple[str, ...] = ()
    split: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        # ``rpc``: llama.cpp RPC workers (``outrider rpc-worker``) as "HOST:PORT"; the model's offloaded layers
        # (``gpu_layers``) are spread over this machine's GPUs and the workers' devices. ``split``: the share of
        # those layers per device, local GPUs first, then the workers in order (empty: llama.cpp's default, by
        # free memory). Lists from the wire become tuples; every entry is checked here.
        object.__setattr__(self, "rpc", tuple(check_rpc_endpoint(e) for e in self.rpc))
        object.__setattr__(self, "split", tuple(float(x) for x in self.split))
        if any(not (math.isfinite(x) and x >= 0) for x in self.split) or (self.split and not sum(self.split) > 0):
            raise ValueError(f"split proportions must be >= 0 and not all 0, got {self.split}")

MAX_RPC_SERVERS = 16  # GGML_RPC_MAX_SERVERS


def check_rpc_endpoint(text: object) -> str:
    """``text`` if it is a "HOST:PORT" llama.cpp can connect to (port 1-65535); ValueError saying why not."""
    if not isinstance(text, str):
        raise ValueError(f"an RPC worker is given as HOST:PORT, got {text!r}")
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or any(c.isspace() for c in host):
        raise ValueError(f"an RPC worker is given as HOST:PORT, got {text!r}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"RPC worker {text!r}: the port must be a number from 1 to 65535")
    if ":" in host:  # llama.cpp splits the endpoint at its first colon
        raise ValueError(f"RPC worker {text!r}: llama.cpp's RPC takes a host name or IPv4 address, not IPv6")
    return f"{host}:{int(port)}"


def parse_rpc_list(text: str) -> tuple[str, ...]:
    """"HOST:PORT[,HOST:PORT…]" to endpoints (blank entries ignored, duplicates refused, at most 16)."""
    endpoints = tuple(check_rpc_endpoint(part) for part in text.split(",") if part.strip())
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"an RPC worker is listed twice in {text!r}")
    if len(endpoints) > MAX_RPC_SERVERS:
        raise ValueError(f"at most {MAX_RPC_SERVERS} RPC workers, got {len(endpoints)}")
    return endpoints


def parse_split(text: str) -> tuple[float, ...]:
    """"3,1" (proportions per device) to floats; ValueError for anything else."""
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"a split is numbers separated by commas, e.g. 3,1 — got {text!r}") from None
    if not values or any(not (math.isfinite(x) and x >= 0) for x in values) or not sum(values) > 0:
        raise ValueError(f"split proportions must be >= 0 and not all 0, got {text!r}")
    return values


@dataclasses.dataclass(frozen=True)
class ContextSettings:
    """A llama.cpp context. ``n_ctx`` in tokens; ``threads`` 0 = llama.cpp's default; flash attention auto."""

    n_ctx: int = 4096
    n_batch: int = 512
    threads: int = 0
    flash_attention: str = "auto"

@dataclasses.dataclass(frozen=True)
class LookupSettings:
    """Prompt lookup: match the last n tokens (``ngram_max`` down to ``ngram_min``) earlier in the text."""

    ngram_min: int = 1
    ngram_max: int = 3

    def __post_init__(self) -> None:
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"n-gram sizes must satisfy 1 <= min <= max, got {self.ngram_min}..{self.ngram_max}")

Sampler = Literal["auto", "coupled", "rejection"]
SAMPLERS: tuple[Sampler, ...] = ("auto", "coupled", "rejection")
DEFAULT_SAMPLER: Sampler = "auto"


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Sampling settings. ``temperature == 0`` means greedy; top_k 0, top_p 1 and min_p 0 disable a filter.

    ``sampler`` (temperature > 0 with a drafter; both exact in distribution, see ``engine/sampling.py``):
    ``coupled`` (Gumbel-max coupling: a seeded reply is the same text with any drafter and any k, or none),
    ``rejection`` (classic speculative sampling: the seeded text depends on what was drafted), or ``auto`` (the
    default): coupled when a seed is given — a seeded reply must repeat whatever k automatic k picks — and rejection
    otherwise, whose acceptance is higher with a draft model (measured: docs/metrics.md) and equal with lookup.
    """

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    sampler: Sampler = DEFAULT_SAMPLER

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top-k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min-p must be in [0, 1], got {self.min_p}")
        if self.seed is not None and self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be auto, coupled or rejection, got {self.sampler!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

@dataclasses.dataclass(frozen=True)
class DraftParams:
    """Drafting settings. ``k``: the draft length, a fixed count (0 = plain decoding) or ``None`` = automatic
    (the CLI's ``--k auto``, the catalogue's ``k = "auto"``); ``k_max``: the largest k automatic k may choose;
    ``draft_min`` drops drafts shorter than it; ``p_min`` stops drafting when the draft's probability of its own
    choice falls below it."""

    k: int | None = None
    k_max: int = 16
    draft_min: int = 0
    p_min: float = 0.0

    def __post_init__(self) -> None:
        if self.k is not None and not 0 <= self.k <= 64:
            raise ValueError(f"draft length k must be between 0 and 64, got {self.k}")
        if not 1 <= self.k_max <= 64:
            raise ValueError(f"maximum draft length must be between 1 and 64, got {self.k_max}")
        if self.draft_min < 0:
            raise ValueError(f"draft-min must be >= 0, got {self.draft_min}")
        if not 0.0 <= self.p_min <= 1.0:
            raise ValueError(f"draft-p-min must be in [0, 1], got {self.p_min}")

@dataclasses.dataclass(frozen=True)
class PairSpec:
    """What to load: a target and optionally one drafter: a draft model file, prompt lookup, the target's own MTP
    heads (``mtp``) or a separate MTP head file (``mtp_head``, loaded with ``draft_settings``).

    ``lookup_history``: the history database (``history.sqlite3``) to draft from as well (history lookup,
    engine/history_draft.py): the drafters are then chained — history lookup, prompt lookup, then the draft model
    if there is one (engine/chain_draft.py).

    ``learned_draft``: the file where automatic draft length keeps what it learned about this pair across loads
    (engine/learned_draft.py); None: every load starts cold.
    """

    target: str
    draft: str | None = None
    lookup: bool = False
    target_settings: ModelSettings = ModelSettings()
    draft_settings: ModelSettings = ModelSettings()
    context: ContextSettings = ContextSettings()
    lookup_settings: LookupSettings = LookupSettings()
    lookup_history: str | None = None
    mtp: bool = False
    mtp_head: str | None = None
    learned_draft: str | None = None

    def __post_init__(self) -> None:
        chosen = [name for name, on in (("a draft model", bool(self.draft)), ("prompt lookup", self.lookup),
                                        ("the model's MTP heads", self.mtp), ("an MTP head file", bool(self.mtp_head)))
                  if on]
        if len(chosen) > 1:
            raise ValueError(f"choose one drafter, not {' and '.join(chosen)}")
        if self.lookup_history is not None and not str(self.lookup_history).strip():
            raise ValueError("history lookup needs the history database's path")
        if self.lookup_history is not None and (self.mtp or self.mtp_head):
            raise ValueError("history lookup does not chain with MTP drafting: choose one of them")

    @property
    def draft_mode(self) -> str:
        """The loaded drafter's kind (``LoadedPair.draft_mode``): ``model``, ``lookup``, ``mtp`` (heads in the target
        or a head file), ``none``, or a chain's members joined by ``+`` (``history+lookup``,
        ``history+lookup+model``)."""
        if self.mtp or self.mtp_head:
            return "mtp"
        if self.lookup_history is not None:
            return "history+lookup" + ("+model" if self.draft else "")
        return "model" if self.draft else ("lookup" if self.lookup else "none")

@dataclasses.dataclass(frozen=True)
class GrammarSpec:
    """A constraint on the reply's text: ``json`` (any JSON object), ``json_schema`` (``text``: the schema as JSON),
    ``gbnf`` (``text``: a llama.cpp grammar) or ``text_or_tool_calls`` (``text``: the JSON schema of one tool call:
    free text, then ``<tool_call>`` blocks each holding such a call, or one bare call — ``tool_choice: "auto"`` with
    strict functions). Decoded exactly under speculation (engine/grammar.py)."""

    kind: Literal["json", "json_schema", "gbnf", "text_or_tool_calls"]
    text: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("json", "json_schema", "gbnf", "text_or_tool_calls"):
            raise ValueError(f"a grammar is json, json_schema, gbnf or text_or_tool_calls, got {self.kind!r}")


@dataclasses.dataclass(frozen=True)
class TextRequest:
    """One reply to produce, from raw ``prompt`` text or from chat ``messages`` (exactly one of them).

    ``continue_reply``: the last of ``messages`` is an assistant reply cut short (at the token limit); the model
    continues its text instead of starting a new reply (the prompt ends with that text, no end of turn).
    ``continue_tokens``: with ``continue_reply``, that reply's token ids as the model generated them (stored with
    the reply): the engine continues from them when they spell the reply's text in the loaded model, so a
    continuation after a restart equals the uninterrupted reply (re-tokenising the text can split it otherwise).
    ``trim``: a conversation too long for the context loses its oldest turns (the app's chats); False: it is
    refused with a context overflow instead (the server, unless the request asks for trimming).
    """

    prompt: str | None = None
    messages: tuple[ChatMessage, ...] | None = None
    max_tokens: int = 512
    sampling: SamplingParams = SamplingParams()
    draft: DraftParams = DraftParams()
    stop: tuple[str, ...] = ()
    plain: bool = False
    continue_reply: bool = False
    continue_tokens: tuple[int, ...] | None = None
    trim: bool = True
    grammar: GrammarSpec | None = None
    tools: str | None = None  # OpenAI's ``tools`` array as JSON text, for the chat template (``ChatFormatter``)
    top_logprobs: int | None = None  # each token's log-probability and this many alternatives (None: none)
    suffix: str | None = None  # with ``prompt``: fill in the middle between them (the model's FIM tokens)
    ignore_eos: bool = False  # ``outrider verify``: sample through end-of-generation tokens (every sample M tokens)

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give either a prompt or chat messages")
        if self.continue_reply and not (self.messages and self.messages[-1].role == "assistant"):
            raise ValueError("continuing a reply needs the reply as the last chat message")
        if self.continue_tokens is not None and not self.continue_reply:
            raise ValueError("a reply's token ids are only for continuing it")
        if self.max_tokens < 1:
            raise ValueError(f"max tokens must be >= 1, got {self.max_tokens}")
