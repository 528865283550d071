"""A reply's provenance runs stored with it (history/provenance.py)."""

from __future__ import annotations

from outrider.history import HistoryStore, MessageStatus, ReplyStats, decode_runs, with_runs
from outrider.history.provenance import encode_runs


def test_runs_round_trip_through_the_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runs = [("The ", "target"), ("quick ", "lookup"), ("brown", "lookup"), (" fox", "model"), ("!", None)]
    text = "".join(t for t, _ in runs)
    assert encode_runs(runs) == [[4, "target"], [11, "lookup"], [4, "model"], [1, None]]
    with HistoryStore.open(tmp_path) as store:
        cid = store.create_conversation("c")
        store.add_user_message(cid, "q")
        rid = store.begin_reply(cid)
        store.finish_reply(rid, text, MessageStatus.COMPLETE, with_runs(ReplyStats(k_mean=2.0), text, runs))
    with HistoryStore.open(tmp_path) as store:  # a restart
        reply = store.get_conversation(cid).messages[-1]
        assert decode_runs(reply.text, reply.stats) == [("The ", "target"), ("quick brown", "lookup"),
                                                        (" fox", "model"), ("!", None)]
        assert reply.stats is not None and reply.stats.k_mean == 2.0  # the other figures are untouched


def test_runs_that_do_not_spell_the_text_are_never_drawn() -> None:
    stats = with_runs(None, "abc", [("ab", "target"), ("c", "model")])
    assert decode_runs("abc", stats) == [("ab", "target"), ("c", "model")]
    assert decode_runs("abcd", stats) is None  # the text was edited since
    assert with_runs(None, "abc", [("xy", "target")]) is None  # runs of another text are not stored
    bad = ReplyStats.from_dict({"provenance": [[2, "target"], [1, "nonsense"]]})
    assert decode_runs("abc", bad) is None
    assert decode_runs("abc", ReplyStats.from_dict({"provenance": "garbage"})) is None
    assert decode_runs("abc", None) is None
