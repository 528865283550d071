"""The history for a front end without a store thread (a terminal command): ``TurnStore`` run at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from outrider.history.checkpoint import ReplyCheckpointer
from outrider.history.models import Conversation, MessageStatus, ReplyStats
from outrider.history.store import HistoryStore


class DirectStore:
    """Every job runs in the caller's thread before ``submit`` returns; a failing job goes to ``on_error`` (raised
    when there is none); checkpoints and ends raise what the store raises (``DiskFullError``…)."""

    def __init__(self, store: HistoryStore) -> None:
        self.store = store

    def conversation(self, conversation_id: int) -> Conversation:
        return self.store.get_conversation(conversation_id)

    def submit(self, fn: Callable[[HistoryStore], Any], on_done: Callable[[Any], None] | None = None,
               *, notify: bool = False, on_error: Callable[[Exception], None] | None = None) -> None:
        try:
            value = fn(self.store)
        except Exception as exc:
            if on_error is None:
                raise
            on_error(exc)
            return
        if on_done is not None:
            on_done(value)

    def checkpoint(self, checkpointer: ReplyCheckpointer, text: str) -> None:
        checkpointer.update(text)
        checkpointer.flush()

    def finish(self, checkpointer: ReplyCheckpointer, text: str, status: MessageStatus,
               stats: ReplyStats | None, on_done: Callable[[Any], None] | None = None) -> None:
        checkpointer.finish(text, status, stats)
        if on_done is not None:
            on_done(None)
