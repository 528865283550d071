"""History lookup: draft the continuation of the longest match of the reply's end in the user's chat history.

SuffixDecoding's idea (suffix structures over past prompts and outputs, a draft length adapted to the match) over
Outrider's own history (``history_index.HistoryIndex``): a user's next reply often repeats what an earlier chat
holds — a file edited again, a tool call of an agent loop, text quoted before. The draft is the most frequent
continuation of the longest matching suffix, as long as its frequency-based probability stays above
``MIN_CONFIDENCE`` and at most ``LENGTH_PER_MATCHED`` tokens per matched token (a long match predicts further).
In a chain a match of ``chain_draft.LONG_MATCH`` tokens or more is asked for more than k (up to what one pass can
verify), so that this rule, not k, bounds the draft.

Exactness: the draft is a function of the committed tokens alone, so it is a point-mass proposal q; the
verifier's rule (accept with min(1, p/q), else sample the residual) is exact for it at any temperature, and the
coupled sampler needs nothing of q beyond that either. Whether a position is drafted never depends on a token drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from outrider.engine.draft import EMPTY_DRAFT, Draft
from outrider.engine.drafters import SHADOW_WINDOW
from outrider.engine.history_index import HistoryIndex, HistoryIndexError, Tokenize
from outrider.engine.params import SamplingParams
from outrider.engine.sampling import SparseDist

MIN_CONFIDENCE = 0.3  # the draft stops where the share of past occurrences that agree falls below this
LENGTH_PER_MATCHED = 2.0  # draft tokens per matched token at most (SuffixDecoding's alpha)


class HistoryLookupDraft:
    """Drafts from a ``HistoryIndex``, synced with ``history_db`` before each reply (``prefill``).

    A history that cannot be read is never fatal: drafting goes on from what the index holds, and
    ``last_error`` says why it is not up to date.
    """

    kind = "history"

    def __init__(self, index: HistoryIndex, history_db: Path | None, tokenize: Tokenize) -> None:
        self.index = index
        self.history_db = history_db
        self.tokenize = tokenize
        self.last_error: str | None = None
        self.match_length = 0  # tokens matched by the latest guess (0: none); a chain compares lookups by it

    def prefill(self, prompt: Sequence[int]) -> int:
        """Catch up with the history (replies stored since the last reply); evaluates no token."""
        if self.history_db is not None:
            try:
                self.index.sync(self.history_db, self.tokenize)
                self.last_error = None
            except (HistoryIndexError, OSError) as exc:
                self.last_error = str(exc)
        return 0

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float,
        draft_min: int = 0,
    ) -> Draft:
        if k <= 0:
            return EMPTY_DRAFT
        tokens = self.guess(committed, k)
        if not tokens:
            return EMPTY_DRAFT
        dists = None if sampling.greedy else [SparseDist.point(t) for t in tokens]
        return Draft(tokens, dists)

    def guess(self, committed: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens continuing ``committed`` (empty without a match)."""
        match = self.index.longest_match(committed)
        self.match_length = match.length if match is not None else 0
        if match is None:
            return []
        limit = min(k, max(1, int(LENGTH_PER_MATCHED * match.length)))
        tokens, _ = self.index.continuation(match, limit, MIN_CONFIDENCE)
        return tokens

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        """Would the history have guessed each of the last (at most SHADOW_WINDOW) of ``committed[start:]``?"""
        hits = trials = 0
        for i in range(max(start, len(committed) - SHADOW_WINDOW, 1), len(committed)):
            guess = self.guess(committed[:i], 1)
            if guess:
                trials += 1
                hits += int(guess[0] == committed[i])
        return hits, trials

    def close(self) -> None:
        pass
