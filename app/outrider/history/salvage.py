"""Salvage of a damaged history database: copy every row that can still be read into a fresh one.

Like the ``sqlite3`` shell's ``.recover``, but only for Outrider's own tables: conversations first, then messages,
table by table and, where a table scan hits a damaged page, rowid by rowid; then every row SQLite could not reach
is read off the pages themselves (``page_scan.py``: a damaged header, schema page or interior page hides whole
tables from SQLite although their rows are intact on the leaf pages). Indexes and the full-text index are
not read at all; they are rebuilt by inserting into the fresh database (its indexes and FTS triggers), so damage
confined to index pages loses nothing. The damaged file itself is only read from a private copy (opening it
would replay and checkpoint its WAL into it); it is kept as it was.

Nothing here raises on damage: the result says how much was recovered. A failure to write the new database
(disk full) rolls the whole salvage back and is raised to the caller.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from outrider.history.database import transaction
from outrider.history.page_scan import ScannedRow, scan_rows

# A table scan that stops at a damaged page continues by probing rowids one by one, up to the highest rowid
# known (AUTOINCREMENT's sqlite_sequence or max(rowid)); without one, until this many rowids in a row were
# missing. The probe never runs longer than MAX_PROBES lookups (a garbage max rowid must not hang the app).
_MISSES_BEFORE_GIVING_UP: Final = 10_000
_MAX_PROBES: Final = 2_000_000

_CONVERSATION_COLUMNS: Final = (
    "id", "title", "created_at", "updated_at", "pair_id", "settings_json", "uuid", "deleted_at",
)
_MESSAGE_COLUMNS: Final = ("id", "conversation_id", "role", "text", "status", "created_at", "updated_at", "stats_json")
# The columns in the order they are stored in a record: CREATE TABLE's, then each ALTER TABLE … ADD COLUMN's.
# Every history has this order, because every database, new or old, is built by the same migrations in turn.
_CONVERSATION_LAYOUT: Final = _CONVERSATION_COLUMNS
_MESSAGE_LAYOUT: Final = ("id", "conversation_id", "role", "text", "status", "created_at", "stats_json", "updated_at")
_ROLES: Final = frozenset({"system", "user", "assistant"})
_STATUSES: Final = frozenset({"complete", "streaming", "interrupted", "error"})


@dataclass(frozen=True)
class SalvageResult:
    """What was copied into the new database.

    Attributes:
        conversations: conversation rows recovered (including placeholders made for orphaned messages).
        messages: message rows recovered.
    """

    conversations: int = 0
    messages: int = 0


# A stored value as read: (SQLite type name, value). Text is kept as its bytes, never decoded.
_Cell = tuple[str, Any]
_Rows = dict[int, dict[str, _Cell]]


def _name(value: object) -> str:
    return str(value, "utf-8", "replace") if isinstance(value, bytes) else str(value)


def _columns(src: sqlite3.Connection, table: str) -> list[str]:
    return [_name(row[1]) for row in src.execute(f"PRAGMA table_info({table})")]


def _max_rowid(src: sqlite3.Connection, table: str) -> int | None:
    best: int | None = None
    for sql, params in (
        ("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)),
        (f"SELECT max(rowid) FROM {table}", ()),
    ):
        try:
            row = src.execute(sql, params).fetchone()
        except sqlite3.DatabaseError:
            continue
        if row is not None and isinstance(row[0], int):
            best = row[0] if best is None else max(best, row[0])
    return best


def _read_table(src: sqlite3.Connection, table: str, wanted: Sequence[str]) -> Iterator[tuple[int, dict[str, _Cell]]]:
    """Every readable row of ``table`` as ``(rowid, {column: (type, value)})``, in rowid order."""
    try:
        present = set(_columns(src, table))
    except sqlite3.DatabaseError:
        return
    cols = [c for c in wanted if c in present]
    if not cols:
        return
    select = ", ".join(f"typeof({c}), {c}" for c in cols)

    def cells(row: Sequence[Any]) -> dict[str, _Cell]:
        # typeof() is text too, so it arrives as bytes (text_factory): decode it, keep the values' bytes.
        return {c: (_name(row[1 + 2 * i]), row[2 + 2 * i]) for i, c in enumerate(cols)}

    last = 0
    try:
        for row in src.execute(f"SELECT rowid, {select} FROM {table} NOT INDEXED ORDER BY rowid"):
            last = int(row[0])
            yield last, cells(row)
        return
    except sqlite3.DatabaseError:
        pass  # a damaged table page: go on rowid by rowid past it
    top = _max_rowid(src, table)
    rowid, misses, probes = last, 0, 0
    while probes < _MAX_PROBES:
        rowid += 1
        probes += 1
        if top is not None and rowid > top:
            break
        if top is None and misses >= _MISSES_BEFORE_GIVING_UP:
            break
        try:
            row = src.execute(f"SELECT rowid, {select} FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
        except sqlite3.DatabaseError:
            row = None
        if row is None:
            misses += 1
            continue
        misses = 0
        yield rowid, cells(row)


def _text(cell: _Cell | None) -> str | None:
    if cell is None or cell[0] != "text":
        return None
    value = cell[1]
    return bytes(value).decode("utf-8", "replace") if isinstance(value, bytes | bytearray | memoryview) else str(value)


def _number(cell: _Cell | None) -> float | None:
    if cell is None or cell[0] not in ("integer", "real"):
        return None
    return float(cell[1])


def _is(row: dict[str, _Cell], column: str, *kinds: str) -> bool:
    cell = row.get(column)
    return cell is not None and cell[0] in kinds


def _plausible_conversation(row: dict[str, _Cell]) -> bool:
    """Every column has the type Outrider writes (a garbled cell from a damaged page rarely does)."""
    return (
        _is(row, "title", "text") and _is(row, "created_at", "real", "integer")
        and _is(row, "updated_at", "real", "integer") and _is(row, "settings_json", "text")
        and _is(row, "pair_id", "text", "null")
        and ("uuid" not in row or _is(row, "uuid", "text", "null"))
        and ("deleted_at" not in row or _is(row, "deleted_at", "real", "integer", "null"))
    )


def _plausible_message(row: dict[str, _Cell]) -> bool:
    return (
        _is(row, "conversation_id", "integer") and _text(row.get("role")) in _ROLES
        and _text(row.get("status")) in _STATUSES and _is(row, "text", "text")
        and _is(row, "created_at", "real", "integer") and _is(row, "stats_json", "text", "null")
        and ("updated_at" not in row or _is(row, "updated_at", "real", "integer", "null"))
    )


def _insert(dst: sqlite3.Connection, table: str, values: dict[str, _Cell]) -> bool:
    """Insert one row as stored (text bytes go back as text, unchanged); False when the new schema refuses it."""
    cols = list(values)
    placeholders = ", ".join("CAST(? AS TEXT)" if values[c][0] == "text" else "?" for c in cols)
    params = [None if values[c][0] == "null" else values[c][1] for c in cols]
    try:
        dst.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({placeholders})", params)
    except sqlite3.IntegrityError:
        return False
    return True


def _sql_rows(src: sqlite3.Connection) -> tuple[set[str] | None, _Rows, _Rows]:
    """What SQLite itself can still read: (table names or None when the schema is unreadable, conversations,
    messages), plausible rows only, by rowid."""
    try:
        tables = {_name(r[0]) for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        return None, {}, {}
    conversations: _Rows = {}
    messages: _Rows = {}
    if "conversations" in tables:
        conversations = {rowid: row for rowid, row in _read_table(src, "conversations", _CONVERSATION_COLUMNS)
                         if _plausible_conversation(row)}  # others are cells from a smashed page
    if "messages" in tables:
        messages = {rowid: row for rowid, row in _read_table(src, "messages", _MESSAGE_COLUMNS)
                    if _plausible_message(row)}
    return tables, conversations, messages


def _as_row(layout: Sequence[str], row: ScannedRow) -> dict[str, _Cell] | None:
    """A scanned record as a row of the table with this physical layout; None when it cannot be one.

    The ``id`` column is an ``INTEGER PRIMARY KEY``: SQLite stores it as NULL in the record (the rowid holds it),
    which tells a row of these tables from the full-text index's rows. A record shorter than the layout is an
    older row from before a column was added (``ALTER TABLE … ADD COLUMN``): the missing columns read as NULL.
    """
    if not row.values or len(row.values) > len(layout) or row.values[0][0] != "null":
        return None
    cells = dict(zip(layout, row.values, strict=False))
    for column in layout[len(row.values):]:
        cells[column] = ("null", None)
    del cells["id"]
    return cells


def _newest(a: dict[str, _Cell], b: dict[str, _Cell]) -> dict[str, _Cell]:
    """Of two copies of one row (a page rewritten, its old copy not reused yet), the later-updated one."""
    def when(row: dict[str, _Cell]) -> float:
        return _number(row.get("updated_at")) or _number(row.get("created_at")) or 0.0
    return b if when(b) > when(a) else a


def _scanned_rows(path: Path) -> tuple[_Rows, _Rows]:
    """Conversations and messages found on the file's pages without SQLite (page_scan.py), by rowid."""
    conversations: _Rows = {}
    messages: _Rows = {}
    for found in scan_rows(path):
        message = _as_row(_MESSAGE_LAYOUT, found)
        if message is not None and _plausible_message(message):
            messages[found.rowid] = _newest(messages[found.rowid], message) if found.rowid in messages else message
            continue
        conversation = _as_row(_CONVERSATION_LAYOUT, found)
        if conversation is not None and _plausible_conversation(conversation):
            known = conversations.get(found.rowid)
            conversations[found.rowid] = conversation if known is None else _newest(known, conversation)
    return conversations, messages


def _copy(src: sqlite3.Connection, path: Path, dst: sqlite3.Connection) -> SalvageResult:
    """Reads of ``src`` never raise (damage is skipped); an error raised here comes from writing ``dst``.

    Rows SQLite can read come first; the page scan adds the rows it could not reach (a damaged header, schema
    page or interior page hides whole tables from SQLite although their leaf pages are intact). A file whose
    schema reads fine but has none of Outrider's tables is another application's: nothing is taken from it.
    """
    tables, conversation_rows, message_rows = _sql_rows(src)
    if tables is None or {"conversations", "messages"} & tables:
        scanned_conversations, scanned_messages = _scanned_rows(path)
        for rowid, row in scanned_conversations.items():
            conversation_rows.setdefault(rowid, row)
        for rowid, row in scanned_messages.items():
            message_rows.setdefault(rowid, row)
    conversations: set[int] = set()
    for rowid in sorted(conversation_rows):
        row = conversation_rows[rowid]
        row["id"] = ("integer", rowid)
        if "uuid" not in row or row["uuid"][0] == "null":  # a version 1 database has none
            row["uuid"] = ("text", uuid.uuid4().hex.encode())
        if not _insert(dst, "conversations", row):
            row["uuid"] = ("text", uuid.uuid4().hex.encode())  # a duplicate uuid: keep the row, new identity
            if not _insert(dst, "conversations", row):
                continue
        conversations.add(rowid)
    messages = 0
    for rowid in sorted(message_rows):
        row = message_rows[rowid]
        row["id"] = ("integer", rowid)
        created = _number(row["created_at"])
        if _number(row.get("updated_at")) is None:  # none in a version 1 database
            row["updated_at"] = ("real", created)
        cid = int(row["conversation_id"][1])
        if cid not in conversations:
            # Its conversation row was on a damaged page: keep the message under a placeholder.
            placeholder = {
                "id": ("integer", cid), "title": ("text", f"Recovered conversation {cid}".encode()),
                "created_at": ("real", created), "updated_at": ("real", created),
                "settings_json": ("text", b"{}"), "uuid": ("text", uuid.uuid4().hex.encode()),
            }
            if not _insert(dst, "conversations", placeholder):
                continue
            conversations.add(cid)
        if _insert(dst, "messages", row):
            messages += 1
    return SalvageResult(conversations=len(conversations), messages=messages)


def salvage_into(damaged: Path, dst: sqlite3.Connection, workdir: Path) -> SalvageResult:
    """Copy every readable conversation and message of ``damaged`` into ``dst`` in one transaction.

    ``dst`` is a fresh database at the current schema, in autocommit mode. ``damaged`` (and its ``-wal``) is
    copied into a private temporary folder under ``workdir`` and read from there. Returns what was copied;
    an unreadable file gives an empty result.

    Raises:
        sqlite3.Error: writing ``dst`` failed (e.g. the disk is full); the copy was rolled back.
        OSError: the private copy of the damaged file could not be written (e.g. the disk is full).
    """
    scratch = Path(tempfile.mkdtemp(prefix=".salvage-", dir=workdir))  # 0700
    try:
        copy = scratch / "damaged.sqlite3"
        shutil.copyfile(damaged, copy)
        wal = damaged.with_name(damaged.name + "-wal")
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        try:
            src = sqlite3.connect(str(copy), isolation_level=None)
        except sqlite3.Error:
            src = sqlite3.connect(":memory:", isolation_level=None)  # nothing SQLite can read; the scan still runs
        try:
            src.text_factory = bytes
            # A truncated file is shorter than its header says: SQLite refuses it as corrupt unless the schema is
            # "writable" (only then does it read what is there). Nothing is written through this connection.
            with contextlib.suppress(sqlite3.Error):
                src.execute("PRAGMA writable_schema = ON")
            with transaction(dst):
                return _copy(src, copy, dst)
        finally:
            src.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

