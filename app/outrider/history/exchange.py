"""Export and import: conversations in and out of the database as documents.

Markdown is for people; JSON is for round trips (``HistoryStore.import_json`` reads back what ``export_*``
wrote; a conversation keeps its ``uuid``, so importing the same export twice adds nothing). The raw dump
(``raw_document``) is for the rows that cannot be decoded: every column exactly as stored.
Writing the document to a file is ``outrider.fileio`` (temp file, fsync, replace, directory fsync).
"""

from __future__ import annotations

import base64
import json
import math
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from outrider.engine.speedup import describe_speedup
from outrider.history.errors import ConversationNotFoundError, ImportFormatError
from outrider.history.models import (
    END_REASON_WORDS,
    Conversation,
    ImportResult,
    Message,
    MessageStatus,
    ReplyStats,
    Role,
    UnreadableRecord,
)
from outrider.history.rows import stats_json

FORMAT_NAME = "outrider-history"
FORMAT_VERSION = 1
# An export nests 5 levels (document, conversations, conversation, messages, stats); settings a few more.
# Anything deeper is refused before it can exhaust the stack of a later recursive encoder.
MAX_NESTING = 64
RAW_FORMAT_NAME = "outrider-history-raw"


class ExportFormat(StrEnum):
    MARKDOWN = "md"
    JSON = "json"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")


def message_to_dict(message: Message) -> dict[str, Any]:
    return {
        "role": str(message.role),
        "text": message.text,
        "status": str(message.status),
        "created_at": message.created_at,
        "stats": message.stats.to_dict() if message.stats is not None else None,
    }


def conversation_to_dict(conversation: Conversation) -> dict[str, Any]:
    summary = conversation.summary
    return {
        "uuid": summary.uuid,
        "title": summary.title,
        "created_at": summary.created_at,
        "updated_at": summary.updated_at,
        "pair_id": summary.pair_id,
        "settings": summary.settings,
        "messages": [message_to_dict(m) for m in conversation.messages if isinstance(m, Message)],
        "unreadable_message_ids": [m.id for m in conversation.messages if isinstance(m, UnreadableRecord)],
    }


def to_json_document(conversations: Iterable[Conversation], exported_at: float | None = None) -> str:
    doc = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "exported_at": time.time() if exported_at is None else exported_at,
        "conversations": [conversation_to_dict(c) for c in conversations],
    }
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def stats_line(stats: ReplyStats) -> str:
    parts: list[str] = []
    if stats.pair_id:
        parts.append(f"pair {stats.pair_id}")
    if stats.draft_mode:
        parts.append(f"draft {stats.draft_mode}")
    if stats.k_mean is not None:
        parts.append(f"mean k {stats.k_mean:g}")
    if stats.temperature is not None:
        parts.append(f"temperature {stats.temperature:g}")
    if stats.generated is not None:
        parts.append(f"{stats.generated} tokens")
    if stats.drafted is not None and stats.accepted is not None:
        parts.append(f"{stats.accepted}/{stats.drafted} drafted accepted")
    if stats.acceptance_rate is not None:
        parts.append(f"acceptance {stats.acceptance_rate:.0%}")
    if stats.decode_tps is not None:
        parts.append(f"{stats.decode_tps:.1f} tok/s")
    if stats.speedup is not None:
        parts.append(f"speed-up {describe_speedup(stats.speedup, stats.speedup_low, stats.speedup_high)} vs plain "
                     "(measured in the reply)")
    elif isinstance(stats.extra.get("speedup_v4"), int | float):
        parts.append(f"speed-up {stats.extra['speedup_v4']:.2f}× (an older estimate from plain probes, no "
                     "interval)")
    if stats.stop_reason in END_REASON_WORDS:
        parts.append(END_REASON_WORDS[stats.stop_reason])
    return " · ".join(parts)


def conversation_to_markdown(conversation: Conversation) -> str:
    summary = conversation.summary
    lines = [f"# {summary.title}", ""]
    meta = [f"created {_iso(summary.created_at)}", f"updated {_iso(summary.updated_at)}"]
    if summary.pair_id:
        meta.append(f"pair {summary.pair_id}")
    lines += ["_" + ", ".join(meta) + "_", ""]
    for message in conversation.messages:
        if isinstance(message, UnreadableRecord):
            lines += [f"## (message {message.id} {message.label})", ""]
            continue
        heading = message.role.value.capitalize()
        if message.status is not MessageStatus.COMPLETE:
            heading += f" ({message.status.value})"
        lines += [f"## {heading}", "", message.text, ""]
        if message.stats is not None:
            line = stats_line(message.stats)
            if line:
                lines += [f"> {line}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def to_markdown_document(conversations: Iterable[Conversation]) -> str:
    return "\n---\n\n".join(conversation_to_markdown(c) for c in conversations)


@dataclass(frozen=True)
class ImportedMessage:
    role: Role
    text: str
    status: MessageStatus
    created_at: float
    stats: ReplyStats | None


@dataclass(frozen=True)
class ImportedConversation:
    uuid: str
    title: str
    created_at: float
    updated_at: float
    pair_id: str | None
    settings: dict[str, Any]
    messages: list[ImportedMessage]


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ImportFormatError(f"{where} must be a number")
    return float(value)


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ImportFormatError(f"{where} must be a string")
    return value


def _check_tree(doc: Any) -> None:
    """Refuse lone surrogates (``"\\ud800"`` decodes to one; it cannot be stored as UTF-8) and deep nesting.

    Iterative, so a hostile document cannot exhaust the stack here.
    """
    stack: list[tuple[Any, int, str]] = [(doc, 0, "$")]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_NESTING:
            raise ImportFormatError(f"nested more than {MAX_NESTING} levels deep")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ImportFormatError(f"{where} holds text that is not valid Unicode (a lone surrogate)") from None
        elif isinstance(value, dict):
            for key, item in value.items():
                stack.append((key, depth + 1, f"a key in {where}"))
                label = key.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(key, str) else "?"
                stack.append((item, depth + 1, f"{where}.{label}"))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, f"{where}[{i}]") for i, item in enumerate(value))


def parse_json_document(text: str) -> list[ImportedConversation]:
    """Validate a whole export before anything is written (import is all or nothing)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ImportFormatError(f"nested more than {MAX_NESTING} levels deep") from None
    _check_tree(doc)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise ImportFormatError('not an Outrider history export (missing "format": "outrider-history")')
    if doc.get("format_version") != FORMAT_VERSION:
        raise ImportFormatError(f"unsupported export format version {doc.get('format_version')!r}")
    raw_conversations = doc.get("conversations")
    if not isinstance(raw_conversations, list):
        raise ImportFormatError('"conversations" must be a list')
    result: list[ImportedConversation] = []
    for i, raw in enumerate(raw_conversations):
        where = f"conversations[{i}]"
        if not isinstance(raw, dict):
            raise ImportFormatError(f"{where} must be an object")
        settings = raw.get("settings", {})
        if not isinstance(settings, dict):
            raise ImportFormatError(f"{where}.settings must be an object")
        pair_id = raw.get("pair_id")
        if pair_id is not None:
            pair_id = _string(pair_id, f"{where}.pair_id")
        raw_messages = raw.get("messages")
        if not isinstance(raw_messages, list):
            raise ImportFormatError(f"{where}.messages must be a list")
        messages: list[ImportedMessage] = []
        for j, rm in enumerate(raw_messages):
            mwhere = f"{where}.messages[{j}]"
            if not isinstance(rm, dict):
                raise ImportFormatError(f"{mwhere} must be an object")
            try:
                role = Role(str(rm.get("role")))
                status = MessageStatus(str(rm.get("status")))
            except ValueError:
                raise ImportFormatError(f"{mwhere} has an unknown role or status") from None
            if status is MessageStatus.STREAMING:  # an export taken mid-reply
                status = MessageStatus.INTERRUPTED
            raw_stats = rm.get("stats")
            try:
                stats = ReplyStats.from_dict(raw_stats) if raw_stats is not None else None
            except (TypeError, ValueError) as exc:
                raise ImportFormatError(f"{mwhere}.stats: {exc}") from None
            messages.append(
                ImportedMessage(
                    role=role,
                    text=_string(rm.get("text"), f"{mwhere}.text"),
                    status=status,
                    created_at=_number(rm.get("created_at"), f"{mwhere}.created_at"),
                    stats=stats,
                )
            )
        uuid = _string(raw.get("uuid"), f"{where}.uuid")
        if not uuid:
            raise ImportFormatError(f"{where}.uuid must not be empty")
        result.append(
            ImportedConversation(
                uuid=uuid,
                title=_string(raw.get("title"), f"{where}.title"),
                created_at=_number(raw.get("created_at"), f"{where}.created_at"),
                updated_at=_number(raw.get("updated_at"), f"{where}.updated_at"),
                pair_id=pair_id,
                settings=settings,
                messages=messages,
            )
        )
    return result


def render(conversations: Sequence[Conversation], fmt: ExportFormat) -> str:
    """One document holding ``conversations`` (in the order given)."""
    if ExportFormat(fmt) is ExportFormat.JSON:
        return to_json_document(conversations)
    return to_markdown_document(conversations)


# -------------------------------------------------------------------------- raw dump (rows as stored)

_RAW_CONVERSATION_COLUMNS = (
    "id", "uuid", "title", "created_at", "updated_at", "pair_id", "settings_json", "deleted_at"
)
_RAW_MESSAGE_COLUMNS = ("id", "conversation_id", "role", "text", "status", "created_at", "updated_at", "stats_json")


def _raw_value(kind: str, value: Any) -> Any:
    """A column as exactly stored: numbers as numbers, text as text when it is UTF-8, else base64."""
    if kind == "null" or value is None:
        return None
    if kind in ("integer", "real"):
        return value
    data = bytes(value)
    if kind == "text":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"base64": base64.b64encode(data).decode("ascii"), "sqlite_type": kind}


def raw_document(conn: sqlite3.Connection, conversation_id: int) -> str:
    """A JSON dump of a conversation exactly as stored (undecodable bytes as base64), even if unreadable.

    ``conn`` is inside a read transaction (one consistent snapshot).
    """

    def select(cols: Sequence[str]) -> str:
        return ", ".join(
            f"typeof({c}), CASE WHEN typeof({c}) IN ('text', 'blob') THEN CAST({c} AS BLOB) ELSE {c} END"
            for c in cols
        )

    row = conn.execute(
        f"SELECT {select(_RAW_CONVERSATION_COLUMNS)} FROM conversations WHERE id = ?", (conversation_id,)
    ).fetchone()
    if row is None:
        raise ConversationNotFoundError(conversation_id)
    mrows = conn.execute(
        f"SELECT {select(_RAW_MESSAGE_COLUMNS)} FROM messages WHERE conversation_id = ? ORDER BY id",
        (conversation_id,),
    ).fetchall()

    def decode(cols: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, col in enumerate(cols):
            kind, raw = values[2 * i], values[2 * i + 1]
            out[col] = _raw_value(kind, raw)
        return out

    doc = {
        "format": RAW_FORMAT_NAME,
        "conversation": decode(_RAW_CONVERSATION_COLUMNS, row),
        "messages": [decode(_RAW_MESSAGE_COLUMNS, m) for m in mrows],
    }
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


# ---------------------------------------------------------------------------------------------- import

def insert_conversations(conn: sqlite3.Connection, conversations: Iterable[ImportedConversation]) -> ImportResult:
    """Insert parsed conversations with new ids; one whose ``uuid`` is already present is skipped.

    ``conn`` is inside one write transaction (the caller's): all of the import is committed, or none of it.
    """
    imported: list[int] = []
    skipped = 0
    for conv in conversations:
        if conn.execute("SELECT 1 FROM conversations WHERE uuid = ?", (conv.uuid,)).fetchone():
            skipped += 1
            continue
        cur = conn.execute(
            "INSERT INTO conversations (uuid, title, created_at, updated_at, pair_id, settings_json) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                conv.uuid,
                conv.title,
                conv.created_at,
                conv.updated_at,
                conv.pair_id,
                json.dumps(conv.settings, ensure_ascii=False),
            ),
        )
        new_id = int(cur.lastrowid or 0)
        conn.executemany(
            "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at, "
            "stats_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (new_id, str(m.role), m.text, str(m.status), m.created_at, m.created_at, stats_json(m.stats))
                for m in conv.messages
            ],
        )
        imported.append(new_id)
    return ImportResult(imported=imported, skipped=skipped)
