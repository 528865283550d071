"""Draft sources behind one interface: a draft model, prompt lookup, or none (plain decoding).

A drafter proposes up to ``k`` tokens that continue ``committed`` (the prompt plus every token accepted so far).
At temperature > 0 it also returns, for each proposed token, the distribution q it was drawn from — the
verifier needs q for the exact acceptance rule. A deterministic drafter (prompt lookup) proposes with q a point
mass, for which the same rule stays exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from outrider.engine.backend import ModelContext
from outrider.engine.params import LookupSettings, SamplingParams
from outrider.engine.sampling import (
    SparseDist,
    distribution,
    greedy_confidence,
    greedy_token,
    sample,
)


@dataclasses.dataclass(frozen=True)
class Draft:
    """Proposed tokens; ``dists[i]`` is the q that ``tokens[i]`` was drawn from (None when greedy)."""

    tokens: list[int]
    dists: list[SparseDist] | None = None


EMPTY_DRAFT = Draft([])


class DraftSource(Protocol):
    """What the speculative loop needs from a drafter."""

    kind: str

    def prefill(self, prompt: Sequence[int]) -> int:
        """Prepare for a new generation from ``prompt``; returns how many tokens had to be evaluated."""
        ...

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float
    ) -> Draft:
        """Up to ``k`` tokens continuing ``committed``; stop early when confidence falls below ``p_min``."""
        ...

    def close(self) -> None: ...


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix (C-speed list comparison in the usual all-equal case)."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class NoDraft:
    """Plain decoding: never proposes anything (the baseline)."""

    kind = "none"

    def prefill(self, prompt: Sequence[int]) -> int:
        return 0

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float
    ) -> Draft:
        return EMPTY_DRAFT

    def close(self) -> None:
        pass


class ModelDraft:
    """A separate draft model with its own context, kept in sync with the committed tokens.

    Invariant: ``self.cached`` lists exactly the tokens whose keys/values are in the draft's KV cache.
    """

    kind = "model"

    def __init__(self, context: ModelContext) -> None:
        self.context = context
        self.cached: list[int] = []

    def _sync(self, committed: Sequence[int]) -> None:
        """Make the cache hold ``committed`` with logits for the next position (reuses the common prefix)."""
        keep = min(common_prefix_length(self.cached, committed), len(committed) - 1)
        self.context.truncate(keep)
        del self.cached[keep:]
        self.context.decode(committed[keep:], logits="last")
        self.cached.extend(committed[keep:])

    def prefill(self, prompt: Sequence[int]) -> int:
        before = len(prompt) - min(common_prefix_length(self.cached, prompt), len(prompt) - 1)
        self._sync(prompt)
        return before

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float
    ) -> Draft:
        room = self.context.n_ctx - len(committed) - 1
        k = min(k, room)
        if k <= 0:
            return EMPTY_DRAFT
        self._sync(committed)
        tokens: list[int] = []
        dists: list[SparseDist] | None = None if sampling.greedy else []
        while True:
            logits = self.context.logits_row(-1)
            if sampling.greedy:
                token = greedy_token(logits)
                confidence = greedy_confidence(logits, token) if p_min > 0 else 1.0
            else:
                q = distribution(logits, sampling)
                token = sample(q, rng)
                confidence = q.prob_of(token)
                assert dists is not None
            if confidence < p_min:
                break
            tokens.append(token)
            if dists is not None:
                dists.append(q)
            if len(tokens) >= k:
                break
            self.context.decode([token], logits="last")
            self.cached.append(token)
        return Draft(tokens, dists)

    def close(self) -> None:
        self.context.close()




class PromptLookupDraft:
    """N-gram search over the prompt and the output so far; proposes what followed the latest match.

    An incremental index maps each n-gram to the position right after its latest occurrence, so a step costs
    O(ngram_max) dictionary look-ups however long the conversation is.
    """

    kind = "lookup"

    def __init__(self, settings: LookupSettings = LookupSettings()) -> None:
        self.settings = settings
        self._indexed: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}

    def _update_index(self, committed: Sequence[int]) -> None:
        start = common_prefix_length(self._indexed, committed)
        if start < len(self._indexed):  # history changed (new conversation): rebuild
            self._indexed, self._index, start = [], {}, 0
        self._indexed.extend(committed[start:])
        # Index the n-grams ending just before each position e whose continuation committed[e] exists.
        for e in range(max(start, 1), len(committed)):
            for n in range(self.settings.ngram_min, self.settings.ngram_max + 1):
                if e - n >= 0:
                    self._index[tuple(committed[e - n : e])] = e

    def prefill(self, prompt: Sequence[int]) -> int:
        self._update_index(prompt)
        return 0

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float
    ) -> Draft:
        if k <= 0:
            return EMPTY_DRAFT
        self._update_index(committed)
        for n in range(self.settings.ngram_max, self.settings.ngram_min - 1, -1):
            if len(committed) < n:
                continue
            e = self._index.get(tuple(committed[-n:]))
            if e is not None:
                tokens = list(committed[e : e + k])
                dists = None if sampling.greedy else [SparseDist.point(t) for t in tokens]
                return Draft(tokens, dists)
        return EMPTY_DRAFT

    def close(self) -> None:
        pass
