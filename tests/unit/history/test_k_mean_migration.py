"""``ReplyStats.k`` became ``k_mean``: old databases (schema 2) and old export files still open and read.

Before schema version 3 the mean draft length the engine used was stored under ``k`` as a JSON real; before
that, ``k`` held the fixed-k setting as a JSON integer (another meaning, so it keeps its name, in ``extra``).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from outrider.history import CURRENT_VERSION, ExportFormat, HistoryStore, Message, ReplyStats, UnreadableRecord, connect
from outrider.history.models import upgrade_stats_dict
from outrider.history.schema import create_database

# stats_json as an older Outrider stored it -> what the store reads now (None: still unreadable)
OLD_ROWS: list[tuple[str, ReplyStats | None]] = [
    ('{"k": 2.5, "generated": 10, "draft_mode": "model"}', ReplyStats(k_mean=2.5, generated=10, draft_mode="model")),
    ('{"k": 4.0}', ReplyStats(k_mean=4.0)),  # round(k_mean, 2) of a whole number is still written as a real
    ('{"k": 4, "draft_mode": "model"}', ReplyStats(draft_mode="model", extra={"k": 4})),  # the fixed-k setting
    ('{"k": 3.0, "k_mean": 2.0}', ReplyStats(k_mean=2.0, extra={"k": 3.0})),  # already has k_mean: untouched
    ('{"tokens_per_s": 12.5}', ReplyStats(decode_tps=12.5)),  # renamed too, by version 4
    ('{"k": 1.5, "broken', None),  # not JSON: reported as unreadable, before and after
    ('{"k": NaN}', None),  # not finite
]


def _schema_2_database(data_dir: Path) -> None:
    data_dir.mkdir()
    conn = connect(data_dir / "history.sqlite3")
    try:
        create_database(conn, version=2)
        conn.execute(
            "INSERT INTO conversations (uuid, title, created_at, updated_at, settings_json) "
            "VALUES ('0123456789abcdef0123456789abcdef', 'old', 1, 2, '{}')"
        )
        for raw, _ in OLD_ROWS:
            conn.execute(
                "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at, stats_json) "
                "VALUES (1, 'assistant', 'an answer', 'complete', 1, 7, ?)",
                (raw,),
            )
        # A record whose bytes are not UTF-8: left exactly as stored, still reported as unreadable.
        conn.execute(
            "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at, stats_json) VALUES "
            "(1, 'assistant', 'bad bytes', 'complete', 1, 7, CAST(X'7B226B223A20312E352C2278223A22FF227D' AS TEXT))"
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


def test_a_schema_2_database_opens_with_the_mean_k_renamed_and_the_setting_kept(tmp_path: Path) -> None:
    _schema_2_database(tmp_path / "data")
    db = tmp_path / "data" / "history.sqlite3"
    before = _raw_stats(db)
    with HistoryStore.open(tmp_path / "data") as store:
        assert store.schema_version == CURRENT_VERSION == 4
        assert store.backup_path is not None and store.backup_path.exists()
        messages = store.get_conversation(1).messages
    expected = [stats for _, stats in OLD_ROWS] + [None]
    assert len(messages) == len(expected)
    for message, stats in zip(messages, expected, strict=True):
        if stats is None:
            assert isinstance(message, UnreadableRecord)
        else:
            assert isinstance(message, Message) and message.stats == stats
    after = _raw_stats(db)
    assert json.loads(after[0][0] or b"") == {"k_mean": 2.5, "generated": 10, "draft_mode": "model"}
    assert json.loads(after[4][0] or b"") == {"decode_tps": 12.5}  # version 4's rename, in the same upgrade
    assert after[2:4] + after[5:] == before[2:4] + before[5:]  # nothing else was rewritten, not even re-serialised
    assert [updated for _, updated in after] == [7.0] * len(after)  # the rename is no edit of the message
    backup = sqlite3.connect(store.backup_path)
    try:
        assert backup.execute("SELECT version FROM schema_version").fetchone() == (2,)
    finally:
        backup.close()


def test_reopening_a_migrated_database_changes_nothing(tmp_path: Path) -> None:
    _schema_2_database(tmp_path / "data")
    with HistoryStore.open(tmp_path / "data"):
        pass
    migrated = _raw_stats(tmp_path / "data" / "history.sqlite3")
    with HistoryStore.open(tmp_path / "data") as store:
        assert store.backup_path is None  # no migration ran, so no backup was taken
    assert _raw_stats(tmp_path / "data" / "history.sqlite3") == migrated


def test_a_new_reply_is_stored_and_exported_with_k_mean(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        cid = store.create_conversation("new")
        rid = store.begin_reply(cid)
        store.finish_reply(rid, "done", stats=ReplyStats(k_mean=3.25, generated=4))
        doc = json.loads(store.render_conversation(cid, ExportFormat.JSON))
        markdown = store.render_conversation(cid, ExportFormat.MARKDOWN)
    assert doc["conversations"][0]["messages"][0]["stats"] == {"k_mean": 3.25, "generated": 4}
    assert "mean k 3.25" in markdown and "k=" not in markdown
    assert json.loads(_raw_stats(tmp_path / "history.sqlite3")[0][0] or b"") == {"k_mean": 3.25, "generated": 4}


def _export_with_stats(stats: dict[str, Any]) -> str:
    return json.dumps({
        "format": "outrider-history", "format_version": 1, "exported_at": 1.0,
        "conversations": [{
            "uuid": "fedcba9876543210fedcba9876543210", "title": "exported earlier", "created_at": 1.0,
            "updated_at": 2.0, "pair_id": None, "settings": {},
            "messages": [{"role": "assistant", "text": "hi", "status": "complete", "created_at": 1.0,
                          "stats": stats}],
        }],
    })


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        ({"k": 1.75, "accepted": 3}, ReplyStats(k_mean=1.75, accepted=3)),
        ({"k": 6}, ReplyStats(extra={"k": 6})),
        ({"k_mean": 2.0}, ReplyStats(k_mean=2.0)),
    ],
)
def test_an_export_from_an_older_version_imports_with_k_mean(
    tmp_path: Path, stats: dict[str, Any], expected: ReplyStats
) -> None:
    with HistoryStore.open(tmp_path) as store:
        result = store.import_json_text(_export_with_stats(stats))
        (message,) = store.get_conversation(result.imported[0]).messages
    assert isinstance(message, Message) and message.stats == expected


def test_upgrade_stats_dict_returns_a_new_dict_and_leaves_other_keys() -> None:
    old = {"k": 2.5, "pair_id": "p", "custom": [1]}
    assert upgrade_stats_dict(old) == {"k_mean": 2.5, "pair_id": "p", "custom": [1]}
    assert old == {"k": 2.5, "pair_id": "p", "custom": [1]}
    assert upgrade_stats_dict({"k": True}) == {"k": True}  # not a real: not a mean
