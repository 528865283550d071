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

from outrider.history import CURRENT_VERSION, HistoryStore, Message, ReplyStats, UnreadableRecord
from outrider.history.models import upgrade_stats_dict
from support.old_history import import_old_export, old_database, raw_stats, store_new_reply

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


def _schema_2_database(data_dir: Path) -> Path:
    # The last record's bytes ({"k": 1.5,"x":"\xff"}) are not UTF-8: left exactly as stored, still unreadable.
    return old_database(data_dir, 2, (raw for raw, _ in OLD_ROWS), "7B226B223A20312E352C2278223A22FF227D")


def test_a_schema_2_database_opens_with_the_mean_k_renamed_and_the_setting_kept(tmp_path: Path) -> None:
    _schema_2_database(tmp_path / "data")
    db = tmp_path / "data" / "history.sqlite3"
    before = raw_stats(db)
    with HistoryStore.open(tmp_path / "data") as store:
        assert store.schema_version == CURRENT_VERSION == 5
        assert store.backup_path is not None and store.backup_path.exists()
        messages = store.get_conversation(1).messages
    expected = [stats for _, stats in OLD_ROWS] + [None]
    assert len(messages) == len(expected)
    for message, stats in zip(messages, expected, strict=True):
        if stats is None:
            assert isinstance(message, UnreadableRecord)
        else:
            assert isinstance(message, Message) and message.stats == stats
    after = raw_stats(db)
    assert json.loads(after[0][0] or b"") == {"k_mean": 2.5, "generated": 10, "draft_mode": "model"}
    assert json.loads(after[4][0] or b"") == {"decode_tps": 12.5}  # version 4's rename, in the same upgrade
    assert after[2:4] + after[5:] == before[2:4] + before[5:]  # nothing else was rewritten, not even re-serialised
    assert [updated for _, updated in after] == [7.0] * len(after)  # the rename is no edit of the message
    backup = sqlite3.connect(store.backup_path)
    try:
        assert backup.execute("SELECT version FROM schema_version").fetchone() == (2,)
    finally:
        backup.close()


def test_a_new_reply_is_stored_and_exported_with_k_mean(tmp_path: Path) -> None:
    exported, markdown, stored = store_new_reply(tmp_path, ReplyStats(k_mean=3.25, generated=4))
    assert exported == stored == {"k_mean": 3.25, "generated": 4}
    assert "mean k 3.25" in markdown and "k=" not in markdown


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
    message, _ = import_old_export(tmp_path, stats)
    assert isinstance(message, Message) and message.stats == expected


def test_upgrade_stats_dict_returns_a_new_dict_and_leaves_other_keys() -> None:
    old = {"k": 2.5, "pair_id": "p", "custom": [1]}
    assert upgrade_stats_dict(old) == {"k_mean": 2.5, "pair_id": "p", "custom": [1]}
    assert old == {"k": 2.5, "pair_id": "p", "custom": [1]}
    assert upgrade_stats_dict({"k": True}) == {"k": True}  # not a real: not a mean
