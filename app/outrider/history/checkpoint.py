"""Rate-limited reply checkpointing: at most one write per interval while streaming, always one at the end."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from outrider.history.models import MessageStatus, ReplyStats


class ReplyWriter(Protocol):
    """What ``ReplyCheckpointer`` needs from a store (``HistoryStore`` satisfies it)."""

    def checkpoint_reply(self, message_id: int, text: str) -> None: ...

    def finish_reply(
        self,
        message_id: int,
        text: str,
        status: MessageStatus = MessageStatus.COMPLETE,
        stats: ReplyStats | None = None,
    ) -> None: ...


class ReplyCheckpointer:
    """Feed it the growing reply text on every token; it writes to the store at most once per ``interval_s``.

    The interval counts from ``begin_reply`` (construction). Unchanged text is never rewritten. A GUI that
    receives tokens irregularly can also call ``flush_if_due`` from a 1 s timer so that a checkpoint is taken
    at least once a second whenever the text changed. ``finish`` always writes.

    Attributes:
        reply_id: the assistant message being streamed.
        writes: how many checkpoints were written (for tests and diagnostics).
    """

    def __init__(
        self,
        store: ReplyWriter,
        reply_id: int,
        *,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self.reply_id = reply_id
        self._interval = interval_s
        self._clock = clock
        self._last_write = clock()
        self._text = ""
        self._written = ""
        self._finished = False
        self.writes = 0

    @property
    def text(self) -> str:
        """The latest text given (may be ahead of what is stored)."""
        return self._text

    @property
    def written_text(self) -> str:
        """The text of the last checkpoint committed."""
        return self._written

    def update(self, text: str) -> bool:
        """Record the text so far; write it if the interval has passed. Returns whether it wrote."""
        if self._finished:
            raise RuntimeError("reply already finished")
        self._text = text
        return self.flush_if_due()

    def flush_if_due(self) -> bool:
        if self._finished or self._text == self._written:
            return False
        if self._clock() - self._last_write < self._interval:
            return False
        return self.flush()

    def flush(self) -> bool:
        """Write the current text now if it changed."""
        if self._finished or self._text == self._written:
            return False
        self._store.checkpoint_reply(self.reply_id, self._text)
        self._written = self._text
        self._last_write = self._clock()
        self.writes += 1
        return True

    def finish(
        self,
        text: str | None = None,
        status: MessageStatus = MessageStatus.COMPLETE,
        stats: ReplyStats | None = None,
    ) -> None:
        """Commit the final text, status and statistics (always written, regardless of the interval)."""
        if self._finished:
            raise RuntimeError("reply already finished")
        if text is not None:
            self._text = text
        self._store.finish_reply(self.reply_id, self._text, status, stats)
        self._written = self._text
        self._finished = True
