"""The chat's messages as the view holds them, and the text of the reply being streamed (no Qt).

``ReplyText`` is the one owner of a streaming reply's text in the app: ``ChatSession`` appends each
``StepBatch`` to it, and the chat view's ``MessageItem`` for that reply refers to the same object, reading the
pieces it has not shown yet. Each piece keeps its provenance (docs/metrics.md "Provenance"): the engine sends the
text each token released (``StepEvent.pieces``, aligned with ``StepEvent.drafted``), so no step is ever split by
guesswork. Consecutive pieces of one provenance are merged into one run only when a whole message is drawn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

# Where a piece came from: "target" (the target's own token), the kind of drafter whose accepted draft token it is
# ("lookup" = prompt lookup, "history", "model", "mtp"; "draft" = a drafter not named), or None: plain text whose
# tokens are not known (a continued reply's start).
Provenance = str | None
TARGET = "target"
Run = tuple[str, Provenance]


class ReplyText:
    """The text of one streaming reply, piece by piece with provenance; appended to, never rewritten.

    ``start`` is text the reply already had (a reply being continued): one plain piece. ``text`` joins the
    pieces lazily and keeps the join, so reading it once a second costs only what arrived since.

    Attributes:
        pieces: (text, provenance) in arrival order; empty pieces (a held partial character) are left out.
        tokens: the reply's token ids, ``start_tokens`` then each step's (stored for Continue).
    """

    def __init__(self, start: str = "", start_runs: Sequence[Run] | None = None,
                 start_tokens: Sequence[int] | None = None) -> None:
        """``start_runs``: ``start``'s provenance runs when known (a continued reply's stored colours);
        ``start_tokens``: its token ids when known (with none, a continuation's ids are not whole: none kept)."""
        self.tokens: list[int] = list(start_tokens or ())
        self._tokens_whole = not start or bool(start_tokens)
        if start_runs is not None and "".join(t for t, _ in start_runs) == start:
            self.pieces: list[Run] = [run for run in start_runs if run[0]]
        else:
            self.pieces = [(start, None)] if start else []
        self._joined = ""
        self._n_joined = 0

    def add_steps(self, steps: Iterable[Any]) -> int:
        """Append each step's pieces (``StepEvent``: ``pieces`` with their ``provenance``; a final piece with no
        token — held-back text — is the target's). Returns the number of pieces added."""
        before = len(self.pieces)
        for step in steps:
            self.tokens.extend(step.tokens)
            kinds = step.provenance
            self.pieces.extend((piece, kinds[i] if i < len(kinds) else TARGET)
                               for i, piece in enumerate(step.pieces) if piece)
        return len(self.pieces) - before

    @property
    def text(self) -> str:
        if self._n_joined < len(self.pieces):
            self._joined += "".join(p for p, _ in self.pieces[self._n_joined:])
            self._n_joined = len(self.pieces)
        return self._joined

    def runs(self) -> list[Run]:
        return merge_runs(self.pieces)

    @property
    def whole_tokens(self) -> list[int]:
        """The ids of the whole text, or [] when its start's ids are not known (a continued reply of an older
        version): part of a reply's ids would not spell it."""
        return self.tokens if self._tokens_whole else []


@dataclasses.dataclass
class MessageItem:
    """One message as the view shows it.

    ``end``: how an assistant reply ended (an ``EndReason`` value; "" for other messages). ``reply``: the
    ``ReplyText`` of a reply streaming now (``text`` follows it on ``flush``); ``runs``: the provenance runs of a
    reply streamed in this session, kept once it ended (None for messages loaded from the history).
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


def merge_runs(runs: Sequence[Run]) -> list[Run]:
    """Consecutive runs of the same provenance as one run each (one document insertion instead of many)."""
    out: list[Run] = []
    parts: list[str] = []
    current: Provenance = None
    for text, kind in runs:
        if kind != current and parts:
            out.append(("".join(parts), current))
            parts = []
        current = kind
        parts.append(text)
    if parts:
        out.append(("".join(parts), current))
    return out
