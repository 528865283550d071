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
import math
import statistics

SETTLED_WIDTH = 0.20  # relative half-width of the interval above which the figure is shown as a range
MODEL_ERROR = 0.05  # relative error the fit cannot see, in quadrature (its coverage: tests/unit/engine/test_stats)
CONFIDENCE = 0.95  # two-sided coverage of low .. high
WINSOR_SIGMAS = 3.0  # a pass this many robust sigmas above its local level is a stall, bounded there
MIN_SIGMA_SHARE = 0.005  # robust sigma floor, relative to c1 (identical timings are not perfectly known)
LOCAL_STEPS = 8  # steps: the reach of the growth's pairs and the window of the local plain cost
PLAIN_PROBES_MIN = 3  # one-token passes after the first step the decoder forces until it has them
PLAIN_PROBE_GAP = 4  # steps between those early probes (the first one is the reply's second step)
REFIT_INTERVAL_S = 0.25  # seconds: the longest a reply's figures go without a refit (the GUI ticks at 4 Hz)




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
        growth: g, the relative cost of each further token in a pass (0 when nothing was drafted).
    """

    speedup: float
    low: float
    high: float
    plain_s: float
    plain_equiv_s: float
    stall_s: float
    growth: float = 0.0


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
