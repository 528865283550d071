"""Plain typed records the history store hands out (no Qt; the UI wraps them in item models)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

# How a reply ended, in the words the chat shows and the exports write (keys: ``turns.EndReason`` values; a reply
# that ended by itself, "stop", says nothing). One table, so an export never says "stopped: length" where the
# window said "cut at the token limit".
END_REASON_WORDS: dict[str, str] = {
    "length": "cut at the token limit",
    "cancelled": "stopped",
    "crashed": "interrupted — the engine stopped",
    "error": "failed",
    "interrupted": "interrupted",
}


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class MessageStatus(StrEnum):
    """``streaming`` only while a reply is being generated; after a crash it becomes ``interrupted``."""

    COMPLETE = "complete"
    STREAMING = "streaming"
    INTERRUPTED = "interrupted"
    ERROR = "error"


UNREADABLE_LABEL = "could not be read"


def k_mean_from_k(data: dict[str, Any]) -> dict[str, Any]:
    """Schema version 3: the mean draft length is ``k_mean``, no longer ``k`` (a new dict; ``data`` is kept).

    Before version 3 the mean draft length was stored as ``k``: a JSON real (``round(k_mean, 2)``, always
    written with a decimal point). Earlier still, ``k`` held the fixed-k *setting*, a JSON integer; that is
    another meaning, so it keeps its name (and lands in ``ReplyStats.extra``). A record that already has
    ``k_mean`` is left as it is.
    """
    k = data.get("k")
    if "k_mean" in data or not isinstance(k, float):
        return dict(data)
    upgraded = {key: value for key, value in data.items() if key != "k"}
    upgraded["k_mean"] = k
    return upgraded


def decode_tps_from_tokens_per_s(data: dict[str, Any]) -> dict[str, Any]:
    """Schema version 4: decode tokens per second is ``decode_tps`` (the engine's name, docs/metrics.md), no
    longer ``tokens_per_s`` (a new dict; ``data`` is kept).

    ``tokens_per_s`` always meant decode tokens per second, so it is renamed whatever its value (a malformed
    one stays malformed under the new name). A record that already has ``decode_tps`` is left as it is.
    """
    if "decode_tps" in data or "tokens_per_s" not in data:
        return dict(data)
    return {("decode_tps" if key == "tokens_per_s" else key): value for key, value in data.items()}


def speedup_v4_from_speedup(data: dict[str, Any]) -> dict[str, Any]:
    """Schema version 5: ``speedup`` always comes with its interval ``speedup_low``/``speedup_high`` (a new
    dict; ``data`` is kept).

    Before version 5 the figure was valued from one or two forced plain probes, with ``speedup_error`` (a
    standard error that did not cover the truth: docs/metrics.md), so an old record's figures are kept under
    ``speedup_v4`` and ``speedup_error_v4`` (in ``ReplyStats.extra``, shown as an older estimate), never read
    as today's measurement. A record that has ``speedup_low`` or no ``speedup`` is left as it is.
    """
    if "speedup_low" in data or ("speedup" not in data and "speedup_error" not in data):
        return dict(data)
    names = {"speedup": "speedup_v4", "speedup_error": "speedup_error_v4"}
    return {names.get(key, key): value for key, value in data.items()}


# Each schema version's renames of the statistics' keys, oldest first; ``upgrade_stats_dict`` applies them all.
STATS_UPGRADES: tuple[Callable[[dict[str, Any]], dict[str, Any]], ...] = (
    k_mean_from_k, decode_tps_from_tokens_per_s, speedup_v4_from_speedup)


def upgrade_stats_dict(data: dict[str, Any]) -> dict[str, Any]:
    """Statistics as stored or exported by any older Outrider, in today's keys (a new dict; ``data`` is kept):
    every step of ``STATS_UPGRADES`` in turn. Applied on every read, so old export files import the same way."""
    for upgrade in STATS_UPGRADES:
        data = upgrade(data)
    return dict(data)


@dataclass(frozen=True)
class ReplyStats:
    """Per-reply statistics, stored with each assistant message so pairs and settings can be compared later.

    Every field is optional: a reply stopped early may have no throughput. ``k_mean`` is the mean draft length
    the engine used (``GenerationStats.k_mean``, two decimals), not the setting. ``speedup`` and its 95 %
    interval ``speedup_low``/``speedup_high`` are the engine's own figures for the reply
    (``GenerationStats.speedup``: measured from the reply's own passes; docs/metrics.md), stored as reported —
    None when the reply could not measure it. ``decode_tps`` is decode tokens per second
    (``GenerationStats.decode_tps``); ``token_acceptance`` (the per-token a) and ``tokens_per_pass`` are the
    engine's too (absent in replies stored before they were kept). Unknown keys found in stored JSON are kept in
    ``extra``; older records are read through ``upgrade_stats_dict``.
    """

    pair_id: str | None = None
    draft_mode: str | None = None
    k_mean: float | None = None
    temperature: float | None = None
    generated: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    acceptance_rate: float | None = None
    token_acceptance: float | None = None
    tokens_per_pass: float | None = None
    decode_tps: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    stop_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.speedup is not None and (self.speedup_low is None or self.speedup_high is None):
            raise ValueError("stats.speedup needs its interval, speedup_low and speedup_high")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        extra = data.pop("extra")
        data = {key: value for key, value in data.items() if value is not None}
        data.update(extra)
        return data

    @classmethod
    def from_dict(cls, data: Any) -> ReplyStats:
        """Validate and build; raises ``ValueError``/``TypeError`` for a malformed record."""
        if not isinstance(data, dict):
            raise TypeError("stats must be a JSON object")
        data = upgrade_stats_dict(data)
        known = {f.name for f in fields(cls)} - {"extra"}
        kwargs: dict[str, Any] = {}
        for name in known:
            value = data.get(name)
            if value is None:
                continue
            if name in ("pair_id", "draft_mode", "stop_reason"):
                if not isinstance(value, str):
                    raise TypeError(f"stats.{name} must be a string")
            elif name in ("generated", "drafted", "accepted"):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"stats.{name} must be an integer")
            else:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise TypeError(f"stats.{name} must be a number")
                value = float(value)
                if not math.isfinite(value):
                    raise ValueError(f"stats.{name} must be finite")
            kwargs[name] = value
        extra = {key: value for key, value in data.items() if key not in known}
        return cls(**kwargs, extra=extra)


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: Role
    text: str
    status: MessageStatus
    created_at: float
    updated_at: float
    stats: ReplyStats | None


@dataclass(frozen=True)
class ConversationSummary:
    """One row of the conversation list."""

    id: int
    uuid: str
    title: str
    created_at: float
    updated_at: float
    pair_id: str | None
    settings: dict[str, Any]
    message_count: int
    deleted_at: float | None = None


@dataclass(frozen=True)
class UnreadableRecord:
    """A record that exists but could not be decoded. Shown as "could not be read"; see ``export_raw``.

    Attributes:
        kind: ``conversation`` or ``message``.
        id: the record's id.
        conversation_id: the conversation it belongs to (its own id for a conversation).
        reason: what was wrong, for logs and the details view.
    """

    kind: str
    id: int
    conversation_id: int
    reason: str
    label: str = UNREADABLE_LABEL


@dataclass(frozen=True)
class Conversation:
    summary: ConversationSummary
    messages: list[Message | UnreadableRecord]

    @property
    def id(self) -> int:
        return self.summary.id

    @property
    def title(self) -> str:
        return self.summary.title


@dataclass(frozen=True)
class SearchHit:
    conversation_id: int
    conversation_title: str
    message_id: int
    role: Role
    snippet: str
    created_at: float


@dataclass(frozen=True)
class ReplyStatsRow:
    """A stored reply's statistics, for comparing pairs and settings over time."""

    message_id: int
    conversation_id: int
    created_at: float
    status: MessageStatus
    stats: ReplyStats


@dataclass(frozen=True)
class ImportResult:
    imported: list[int]
    skipped: int
