"""History data as an older Outrider left it, built at test time: a database at an old schema version holding given
reply statistics, and an export file with old statistics keys (the migration tests of ``outrider.history``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from outrider.history import connect
from outrider.history.schema import create_database


def old_database(data_dir: Path, version: int, stats_rows: Iterable[str], undecodable_hex: str) -> Path:
    """A history database at schema ``version`` in a new ``data_dir``: one conversation whose assistant messages
    hold ``stats_rows`` as their ``stats_json`` (as stored, any text), then one whose ``stats_json`` is the bytes
    ``undecodable_hex`` (not UTF-8). Every message has ``updated_at`` 7. Returns the database file."""
    data_dir.mkdir()
    db = data_dir / "history.sqlite3"
    conn = connect(db)
    try:
        create_database(conn, version=version)
        conn.execute(
            "INSERT INTO conversations (uuid, title, created_at, updated_at, settings_json) "
            "VALUES ('0123456789abcdef0123456789abcdef', 'old', 1, 2, '{}')"
        )
        insert = ("INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at, stats_json) "
                  "VALUES (1, 'assistant', ?, 'complete', 1, 7, {})")
        for raw in stats_rows:
            conn.execute(insert.format("?"), ("an answer", raw))
        conn.execute(insert.format(f"CAST(X'{undecodable_hex}' AS TEXT)"), ("bad bytes",))
    finally:
        conn.close()
    return db


def raw_stats(db: Path) -> list[tuple[bytes | None, float]]:
    """Every message's ``stats_json`` as stored (bytes, not decoded) and ``updated_at``, in id order."""
    conn = sqlite3.connect(db)
    conn.text_factory = bytes
    try:
        return conn.execute("SELECT stats_json, updated_at FROM messages ORDER BY id").fetchall()
    finally:
        conn.close()


def export_with_stats(stats: dict[str, Any]) -> str:
    """An export file (format version 1, the only one so far) of one conversation whose reply has ``stats``."""
    return json.dumps({
        "format": "outrider-history", "format_version": 1, "exported_at": 1.0,
        "conversations": [{
            "uuid": "fedcba9876543210fedcba9876543210", "title": "exported earlier", "created_at": 1.0,
            "updated_at": 2.0, "pair_id": None, "settings": {},
            "messages": [{"role": "assistant", "text": "hi", "status": "complete", "created_at": 1.0,
                          "stats": stats}],
        }],
    })


def import_old_export(data_dir: Path, stats: dict[str, Any]) -> tuple[Any, str]:
    """Import an old export whose one reply has ``stats`` into a new store in ``data_dir``: (the reply as read
    back, its conversation rendered as Markdown)."""
    from outrider.history import ExportFormat, HistoryStore

    with HistoryStore.open(data_dir) as store:
        result = store.import_json_text(export_with_stats(stats))
        (message,) = store.get_conversation(result.imported[0]).messages
        return message, store.render_conversation(result.imported[0], ExportFormat.MARKDOWN)


def store_new_reply(data_dir: Path, stats: Any) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """Store a new reply with ``stats`` (a ReplyStats) in a new store in ``data_dir``: (its stats in the JSON export,
    the Markdown export, its stats as stored in the database)."""
    from outrider.history import ExportFormat, HistoryStore

    with HistoryStore.open(data_dir) as store:
        cid = store.create_conversation("new")
        rid = store.begin_reply(cid)
        store.finish_reply(rid, "done", stats=stats)
        doc = json.loads(store.render_conversation(cid, ExportFormat.JSON))
        markdown = store.render_conversation(cid, ExportFormat.MARKDOWN)
    return (doc["conversations"][0]["messages"][0]["stats"], markdown,
            json.loads(raw_stats(data_dir / "history.sqlite3")[0][0] or b""))
