"""A reply's provenance runs kept with it: which stretches of its text were accepted draft tokens, and of which
drafter, so that the colours come back when the conversation is reopened, after a restart, in an export, and on
the first part of a continued reply (they were lost everywhere but in the reply streamed since the app started).

Stored in the reply's statistics (``ReplyStats.extra["provenance"]``, kept by every reader and in JSON exports) as
``[[characters, kind], ...]``: consecutive runs of one kind merged; ``kind`` is "target", a drafter's kind ("lookup",
"history", "model", "mtp", "draft") or null (text whose tokens are not known). Lengths count Python characters and
must add up to the text: a record that does not spell the stored text (an edited message, a damaged record) is
ignored, never drawn wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from outrider.history.models import ReplyStats

STATS_KEY: Final = "provenance"
KINDS: Final = frozenset({"target", "lookup", "history", "model", "mtp", "draft"})

Run = tuple[str, str | None]


def encode_runs(runs: Sequence[Run]) -> list[list[Any]]:
    """``[(text, kind), ...]`` as the stored ``[[characters, kind], ...]``, consecutive kinds merged."""
    out: list[list[Any]] = []
    for text, kind in runs:
        if not text:
            continue
        if out and out[-1][1] == kind:
            out[-1][0] += len(text)
        else:
            out.append([len(text), kind])
    return out


def decode_runs(text: str, stats: ReplyStats | None) -> list[Run] | None:
    """The runs stored with a reply, cut from its ``text``; None when there are none or they do not fit it."""
    stored = stats.extra.get(STATS_KEY) if stats is not None else None
    if not isinstance(stored, list):
        return None
    runs: list[Run] = []
    at = 0
    for entry in stored:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and entry[0] > 0
                and (entry[1] is None or entry[1] in KINDS)):
            return None
        runs.append((text[at:at + entry[0]], entry[1]))
        at += entry[0]
    return runs if at == len(text) else None


def with_runs(stats: ReplyStats | None, text: str, runs: Sequence[Run]) -> ReplyStats | None:
    """``stats`` carrying ``runs`` when they spell ``text`` exactly (else unchanged)."""
    if "".join(t for t, _ in runs) != text or not text:
        return stats
    base = stats if stats is not None else ReplyStats()
    return ReplyStats.from_dict({**base.to_dict(), STATS_KEY: encode_runs(runs)})
