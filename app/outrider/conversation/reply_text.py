"""The text of the reply being streamed, piece by piece with provenance (no Qt).

``ReplyText`` is the one owner of a streaming reply's text: ``ConversationFlow`` appends each batch of steps to
it, and whoever shows the reply (the chat view's ``MessageItem``) refers to the same object, reading the pieces
it has not shown yet; the checkpoints and the crash path read its ``text``. Each piece keeps its provenance
(docs/metrics.md "Provenance"): the engine sends the text each token released (``StepEvent.pieces``, aligned with
``StepEvent.drafted``), so no step is ever split by guesswork. Consecutive pieces of one provenance are merged
into one run only when a whole message is drawn (``merge_runs``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from outrider.engine.events import TARGET, StepEvent

# Where a piece came from: TARGET (the target's own token), the kind of drafter whose accepted draft token it is
# ("lookup" = prompt lookup, "history", "model", "mtp"; "draft" = a drafter not named: ``engine.events.PROVENANCE``),
# or None: plain text whose tokens are not known (a continued reply's start).
Provenance = str | None
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

    def add_steps(self, steps: Iterable[StepEvent]) -> int:
        """Append each step's pieces (with their ``provenance``; a final piece with no token — held-back text —
        is the target's). Returns the number of pieces added."""
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
