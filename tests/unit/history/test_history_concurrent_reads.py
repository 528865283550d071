"""Reads of the history from the GUI thread while the store thread writes."""

from __future__ import annotations

import threading
from pathlib import Path

from outrider.history import HistoryStore, MessageStatus, ReplyStats


def test_reads_never_wait_behind_a_write(tmp_path: Path) -> None:
    """The GUI thread reads while the store thread writes (and fsyncs). Before: one lock for both, so a read
    waited for the whole write (here the read never finished while the write was held open)."""
    with HistoryStore.open(tmp_path) as store:
        for i in range(3):
            cid = store.create_conversation(f"chat {i}")
            store.add_user_message(cid, "question")
            rid = store.begin_reply(cid)
            store.finish_reply(rid, "answer", MessageStatus.COMPLETE, ReplyStats())
    with HistoryStore.open(tmp_path) as store:
        writing, release = threading.Event(), threading.Event()

        def slow_write() -> None:
            with store._db.write() as conn:  # a write held open, as a long fsync holds it
                conn.execute("UPDATE conversations SET title = 'renamed' WHERE id = 1")
                writing.set()
                release.wait(30)

        writer = threading.Thread(target=slow_write)
        writer.start()
        try:
            assert writing.wait(10)
            result: list[int] = []
            reader = threading.Thread(target=lambda: result.append(len(store.list_conversations())))
            reader.start()
            reader.join(20)
            assert result == [3]  # answered while the write was still open
            assert {s.title for s in store.list_conversations()} == {"chat 0", "chat 1", "chat 2"}  # committed only
        finally:
            release.set()
            writer.join(30)
        assert "renamed" in {s.title for s in store.list_conversations()}
