"""The statistics of ``outrider verify``: chi-square tail, pooling, homogeneity test, TV, the exact verdict."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from outrider.engine.measure.verify_stats import (
    END,
    IDENTITY_PAIRS,
    OTHER,
    VerifyCollector,
    chi2_sf,
    chi_square_homogeneity,
    derive_seeds,
    first_divergence,
    ks_critical,
    ks_uniform,
    normal_quantile,
    pit_result,
    pooled_table,
    position_counts,
    regularized_gamma_q,
    total_variation,
    verify_jobs,
)


# -- chi-square tail --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dof", [1, 2, 3, 4, 7, 10, 30, 100, 500])
@pytest.mark.parametrize("x", [0.0, 1e-6, 0.3, 1.0, 2.5, 6.0, 15.0, 40.0, 120.0, 700.0])
def test_chi2_sf_matches_scipy(dof: int, x: float) -> None:
    expected = float(stats.chi2.sf(x, dof))
    got = chi2_sf(x, dof)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_chi2_sf_closed_forms() -> None:
    for x in (0.1, 1.0, 3.84, 10.0, 50.0):
        assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-12)  # dof 2: exp(-x/2)
        assert chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-10)  # dof 1: erfc(sqrt(x/2))
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-9)  # the textbook critical value
    assert chi2_sf(0.0, 5) == 1.0 and chi2_sf(-1.0, 5) == 1.0
    assert chi2_sf(math.inf, 3) == 0.0


def test_regularized_gamma_q_edges() -> None:
    assert regularized_gamma_q(1.0, 2.0) == pytest.approx(math.exp(-2.0))
    assert regularized_gamma_q(0.5, 0.0) == 1.0
    with pytest.raises(ValueError):
        regularized_gamma_q(0.0, 1.0)
    with pytest.raises(ValueError):
        chi2_sf(1.0, 0)
    # monotone decreasing in x
    values = [regularized_gamma_q(3.5, x) for x in np.linspace(0, 30, 61)]
    assert all(a >= b for a, b in itertools.pairwise(values))


# -- pooling, test, TV ------------------------------------------------------------------------------------------
def test_pooling_rare_categories_into_other() -> None:
    a = {"1": 40, "2": 30, "3": 2, "4": 1, "5": 3}
    b = {"1": 38, "2": 33, "3": 1, "4": 4, "6": 2}
    table = pooled_table(a, b)
    # expected per row = total/2 for equal rows: "3" (3), "4" (5→2.5), "5" (1.5), "6" (1) are rare → other (13/2)
    assert table == [("1", 40, 38), ("2", 30, 33), (OTHER, 6, 7)]
    assert sum(r[1] for r in table) == sum(a.values()) and sum(r[2] for r in table) == sum(b.values())


def test_pooled_other_too_small_merges_into_smallest_kept() -> None:
    table = pooled_table({"1": 50, "2": 10, "3": 1}, {"1": 50, "2": 10, "3": 2})
    assert table == [("1", 50, 50), (OTHER, 11, 12)]


def test_everything_rare_leaves_one_cell_and_p_one() -> None:
    a = {str(i): 1 for i in range(20)}
    b = {str(i + 100): 1 for i in range(20)}
    assert pooled_table(a, b) == [(OTHER, 20, 20)]
    test = chi_square_homogeneity(a, b)
    assert test.cells == 1 and test.p_value == 1.0 and test.dof == 0


def test_chi_square_matches_scipy_contingency() -> None:
    a = {"7": 50, "8": 30, "9": 20}
    b = {"7": 20, "8": 30, "9": 50}
    test = chi_square_homogeneity(a, b)
    stat, p, dof, _ = stats.chi2_contingency(np.array([[50, 30, 20], [20, 30, 50]]), correction=False)
    assert test.statistic == pytest.approx(stat) and test.dof == dof and test.p_value == pytest.approx(p)


def test_clearly_different_distributions_are_detected() -> None:
    rng = np.random.default_rng(1)
    a = Counter(str(t) for t in rng.choice(4, size=300, p=[0.7, 0.1, 0.1, 0.1]))
    b = Counter(str(t) for t in rng.choice(4, size=300, p=[0.4, 0.2, 0.2, 0.2]))
    assert chi_square_homogeneity(a, b).p_value < 1e-6
    assert total_variation(a, b) > 0.2


def test_identical_distributions_are_not_rejected() -> None:
    same = {"1": 120, "2": 60, "3": 20}
    assert chi_square_homogeneity(same, dict(same)).p_value == pytest.approx(1.0)
    # Two samples of one distribution: p-values are ~uniform, so p < 0.01 happens about 1% of the time.
    rng = np.random.default_rng(7)
    probs = [0.5, 0.2, 0.15, 0.1, 0.03, 0.02]
    small = 0
    for _ in range(300):
        a = Counter(str(t) for t in rng.choice(6, size=200, p=probs))
        b = Counter(str(t) for t in rng.choice(6, size=200, p=probs))
        small += chi_square_homogeneity(a, b).p_value < 0.01
    assert small <= 10  # binomial(300, 0.01): mean 3, P(> 10) < 1e-3


def test_total_variation() -> None:
    assert total_variation({"1": 5}, {"1": 9}) == 0.0
    assert total_variation({"1": 5}, {"2": 5}) == 1.0
    assert total_variation({"1": 3, "2": 1}, {"1": 1, "2": 1}) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        total_variation({}, {"1": 1})


def test_position_counts_pad_with_end() -> None:
    counts = position_counts([[5, 6, 7], [5, 8], [9]], 3)
    assert counts == [{"5": 2, "9": 1}, {END: 1, "6": 1, "8": 1}, {END: 2, "7": 1}]
    assert list(counts[0]) == ["5", "9"]  # ordered by decreasing count


def test_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 4, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # one ended earlier
    assert first_divergence([], []) is None


def test_seeds_are_distinct_stable_and_plan_is_interleaved() -> None:
    seeds = derive_seeds(42, 1000)
    assert len(set(seeds)) == 1000 and all(0 <= s < 2**31 for s in seeds)
    assert derive_seeds(42, 10) == seeds[:10] and derive_seeds(43, 10) != seeds[:10]
    assert derive_seeds(-5, 3) == derive_seeds(-5, 3)
    jobs = verify_jobs(3, 42, "rejection")
    assert [(j.stage, j.plain) for j in jobs[:4]] == [("greedy", False), ("greedy", True), ("sampling", False),
                                                      ("sampling", True)]
    sampling = [j for j in jobs if j.stage == "sampling"]
    assert len(sampling) == 6 and len({j.seed for j in sampling}) == 6
    identity = [j for j in jobs if j.stage == "identity"]
    assert len(identity) == 2 * IDENTITY_PAIRS and len({j.seed for j in identity}) == IDENTITY_PAIRS
    coupled = verify_jobs(3, 42, "coupled")  # a plain sample shares its speculative sample's seed: identity
    assert len(coupled) == 8 and [j.seed for j in coupled[2::2]] == [j.seed for j in coupled[3::2]]
    with pytest.raises(ValueError):
        verify_jobs(0, 1)


# -- the verdict ------------------------------------------------------------------------------------------------
def _collect(spec_probs: list[float], plain_probs: list[float], *, samples: int = 300, tokens: int = 3,
             greedy: tuple[list[int], list[int]] = ([1, 2, 3], [1, 2, 3]), drafted: int = 4,
             seed: int = 0) -> VerifyCollector:
    rng = np.random.default_rng(seed)
    c = VerifyCollector(samples, tokens, seed=seed, sampler="rejection")
    for job in c.jobs:
        if job.stage == "identity":
            c.record(job, [7] * tokens)
            continue
        if job.greedy:
            c.record(job, greedy[1] if job.plain else greedy[0], drafted=0 if job.plain else 3,
                     accepted=0 if job.plain else 2)
            continue
        probs = plain_probs if job.plain else spec_probs
        sample = [int(t) + 10 for t in rng.choice(len(probs), size=tokens, p=probs)]
        c.record(job, sample, drafted=0 if job.plain else drafted, accepted=0 if job.plain else drafted // 2)
    return c


def test_report_exact_and_json_shape() -> None:
    probs = [0.5, 0.3, 0.2]
    report = _collect(probs, probs).report()
    assert report.exact and report.verdict == "exact"
    d = report.to_dict()
    assert set(d) == {"greedy", "sampling", "identity", "exact"}
    assert d["greedy"] == {"identical": True, "first_divergence": None}
    assert set(d["sampling"]) == {"samples", "drafted", "accepted", "sampler", "positions", "pit", "detectable_tv"}
    assert d["identity"] == {"pairs": IDENTITY_PAIRS, "mismatches": []}
    assert d["sampling"]["samples"] == 300 and d["sampling"]["drafted"] == 1200 and d["sampling"]["accepted"] == 600
    assert [p["position"] for p in d["sampling"]["positions"]] == [0, 1, 2]
    for p in d["sampling"]["positions"]:
        assert set(p) == {"position", "speculative", "plain", "p_value", "tv"}
        assert sum(p["speculative"].values()) == sum(p["plain"].values()) == 300
        assert all(isinstance(k, str) and isinstance(v, int) for k, v in p["speculative"].items())
        assert 0.0 <= p["p_value"] <= 1.0 and 0.0 <= p["tv"] <= 1.0
    assert report.min_p_value > report.threshold == pytest.approx(0.01 / 2 / 3)
    assert "EXACT" in report.explanation() and "1200 draft tokens were verified" in report.explanation()


def test_report_detects_skewed_sampling() -> None:
    report = _collect([0.7, 0.2, 0.1], [0.5, 0.3, 0.2]).report()
    assert not report.exact and report.verdict == "not exact"
    assert report.rejected == [0, 1, 2]
    assert report.to_dict()["exact"] is False
    assert "NOT EXACT" in report.explanation() and "position(s) 0, 1, 2" in report.explanation()


def test_report_greedy_divergence_is_not_exact() -> None:
    probs = [0.5, 0.3, 0.2]
    report = _collect(probs, probs, greedy=([1, 2, 3], [1, 5, 3])).report()
    assert report.verdict == "not exact" and report.first_divergence == 1
    assert report.to_dict()["greedy"] == {"identical": False, "first_divergence": 1}
    assert "diverges from plain decoding at token 1" in report.explanation()


def test_nothing_drafted_is_inconclusive() -> None:
    probs = [0.5, 0.3, 0.2]
    report = _collect(probs, probs, drafted=0).report()
    assert report.verdict == "inconclusive" and not report.exact
    assert "INCONCLUSIVE" in report.explanation() and "nothing was drafted" in report.explanation()


def test_nothing_compared_is_inconclusive() -> None:
    probs = [1 / 200] * 200  # every token rare: all pooled into one cell
    report = _collect(probs, probs, samples=20).report()
    assert report.compared == 0 and report.verdict == "inconclusive"


def test_bonferroni_threshold_uses_all_positions() -> None:
    c = VerifyCollector(10, 50, seed=0, alpha=0.05)
    assert c.total == 22
    report = c.report()
    assert report.threshold == pytest.approx(0.0005) and report.pit_threshold == pytest.approx(0.05 / 6)
    with pytest.raises(ValueError):
        VerifyCollector(10, 5, seed=0, alpha=1.5)
    with pytest.raises(ValueError):
        VerifyCollector(10, 0, seed=0)


def test_end_category_keeps_short_samples_comparable() -> None:
    c = VerifyCollector(2, 3, seed=0, sampler="rejection")
    for job in c.jobs:
        c.record(job, [4] if job.plain else [4, 5, 6], drafted=1)
    report = c.report()
    assert report.first_divergence == 1  # greedy: plain ended after one token
    assert report.positions[2].speculative == {"6": 2} and report.positions[2].plain == {END: 2}
    assert report.positions[2].tv == 1.0


# -- against the target's exact distribution (PIT) ---------------------------------------------------------------
@pytest.mark.parametrize("n", [5, 40, 1000])
def test_ks_matches_scipy(n: int) -> None:
    rng = np.random.default_rng(n)
    for values in (rng.random(n), rng.random(n) ** 1.3):
        d, p = ks_uniform(values.tolist())
        want = stats.kstest(values, "uniform")
        assert d == pytest.approx(want.statistic)
        assert p == pytest.approx(want.pvalue, abs=0.02 if n < 10 else 0.005)
    assert ks_uniform([0.5])[0] == pytest.approx(0.5)
    crit = ks_critical(1000, 0.01)
    assert stats.kstwo.sf(crit, 1000) == pytest.approx(0.01, rel=0.05)
    assert normal_quantile(0.975) == pytest.approx(1.959964, abs=1e-5)


def _scores(rng: np.random.Generator, n_samples: int, tokens: int, *, bias: float = 0.0,
            towards_draft: float = 0.0) -> list[list[tuple[float, ...]]]:
    """Token scores of a sampler drawing from p (``bias`` > 0: from p sharpened by 1 + bias; ``towards_draft``: that
    share of tokens copied from the draft's point-mass proposal), as ``Engine.score`` reports them."""
    out = []
    for _ in range(n_samples):
        rows = []
        for _ in range(tokens):
            p = np.sort(rng.dirichlet(np.ones(6) * 0.7))[::-1]
            proposal = int(rng.choice(6, p=p))  # a lookup-like proposal: d ~ p, then a point mass
            drawn = p ** (1 + bias)
            drawn /= drawn.sum()
            x = proposal if rng.random() < towards_draft else int(rng.choice(6, p=drawn))
            pd = float(p[proposal])
            rows.append((float(p[:x].sum()), float(p[x]), float(p[0]), float(x == proposal), pd, pd * (1 - pd)))
        out.append(rows)
    return out


def test_pit_of_a_correct_sampler_is_uniform_and_states_its_power() -> None:
    rng = np.random.default_rng(1)
    result = pit_result(_scores(rng, 400, 16), list(range(400)), 0.01)
    assert result is not None and result.values == 6400 and result.outside == 0
    assert result.ks_p > 0.01 and result.top_p > 0.01 and result.draft_p > 0.01
    assert result.draft_positions == 6400
    assert 0.02 < result.detectable_tv < 0.04  # ≈ (1.73 + 0.64) / sqrt(6400)
    assert pit_result([], [], 0.01) is None


@pytest.mark.parametrize(("bias", "towards", "test"), [(0.3, 0.0, "top_p"), (0.0, 0.08, "draft_p")])
def test_pit_catches_a_biased_sampler(bias: float, towards: float, test: str) -> None:
    """A sharper distribution than the target's shows in the top-token test; copying the draft's proposal 8 % of
    the time shows in the draft-direction test (mutation: with the draft rows' variance set to -1, i.e. the draft
    test disabled, the second case passed as exact)."""
    rng = np.random.default_rng(2)
    result = pit_result(_scores(rng, 400, 16, bias=bias, towards_draft=towards), list(range(400)), 0.01)
    assert result is not None and getattr(result, test) < 0.01 / 6


def _coupled(spec_tokens: list[int], plain_tokens: list[int], scores: list[tuple[float, ...]]) -> VerifyCollector:
    c = VerifyCollector(20, 3, seed=0, sampler="coupled")
    for job in c.jobs:
        if job.greedy:
            c.record(job, [1, 2, 3], drafted=0 if job.plain else 3)
        else:
            c.record(job, plain_tokens if job.plain else spec_tokens, drafted=0 if job.plain else 2,
                     scores=None if job.plain else scores)
    return c


def test_coupled_pairs_must_be_identical_and_tokens_inside_the_support() -> None:
    good = [(0.0, 0.5, 0.5, 0.0, 0.0, -1.0), (0.5, 0.3, 0.5, 0.0, 0.0, -1.0), (0.8, 0.2, 0.5, 0.0, 0.0, -1.0)]
    report = _coupled([4, 5, 6], [4, 5, 6], good).report()
    assert report.identity_pairs == 20 and not report.identity_mismatches
    assert report.verdict != "not exact"
    report = _coupled([4, 5, 6], [4, 9, 6], good).report()
    assert report.verdict == "not exact" and len(report.identity_mismatches) == 20
    assert "20 of 20 coupled pairs differ with and without drafting" in report.explanation()
    one_off = _coupled([4, 5, 6], [4, 5, 6], good)
    one_off.record(next(j for j in one_off.jobs if j.stage == "sampling" and j.plain), [4, 5, 7])
    report = one_off.report()  # one pair of 20 differs: float rounding at a filter threshold, not a sampler bug
    assert report.identity_mismatches and not report.identity_failed and report.verdict != "not exact"
    outside = [good[0], (1.0, 0.0, 0.5, 0.0, 0.0, -1.0), good[2]]
    report = _coupled([4, 5, 6], [4, 5, 6], outside).report()
    assert report.verdict == "not exact" and report.pit is not None and report.pit.outside == 20
    assert "probability 0 under the target's filters" in report.explanation()
