"""History lookup: draft the continuation of the longest match of the reply's end in the user's chat history.

SuffixDecoding's idea (suffix structures over past prompts and outputs, a draft length adapted to the match) over
Outrider's own history (``history_index.HistoryIndex``): a user's next reply often repeats what an earlier chat
holds — a file edited again, a tool call of an agent loop, text quoted before. The draft is the most frequent
continuation of the longest matching suffix, as long as its frequency-based probability stays above
``MIN_CONFIDENCE`` and at most ``LENGTH_PER_MATCHED`` tokens per matched token (a long match predicts further).
In a chain a match of ``chain_draft.LONG_MATCH`` tokens or more is asked for more than k (up to what one pass can
verify), so that this rule, not k, bounds the draft.

Re-synchronising after an edit: a reply that copies earlier text with a change (a renamed function, a word
replaced, type hints added) leaves its source for a few tokens and comes back. A suffix match needs ``ANCHOR``
agreeing tokens after the change before it finds the source again, and until then nobody drafts the copy. So the
drafter remembers the text it drafted from (``_Source``: where in the corpus the reply was expected to go on, and
how many of the reply's tokens agreed with it) and, when the target diverged from it, looks for where the reply
rejoins it: the last emitted token found again within ``RESYNC_WINDOW`` tokens after the point of divergence (an
insertion or deletion ended, a replacement of another length), else just past as many tokens as were emitted
since (a replacement of the same length: a renamed word). The evidence for the source is
halved at each edit, so one that keeps being left fades out; it yields to a suffix match at least as long. Measured
on bench_history_lookup.py (SmolLM2's reply renaming a function of the file it re-writes): without it, the 23
tokens after "Load" replacing "Parse" took 4 passes (nothing drafted, then prompt lookup's scraps); with it, one.

Exactness: the draft is a function of the committed tokens (and of the source remembered from earlier guesses on
them), fixed before any token it proposes is drawn, so it is a point-mass proposal q; the verifier's rule (accept
with min(1, p/q), else sample the residual) is exact for it at any temperature, and the coupled sampler needs
nothing of q beyond that either. Whether a position is drafted never depends on a token drawn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from outrider.engine.draft import EMPTY_DRAFT, Draft
from outrider.engine.drafters import SHADOW_WINDOW
from outrider.engine.history_index import MAX_MATCH, SEPARATOR, HistoryIndex, HistoryIndexError, Match, Tokenize
from outrider.engine.params import SamplingParams
from outrider.engine.sampling import SparseDist

MIN_CONFIDENCE = 0.3  # the draft stops where the share of past occurrences that agree falls below this
LENGTH_PER_MATCHED = 2.0  # draft tokens per matched token at most (SuffixDecoding's alpha)
RESYNC_WINDOW = 8  # tokens after a divergence within which the reply is looked for in its source again


@dataclasses.dataclass(frozen=True)
class _Source:
    """The earlier text the reply follows: ``committed[n]`` was expected to be ``corpus[at]``, and ``evidence``
    tokens of the reply agreed with this text (halved at each edit). ``check`` is ``committed[n - 1]``: a call on
    tokens that do not extend those it was set on ignores it. ``before`` is the source a re-synchronised guess
    came from: if that guess is wrong at once, the edit goes on and is measured from there."""

    n: int
    at: int
    evidence: int
    check: int
    before: _Source | None = None


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
        self._source: _Source | None = None  # the text the latest guess was read from (see the module docstring)

    def prefill(self, prompt: Sequence[int], *, reuse: bool = True) -> int:
        """Catch up with the history (replies stored since the last reply); evaluates no token. ``reuse`` changes
        nothing: what it proposes is read from the history, whatever its cache (with the rejection sampler a
        seeded reply therefore depends on what the history holds; docs/metrics.md)."""
        self._source = None  # corpus positions change with the sync
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
        """Up to ``k`` tokens continuing ``committed`` (empty without a match): the longest match's continuation,
        or the source the reply follows, re-synchronised after an edit, while its evidence is the longer. Sets
        ``match_length`` (the evidence of the guess's source) and remembers the source for the next call."""
        match = self.index.longest_match(committed)
        follow = self._follow(committed)
        if match is not None and (follow is None or match.length >= follow[1]):
            tokens = self._continue(match, k)
            self.match_length = match.length
            self._source = (_Source(len(committed), self.index.occurrence(match, tokens), match.length,
                                    committed[-1]) if tokens else None)
            return tokens
        if follow is None:
            self.match_length = 0
            self._source = None
            return []
        at, evidence, before = follow
        self.match_length = evidence
        self._source = _Source(len(committed), at, evidence, committed[-1], before)
        return self.index.run(at, min(k, max(1, int(LENGTH_PER_MATCHED * evidence))))

    def _continue(self, match: Match, k: int) -> list[int]:
        limit = min(k, max(1, int(LENGTH_PER_MATCHED * match.length)))
        tokens, _ = self.index.continuation(match, limit, MIN_CONFIDENCE)
        return tokens

    def _follow(self, committed: Sequence[int]) -> tuple[int, int, _Source | None] | None:
        """Where the remembered source goes on after ``committed`` — (corpus position, evidence, the source a
        re-synchronised guess came from) — or None (no source, or the reply left it; see the module docstring)."""
        source = self._source
        if source is None or not 0 < source.n <= len(committed) or committed[source.n - 1] != source.check:
            return None
        before = source.before
        if before is not None and int(self.index.corpus[source.at]) != committed[source.n]:
            source = before  # a re-synchronised guess was wrong at once: the same edit goes on
        return self._resync(source, list(committed[source.n :]))

    def _resync(self, source: _Source, new: list[int]) -> tuple[int, int, _Source | None] | None:
        """Where the reply, ``new`` tokens after ``source`` was set, goes on in it: right after them if they
        agree with it, else where it rejoins the source after the edit (see the module docstring)."""
        c = self.index.corpus
        ahead = c[source.at : source.at + len(new)].tolist()  # a separator (-1) never equals a token
        agreed = next((i for i, (x, y) in enumerate(zip(new, ahead, strict=False)) if x != y), len(ahead))
        if agreed == len(new):
            return source.at + agreed, min(source.evidence + agreed, MAX_MATCH), None
        edit = new[agreed:]
        evidence = (source.evidence + agreed) // 2
        if len(edit) > RESYNC_WINDOW or evidence <= 0:
            return None
        q = source.at + agreed  # the source's first token the reply did not repeat
        window = c[q : q + RESYNC_WINDOW].tolist()
        if SEPARATOR in window:
            window = window[: window.index(SEPARATOR)]
        best, resume = 0, -1
        for j, token in enumerate(window):  # the last emitted token found again; the longest agreement before it
            if token != edit[-1]:
                continue
            r = 1
            while r < len(edit) and r <= j and window[j - r] == edit[-1 - r]:
                r += 1
            if r > best:
                best, resume = r, q + j + 1
        if resume < 0:  # none: a replacement of the same length
            if len(edit) >= len(window):
                return None
            resume = q + len(edit)
        return resume, evidence, source

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        """Would the history have guessed each of the last (at most SHADOW_WINDOW) of ``committed[start:]``?"""
        hits = trials = 0
        for i in range(max(start, len(committed) - SHADOW_WINDOW, 1), len(committed)):
            guess = self._stateless_guess(committed[:i])
            if guess:
                trials += 1
                hits += int(guess[0] == committed[i])
        return hits, trials

    def _stateless_guess(self, committed: Sequence[int]) -> list[int]:
        """The suffix match's first token alone: shadow scoring walks back over committed tokens, which must not
        move the remembered source."""
        match = self.index.longest_match(committed)
        return self._continue(match, 1) if match is not None else []

    def close(self) -> None:
        pass
