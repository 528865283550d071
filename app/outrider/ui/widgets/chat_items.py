"""The chat's messages as the view holds them, and how streamed steps become provenance runs (no Qt).

With provenance on, each token's background shows where it came from (accepted draft token vs target token,
docs/metrics.md "Provenance"). The wire protocol sends one text per step, not per token, so a step that mixes
both kinds is split by the share of its tokens (the accepted draft tokens come first in a step, the target's own
token last); a step that carries ``pieces`` is split exactly. Consecutive pieces of one provenance are merged into
one run, so the view inserts one run per provenance change instead of one piece per token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any


@dataclasses.dataclass
class MessageItem:
    """One message as the view shows it. ``runs`` (text, is_draft) exist for replies streamed in this session.

    Streamed pieces are kept aside by ``add_run`` (O(1)) and joined into ``text`` and ``runs`` by ``flush``,
    which the view calls a few times a second and before it reads them.
    """

    role: str
    text: str
    status: str = "complete"
    message_id: int | None = None
    runs: list[tuple[str, bool]] | None = None
    pending: list[tuple[str, bool]] = dataclasses.field(default_factory=list, repr=False, compare=False)

    def add_run(self, text: str, drafted: bool) -> None:
        self.pending.append((text, drafted))

    def flush(self) -> MessageItem:
        """Join the pending pieces into ``text`` and ``runs`` (consecutive pieces of one provenance merged)."""
        if not self.pending:
            return self
        pending, self.pending = self.pending, []
        self.text += "".join(t for t, _ in pending)
        runs = self.runs if self.runs is not None else []
        for text, drafted in merge_runs(pending):
            if runs and runs[-1][1] == drafted:
                runs[-1] = (runs[-1][0] + text, drafted)
            else:
                runs.append((text, drafted))
        self.runs = runs
        return self


def merge_runs(runs: Sequence[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """Consecutive runs of the same provenance as one run each (one document insertion instead of many)."""
    out: list[tuple[str, bool]] = []
    parts: list[str] = []
    current: bool | None = None
    for text, drafted in runs:
        if drafted is not current and parts:
            out.append(("".join(parts), bool(current)))
            parts = []
        current = drafted
        parts.append(text)
    if parts:
        out.append(("".join(parts), bool(current)))
    return out


def step_runs(step: Any) -> list[tuple[str, bool]]:
    """Split one step's text into (text, accepted-draft?) runs (see the module docstring)."""
    pieces = getattr(step, "pieces", None)
    flags = list(step.drafted)
    if pieces is not None and len(pieces) >= len(flags):
        return [(p, d) for p, d in zip(pieces, [*flags, *[False] * (len(pieces) - len(flags))], strict=True) if p]
    text = step.text
    if not text or not flags:
        return [(text, False)] if text else []
    n_draft = sum(1 for f in flags if f)
    if n_draft == 0:
        return [(text, False)]
    if n_draft == len(flags):
        return [(text, True)]
    cut = round(len(text) * n_draft / len(flags))
    return [(r, d) for r, d in ((text[:cut], True), (text[cut:], False)) if r]
