"""Speculative sampling preserves the target distribution exactly (statistical tests on synthetic p, q)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from outrider.engine.sampling import (
    SamplingParams,
    SparseDist,
    accept_draft_token,
    distribution,
    residual,
    sample,
)


def _dense(dist: SparseDist, n: int) -> np.ndarray:
    out = np.zeros(n)
    out[dist.ids] = dist.probs
    return out


def _spec_sample(p: SparseDist, q: SparseDist, rng: np.random.Generator) -> int:
    x = sample(q, rng)
    if accept_draft_token(x, p, q, rng):
        return x
    return sample(residual(p, q), rng)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_speculative_sample_matches_target_distribution(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 12
    params = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    p = distribution(rng.normal(size=n).astype(np.float32) * 2, params)
    q = distribution(rng.normal(size=n).astype(np.float32) * 2, params)
    draws = np.array([_spec_sample(p, q, rng) for _ in range(20_000)])
    expected = _dense(p, n)
    observed = np.bincount(draws, minlength=n)
    support = expected > 0
    assert observed[~support].sum() == 0, "sampled a token outside the target's top-k"
    _, pvalue = stats.chisquare(observed[support], expected[support] * len(draws))
    assert pvalue > 1e-3


def test_point_mass_proposal_is_exact() -> None:
    """Prompt lookup proposes deterministically (q = point mass); the rule must still give p."""
    rng = np.random.default_rng(7)
    params = SamplingParams(temperature=0.8, top_k=5, top_p=1.0, min_p=0.0)
    p = distribution(np.array([3.0, 2.5, 1.0, 0.2, 0.1, -1.0], dtype=np.float32), params)
    q = SparseDist.point(1)
    draws = np.array([_spec_sample(p, q, rng) for _ in range(20_000)])
    expected = _dense(p, 6)
    observed = np.bincount(draws, minlength=6)
    support = expected > 0
    _, pvalue = stats.chisquare(observed[support], expected[support] * len(draws))
    assert pvalue > 1e-3


def test_filters_follow_llama_cpp_order() -> None:
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0))
    assert list(d.ids) == [0, 1, 2]
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.25))
    assert list(d.ids) == [0, 1, 2]  # 0.15 >= 0.25 * 0.5
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert list(d.ids) == [0, 1]
    assert d.probs.sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"temperature": -1}, "temperature"), ({"top_p": 0}, "top-p"), ({"min_p": 2}, "min-p"), ({"top_k": -3}, "top-k")],
)
def test_bad_sampling_values_are_rejected(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)  # type: ignore[arg-type]
