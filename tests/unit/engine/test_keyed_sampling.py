"""The keyed draws and the two samplers built on them (``engine/sampling.py``): Philox against its published
known-answer vectors, Gumbel-max sampling exact in distribution, the coupled sampler drafter-invariant, the
rejection sampler exact with keyed uniforms.

Mutation checks (each made once, each failed here): Philox's key bump dropped (the known answers differ); the
Gumbel noise drawn per call instead of per (seed, position, token) (``test_coupled_output_ignores_the_draft`` fails:
the draft's noise no longer equals the target's); ``GUMBEL_MAX`` set to 2 (``test_large_supports_skip_only_tokens_
that_cannot_win`` fails on the flat rows); the rejection sampler's residual replaced by p (the chi-square of
``test_rejection_sampler_with_keyed_draws_is_exact`` falls to p ~ 1e-30).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from outrider.engine.params import SamplingParams
from outrider.engine.sampling import (
    STREAM_GUMBEL,
    KeyedDraws,
    SparseDist,
    distribution,
    draft_token,
    gumbel_argmax,
    philox4x32,
    rank_mass,
    resolve_seed,
    verify_sampled,
)

N_DRAWS = 20_000


def _words(*values: int) -> tuple[np.ndarray, ...]:
    return tuple(np.array([v], dtype=np.uint64) for v in values)


@pytest.mark.parametrize(
    ("counter", "key", "want"),
    [  # Random123's kat_vectors for philox4x32_10
        ((0, 0, 0, 0), (0, 0), "6627e8d5 e169c58d bc57ac4c 9b00dbd8"),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), "408f276d 41c83b0e a20bc7c6 6d5451fd"),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         "d16cfe09 94fdcceb 5001e420 24126ea1"),
    ],
)
def test_philox_matches_known_answers(counter: tuple[int, ...], key: tuple[int, int], want: str) -> None:
    out = philox4x32(_words(*counter), key)
    assert " ".join(f"{int(w[0]):08x}" for w in out) == want


def test_keyed_uniforms_are_uniform_and_depend_on_every_key_part() -> None:
    draws = KeyedDraws(12345)
    u = draws.uniforms(np.arange(N_DRAWS), 7, STREAM_GUMBEL)
    assert u.min() > 0 and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    base = draws.uniforms(3, 7, STREAM_GUMBEL)
    for other in (KeyedDraws(12346).uniforms(3, 7, 0), draws.uniforms(4, 7, 0), draws.uniforms(3, 8, 0),
                  draws.uniforms(3, 7, 1), KeyedDraws(12345 + (1 << 32)).uniforms(3, 7, 0),
                  draws.uniforms(3, 7 + (1 << 32), 0)):
        assert other != base
    assert KeyedDraws(12345).uniforms(3, 7, 0) == base  # a pure function


def _dense(dist: SparseDist, n: int) -> np.ndarray:
    out = np.zeros(n)
    out[dist.ids] = dist.probs
    return out


def _chi2(draws: list[int], dist: SparseDist, n: int) -> float:
    expected = _dense(dist, n)
    observed = np.bincount(np.array(draws), minlength=n)
    support = expected > 0
    assert observed[~support].sum() == 0, "a token outside the support"
    return float(stats.chisquare(observed[support], expected[support] * len(draws)).pvalue)


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.5])
def test_gumbel_max_samples_the_distribution(temperature: float) -> None:
    rng = np.random.default_rng(int(temperature * 10))
    params = SamplingParams(temperature=temperature, top_k=8, top_p=1.0, min_p=0.0)
    p = distribution((rng.normal(size=12) * 2).astype(np.float32), params)
    draws = KeyedDraws(99)
    # One draw per position: positions are independent keys.
    picks = [gumbel_argmax([p], [pos], draws)[0] for pos in range(N_DRAWS)]
    assert _chi2(picks, p, 12) > 1e-3


def test_large_supports_skip_only_tokens_that_cannot_win() -> None:
    """A support above SMALL_SUPPORT (no filter) gets noise for a few tokens only: same choice as noise for all."""
    rng = np.random.default_rng(5)
    draws = KeyedDraws(3)
    for scale in (0.05, 1.0, 6.0):  # a flat row (every token a candidate) to a peaked one
        p = distribution((rng.normal(size=3000) * scale).astype(np.float32),
                         SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
        assert p.ids.shape[0] == 3000
        for pos in range(40):
            brute = int(p.ids[np.argmax(np.log(p.probs) + draws.gumbel(p.ids, pos))])
            assert gumbel_argmax([p], [pos], draws)[0] == brute


def _pair(rng: np.random.Generator, params: SamplingParams, n: int = 10) -> tuple[SparseDist, SparseDist]:
    target = rng.normal(size=n).astype(np.float32) * 2
    draft = target + rng.normal(size=n).astype(np.float32)  # related, as a same-family draft is
    return distribution(target, params), distribution(draft, params)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_coupled_output_ignores_the_draft(temperature: float) -> None:
    """Drafter invariance: the coupled verifier emits the target's own seeded choice whatever was proposed, and
    accepts a draft token exactly when it is that choice; acceptance is at least (1 - TV) / (1 + TV)."""
    rng = np.random.default_rng(1)
    params = SamplingParams(temperature=temperature, top_k=6, top_p=1.0, min_p=0.0, seed=2024, sampler="coupled")
    p, q = _pair(rng, params)
    accepted = 0
    for pos in range(5000):
        plain = verify_sampled([], lambda i: p, [], params, pos)
        assert plain[0] == 0
        proposal = draft_token(q, params, pos)
        n, token = verify_sampled([proposal], lambda i: p, [q], params, pos)
        assert (n == 1) == (proposal == plain[1])
        if n == 0:
            assert token == plain[1]
        accepted += n
        lookup = int(rng.integers(10))  # a point-mass proposal (prompt lookup)
        n, token = verify_sampled([lookup], lambda i: p, [SparseDist.point(lookup)], params, pos)
        assert (n, token if n == 0 else lookup) == (int(lookup == plain[1]), plain[1])
    tv = 0.5 * np.abs(_dense(p, 10) - _dense(q, 10)).sum()
    assert accepted / 5000 >= (1 - tv) / (1 + tv) - 0.03


def test_rejection_sampler_with_keyed_draws_is_exact() -> None:
    """Speculative sampling with keyed uniforms: the emitted token at a position follows p (model draft and point
    mass), over many independent positions."""
    rng = np.random.default_rng(4)
    params = SamplingParams(temperature=0.8, top_k=6, top_p=1.0, min_p=0.0, seed=77, sampler="rejection")
    p, q = _pair(rng, params)
    out_model: list[int] = []
    out_point: list[int] = []
    accepted = 0
    for pos in range(N_DRAWS):
        proposal = draft_token(q, params, pos)
        n, token = verify_sampled([proposal], lambda i: p, [q], params, pos)
        accepted += n
        out_model.append(proposal if n else token)
        n, token = verify_sampled([3], lambda i: p, [SparseDist.point(3)], params, pos)
        out_point.append(3 if n else token)
    assert 0 < accepted < N_DRAWS
    assert _chi2(out_model, p, 10) > 1e-3
    assert _chi2(out_point, p, 10) > 1e-3


def test_two_position_draft_is_exact_at_the_second_position() -> None:
    """The rows after an accepted token use their own positions' draws (no reuse of the first row's)."""
    rng = np.random.default_rng(8)
    for sampler in ("coupled", "rejection"):
        params = SamplingParams(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0, seed=5, sampler=sampler)  # type: ignore[arg-type]
        p0, q0 = _pair(rng, params, 6)
        p1, q1 = _pair(rng, params, 6)
        second: list[int] = []
        for pos in range(0, 2 * N_DRAWS, 2):
            d0 = draft_token(q0, params, pos)
            d1 = draft_token(q1, params, pos + 1)
            rows = (p0, p1, p1)
            n, token = verify_sampled([d0, d1], rows.__getitem__, [q0, q1], params, pos)
            if n >= 1:  # the second position is decided in this step: by acceptance, rejection or bonus
                second.append(d1 if n == 2 else token)
        assert len(second) > 1000
        assert _chi2(second, p1, 6) > 1e-3, sampler


def test_rank_mass_orders_by_decreasing_probability() -> None:
    dist = SparseDist(np.array([5, 2, 9, 4]), np.array([0.2, 0.4, 0.2, 0.2]))
    assert rank_mass(dist, 2) == pytest.approx((0.0, 0.4, 0.4))
    assert rank_mass(dist, 4) == pytest.approx((0.4, 0.2, 0.4))  # ties by id: 4 < 5 < 9
    assert rank_mass(dist, 5) == pytest.approx((0.6, 0.2, 0.4))
    assert rank_mass(dist, 9) == pytest.approx((0.8, 0.2, 0.4))
    assert rank_mass(dist, 7) == (1.0, 0.0, 0.4)


def test_resolve_seed_keeps_a_seed_and_draws_one_otherwise() -> None:
    assert resolve_seed(SamplingParams(seed=5)).seed == 5
    a, b = resolve_seed(SamplingParams()).seed, resolve_seed(SamplingParams()).seed
    assert a is not None and b is not None and a != b
