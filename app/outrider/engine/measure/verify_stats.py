"""The statistics of ``outrider verify`` (and the GUI's "Verify exactness"): is speculative decoding of *this* pair
exact — identical to plain decoding at temperature 0, and identical in distribution above it?

Pure functions and small data classes, no llama_cpp, no Qt: the terminal command and the GUI both drive the
engine through the same plan (:func:`verify_jobs`), feed every finished generation to a :class:`VerifyCollector`
and read one :class:`VerifyReport`, so they can never disagree.

The test, per position j of the M generated tokens (a sample that ended early — an end-of-generation token —
shows the category ``<end>`` at the positions it did not reach, so every sample has exactly M observations):

* a chi-square two-sample homogeneity test of the speculative and plain token counts at j, after pooling the
  categories whose expected count is below 5 into one ``other`` cell (the usual validity rule);
* the total-variation distance between the two empirical distributions at j (descriptive, not part of the rule).

Decision ("exact"): the greedy outputs are identical, no position rejects homogeneity at the family-wise level
``alpha`` (Bonferroni: every p-value > alpha / M), and the sampling stage really drafted something (drafted > 0).
With nothing drafted the speculative runs *were* plain decoding, so the check proves nothing: "inconclusive" —
as it is when no position had two cells left to compare after pooling.
The chi-square survival function is computed here (regularised upper incomplete gamma), scipy is not needed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

END = "<end>"  # the category of a position a sample did not reach (it ended with an end-of-generation token)
OTHER = "other"  # the pooled cell of rare categories (chi-square only; reported counts are never pooled)
MIN_EXPECTED = 5.0
DEFAULT_ALPHA = 0.01

Stage = Literal["greedy", "sampling"]
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


@dataclasses.dataclass(frozen=True)
class VerifyJob:
    """One generation of the check: ``stage`` greedy (temperature 0) or sampling (the user's settings)."""

    stage: Stage
    plain: bool
    index: int
    seed: int

    @property
    def greedy(self) -> bool:
        return self.stage == "greedy"


def verify_jobs(samples: int, seed: int) -> list[VerifyJob]:
    """The generations, in order: greedy speculative and plain, then ``samples`` speculative/plain pairs
    (interleaved, so that anything drifting hits both alike), each sample with its own seed."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    jobs = [VerifyJob("greedy", False, 0, seed), VerifyJob("greedy", True, 0, seed)]
    seeds = derive_seeds(seed, 2 * samples)
    for i in range(samples):
        jobs.append(VerifyJob("sampling", False, i, seeds[2 * i]))
        jobs.append(VerifyJob("sampling", True, i, seeds[2 * i + 1]))
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

    @property
    def threshold(self) -> float:
        """The per-position p-value a position must exceed (Bonferroni over the M positions)."""
        return self.alpha / max(1, self.tokens)

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
    def verdict(self) -> Verdict:
        if not self.greedy_identical or self.rejected:
            return "not exact"
        if self.drafted == 0 or self.compared == 0:
            return "inconclusive"
        return "exact"

    @property
    def exact(self) -> bool:
        return self.verdict == "exact"

    def to_dict(self) -> dict[str, Any]:
        return {
            "greedy": {"identical": self.greedy_identical, "first_divergence": self.first_divergence},
            "sampling": {"samples": self.samples, "drafted": self.drafted, "accepted": self.accepted,
                         "positions": [p.to_dict() for p in self.positions]},
            "exact": self.exact,
        }

    def explanation(self) -> str:
        """The verdict in words: what was checked, the outcome and how many draft tokens were really verified."""
        what = (f"greedy output over {self.tokens} tokens, and {self.samples} speculative vs {self.samples} plain "
                f"samples of {self.tokens} tokens (chi-square per position, family-wise α = {self.alpha:g}, "
                f"every p-value must exceed {self.threshold:.3g})")
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
        if reasons:
            return f"NOT EXACT — {'; '.join(reasons)}. Checked: {what}; {verified}."
        notes = ""
        if self.compared < len(self.positions):
            notes += (f" {len(self.positions) - self.compared} of {len(self.positions)} positions had too few "
                      f"repeated tokens to compare.")
        if self.greedy_drafted == 0:
            notes += " The greedy stage drafted nothing, so its identity is trivial."
        return (f"EXACT — greedy output identical and no position rejects homogeneity (min p-value "
                f"{self.min_p_value:.3g}, max TV {self.max_tv:.3f}). Checked: {what}; {verified}.{notes}")


class VerifyCollector:
    """Collects the finished generations of :func:`verify_jobs` and computes the :class:`VerifyReport`."""

    def __init__(self, samples: int, tokens: int, seed: int, alpha: float = DEFAULT_ALPHA) -> None:
        if tokens < 1:
            raise ValueError(f"tokens must be at least 1, got {tokens}")
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.samples = samples
        self.tokens = tokens
        self.alpha = alpha
        self.jobs = verify_jobs(samples, seed)
        self._greedy: dict[bool, list[int]] = {}
        self._greedy_drafted = self._greedy_accepted = 0
        self._sampled: dict[bool, list[list[int]]] = {False: [], True: []}
        self.drafted = 0
        self.accepted = 0

    @property
    def done(self) -> int:
        """Generations recorded so far."""
        return len(self._greedy) + len(self._sampled[False]) + len(self._sampled[True])

    @property
    def total(self) -> int:
        return len(self.jobs)

    def record(self, job: VerifyJob, tokens: Sequence[int], *, drafted: int = 0, accepted: int = 0) -> None:
        """One finished generation of ``job``: its emitted token ids and its stats' drafted/accepted counts."""
        ids = [int(t) for t in tokens[: self.tokens]]
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
        return VerifyReport(
            greedy_identical=divergence is None, first_divergence=divergence, greedy_tokens=len(spec_g),
            greedy_drafted=self._greedy_drafted, greedy_accepted=self._greedy_accepted,
            samples=min(len(self._sampled[False]), len(self._sampled[True])), tokens=self.tokens,
            drafted=self.drafted, accepted=self.accepted, positions=tuple(positions), alpha=self.alpha,
        )
