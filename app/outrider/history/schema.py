"""The history database schema and its migrations.

Version 1 is the first released schema and is kept verbatim so that the upgrade path is always tested.
Each migration runs inside one transaction together with the version bump: a crash or an error leaves the
database wholly at the old version (SQLite DDL is transactional). ``executescript`` is never used here because
it commits first.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from outrider.history.database import transaction
from outrider.history.models import ReplyStats, decode_tps_from_tokens_per_s, k_mean_from_k, speedup_v4_from_speedup


@dataclass(frozen=True)
class Migration:
    """Brings the schema from ``version - 1`` to ``version``.

    Attributes:
        version: the version the database is at after ``apply``.
        apply: runs the statements on a connection that is already inside a transaction.
    """

    version: int
    apply: Callable[[sqlite3.Connection], None]


def _run(conn: sqlite3.Connection, statements: Sequence[str]) -> None:
    for statement in statements:
        conn.execute(statement)


V1_STATEMENTS = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    "INSERT INTO schema_version (version) VALUES (0)",
    """CREATE TABLE conversations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        pair_id TEXT,
        settings_json TEXT NOT NULL DEFAULT '{}'
    )""",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        text TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('complete', 'streaming', 'interrupted', 'error')),
        created_at REAL NOT NULL,
        stats_json TEXT
    )""",
    "CREATE INDEX messages_by_conversation ON messages (conversation_id, id)",
)

V2_STATEMENTS = (
    # A stable identity that survives export/import: re-importing the same export adds no duplicates.
    "ALTER TABLE conversations ADD COLUMN uuid TEXT",
    "UPDATE conversations SET uuid = lower(hex(randomblob(16))) WHERE uuid IS NULL",
    "CREATE UNIQUE INDEX conversations_by_uuid ON conversations (uuid)",
    # Soft delete gives "undo"; purge_deleted removes rows later.
    "ALTER TABLE conversations ADD COLUMN deleted_at REAL",
    "ALTER TABLE messages ADD COLUMN updated_at REAL",
    "UPDATE messages SET updated_at = created_at",
    "CREATE INDEX messages_by_status ON messages (status)",
    # Full-text search over every message, kept in sync by triggers (external-content FTS5 table).
    "CREATE VIRTUAL TABLE messages_fts USING fts5(text, content='messages', content_rowid='id')",
    "INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
    END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
    END""",
)




def _rewrite_stats(conn: sqlite3.Connection, old_key: str, upgrade: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Rewrite the ``stats_json`` of the replies that hold ``old_key`` through ``upgrade`` (one version's rename).

    Only the rows that change are rewritten; a record that cannot be decoded, re-encoded or read as a
    ``ReplyStats`` (bad UTF-8, bad JSON, NaN, a wrong type) is left exactly as it was, to be reported as
    unreadable like before. No message's ``updated_at`` changes: a rename is no edit.
    """
    pattern = f'%"{old_key}"%'
    rows = conn.execute("SELECT id, stats_json FROM messages WHERE stats_json LIKE ?", (pattern,)).fetchall()
    for message_id, raw in rows:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                continue
            upgraded = upgrade(data)
            if upgraded == data:
                continue
            ReplyStats.from_dict(upgraded)  # raises for a record the store cannot read: it stays as stored
            text = json.dumps(upgraded, ensure_ascii=False, allow_nan=False)
            text.encode("utf-8")
        except (TypeError, ValueError, RecursionError):  # UnicodeError and JSONDecodeError are ValueErrors
            continue
        conn.execute("UPDATE messages SET stats_json = ? WHERE id = ?", (text, message_id))


def _v3_rename_k_to_k_mean(conn: sqlite3.Connection) -> None:
    """Version 3: a reply's mean draft length is stored as ``k_mean``, no longer ``k`` (``k_mean_from_k``)."""
    _rewrite_stats(conn, "k", k_mean_from_k)


def _v4_rename_tokens_per_s_to_decode_tps(conn: sqlite3.Connection) -> None:
    """Version 4: decode tokens per second is stored as ``decode_tps``, the engine's name, no longer
    ``tokens_per_s`` (``decode_tps_from_tokens_per_s``)."""
    _rewrite_stats(conn, "tokens_per_s", decode_tps_from_tokens_per_s)


def _v5_keep_old_speedups_apart(conn: sqlite3.Connection) -> None:
    """Version 5: a reply's ``speedup`` comes with its interval; the older figure without one is kept as
    ``speedup_v4`` (``speedup_v4_from_speedup``)."""
    _rewrite_stats(conn, "speedup", speedup_v4_from_speedup)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, lambda conn: _run(conn, V1_STATEMENTS)),
    Migration(2, lambda conn: _run(conn, V2_STATEMENTS)),
    Migration(3, _v3_rename_k_to_k_mean),
    Migration(4, _v4_rename_tokens_per_s_to_decode_tps),
    Migration(5, _v5_keep_old_speedups_apart),
)

CURRENT_VERSION = MIGRATIONS[-1].version


def read_version(conn: sqlite3.Connection) -> int | None:
    """The schema version, 0 for an empty database, ``None`` for a database that is not Outrider's."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return 0
    if "schema_version" not in tables:
        return None
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row is not None else None


def apply_migrations(conn: sqlite3.Connection, migrations: Sequence[Migration], from_version: int) -> int:
    """Apply every migration above ``from_version`` in ONE transaction; roll back wholly on any error.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Returns the new version.
    """
    pending = [m for m in migrations if m.version > from_version]
    if not pending:
        return from_version
    with transaction(conn):
        for migration in pending:
            migration.apply(conn)
            conn.execute("UPDATE schema_version SET version = ?", (migration.version,))
    return pending[-1].version


def create_database(conn: sqlite3.Connection, version: int = CURRENT_VERSION) -> None:
    """Create a fresh database at ``version`` (tests use ``version=1`` to exercise the upgrade path)."""
    apply_migrations(conn, [m for m in MIGRATIONS if m.version <= version], 0)
