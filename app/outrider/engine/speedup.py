"""The in-reply speed-up against plain decoding: a cost model of the target's passes fitted to the reply itself.

Each decoding step is recorded as a ``PassTiming``: the tokens the target evaluated in its pass ``n`` (1 + the
drafted tokens), the step's time without the drafter ``t``, the whole step's time, and the tokens it yielded.
The target's cost of a pass is modelled as

    t(n) = c1 · (1 + g · (n - 1))

fitted robustly to the steps after the first (the first step after the prompt is the coldest of the reply and
must not decide it):

- ``g``, the relative cost of each further token in a pass, is the median over pairs of passes of different
  sizes at most ``LOCAL_STEPS`` steps apart (Theil–Sen; a load that comes and goes scales both passes of a near
  pair alike), fitted twice: the second time without the passes the first fit called stalls;
- each pass then estimates c1 as ``t / (1 + g · (n - 1))``; the local level is the running median of those
  over ``LOCAL_STEPS`` steps (it follows a load that starts or stops mid-reply, as an A/B run through the same
  load would see it); a pass more than ``WINSOR_SIGMAS`` robust sigmas above its level is a stall (e.g. a
  descheduled llama.cpp thread) and counts only up to that bound; the time above it, ``stall_s``, is taken out of
  both sides, since a stall at random costs the two replies of an A/B in proportion to their time (the
  drafter's time gets the same bound, about its own running median);
- each step's tokens are valued at the running mean of the bounded estimates around it.

Then, with ``cold_s`` the first step's time above the model (the plain reply pays that cold step too):

    plain_equiv_s = Σ_steps pass_tokens_i · c1_i + cold_s
    speedup       = plain_equiv_s / (Σ_steps step_s_i - stall_s)

The drafter's own time is in ``step_s`` only: it is charged to speculation. ``low``/``high`` is a
``CONFIDENCE`` interval: the Student t quantile with the fit's degrees of freedom times the standard error of
the mean c1 (the residual spread about the local level, and the leverage of extrapolating from the batch sizes
seen to a one-token pass), combined in quadrature with ``MODEL_ERROR`` (what one reply's fit cannot see: the
curve between the straight line and the truth, how the A/B's own replies vary). With fewer than two batch
sizes and no plain pass after the first step the plain cost is not identified: no figure, and the decoder forces
plain probes (``wants_plain_probe``). A reply that drafted nothing measured plain decoding itself: speedup =
Σ target time / Σ step time, its interval that one value, exactly 1.00 with the drafter off.

Times are seconds; rates tokens per second.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

SETTLED_WIDTH = 0.20  # relative half-width of the interval above which the figure is shown as a range
MODEL_ERROR = 0.05  # relative error the fit cannot see, in quadrature (its coverage: tests/unit/engine/test_stats)
CONFIDENCE = 0.95  # two-sided coverage of low .. high
WINSOR_SIGMAS = 3.0  # a pass this many robust sigmas above its local level is a stall, bounded there
MIN_SIGMA_SHARE = 0.005  # robust sigma floor, relative to c1 (identical timings are not perfectly known)
LOCAL_STEPS = 8  # steps: the reach of the growth's pairs and the window of the local plain cost
PLAIN_PROBES_MIN = 3  # one-token passes after the first step the decoder forces until it has them
PLAIN_PROBE_GAP = 4  # steps between those early probes (the first one is the reply's second step)
REFIT_INTERVAL_S = 0.25  # seconds: the longest a reply's figures go without a refit (the GUI ticks at 4 Hz)


Floats = npt.NDArray[np.float64]


def speedup_is_settled(speedup: float | None, low: float | None, high: float | None) -> bool:
    """True when the interval [low, high] lies within ±``SETTLED_WIDTH`` of ``speedup``."""
    if speedup is None or low is None or high is None or speedup <= 0:
        return False
    return high <= speedup * (1 + SETTLED_WIDTH) and low >= speedup * (1 - SETTLED_WIDTH)


def describe_speedup(speedup: float | None, low: float | None, high: float | None) -> str:
    """The speed-up in words, the same everywhere (CLI, server log, exports, GUI): ``1.85×`` when measured
    exactly (nothing drafted), ``1.85× (1.70–2.00)`` when settled, the range ``1.40–2.60×, uncertain`` when the
    interval is wider than ±``SETTLED_WIDTH``, ``not measured`` without a figure."""
    if speedup is None or low is None or high is None:
        return "not measured"
    if high - low <= 1e-9 * max(1.0, speedup):
        return f"{speedup:.2f}×"
    if speedup_is_settled(speedup, low, high):
        return f"{speedup:.2f}× ({low:.2f}–{high:.2f})"
    return f"{low:.2f}–{high:.2f}×, uncertain"


@dataclasses.dataclass(frozen=True)
class PassTiming:
    """One decoding step as the estimate sees it (seconds).

    Attributes:
        batch: tokens the target evaluated in the step's pass (1 + drafted tokens; 1 is a plain pass).
        target_s: the step without the drafter: the target pass, verification, sampling and bookkeeping.
        step_s: the whole step, drafting included. Invariant: step_s >= target_s.
        pass_tokens: tokens the pass yielded (emitted, plus an end-of-generation token that ended the reply).
    """

    batch: int
    target_s: float
    step_s: float
    pass_tokens: int


@dataclasses.dataclass(frozen=True)
class SpeedupEstimate:
    """The in-reply speed-up of a list of steps (module docstring).

    Attributes:
        speedup: plain_equiv_s / (step_s - stall_s).
        low / high: its ``CONFIDENCE`` interval (equal when measured exactly).
        plain_s: c1, the mean predicted seconds of a one-token pass over the reply.
        plain_equiv_s: seconds plain decoding would have needed for the same tokens.
        stall_s: target time above the stall bound, out of both sides.
    """

    speedup: float
    low: float
    high: float
    plain_s: float
    plain_equiv_s: float
    stall_s: float


def student_t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t with ``df`` >= 1 degrees of freedom: exact for 1 and 2, the
    Cornish–Fisher expansion around the normal quantile above (within 1 % from df = 3)."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) * math.sqrt(2 / (4 * p * (1 - p)))
    z = statistics.NormalDist().inv_cdf(p)
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def _pair_growths(n: Floats, t: Floats, m: Floats, u: Floats) -> Floats:
    """The growth g of ``t(n) = c1 · (1 + g · (n - 1))`` through each pair of passes (n, t) and (m, u) of
    different sizes; pairs that no g fits (a zero time, or a larger pass not costlier) are left out."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = u / t
        below = (m - 1) - ratio * (n - 1)
        growth = (ratio - 1) / below
    keep = (n != m) & (t > 0) & (u > 0) & (below > 0) & np.isfinite(growth)
    return np.asarray(growth[keep], dtype=np.float64)


@functools.lru_cache(maxsize=64)
def _near_pairs_cached(count: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    i, j = np.triu_indices(count, k=1)
    near = j - i <= LOCAL_STEPS
    return i[near], j[near]


def _near_pairs(count: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Index pairs (i, j), i < j <= i + ``LOCAL_STEPS``, of ``count`` passes (built once per block of 64)."""
    block = -(-count // 64) * 64
    i, j = _near_pairs_cached(block)
    keep = j < count
    return i[keep], j[keep]


def _growth(batch: Floats, target: Floats) -> float:
    """The relative cost of each further token in a pass, never below 0: the median growth through pairs of
    passes at most ``LOCAL_STEPS`` apart, else (no such pair) through the median costs of the batch sizes."""
    first, second = _near_pairs(len(batch))
    pooled = _pair_growths(batch[first], target[first], batch[second], target[second])
    if pooled.size == 0:
        sizes = np.unique(batch)
        medians = np.array([np.median(target[batch == n]) for n in sizes])
        i, j = np.triu_indices(len(sizes), k=1)
        pooled = _pair_growths(sizes[i], medians[i], sizes[j], medians[j])
    return max(0.0, float(np.median(pooled))) if pooled.size else 0.0


def _running(values: Floats, how: str) -> Floats:
    """The median or mean (``how``) of the centred window of ``LOCAL_STEPS`` + 1 values around each value
    (the window shifted inwards at the ends, so that every value has a full one when there are enough)."""
    width = min(len(values), LOCAL_STEPS + 1)
    windows = np.lib.stride_tricks.sliding_window_view(values, width)
    reduced = np.median(windows, axis=1) if how == "median" else windows.mean(axis=1)
    start = np.clip(np.arange(len(values)) - width // 2, 0, len(values) - width)
    return np.asarray(reduced[start], dtype=np.float64)


def _fit_once(batch: Floats, target: Floats, calm: npt.NDArray[np.bool_]) -> tuple[float, Floats, Floats, float]:
    """The growth fitted to the ``calm`` passes, then for every pass: its estimate of c1 (the residual), the
    local level (running median of those) and the robust sigma of the residuals about it."""
    growth = _growth(batch[calm], target[calm])
    residuals = target / (1 + growth * (batch - 1))
    level = _running(residuals, "median")
    mad = float(np.median(np.abs(residuals - level)))
    return growth, residuals, level, max(1.4826 * mad, MIN_SIGMA_SHARE * float(np.median(residuals)))


def _drafting_stalls(steps: Sequence[PassTiming], sigma: float) -> float:
    """Seconds of drafting above its own stall bound (the running median of the steps' drafting times +
    ``WINSOR_SIGMAS`` robust sigmas, never below the target's sigma): a drafter descheduled mid-step is a stall
    like any other, out of both sides; its ordinary time stays charged to speculation. The first step counts
    here too (a drafter descheduled there is no cost of speculation; a first draft within the bound stays
    charged)."""
    drafting = np.array([p.step_s - p.target_s for p in steps], dtype=np.float64)
    level = _running(drafting, "median")
    spread = max(1.4826 * float(np.median(np.abs(drafting - level))), sigma)
    return float(np.maximum(0.0, drafting - (level + WINSOR_SIGMAS * spread)).sum())


def estimate_speedup(steps: Sequence[PassTiming]) -> SpeedupEstimate | None:
    """The speed-up of ``steps`` against plain decoding (module docstring); None while not identified."""
    if not steps:
        return None
    step_s = math.fsum(p.step_s for p in steps)
    tokens = sum(p.pass_tokens for p in steps)
    if step_s <= 0 or tokens < 1:
        return None
    if all(p.batch <= 1 for p in steps):  # nothing drafted: the steps are plain decoding, measured exactly
        target_s = math.fsum(p.target_s for p in steps)
        ratio = target_s / step_s
        return SpeedupEstimate(ratio, ratio, ratio, target_s / tokens, target_s, 0.0)
    fit = steps[1:]
    batch = np.array([p.batch for p in fit], dtype=np.float64)
    target = np.array([p.target_s for p in fit], dtype=np.float64)
    n_sizes = len(np.unique(batch))
    if n_sizes < 2 and not (batch == 1).any():
        return None  # passes of one size above 1 only: the cost of a plain pass cannot be told from them
    params = 1 if n_sizes == 1 else 2
    df = len(fit) - params
    if df < 1:
        return None
    # Twice: a stall in one of the few plain passes would tilt the first growth; the second leaves stalls out.
    growth, residuals, level, sigma = _fit_once(batch, target, np.ones(len(fit), dtype=bool))
    growth, residuals, level, sigma = _fit_once(batch, target, residuals <= level + WINSOR_SIGMAS * sigma)
    clipped = np.minimum(residuals, level + WINSOR_SIGMAS * sigma)
    stall_s = float(((residuals - clipped) * (1 + growth * (batch - 1))).sum()) + _drafting_stalls(steps, sigma)
    local = _running(clipped, "mean")
    yielded = np.array([p.pass_tokens for p in fit], dtype=np.float64)
    # Each step's tokens at the plain cost around it; the first step's at that of the pass after it.
    plain_tokens_s = steps[0].pass_tokens * float(local[0]) + float((yielded * local).sum())
    c1 = plain_tokens_s / tokens
    if c1 <= 0:
        return None
    cold_s = max(0.0, steps[0].target_s - float(local[0]) * (1 + growth * (steps[0].batch - 1)))
    plain_equiv_s = plain_tokens_s + cold_s
    speedup = plain_equiv_s / (step_s - stall_s)
    spread = max(float(np.std(clipped - local, ddof=1)) if len(fit) > 1 else 0.0, sigma)
    sxx = float(((batch - batch.mean()) ** 2).sum())
    leverage = 1 / len(fit) + ((1 - float(batch.mean())) ** 2 / sxx if params == 2 and sxx > 0 else 0.0)
    rel = math.hypot(student_t_quantile((1 + CONFIDENCE) / 2, df) * spread * math.sqrt(leverage) / c1,
                     MODEL_ERROR)
    rel *= plain_tokens_s / plain_equiv_s  # the cold step is measured, not predicted
    return SpeedupEstimate(speedup, speedup * max(0.0, 1 - rel), speedup * (1 + rel), c1, plain_equiv_s, stall_s)
