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
    HistoryStore,
    ImportFormatError,
    Message,
    ReplyStats,
    UnreadableRecord,
)
from outrider.history.models import decode_tps_from_tokens_per_s, upgrade_stats_dict
from support.old_history import export_with_stats, import_old_export, old_database, raw_stats, store_new_reply

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


def _schema_3_database(data_dir: Path) -> Path:
    # The last record's bytes ({"tokens_per_s": 1.5,"x":"\xff"}) are not UTF-8: left exactly as stored.
    return old_database(data_dir, 3, (raw for raw, _, _ in OLD_ROWS),
                        "7B22746F6B656E735F7065725F73223A20312E352C2278223A22FF227D")


def test_a_schema_3_database_opens_with_decode_tps(tmp_path: Path) -> None:
    _schema_3_database(tmp_path / "data")
    db = tmp_path / "data" / "history.sqlite3"
    before = raw_stats(db)
    assert b"tokens_per_s" in (before[-1][0] or b"")  # the fixture really holds the old key in the bad-bytes row
    with HistoryStore.open(tmp_path / "data") as store:
        assert store.schema_version == CURRENT_VERSION == 5
        assert store.backup_path is not None and store.backup_path.exists()
        messages = store.get_conversation(1).messages
    expected = [stats for _, stats, _ in OLD_ROWS] + [None]
    assert len(messages) == len(expected)
    for message, stats in zip(messages, expected, strict=True):
        if stats is None:
            assert isinstance(message, UnreadableRecord)
        else:
            assert isinstance(message, Message) and message.stats == stats
    after = raw_stats(db)
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


def test_the_backup_is_fsynced_before_the_migration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    _schema_3_database(tmp_path / "data")
    synced: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    with HistoryStore.open(tmp_path / "data") as store:
        assert store.backup_path is not None
        assert store.backup_path.stat().st_ino in synced  # its bytes, then the rename (the folder)
        assert (tmp_path / "data").stat().st_ino in synced


@pytest.mark.parametrize("version", [2, 3])  # also k -> k_mean's upgrade (test_k_mean_migration.py)
def test_reopening_a_migrated_database_changes_nothing(tmp_path: Path, version: int) -> None:
    old_database(tmp_path / "data", version, ['{"k": 2.5, "tokens_per_s": 3.0}', *(raw for raw, _, _ in OLD_ROWS)],
                 "7B22746F6B656E735F7065725F73223A20312E352C2278223A22FF227D")
    with HistoryStore.open(tmp_path / "data"):
        pass
    migrated = raw_stats(tmp_path / "data" / "history.sqlite3")
    with HistoryStore.open(tmp_path / "data") as store:
        assert store.backup_path is None  # no migration ran, so no backup was taken
    assert raw_stats(tmp_path / "data" / "history.sqlite3") == migrated


def test_a_new_reply_is_stored_and_exported_with_decode_tps(tmp_path: Path) -> None:
    exported, markdown, stored = store_new_reply(tmp_path, ReplyStats(decode_tps=41.25, generated=4))
    assert exported == stored == {"decode_tps": 41.25, "generated": 4}
    assert "41.2 tok/s" in markdown


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
    message, markdown = import_old_export(tmp_path, stats)
    assert isinstance(message, Message) and message.stats == expected
    assert f"{expected.decode_tps:.1f} tok/s" in markdown


def test_an_old_export_with_a_malformed_rate_is_refused_whole(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        with pytest.raises(ImportFormatError, match=r"messages\[0\]\.stats: stats\.decode_tps must be a number"):
            store.import_json_text(export_with_stats({"tokens_per_s": "fast"}))
        assert store.list_conversations() == []  # nothing was written


def test_the_rename_returns_a_new_dict_and_keeps_other_keys_in_order() -> None:
    old = {"pair_id": "p", "tokens_per_s": 3.5, "custom": [1]}
    assert list(decode_tps_from_tokens_per_s(old).items()) == [("pair_id", "p"), ("decode_tps", 3.5), ("custom", [1])]
    assert old == {"pair_id": "p", "tokens_per_s": 3.5, "custom": [1]}
    both = {"tokens_per_s": 1.0, "decode_tps": 2.0}
    assert decode_tps_from_tokens_per_s(both) == both and decode_tps_from_tokens_per_s(both) is not both
    assert upgrade_stats_dict({"k": 2.5, "tokens_per_s": 4}) == {"k_mean": 2.5, "decode_tps": 4}
