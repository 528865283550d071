"""The statistics of ``outrider verify`` (and the GUI's "Verify exactness"): is speculative decoding of *this* pair
exact — identical to plain decoding at temperature 0, and identical in distribution above it?

Pure functions and small data classes, no llama_cpp, no Qt: the terminal command and the GUI both drive the
engine through the same plan (:func:`verify_jobs`), feed every finished generation to a :class:`VerifyCollector`
and read one :class:`VerifyReport`, so they can never disagree.

The decisive test compares every sampled token with the target's *exact* conditional distribution at its position:
the engine re-evaluates each speculative sample's prefix plainly (``Engine.score``) and gives, for the token x at
position j, the mass F of the tokens ranked before it (by decreasing probability, with the request's filters and
temperature), its probability p(x) and the top probability. The randomised probability-integral transform
u = F + V·p(x), V uniform, is exactly uniform on (0, 1) for a correct sampler, and the u of one sample's positions are
independent (Rosenblatt's transform of a sequence drawn from its own conditionals), so all N × M of them are pooled:

* a Kolmogorov–Smirnov test of uniformity of the pooled u (any bias that moves mass along the target's ranking);
* a z-test of how often the target's likeliest token was drawn against the sum of its probabilities;
* the draft-direction z-test: Σ q(x) against Σ E_p[q] (q the draft's proposal distribution at the position,
  recomputed from the prefix: a draft model's, or the point mass of prompt lookup's proposal) — the direction
  almost every speculative-sampling bug takes is towards (or away from) what the draft proposes;
* a token the target gives probability 0 (outside its filters) fails outright.

Also, per position j of the M tokens: a chi-square two-sample homogeneity test of the speculative and plain token
counts (categories with expected count below 5 pooled into ``other``), and the total-variation distance between the
two empirical distributions (descriptive). With the coupled sampler each plain sample has the same seed as its
speculative one and must be the same tokens (per-seed identity: drafter invariance); with the rejection sampler a
few extra coupled pairs check the same identity.

Decision ("exact") at the family-wise level ``alpha`` (Bonferroni): the greedy outputs are identical, the coupled
pairs are identical and no token lies outside the target's support (up to float rounding: ``IDENTITY_SLACK``,
``OUTSIDE_SLACK``), the KS, top-token and draft-direction p-values
each exceed alpha / 6, and no position's chi-square p-value is at or below alpha / (2 M); and the sampling stage
really drafted something (drafted > 0): with nothing drafted the speculative runs *were* plain decoding and prove
nothing ("inconclusive").
``detectable_tv`` is the smallest shift of the ranked cumulative distribution the KS test catches with power 0.9 at
this sample size: "no bias larger than TV d along the target's ranking". Samples run through end-of-generation
tokens (``TextRequest.ignore_eos``), so every sample has exactly M positions and none is cut where a value decides.
The chi-square and Kolmogorov tails are computed here, scipy is not needed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

END = "<end>"  # the category of a position a sample did not reach (it ended with an end-of-generation token)
OTHER = "other"  # the pooled cell of rare categories (chi-square only; reported counts are never pooled)
MIN_EXPECTED = 5.0
DEFAULT_ALPHA = 0.01

Stage = Literal["greedy", "sampling", "identity"]
Verdict = Literal["exact", "not exact", "inconclusive"]


# ======================================================================================= chi-square tail ==
def regularized_gamma_q(a: float, x: float) -> float:
    """Q(a, x) = Γ(a, x) / Γ(a), the regularised upper incomplete gamma function (a > 0, x >= 0).

    A series for x < a + 1, a continued fraction (modified Lentz) otherwise; relative accuracy ~1e-14.
    """
    if not a > 0 or math.isnan(x):
        raise ValueError(f"regularized_gamma_q needs a > 0 and a number x, got a={a!r}, x={x!r}")
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    log_prefactor = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # P(a, x) by its series, Q = 1 - P
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefactor))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        if abs(d) < tiny:
            d = tiny
        c = b + an / c
        if abs(c) < tiny:
            c = tiny
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return min(1.0, math.exp(log_prefactor) * h)


def chi2_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X ~ chi-square with ``dof`` degrees of freedom (dof >= 1)."""
    if dof < 1:
        raise ValueError(f"chi-square needs at least one degree of freedom, got {dof}")
    return regularized_gamma_q(dof / 2.0, max(0.0, statistic) / 2.0)


# ============================================================================= uniformity (PIT) tests ==
def kolmogorov_sf(x: float) -> float:
    """P(K > x) for the Kolmogorov distribution (the limit of sqrt(n) · D_n): 2 Σ (-1)^(k-1) exp(-2 k² x²)."""
    if x <= 0.0:
        return 1.0
    if x < 0.2:  # the series converges slowly here; the value is 1 to 15 digits
        return 1.0
    total = 0.0
    for k in range(1, 200):
        term = math.exp(-2.0 * k * k * x * x)
        total += term if k % 2 else -term
        if term < 1e-17:
            break
    return min(1.0, max(0.0, 2.0 * total))


def ks_uniform(values: Sequence[float]) -> tuple[float, float]:
    """(D, p-value) of the one-sample Kolmogorov–Smirnov test that ``values`` are uniform on (0, 1) (Stephens'
    small-sample correction of the asymptotic tail: within 0.02 of the exact p for n >= 5, within 0.005 from n = 40;
    verify pools thousands)."""
    n = len(values)
    if n == 0:
        raise ValueError("the KS test needs at least one value")
    ordered = sorted(values)
    d = max(max((i + 1) / n - u, u - i / n) for i, u in enumerate(ordered))
    root = math.sqrt(n)
    return d, kolmogorov_sf((root + 0.12 + 0.11 / root) * d)


def ks_critical(n: int, alpha: float) -> float:
    """The D at which :func:`ks_uniform`'s p-value equals ``alpha`` for ``n`` values (bisection)."""
    root = math.sqrt(n)
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if kolmogorov_sf((root + 0.12 + 0.11 / root) * mid) > alpha:
            low = mid
        else:
            high = mid
    return high


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def normal_quantile(p: float) -> float:
    """z with P(Z <= z) = p (bisection on :func:`normal_sf`; 0 < p < 1)."""
    low, high = -40.0, 40.0
    for _ in range(100):
        mid = (low + high) / 2
        if 1.0 - normal_sf(mid) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


POWER = 0.9  # the power at which ``detectable_tv`` is stated
PIT_TESTS = 6  # alpha / PIT_TESTS for each pooled test (KS, top token, draft direction: half of alpha together)


@dataclasses.dataclass(frozen=True)
class PitResult:
    """The pooled probability-integral-transform tests of the speculative samples."""

    values: int  # u values pooled (N samples × M positions)
    ks_d: float
    ks_p: float
    top_drawn: int  # how often the target's likeliest token was drawn
    top_expected: float  # Σ of its probability over the positions
    top_p: float  # two-sided p-value of the top-token z-test
    draft_z: float  # the draft-direction z (positive: the output leans towards the draft's proposals)
    draft_p: float  # its two-sided p-value (1.0 without a draft distribution)
    draft_positions: int  # positions with a draft distribution
    outside: int  # tokens the target gives probability 0
    detectable_tv: float  # KS: the ranked-CDF shift caught with power POWER at level alpha / 6
    detectable_top: float  # z-test: the mean shift of the top token's probability caught with power POWER

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def pit_result(scores: Sequence[Sequence[Sequence[float]]], seeds: Sequence[int],
               alpha: float) -> PitResult | None:
    """The tests of :class:`PitResult` over each sample's token scores ``(mass before, probability, top, q(x),
    E_p[q], Var_p[q])`` (``Engine.score``; Var < 0: no draft distribution there); the randomisation V of sample i
    comes from ``seeds[i]`` (reproducible reports). None without any score."""
    values: list[float] = []
    drawn = 0
    expected = variance = 0.0
    outside = 0
    q_sum = q_mean = q_var = 0.0
    q_positions = 0
    for sample, seed in zip(scores, seeds, strict=True):
        jitter = random.Random(f"outrider-verify-pit:{seed}")
        for row in sample:
            below, prob, top = row[0], row[1], row[2]
            v = jitter.random()
            if len(row) >= 6 and row[5] >= 0.0:
                q_sum, q_mean, q_var, q_positions = q_sum + row[3], q_mean + row[4], q_var + row[5], q_positions + 1
            if prob <= 0.0:
                outside += 1
                continue
            values.append(min(1.0, below + v * prob))
            drawn += int(below <= 0.0)
            expected += top
            variance += top * (1.0 - top)
    if not values:
        return None
    d, p_ks = ks_uniform(values)
    n = len(values)
    z = (drawn - expected) / math.sqrt(variance) if variance > 0 else 0.0
    p_top = min(1.0, 2.0 * normal_sf(abs(z))) if variance > 0 else 1.0
    z_draft = (q_sum - q_mean) / math.sqrt(q_var) if q_var > 0 else 0.0
    p_draft = min(1.0, 2.0 * normal_sf(abs(z_draft))) if q_var > 0 else 1.0
    z_power = normal_quantile(POWER)
    detect_ks = ks_critical(n, alpha / PIT_TESTS) + z_power * 0.5 / math.sqrt(n)  # an empirical CDF's sd <= 0.5/√n
    detect_top = (normal_quantile(1 - alpha / PIT_TESTS / 2) + z_power) * math.sqrt(max(variance, 1e-12)) / n
    return PitResult(n, d, p_ks, drawn, expected, p_top, z_draft, p_draft, q_positions, outside, detect_ks,
                     detect_top)


# ===================================================================================== two-sample tests ==
def pooled_table(a: Mapping[str, int], b: Mapping[str, int],
                 min_expected: float = MIN_EXPECTED) -> list[tuple[str, int, int]]:
    """The 2×c contingency table of two count maps, ``(category, count in a, count in b)`` per cell.

    Categories whose smaller expected count (under homogeneity) is below ``min_expected`` are pooled into one
    ``other`` cell; if that cell is itself still too small it is merged into the smallest kept category.
    Cells are ordered by decreasing total count (ties by name), ``other`` last.
    """
    na, nb = sum(a.values()), sum(b.values())
    n = na + nb
    if n == 0:
        return []
    small_row = min(na, nb)
    cats = sorted(set(a) | set(b), key=lambda c: (-(a.get(c, 0) + b.get(c, 0)), c))
    kept: list[tuple[str, int, int]] = []
    rare_a = rare_b = 0
    for c in cats:
        ca, cb = a.get(c, 0), b.get(c, 0)
        if small_row * (ca + cb) / n >= min_expected:
            kept.append((c, ca, cb))
        else:
            rare_a += ca
            rare_b += cb
    if rare_a + rare_b:
        if not kept or small_row * (rare_a + rare_b) / n >= min_expected:
            kept.append((OTHER, rare_a, rare_b))
        else:
            _name, la, lb = kept.pop()
            kept.append((OTHER, la + rare_a, lb + rare_b))
    return kept


@dataclasses.dataclass(frozen=True)
class ChiSquare:
    statistic: float
    dof: int
    p_value: float
    cells: int


def chi_square_homogeneity(a: Mapping[str, int], b: Mapping[str, int],
                           min_expected: float = MIN_EXPECTED) -> ChiSquare:
    """Pearson's chi-square test that two samples of counts come from the same distribution (after pooling).

    With a single cell left (both samples concentrated on one category, or everything rare) there is nothing to
    compare: statistic 0, p-value 1.
    """
    if sum(a.values()) == 0 or sum(b.values()) == 0:
        raise ValueError("both samples need at least one observation")
    table = pooled_table(a, b, min_expected)
    if len(table) < 2:
        return ChiSquare(0.0, 0, 1.0, len(table))
    na, nb = sum(r[1] for r in table), sum(r[2] for r in table)
    n = na + nb
    stat = 0.0
    for _cat, ca, cb in table:
        col = ca + cb
        for observed, row in ((ca, na), (cb, nb)):
            expected = row * col / n
            stat += (observed - expected) ** 2 / expected
    dof = len(table) - 1
    return ChiSquare(stat, dof, chi2_sf(stat, dof), len(table))


def total_variation(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    """½ Σ |a(c)/|a| − b(c)/|b||: the total-variation distance between two empirical distributions (0..1)."""
    na, nb = sum(a.values()), sum(b.values())
    if na == 0 or nb == 0:
        raise ValueError("both samples need at least one observation")
    return 0.5 * sum(abs(a.get(c, 0) / na - b.get(c, 0) / nb) for c in set(a) | set(b))


def position_counts(samples: Iterable[Sequence[int]], positions: int) -> list[dict[str, int]]:
    """Per position 0..positions-1, the count of each token id (as a string) over ``samples``; ``<end>`` where a
    sample is shorter than ``positions``. Maps are ordered by decreasing count."""
    counters: list[Counter[str]] = [Counter() for _ in range(positions)]
    for sample in samples:
        for j in range(positions):
            counters[j][str(sample[j]) if j < len(sample) else END] += 1
    return [dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for c in counters]


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two token sequences differ (a shorter one differs where it ends), or None."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# ================================================================================================ plan ==
def derive_seeds(seed: int, count: int) -> list[int]:
    """``count`` distinct non-negative 31-bit seeds derived from ``seed`` (stable across runs and platforms)."""
    out: list[int] = []
    seen: set[int] = set()
    i = 0
    while len(out) < count:
        digest = hashlib.blake2b(f"outrider-verify:{seed}:{i}".encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little") & 0x7FFF_FFFF
        i += 1
        if value not in seen:
            seen.add(value)
            out.append(value)
    return out


IDENTITY_PAIRS = 10  # coupled-sampler identity pairs added to a check of the rejection sampler
# Float rounding: llama.cpp evaluates a verification batch with other kernels than a one-token step, so a logit can
# differ in its last bits between the speculative and the plain run (and the re-scoring pass). Where a filter
# threshold or a Gumbel near-tie falls within that rounding, the two runs may differ at one position (seen on the
# peaked tiny pair: at most 1 of 400 coupled pairs of 16 tokens, and a plain token just outside the re-scored
# top-p cut). A sampler bug differs on a large share (always-accept: 80-93 % of pairs), so the check allows this many:
IDENTITY_SLACK = 0.02  # share of coupled pairs that may differ (at least one pair)
OUTSIDE_SLACK = 0.001  # share of sampled tokens the re-scoring may put outside the filters (at least one)


@dataclasses.dataclass(frozen=True)
class VerifyJob:
    """One generation of the check: ``stage`` greedy (temperature 0), sampling (the user's settings) or identity
    (the user's settings with the coupled sampler: speculative and plain with one seed must give the same tokens)."""

    stage: Stage
    plain: bool
    index: int
    seed: int

    @property
    def greedy(self) -> bool:
        return self.stage == "greedy"


def verify_jobs(samples: int, seed: int, sampler: str = "coupled") -> list[VerifyJob]:
    """The generations, in order: greedy speculative and plain, then ``samples`` speculative/plain pairs
    (interleaved, so that anything drifting hits both alike), each sample with its own seed — with the coupled
    sampler a pair shares its seed (per-seed identity); with the rejection sampler ``IDENTITY_PAIRS`` coupled
    identity pairs follow."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    jobs = [VerifyJob("greedy", False, 0, seed), VerifyJob("greedy", True, 0, seed)]
    seeds = derive_seeds(seed, 2 * samples + IDENTITY_PAIRS)
    paired = sampler == "coupled"
    for i in range(samples):
        jobs.append(VerifyJob("sampling", False, i, seeds[2 * i]))
        jobs.append(VerifyJob("sampling", True, i, seeds[2 * i + (0 if paired else 1)]))
    if not paired:
        for i in range(IDENTITY_PAIRS):
            jobs.append(VerifyJob("identity", False, i, seeds[2 * samples + i]))
            jobs.append(VerifyJob("identity", True, i, seeds[2 * samples + i]))
    return jobs


# ============================================================================================== report ==
@dataclasses.dataclass(frozen=True)
class PositionResult:
    position: int
    speculative: dict[str, int]
    plain: dict[str, int]
    p_value: float
    tv: float
    cells: int  # chi-square cells after pooling (1: nothing to compare at this position)

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, "speculative": dict(self.speculative), "plain": dict(self.plain),
                "p_value": self.p_value, "tv": self.tv}


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """Everything the check found. ``to_dict`` is the ``outrider verify --json`` object (a contract)."""

    greedy_identical: bool
    first_divergence: int | None
    greedy_tokens: int  # tokens the greedy speculative run produced
    greedy_drafted: int
    greedy_accepted: int
    samples: int
    tokens: int  # positions compared (M)
    drafted: int  # sampling stage, speculative runs: draft tokens the target verified
    accepted: int
    positions: tuple[PositionResult, ...]
    alpha: float
    pit: PitResult | None = None
    identity_pairs: int = 0  # coupled pairs compared (same seed, with and without drafting)
    identity_mismatches: tuple[int, ...] = ()  # indices of the pairs whose tokens differ
    sampler: str = "coupled"

    @property
    def threshold(self) -> float:
        """The per-position p-value a position must exceed (Bonferroni: half of alpha over the M positions)."""
        return self.alpha / 2 / max(1, self.tokens)

    @property
    def pit_threshold(self) -> float:
        """The p-value each pooled test must exceed (a sixth of alpha each: half of alpha for the three)."""
        return self.alpha / PIT_TESTS

    @property
    def pit_failures(self) -> list[str]:
        """What the pooled tests against the target's exact distribution found (empty: nothing)."""
        pit = self.pit
        if pit is None:
            return []
        out = []
        if pit.outside > max(1, OUTSIDE_SLACK * (pit.values + pit.outside)):
            out.append(f"{pit.outside} sampled token(s) have probability 0 under the target's filters")
        if pit.ks_p <= self.pit_threshold:
            out.append(f"the pooled PIT values are not uniform (KS D {pit.ks_d:.3f}, p {pit.ks_p:.3g})")
        if pit.top_p <= self.pit_threshold:
            out.append(f"the target's likeliest token was drawn {pit.top_drawn} times where {pit.top_expected:.1f} "
                       f"are expected (p {pit.top_p:.3g})")
        if pit.draft_p <= self.pit_threshold:
            way = "towards" if pit.draft_z > 0 else "away from"
            out.append(f"the sampled tokens lean {way} the draft's proposals (z {pit.draft_z:+.1f}, p "
                       f"{pit.draft_p:.3g}, over {pit.draft_positions} positions)")
        return out

    @property
    def min_p_value(self) -> float:
        return min((p.p_value for p in self.positions), default=1.0)

    @property
    def max_tv(self) -> float:
        return max((p.tv for p in self.positions), default=0.0)

    @property
    def rejected(self) -> list[int]:
        """Positions whose p-value is at or below the family-wise threshold."""
        return [p.position for p in self.positions if p.p_value <= self.threshold]

    @property
    def compared(self) -> int:
        """Positions where the chi-square test had at least two cells to compare."""
        return sum(1 for p in self.positions if p.cells >= 2)

    @property
    def identity_failed(self) -> bool:
        """More coupled pairs differ than float rounding explains (``IDENTITY_SLACK``)."""
        return len(self.identity_mismatches) > max(1, IDENTITY_SLACK * self.identity_pairs)

    @property
    def verdict(self) -> Verdict:
        if not self.greedy_identical or self.rejected or self.pit_failures or self.identity_failed:
            return "not exact"
        if self.drafted == 0 or (self.compared == 0 and self.pit is None):
            return "inconclusive"
        return "exact"

    @property
    def exact(self) -> bool:
        return self.verdict == "exact"

    def to_dict(self) -> dict[str, Any]:
        return {
            "greedy": {"identical": self.greedy_identical, "first_divergence": self.first_divergence},
            "sampling": {"samples": self.samples, "drafted": self.drafted, "accepted": self.accepted,
                         "sampler": self.sampler, "positions": [p.to_dict() for p in self.positions],
                         "pit": self.pit.to_dict() if self.pit is not None else None,
                         "detectable_tv": self.pit.detectable_tv if self.pit is not None else None},
            "identity": {"pairs": self.identity_pairs, "mismatches": list(self.identity_mismatches)},
            "exact": self.exact,
        }

    def explanation(self) -> str:
        """The verdict in words: what was checked, the outcome and how many draft tokens were really verified."""
        what = (f"greedy output over {self.tokens} tokens, and {self.samples} speculative vs {self.samples} plain "
                f"samples of {self.tokens} tokens ({self.sampler} sampler; every sampled token against the target's "
                f"exact distribution, chi-square per position; family-wise α = {self.alpha:g})")
        if self.identity_pairs:
            what += f"; {self.identity_pairs} coupled pairs (same seed, with and without drafting) compared"
        power = ""
        if self.pit is not None:
            power = (f" No bias larger than TV {self.pit.detectable_tv:.3f} along the target's ranking at this "
                     f"sample size ({self.pit.values} tokens; power {POWER:g}), and no shift of the likeliest "
                     f"token's probability larger than {self.pit.detectable_top:.3f}.")
        verified = (f"{self.drafted} draft tokens were verified by the target at the sampling stage, "
                    f"{self.accepted} accepted")
        if self.verdict == "inconclusive":
            if self.drafted == 0:
                why = ("nothing was drafted while sampling, so the speculative runs were plain decoding and prove "
                       "nothing (raise --k, lower --draft-p-min/--draft-min, or use another prompt)")
            else:
                why = ("no position had two tokens frequent enough to compare (every sampled token was rare or all "
                       "samples agreed): raise --samples or lower --top-k")
            return f"INCONCLUSIVE — {why}. Checked: {what}."
        reasons = []
        if not self.greedy_identical:
            reasons.append(f"the greedy output diverges from plain decoding at token {self.first_divergence}")
        if self.rejected:
            where = ", ".join(str(j) for j in self.rejected)
            reasons.append(f"the token distribution differs from plain sampling at position(s) {where} "
                           f"(min p-value {self.min_p_value:.3g}, max TV {self.max_tv:.3f})")
        reasons += self.pit_failures
        if self.identity_failed:
            reasons.append(f"{len(self.identity_mismatches)} of {self.identity_pairs} coupled pairs differ with and "
                           f"without drafting (same seed)")
        if reasons:
            return f"NOT EXACT — {'; '.join(reasons)}. Checked: {what}; {verified}."
        notes = ""
        if self.compared < len(self.positions):
            notes += (f" {len(self.positions) - self.compared} of {len(self.positions)} positions had too few "
                      f"repeated tokens to compare.")
        if self.greedy_drafted == 0:
            notes += " The greedy stage drafted nothing, so its identity is trivial."
        pit = self.pit
        tests = (f"KS p {pit.ks_p:.3g}, top-token p {pit.top_p:.3g}, draft-direction p {pit.draft_p:.3g}, "
                 if pit is not None else "")
        return (f"EXACT — greedy output identical, sampled tokens follow the target's distribution ({tests}min "
                f"per-position p-value {self.min_p_value:.3g}, max TV {self.max_tv:.3f}). Checked: {what}; "
                f"{verified}.{power}{notes}")


class VerifyCollector:
    """Collects the finished generations of :func:`verify_jobs` and computes the :class:`VerifyReport`."""

    def __init__(self, samples: int, tokens: int, seed: int, alpha: float = DEFAULT_ALPHA,
                 sampler: str = "coupled") -> None:
        if tokens < 1:
            raise ValueError(f"tokens must be at least 1, got {tokens}")
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.samples = samples
        self.tokens = tokens
        self.alpha = alpha
        self.sampler = sampler
        self.jobs = verify_jobs(samples, seed, sampler)
        self._scores: list[list[tuple[float, ...]]] = []
        self._score_seeds: list[int] = []
        self._pairs: dict[tuple[Stage, int], dict[bool, list[int]]] = {}
        self._greedy: dict[bool, list[int]] = {}
        self._greedy_drafted = self._greedy_accepted = 0
        self._sampled: dict[bool, list[list[int]]] = {False: [], True: []}
        self.drafted = 0
        self.accepted = 0

    @property
    def done(self) -> int:
        """Generations recorded so far."""
        identity = sum(len(v) for (stage, _), v in self._pairs.items() if stage == "identity")
        return len(self._greedy) + len(self._sampled[False]) + len(self._sampled[True]) + identity

    @property
    def total(self) -> int:
        return len(self.jobs)

    def record(self, job: VerifyJob, tokens: Sequence[int], *, drafted: int = 0, accepted: int = 0,
               scores: Sequence[Sequence[float]] | None = None) -> None:
        """One finished generation of ``job``: its emitted token ids, its stats' drafted/accepted counts and, for
        a speculative sampling job, the target's ``scores`` of its tokens (``Engine.score``)."""
        ids = [int(t) for t in tokens[: self.tokens]]
        if job.stage != "greedy" and (job.stage == "identity" or self.sampler == "coupled"):
            self._pairs.setdefault((job.stage, job.index), {})[job.plain] = ids
        if job.stage == "identity":
            return
        if scores is not None and not job.plain:
            self._scores.append([tuple(float(x) for x in row) for row in scores[: self.tokens]])
            self._score_seeds.append(job.seed)
        if job.greedy:
            self._greedy[job.plain] = ids
            if not job.plain:
                self._greedy_drafted, self._greedy_accepted = drafted, accepted
            return
        self._sampled[job.plain].append(ids)
        if not job.plain:
            self.drafted += drafted
            self.accepted += accepted

    def report(self) -> VerifyReport:
        """The report of every generation recorded (all of :attr:`jobs` for a complete check)."""
        spec_g, plain_g = self._greedy.get(False, []), self._greedy.get(True, [])
        divergence = first_divergence(spec_g, plain_g)
        positions: list[PositionResult] = []
        if self._sampled[False] and self._sampled[True]:
            spec_counts = position_counts(self._sampled[False], self.tokens)
            plain_counts = position_counts(self._sampled[True], self.tokens)
            for j, (s, p) in enumerate(zip(spec_counts, plain_counts, strict=True)):
                test = chi_square_homogeneity(s, p)
                positions.append(PositionResult(j, s, p, test.p_value, total_variation(s, p), test.cells))
        complete = [(key, pair) for key, pair in sorted(self._pairs.items()) if len(pair) == 2]
        mismatches = tuple(index for (_stage, index), pair in complete if pair[False] != pair[True])
        return VerifyReport(
            greedy_identical=divergence is None, first_divergence=divergence, greedy_tokens=len(spec_g),
            greedy_drafted=self._greedy_drafted, greedy_accepted=self._greedy_accepted,
            samples=min(len(self._sampled[False]), len(self._sampled[True])), tokens=self.tokens,
            drafted=self.drafted, accepted=self.accepted, positions=tuple(positions), alpha=self.alpha,
            pit=pit_result(self._scores, self._score_seeds, self.alpha), identity_pairs=len(complete),
            identity_mismatches=mismatches, sampler=self.sampler,
        )
