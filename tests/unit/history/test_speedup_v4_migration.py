"""A reply's ``speedup`` comes with its interval from schema version 5; the older figure (valued from one or two
forced plain probes, with a standard error that did not cover the truth) is kept apart as ``speedup_v4``.

Old databases (schema 4, built here) open at version 5 with the old figures moved where a record can be read;
records the store cannot read stay exactly as stored; old export files import the same way; the Markdown export
names an old figure for what it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from outrider.history import CURRENT_VERSION, HistoryStore, Message, ReplyStats, UnreadableRecord
from outrider.history.models import speedup_v4_from_speedup
from support.old_history import import_old_export, old_database, raw_stats, store_new_reply

# stats_json as schema 4 stored it -> what the store reads now (None: unreadable) and whether the row is rewritten
OLD_ROWS: list[tuple[str, ReplyStats | None, bool]] = [
    ('{"speedup": 7.29, "speedup_error": 0.0004, "generated": 40}',
     ReplyStats(generated=40, extra={"speedup_v4": 7.29, "speedup_error_v4": 0.0004}), True),
    ('{"speedup": 2.5}', ReplyStats(extra={"speedup_v4": 2.5}), True),
    ('{"speedup": 1.9, "speedup_low": 1.7, "speedup_high": 2.1}',
     ReplyStats(speedup=1.9, speedup_low=1.7, speedup_high=2.1), False),  # already new
    ('{"decode_tps": 7.5}', ReplyStats(decode_tps=7.5), False),  # no speed-up at all
    ('{"speedup": "fast"}', ReplyStats(extra={"speedup_v4": "fast"}), True),  # kept, as extra it is no figure
    ('{"speedup": 1.5, "broken', None, False),  # not JSON
]


def test_a_schema_4_database_opens_with_old_speedups_kept_apart(tmp_path: Path) -> None:
    old_database(tmp_path / "data", 4, (raw for raw, _, _ in OLD_ROWS),
                 "7B2273706565647570223A20312E352C2278223A22FF227D")
    db = tmp_path / "data" / "history.sqlite3"
    before = raw_stats(db)
    with HistoryStore.open(tmp_path / "data") as store:
        assert store.schema_version == CURRENT_VERSION == 5
        messages = store.get_conversation(1).messages
    for message, (_, stats, _) in zip(messages, OLD_ROWS, strict=False):
        if stats is None:
            assert isinstance(message, UnreadableRecord)
        else:
            assert isinstance(message, Message) and message.stats == stats
    after = raw_stats(db)
    for (raw_before, _), (raw_after, _), (_, stats, changed) in zip(before, after, OLD_ROWS, strict=False):
        if changed:
            assert stats is not None and json.loads(raw_after or b"") == stats.to_dict()
            assert b'"speedup"' not in (raw_after or b"")
        else:
            assert raw_after == raw_before
    assert [updated for _, updated in after] == [7.0] * len(after)  # moving a key is no edit of the message


def test_an_old_export_imports_with_the_old_figure_named_as_such(tmp_path: Path) -> None:
    message, markdown = import_old_export(tmp_path, {"speedup": 7.29, "speedup_error": 0.0004, "generated": 40})
    assert isinstance(message, Message) and message.stats is not None and message.stats.speedup is None
    assert message.stats.extra == {"speedup_v4": 7.29, "speedup_error_v4": 0.0004}
    assert "speed-up 7.29× (an older estimate from plain probes, no interval)" in markdown


def test_a_new_reply_is_stored_and_exported_with_its_interval(tmp_path: Path) -> None:
    exported, markdown, stored = store_new_reply(
        tmp_path, ReplyStats(speedup=1.85, speedup_low=1.7, speedup_high=2.0, generated=4))
    assert exported == stored == {"speedup": 1.85, "speedup_low": 1.7, "speedup_high": 2.0, "generated": 4}
    assert "speed-up 1.85× (1.70–2.00) vs plain" in markdown
    _, wide, _ = store_new_reply(tmp_path / "wide", ReplyStats(speedup=1.9, speedup_low=1.2, speedup_high=2.6))
    assert "speed-up 1.20–2.60×, uncertain vs plain" in wide


def test_a_figure_without_its_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="speedup needs its interval"):
        ReplyStats(speedup=1.8)
    with pytest.raises(ValueError, match="speedup needs its interval"):
        ReplyStats.from_dict({"speedup": 1.8, "speedup_low": 1.6})


def test_the_upgrade_returns_a_new_dict_and_keeps_other_keys_in_order() -> None:
    old = {"pair_id": "p", "speedup": 2.0, "speedup_error": 0.1, "custom": [1]}
    assert list(speedup_v4_from_speedup(old)) == ["pair_id", "speedup_v4", "speedup_error_v4", "custom"]
    assert old == {"pair_id": "p", "speedup": 2.0, "speedup_error": 0.1, "custom": [1]}
    new = {"speedup": 2.0, "speedup_low": 1.8, "speedup_high": 2.2}
    assert speedup_v4_from_speedup(new) == new and speedup_v4_from_speedup(new) is not new
