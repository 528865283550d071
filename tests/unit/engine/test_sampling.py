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
    top_probability,
)


def _dense(dist: SparseDist, n: int) -> np.ndarray:
    out = np.zeros(n)
    out[dist.ids] = dist.probs
    return out


def _spec_sample(p: SparseDist, q: SparseDist, rng: np.random.Generator) -> int:
    x = sample(q, rng)
    if accept_draft_token(x, p, q, rng.random()):
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
    [({"temperature": -1}, "temperature"), ({"top_p": 0}, "top-p"), ({"min_p": 2}, "min-p"), ({"top_k": -3}, "top-k"),
     ({"sampler": "gumbel"}, "sampler must be auto, coupled or rejection, got 'gumbel'")],
)
def test_bad_sampling_values_are_rejected(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)  # type: ignore[arg-type]


def _reference_distribution(logits: np.ndarray, params: SamplingParams) -> dict[int, float]:
    """The definition, written the slow obvious way: sort the whole row, then top-k, top-p, min-p, temperature."""
    order = np.argsort(-logits.astype(np.float64), kind="stable")
    if 0 < params.top_k < len(order):
        order = order[: params.top_k]
    values = logits[order].astype(np.float64)
    p = np.exp(values - values[0])
    p /= p.sum()
    keep = len(order)
    if params.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), params.top_p) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(p[:keep] >= params.min_p * p[0])))
    keep = max(1, keep)
    scaled = np.exp((values[:keep] - values[0]) / params.temperature)
    return dict(zip(order[:keep].tolist(), (scaled / scaled.sum()).tolist(), strict=True))


@pytest.mark.parametrize("top_k", [0, 1, 5, 40, 600])
@pytest.mark.parametrize("top_p", [1.0, 0.95, 0.5])
@pytest.mark.parametrize("min_p", [0.0, 0.05, 0.3])
def test_fast_filters_equal_the_definition(top_k: int, top_p: float, min_p: float) -> None:
    """The threshold-based filters keep exactly the tokens, with the same probabilities, as a full sort."""
    rng = np.random.default_rng(top_k * 100 + int(top_p * 10) + int(min_p * 100))
    for scale in (0.5, 3.0, 12.0):  # flat to peaked rows
        logits = (rng.standard_normal(2000) * scale).astype(np.float32)
        params = SamplingParams(temperature=0.7, top_k=top_k, top_p=top_p, min_p=min_p)
        fast = distribution(logits, params)
        want = _reference_distribution(logits, params)
        assert set(fast.ids.tolist()) == set(want)
        got = dict(zip(fast.ids.tolist(), fast.probs.tolist(), strict=True))
        for token, prob in want.items():
            assert got[token] == pytest.approx(prob, rel=1e-5, abs=1e-9)


def test_top_probability_is_the_top10_softmax() -> None:
    rng = np.random.default_rng(3)
    for scale in (0.3, 2.0, 8.0):
        logits = (rng.standard_normal(5000) * scale).astype(np.float32)
        top10 = np.sort(logits.astype(np.float64))[-10:]
        want = 1.0 / np.exp(top10 - top10[-1]).sum()
        assert top_probability(logits) == pytest.approx(want, abs=1e-4)
