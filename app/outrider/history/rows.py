"""Stored rows to typed records and back: the column lists, strict decoding, statistics as JSON.

A row whose bytes are not valid UTF-8 comes out of SQLite with lone surrogates (``connection._decode_text``);
the ``_check_*`` helpers turn that, and any value of the wrong type, into ``ValueError``/``TypeError``, which the
store reports as an ``UnreadableRecord`` instead of failing the whole query.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from outrider.history.models import (
    ConversationSummary,
    Message,
    MessageStatus,
    ReplyStats,
    ReplyStatsRow,
    Role,
    SearchHit,
    UnreadableRecord,
)

CONVERSATION_COLUMNS: Final = (
    "c.id, c.uuid, c.title, c.created_at, c.updated_at, c.pair_id, c.settings_json, c.deleted_at, "
    "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id)"
)
MESSAGE_COLUMNS: Final = "id, conversation_id, role, text, status, created_at, updated_at, stats_json"
# messages m JOIN conversations c, from a full-text match on messages_fts
SEARCH_HIT_COLUMNS: Final = (
    "m.conversation_id, c.title, m.id, m.role, snippet(messages_fts, 0, '[', ']', '…', 12), m.created_at"
)
REPLY_STATS_COLUMNS: Final = "id, conversation_id, created_at, status, stats_json"


def check_text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} is not text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not valid UTF-8") from None
    return value


def check_number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} is not a number")
    return float(value)


def fts_query(text: str) -> str | None:
    """The words of ``text`` as an FTS5 query (each quoted; the last one a prefix); ``None`` without words."""
    words = re.findall(r"\w+", text)
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"  # search as you type: the last word may be a prefix
    return " ".join(quoted)


def parse_conversation(row: Sequence[Any]) -> ConversationSummary:
    """A row of ``CONVERSATION_COLUMNS``."""
    settings_raw = check_text(row[6], "settings")
    try:
        settings = json.loads(settings_raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"settings are not valid JSON ({exc.msg})") from None
    if not isinstance(settings, dict):
        raise TypeError("settings are not a JSON object")
    pair_id = row[5]
    if pair_id is not None:
        pair_id = check_text(pair_id, "pair id")
    deleted_at = row[7]
    return ConversationSummary(
        id=int(row[0]),
        uuid=check_text(row[1], "uuid"),
        title=check_text(row[2], "title"),
        created_at=check_number(row[3], "created time"),
        updated_at=check_number(row[4], "updated time"),
        pair_id=pair_id,
        settings=settings,
        message_count=int(row[8]),
        deleted_at=None if deleted_at is None else check_number(deleted_at, "deleted time"),
    )


def parse_conversations(rows: Sequence[Sequence[Any]]) -> list[ConversationSummary | UnreadableRecord]:
    """Rows of ``CONVERSATION_COLUMNS``, in order; one that cannot be decoded is an ``UnreadableRecord``."""
    result: list[ConversationSummary | UnreadableRecord] = []
    for row in rows:
        try:
            result.append(parse_conversation(row))
        except (ValueError, TypeError) as exc:
            result.append(UnreadableRecord("conversation", int(row[0]), int(row[0]), str(exc)))
    return result


def settings_json(settings: Mapping[str, Any]) -> str:
    """A conversation's settings as stored (a JSON object; NaN and infinities are refused with ``ValueError``)."""
    return json.dumps(dict(settings), ensure_ascii=False, allow_nan=False)


def parse_stats(raw: object) -> ReplyStats | None:
    if raw is None:
        return None
    text = check_text(raw, "statistics")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"statistics are not valid JSON ({exc.msg})") from None
    return ReplyStats.from_dict(data)


def parse_message(row: Sequence[Any]) -> Message:
    """A row of ``MESSAGE_COLUMNS``."""
    created = check_number(row[5], "created time")
    return Message(
        id=int(row[0]),
        conversation_id=int(row[1]),
        role=Role(check_text(row[2], "role")),
        text=check_text(row[3], "text"),
        status=MessageStatus(check_text(row[4], "status")),
        created_at=created,
        updated_at=created if row[6] is None else check_number(row[6], "updated time"),
        stats=parse_stats(row[7]),
    )


def parse_messages(rows: Sequence[Sequence[Any]], conversation_id: int) -> list[Message | UnreadableRecord]:
    """Rows of ``MESSAGE_COLUMNS`` of one conversation; one that cannot be decoded is an ``UnreadableRecord``."""
    result: list[Message | UnreadableRecord] = []
    for row in rows:
        try:
            result.append(parse_message(row))
        except (ValueError, TypeError) as exc:
            result.append(UnreadableRecord("message", int(row[0]), conversation_id, str(exc)))
    return result


def stats_json(stats: ReplyStats | None) -> str | None:
    if stats is None:
        return None
    return json.dumps(stats.to_dict(), ensure_ascii=False, allow_nan=False)


def parse_search_hit(row: Sequence[Any]) -> SearchHit:
    """A row of ``SEARCH_HIT_COLUMNS``."""
    return SearchHit(
        conversation_id=int(row[0]),
        conversation_title=check_text(row[1], "title"),
        message_id=int(row[2]),
        role=Role(check_text(row[3], "role")),
        snippet=check_text(row[4], "snippet"),
        created_at=check_number(row[5], "created time"),
    )


def parse_reply_stats(row: Sequence[Any]) -> ReplyStatsRow | None:
    """A row of ``REPLY_STATS_COLUMNS``; ``None`` when the reply has no statistics."""
    stats = parse_stats(row[4])
    if stats is None:
        return None
    return ReplyStatsRow(
        int(row[0]),
        int(row[1]),
        check_number(row[2], "created time"),
        MessageStatus(check_text(row[3], "status")),
        stats,
    )
