"""A reply's token ids kept with it, so that Continue resumes it as the model generated it — also after a restart.

Re-tokenising a reply's text can split it differently from how the model wrote it (SmolLM2 writes a blank line as
two "\\n" tokens and reads "\\n\\n" back as one), and a continuation from the re-read text then differs from the
reply the model would have written uninterrupted. The engine keeps the ids of its last reply in memory; these are
the same ids, stored with the reply for the next process (``TextRequest.continue_tokens``).

Stored in the reply's statistics (``ReplyStats.extra["tokens"]``, kept by every reader and in JSON exports) as
``{"ids": [...], "chars": len(text)}``, only for a reply that can be continued (one that did not end by itself):
a record whose ``chars`` is not the stored text's length (an edited or damaged record) is ignored. Whether the ids
are the loaded model's and spell the text is the engine's check (another pair may be loaded by then).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from outrider.history.models import ReplyStats

STATS_KEY: Final = "tokens"
MAX_TOKEN_ID: Final = 1 << 31


def decode_tokens(text: str, stats: ReplyStats | None) -> tuple[int, ...] | None:
    """The token ids stored with a reply of ``text``; None when there are none or they are not of this text."""
    stored = stats.extra.get(STATS_KEY) if stats is not None else None
    if not isinstance(stored, dict) or stored.get("chars") != len(text) or not text:
        return None
    ids = stored.get("ids")
    if not isinstance(ids, list) or not ids:
        return None
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < MAX_TOKEN_ID for t in ids):
        return None
    return tuple(ids)


def with_tokens(stats: ReplyStats | None, text: str, tokens: Sequence[int], *, continuable: bool) -> ReplyStats | None:
    """``stats`` carrying ``tokens``, the ids of the reply ``text``, when the reply can be continued (else, and
    with no text or no ids, unchanged: a reply that ended by itself is never continued, its ids would only
    take room)."""
    if not continuable or not text or not tokens:
        return stats
    base = stats if stats is not None else ReplyStats()
    return ReplyStats.from_dict({**base.to_dict(), STATS_KEY: {"ids": [int(t) for t in tokens], "chars": len(text)}})
