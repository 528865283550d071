"""The speculative loop's drafting rules at temperature > 0, on a two-token vocabulary with known p and q.

``SpeculativeDecoder`` and ``ModelDraft`` run for real; only the llama.cpp objects are replaced by fakes whose logits
are fixed: the target always gives p = (0.1, 0.9); the draft gives q = (0.9, 0.1) after token 0 and (0.5, 0.5) after
token 1. Every prompt ends with token 0, so the first draft token is drawn from q = (0.9, 0.1).

Exact speculative sampling must emit token 0 with probability p(0) = 0.10 at every position. The failure this
guards against: drawing x ~ q and then dropping x because q(x) < p-min (or dropping a started draft for being
shorter than draft-min) while verifying with the full q. With p-min 0.5 that drafts x = 0 only (q(0) = 0.9), which
is accepted with probability p(0)/q(0) = 1/9, and falls back to p when x = 1 was drawn:
P(token 0) = 0.9 * 1/9 + 0.1 * 0.1 = 0.11 instead of 0.10.

Power: N = 40 000 runs, binomial test against 0.10 (sd 0.0015): the skew to 0.11 is 6.7 sd (p ~ 1e-11), and an exact
engine falls below the threshold p = 1e-3 once in a thousand seeds (the seeds are fixed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import stats

from outrider.engine.drafters import ModelDraft
from outrider.engine.params import DraftParams, Sampler, SamplingParams
from outrider.engine.speculative import DoneEvent, GenerationRequest, SpeculativeDecoder

N_RUNS = 40_000
TARGET = np.log(np.array([0.1, 0.9], dtype=np.float32))
DRAFT_AFTER = {0: np.log(np.array([0.9, 0.1], dtype=np.float32)), 1: np.log(np.array([0.5, 0.5], dtype=np.float32))}


class FakeModel:
    """What the loop needs from a LoadedModel: two ordinary tokens, no end-of-generation token."""

    n_vocab = 2
    is_recurrent = False

    def is_eog(self, token: int) -> bool:
        return False

    def piece(self, token: int) -> bytes:
        return b"ab"[token : token + 1]


class FakeContext:
    """A ModelContext whose logits depend only on the last token evaluated (``rows(last token)``)."""

    n_vocab = 2
    n_batch = 64
    is_recurrent = False
    n_threads = 1

    def __init__(self, logits_after: dict[int, np.ndarray] | None, n_ctx: int = 64) -> None:
        self.logits_after = logits_after
        self.n_ctx = n_ctx
        self.n_past = 0
        self._rows: list[np.ndarray] = []

    def _row(self, token: int) -> np.ndarray:
        return TARGET if self.logits_after is None else self.logits_after[token]

    def decode(self, tokens: Sequence[int], *, logits: str = "last", abortable: bool = False) -> None:
        assert self.n_past + len(tokens) <= self.n_ctx
        self.n_past += len(tokens)
        if logits == "all":
            self._rows = [self._row(t) for t in tokens]
        elif logits == "last":
            self._rows = [self._row(tokens[-1])]
        else:
            self._rows = []

    def logits_row(self, i: int) -> np.ndarray:
        return self._rows[i]

    def truncate(self, n_keep: int) -> None:
        self.n_past = min(self.n_past, n_keep)

    def clear(self) -> None:
        self.n_past = 0

    def synchronize(self) -> None:
        pass

    def request_abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def _request(**kwargs: object) -> GenerationRequest:
    """A request whose first step may speculate (no forced plain-decoding probe step, where the engine has one)."""
    if "plain_probe_every" in {f.name for f in dataclasses.fields(GenerationRequest)}:
        kwargs["plain_probe_every"] = 0
    return GenerationRequest(**kwargs)  # type: ignore[arg-type]


def _decoder() -> SpeculativeDecoder:
    return SpeculativeDecoder(FakeModel(), FakeContext(None), ModelDraft(FakeContext(DRAFT_AFTER)))  # type: ignore[arg-type]


def _token_zero_counts(draft: DraftParams, n_positions: int,
                       sampler: Sampler = "rejection") -> tuple[list[int], int, int]:
    decoder = _decoder()
    counts = [0] * n_positions
    drafted = accepted = 0
    for seed in range(N_RUNS):
        request = _request(
            prompt_tokens=[1, 0, 1, 0],
            max_tokens=n_positions,
            sampling=SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed, sampler=sampler),
            draft=draft,
        )
        tokens: list[int] = []
        for event in decoder.generate(request):
            if isinstance(event, DoneEvent):
                drafted += event.stats.drafted
                accepted += event.stats.accepted
            else:
                tokens.extend(event.tokens)
        assert len(tokens) == n_positions
        for pos in range(n_positions):
            counts[pos] += tokens[pos] == 0
    return counts, drafted, accepted


@pytest.mark.parametrize(
    "draft",
    [
        DraftParams(k=1, p_min=0.5),  # the exact example: 0.11 instead of 0.10 when x is dropped for q(x) < p-min
        DraftParams(k=2, p_min=0.75),
        DraftParams(k=2, draft_min=2, p_min=0.6),  # a started draft dropped for being short skews the same way
        DraftParams(k=2),  # no p-min: the plain rule
    ],
    ids=["p_min_0.5", "p_min_0.75", "draft_min_2_p_min_0.6", "no_p_min"],
)
def test_token_zero_keeps_probability_p0_at_every_position(draft: DraftParams) -> None:
    """The rejection sampler, where the p-min rule decides exactness."""
    counts, drafted, accepted = _token_zero_counts(draft, n_positions=3)
    assert drafted > 0 and accepted < drafted, (drafted, accepted)
    for pos, count in enumerate(counts):
        pvalue = stats.binomtest(count, N_RUNS, 0.1).pvalue
        assert pvalue > 1e-3, f"position {pos}: token 0 in {count / N_RUNS:.4f} of runs, target p(0) = 0.1000"


def test_coupled_sampler_keeps_p0_with_p_min() -> None:
    """The coupled sampler emits the target's own Gumbel-max choice whatever the draft did: exact with p-min too."""
    counts, drafted, accepted = _token_zero_counts(DraftParams(k=2, p_min=0.5), n_positions=3, sampler="coupled")
    assert drafted > 0 and accepted < drafted, (drafted, accepted)
    for pos, count in enumerate(counts):
        pvalue = stats.binomtest(count, N_RUNS, 0.1).pvalue
        assert pvalue > 1e-3, f"position {pos}: token 0 in {count / N_RUNS:.4f} of runs, target p(0) = 0.1000"


def test_the_fakes_give_the_stated_distributions() -> None:
    def softmax(x: np.ndarray) -> list[float]:
        e = np.exp(x - x.max())
        return [float(v) for v in e / e.sum()]

    assert softmax(TARGET) == pytest.approx([0.1, 0.9])
    assert softmax(DRAFT_AFTER[0]) == pytest.approx([0.9, 0.1])
    # the arithmetic of the failure this file guards against
    buggy = 0.9 * (0.1 / 0.9) + 0.1 * 0.1
    assert buggy == pytest.approx(0.11)
    assert math.isclose(stats.binomtest(int(0.11 * N_RUNS), N_RUNS, 0.1).pvalue, 0.0, abs_tol=1e-9)
