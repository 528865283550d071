"""``ReplyStats.tokens_per_s`` became ``decode_tps`` (the engine's name, docs/metrics.md): schema version 4.

Old databases (schema 3, built here) open at version 4 with the key renamed where a record can be read; records
the store cannot read stay exactly as stored; old export files import the same way.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from outrider.history import (
    CURRENT_VERSION,
    ExportFormat,
    HistoryStore,
    ImportFormatError,
    Message,
    ReplyStats,
    UnreadableRecord,
    connect,
)
from outrider.history.models import decode_tps_from_tokens_per_s, upgrade_stats_dict
from outrider.history.schema import create_database

# stats_json as schema 3 stored it -> what the store reads now (None: unreadable) and whether the row is rewritten
OLD_ROWS: list[tuple[str, ReplyStats | None, bool]] = [
    ('{"k_mean": 2.5, "tokens_per_s": 12.5, "generated": 10}',
     ReplyStats(k_mean=2.5, decode_tps=12.5, generated=10), True),
    ('{"tokens_per_s": 30}', ReplyStats(decode_tps=30.0), True),  # a whole number: still a number
    ('{"tokens_per_s": 1.0, "decode_tps": 2.0}', ReplyStats(decode_tps=2.0, extra={"tokens_per_s": 1.0}), False),
    ('{"pair_id": "p", "decode_tps": 7.5}', ReplyStats(pair_id="p", decode_tps=7.5), False),  # already new
    ('{"tokens_per_s": "fast"}', None, False),  # a wrong type: unreadable before and after, left as stored
    ('{"tokens_per_s": NaN}', None, False),  # not finite
    ('{"tokens_per_s": 4.5, "broken', None, False),  # not JSON
]


def _schema_3_database(data_dir: Path) -> None:
    data_dir.mkdir()
    conn = connect(data_dir / "history.sqlite3")
    try:
        create_database(conn, version=3)
        conn.execute(
            "INSERT INTO conversations (uuid, title, created_at, updated_at, settings_json) "
            "VALUES ('00112233445566778899aabbccddeeff', 'from schema 3', 1, 2, '{}')"
        )
        for raw, _, _ in OLD_ROWS:
            conn.execute(
                "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at, stats_json) "
                "VALUES (1, 'assistant', 'an answer', 'complete', 1, 7, ?)",
                (raw,),
            )
        # A record whose bytes are not UTF-8 ({"tokens_per_s": 1.5,"x":"\xff"}): left exactly as stored.
        conn.execute(
            "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at, stats_json) VALUES "
            "(1, 'assistant', 'bad bytes', 'complete', 1, 7, "
            "CAST(X'7B22746F6B656E735F7065725F73223A20312E352C2278223A22FF227D' AS TEXT))"
        )
    finally:
        conn.close()


def _raw_stats(db: Path) -> list[tuple[bytes | None, float]]:
    conn = sqlite3.connect(db)
    conn.text_factory = bytes
    try:
        return conn.execute("SELECT stats_json, updated_at FROM messages ORDER BY id").fetchall()
    finally:
        conn.close()


def test_a_schema_3_database_opens_with_decode_tps(tmp_path: Path) -> None:
    _schema_3_database(tmp_path / "data")
    db = tmp_path / "data" / "history.sqlite3"
    before = _raw_stats(db)
    assert b"tokens_per_s" in (before[-1][0] or b"")  # the fixture really holds the old key in the bad-bytes row
    with HistoryStore.open(tmp_path / "data") as store:
        assert store.schema_version == CURRENT_VERSION == 4
        assert store.backup_path is not None and store.backup_path.exists()
        messages = store.get_conversation(1).messages
    expected = [stats for _, stats, _ in OLD_ROWS] + [None]
    assert len(messages) == len(expected)
    for message, stats in zip(messages, expected, strict=True):
        if stats is None:
            assert isinstance(message, UnreadableRecord)
        else:
            assert isinstance(message, Message) and message.stats == stats
    after = _raw_stats(db)
    rows = [*OLD_ROWS, ("", None, False)]  # the bad-bytes row last
    for (raw_before, _), (raw_after, _), (_, stats, changed) in zip(before, after, rows, strict=True):
        if changed:
            assert stats is not None and json.loads(raw_after or b"") == stats.to_dict()
            assert b"tokens_per_s" not in (raw_after or b"")
        else:
            assert raw_after == raw_before  # not rewritten, not even re-serialised
    assert [updated for _, updated in after] == [7.0] * len(after)  # the rename is no edit of the message
    backup = sqlite3.connect(store.backup_path)
    try:
        assert backup.execute("SELECT version FROM schema_version").fetchone() == (3,)
        assert backup.execute("SELECT stats_json FROM messages WHERE id = 1").fetchone() == (OLD_ROWS[0][0],)
    finally:
        backup.close()


def test_reopening_a_migrated_database_changes_nothing(tmp_path: Path) -> None:
    _schema_3_database(tmp_path / "data")
    with HistoryStore.open(tmp_path / "data"):
        pass
    migrated = _raw_stats(tmp_path / "data" / "history.sqlite3")
    with HistoryStore.open(tmp_path / "data") as store:
        assert store.backup_path is None  # no migration ran, so no backup was taken
    assert _raw_stats(tmp_path / "data" / "history.sqlite3") == migrated


def test_a_new_reply_is_stored_and_exported_with_decode_tps(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        cid = store.create_conversation("new")
        rid = store.begin_reply(cid)
        store.finish_reply(rid, "done", stats=ReplyStats(decode_tps=41.25, generated=4))
        doc = json.loads(store.render_conversation(cid, ExportFormat.JSON))
        markdown = store.render_conversation(cid, ExportFormat.MARKDOWN)
    assert doc["conversations"][0]["messages"][0]["stats"] == {"decode_tps": 41.25, "generated": 4}
    assert "41.2 tok/s" in markdown
    assert json.loads(_raw_stats(tmp_path / "history.sqlite3")[0][0] or b"") == {"decode_tps": 41.25, "generated": 4}


def _export_with_stats(stats: dict[str, Any]) -> str:
    """An export file as an Outrider with schema 3 (or older) wrote it: same format version, old keys."""
    return json.dumps({
        "format": "outrider-history", "format_version": 1, "exported_at": 1.0,
        "conversations": [{
            "uuid": "ffeeddccbbaa99887766554433221100", "title": "exported earlier", "created_at": 1.0,
            "updated_at": 2.0, "pair_id": None, "settings": {},
            "messages": [{"role": "assistant", "text": "hi", "status": "complete", "created_at": 1.0,
                          "stats": stats}],
        }],
    })


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        ({"tokens_per_s": 18.5, "accepted": 3}, ReplyStats(decode_tps=18.5, accepted=3)),
        ({"k": 1.75, "tokens_per_s": 9}, ReplyStats(k_mean=1.75, decode_tps=9.0)),  # from schema 2: both renames
        ({"decode_tps": 2.0}, ReplyStats(decode_tps=2.0)),
    ],
)
def test_an_export_from_an_older_version_imports_with_decode_tps(
    tmp_path: Path, stats: dict[str, Any], expected: ReplyStats
) -> None:
    with HistoryStore.open(tmp_path) as store:
        result = store.import_json_text(_export_with_stats(stats))
        (message,) = store.get_conversation(result.imported[0]).messages
        markdown = store.render_conversation(result.imported[0], ExportFormat.MARKDOWN)
    assert isinstance(message, Message) and message.stats == expected
    assert f"{expected.decode_tps:.1f} tok/s" in markdown


def test_an_old_export_with_a_malformed_rate_is_refused_whole(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        with pytest.raises(ImportFormatError, match=r"messages\[0\]\.stats: stats\.decode_tps must be a number"):
            store.import_json_text(_export_with_stats({"tokens_per_s": "fast"}))
        assert store.list_conversations() == []  # nothing was written


def test_the_rename_returns_a_new_dict_and_keeps_other_keys_in_order() -> None:
    old = {"pair_id": "p", "tokens_per_s": 3.5, "custom": [1]}
    assert list(decode_tps_from_tokens_per_s(old).items()) == [("pair_id", "p"), ("decode_tps", 3.5), ("custom", [1])]
    assert old == {"pair_id": "p", "tokens_per_s": 3.5, "custom": [1]}
    both = {"tokens_per_s": 1.0, "decode_tps": 2.0}
    assert decode_tps_from_tokens_per_s(both) == both and decode_tps_from_tokens_per_s(both) is not both
    assert upgrade_stats_dict({"k": 2.5, "tokens_per_s": 4}) == {"k_mean": 2.5, "decode_tps": 4}
