"""The history store for the GUI: writes on a background thread, results and errors as signals.

Reads that the GUI needs at once (the conversation list, one conversation, search) are quick indexed queries and
run on the GUI thread; every write (they fsync: ``synchronous=FULL``) goes through the store's own
``QtTaskRunner`` thread, in order, so a checkpoint never stalls the chat. ``HistoryStore`` is thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from outrider.history import (
    Conversation,
    ConversationSummary,
    HistoryStore,
    MessageStatus,
    ReplyCheckpointer,
    ReplyStats,
    SearchHit,
    UnreadableRecord,
)
from outrider.ui.bridges.tasks import QtTaskRunner


class QtStoreBridge(QObject):
    """Wraps an open ``HistoryStore``.

    Signals:
        conversations_changed(): the list of conversations changed (created, renamed, deleted, restored, a reply
            finished): the list model reloads.
        error(Exception): a write failed (``StoreError``).

    Attributes:
        store: the ``HistoryStore`` (reads only from the GUI thread).
    """

    conversations_changed = Signal()
    error = Signal(object)

    def __init__(self, store: HistoryStore, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self._runner = QtTaskRunner("outrider-store", self)
        self._runner.error.connect(self.error)
        self._closed = False

    # -- reads (GUI thread) -----------------------------------------------------------------------------------
    def conversations(self) -> list[ConversationSummary | UnreadableRecord]:
        return self.store.list_conversations()

    def conversation(self, conversation_id: int) -> Conversation:
        return self.store.get_conversation(conversation_id)

    def search(self, text: str) -> list[SearchHit]:
        return self.store.search(text)

    # -- writes (store thread) --------------------------------------------------------------------------------
    def submit(self, fn: Callable[[HistoryStore], Any], on_done: Callable[[Any], None] | None = None,
               *, notify: bool = False, on_error: Callable[[Exception], None] | None = None) -> None:
        """Run ``fn(store)`` on the store thread; ``on_done(result)`` on the GUI thread, or ``on_error(exc)``
        when it failed (without ``on_error`` the failure is emitted as ``error``)."""
        if self._closed:
            return  # a late timer (a checkpoint) after close: the store is gone, the reply was finished or lost
        def done(value: Any) -> None:
            if on_done is not None:
                on_done(value)
            if notify:
                self.conversations_changed.emit()

        self._runner.submit(lambda: fn(self.store), done, on_error)

    def rename(self, conversation_id: int, title: str) -> None:
        self.submit(lambda s: s.rename_conversation(conversation_id, title), notify=True)

    def delete(self, conversation_id: int) -> None:
        self.submit(lambda s: s.delete_conversation(conversation_id), notify=True)

    def restore(self, conversation_id: int) -> None:
        self.submit(lambda s: s.restore_conversation(conversation_id), notify=True)

    def checkpoint(self, checkpointer: ReplyCheckpointer, text: str) -> None:
        """Commit the streamed text so far (if it changed since the last checkpoint)."""
        def write(_: HistoryStore) -> None:
            checkpointer.update(text)
            checkpointer.flush()

        self.submit(write)

    def finish(self, checkpointer: ReplyCheckpointer, text: str, status: MessageStatus,
               stats: ReplyStats | None, on_done: Callable[[Any], None] | None = None) -> None:
        self.submit(lambda _: checkpointer.finish(text, status, stats), on_done, notify=True)

    def close(self) -> None:
        """Finish pending writes, then close the store (releases the single-instance lock)."""
        self._closed = True
        self._runner.close()
        self.store.close()
