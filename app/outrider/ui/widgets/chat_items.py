"""The chat's messages as the view holds them (no Qt).

The message streaming now refers to the conversation flow's ``ReplyText`` (``outrider.conversation.reply_text``,
the one owner of a streaming reply's text), reading the pieces it has not shown yet.
"""

from __future__ import annotations

import dataclasses

from outrider.conversation.reply_text import ReplyText, Run


@dataclasses.dataclass
class MessageItem:
    """One message as the view shows it.

    ``end``: how an assistant reply ended (an ``EndReason`` value; "" for other messages). ``reply``: the
    ``ReplyText`` of a reply streaming now (``text`` follows it on ``flush``); ``runs``: the provenance runs of a
    reply streamed since the app started, kept once it ended (None for messages loaded from the history).
    """

    role: str
    text: str
    status: str = "complete"
    message_id: int | None = None
    runs: list[Run] | None = None
    end: str = ""
    reply: ReplyText | None = dataclasses.field(default=None, repr=False, compare=False)

    def flush(self) -> MessageItem:
        """Bring ``text`` up to date with the streaming reply (cheap: the reply keeps its join)."""
        if self.reply is not None:
            self.text = self.reply.text
        return self

    def provenance_runs(self) -> list[Run] | None:
        """(text, provenance) runs of the whole message (consecutive ones may share a provenance), or None when its
        tokens are not known."""
        return self.reply.runs() if self.reply is not None else self.runs

    def finish(self, status: str, text: str, end: str) -> None:
        """The reply ended: keep its runs (when they still spell ``text``) and let go of the ``ReplyText``."""
        if self.reply is not None:  # its pieces become the runs (merged where drawn): no copy, no pass over them
            self.runs = self.reply.pieces if self.reply.text == text else None
            self.reply = None
        elif self.runs is not None and "".join(r for r, _ in self.runs) != text:
            self.runs = None
        self.status, self.text, self.end = status, text, end
