"""The in-reply speed-up against plain decoding: a cost model of the target's passes fitted to the reply itself.

Each decoding step is recorded as a ``PassTiming``: the tokens the target evaluated in its pass ``n`` (1 + the
drafted tokens), the step's time without the drafter ``t``, the whole step's time, and the tokens it yielded.
The target's cost of a pass is modelled as

    t(n) = c1 · (1 + g · (n - 1))

and what plain decoding would have cost is c1 per token, c1 being what a one-token pass costs *in a plain
reply*. Three things measured on the benchmark's pairs shape how c1 is found:

- The first one-token pass after a verify pass costs 25-40 % more than a plain reply's passes (llama.cpp
  rebuilds its compute graph when the batch size changes; a plain reply never does). So the decoder forces
  plain steps in runs (``PLAIN_RUN_FIRST`` from the second step, ``PLAIN_RUN`` later: ``PlainRateMeter``), and
  only *steady* one-token passes, those right after another one, are taken as what plain decoding costs. The
  decoder measured single probes before, and every figure read 12-34 % high.
- A load that starts mid-reply (another process on a core llama.cpp's threads use) costs every pass about the
  same extra time whatever its size, a thread waiting at the barrier for one that was descheduled: a verify
  pass slows by less than a plain pass does, so verify passes cannot tell what plain decoding costs under the
  new load. The decoder therefore runs plain steps again when the passes' cost moves by ``LOAD_SHIFT``, and the
  estimate splits the reply into stretches of steady load (``SEGMENT_SHIFT``, each with steady plain passes of
  its own; at most ``SEGMENT_DEPTH`` levels of splits). Each stretch's tokens are valued at its own c1. A change
  of llama.cpp's thread count within the reply (``PassTiming.threads``: automatic threads step down under a
  load) is such a boundary, known in advance: the decoder runs plain steps at once and the fit splits there.
  The passes that led to the step down (its threads seen waiting for a CPU) ran under the load on the old count:
  they are a stretch of their own (``PassTiming.contended``), not noise in the quiet stretch before them. Measured
  on SmolLM2 copying with prompt lookup, 24 tokens, a load from the reply's middle: the one 9-token verify pass
  that met the load took 85-113 ms instead of 45-55 ms at 2 threads (the plain reply's passes 16-20 ms instead
  of 9), then the threads stepped down; valued at the quiet cost, the figure read 0.69-0.77x of the A/B in three
  rounds of six. They are valued at their own cost for as long as a plain reply meeting the same load would run
  contended before its own threads stepped down (``speedup_fit.STEP_DOWN_S``), at the next stretch's after that.
- The first step after the prompt is the coldest of the reply: it is left out of every fit, and its time above
  the model, ``cold_s``, counts on both sides (a plain reply pays that cold step too).

Within a stretch: c1 is the mean of its steady one-token passes (those more than ``ANCHOR_STALL`` times the
stretch's level are stalls, left out), and g is refitted to their median; without such passes, c1 comes from
every pass at the reply's growth g (the median growth through pairs of passes of different sizes at most
``LOCAL_STEPS`` apart, Theil–Sen, fitted twice: the second time without what the first fit called stalls, more
than ``WINSOR_SIGMAS`` robust sigmas above the level), times their mean ratio to it. A pass more than
``STALL_RATIO`` times the stretch's model is a stall (e.g. a descheduled thread): its time above the model,
``stall_s``, is taken out of both sides, since a stall at random costs the two replies of an A/B in proportion
to their time; slower passes below that bound are ordinary noise, which plain replies have too, and count. The
drafter's time in a step is a stall above ``STALL_RATIO`` times its running median. Then

    plain_equiv_s = Σ_stretches tokens · c1 + cold_s
    speedup       = plain_equiv_s / (Σ_steps step_s_i - stall_s)

The drafter's own time is in ``step_s`` only: it is charged to speculation. ``low``/``high`` is a
``CONFIDENCE`` interval: the Student t quantile times the standard error of each stretch's c1 (its pooled
residual spread over the square root of its steady plain passes, or the leverage of extrapolating to a
one-token pass where it has fewer than two), weighted by the stretches' shares of the plain time, combined in
quadrature with ``MODEL_ERROR`` (what one reply's fit cannot see). With fewer than two batch sizes and no plain
pass after the first step the plain cost is not identified: no figure, and the decoder forces plain runs
(``wants_plain_probe``). A reply that drafted nothing measured plain decoding itself: speedup = Σ target time /
Σ step time, its interval that one value, exactly 1.00 with the drafter off.

Times are seconds; rates tokens per second.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

SETTLED_WIDTH = 0.20  # relative half-width of the interval above which the figure is shown as a range
MODEL_ERROR = 0.05  # relative error the fit cannot see, in quadrature (its coverage: tests/unit/engine/test_stats)
CONFIDENCE = 0.95  # two-sided coverage of low .. high
WINSOR_SIGMAS = 3.0  # robust sigmas: what the growth fit leaves out, and the noise the interval counts
MIN_SIGMA_SHARE = 0.005  # robust sigma floor, relative to c1 (identical timings are not perfectly known)
SEGMENT_SHIFT = 0.25  # relative change of the passes' level that splits a reply into stretches of steady load
ANCHOR_STALL = 2.0  # a steady one-token pass this many times its stretch's level is a stall, left out
STALL_RATIO = 3.0  # a pass this many times its stretch's model is a stall above it, out of both sides
SEGMENT_MIN = 3  # passes: the shortest such stretch (two are a stall as often as a load)
SEGMENT_DEPTH = 3  # levels of splitting: at most 8 stretches
LOCAL_STEPS = 8  # steps: the reach of the growth's pairs and the window of the local plain cost
PLAIN_PROBES_MIN = 2  # steady one-token passes (after another one) the decoder forces plain runs until it has
PLAIN_PROBE_GAP = 4  # steps between early runs when the first run did not give them (the reply's second step)
PLAIN_RUN_FIRST = 3  # plain steps in the first forced run: its first pass pays the change of batch size
PLAIN_RUN = 2  # plain steps in each later forced run
LOAD_SHIFT = 0.30  # relative change of the passes' cost that makes the decoder measure plain decoding again
LOAD_PROBE_GAP = 3  # steps: the fewest since the latest plain pass before such a change forces a run
REFIT_INTERVAL_S = 0.25  # seconds: the longest a reply's figures go without a refit (the GUI ticks at 4 Hz)




def settle_passes(backend: str, offloaded: bool) -> int:
    """One-token passes after a pass of another size before a one-token pass costs what plain decoding costs.

    On a CPU, 1: llama.cpp rebuilds its compute graph when the batch size changes, and only that first pass pays
    for it. On a CUDA back-end with the target offloaded, 2: llama.cpp records a pass as a CUDA graph and
    replays it while the calls keep their shape; after a change of shape it runs one call directly and captures
    the graph on the next, and only the third is replayed. Measured on an H200 (bench_mtp_steps.py, a 12 x 1024
    F16 target): 1.5 ms and 1.35 ms for the first two plain passes after a verify pass, 0.6 ms from the third
    on, and 1.2 ms for every pass with CUDA graphs switched off. Counted as steady, the capturing pass made plain
    decoding look twice its cost: automatic depth kept drafting at 0.56-0.63x plain."""
    return 2 if offloaded and backend == "CUDA" else 1


def speedup_is_settled(speedup: float | None, low: float | None, high: float | None) -> bool:
    """True when the interval [low, high] lies within ±``SETTLED_WIDTH`` of ``speedup``."""
    if speedup is None or low is None or high is None or speedup <= 0:
        return False
    return high <= speedup * (1 + SETTLED_WIDTH) and low >= speedup * (1 - SETTLED_WIDTH)


def describe_speedup(speedup: float | None, low: float | None, high: float | None) -> str:
    """The speed-up in words, the same everywhere (CLI, server log, exports, GUI): ``1.85×`` when measured
    exactly (nothing drafted), ``1.85× (1.70–2.00)`` when settled, the range ``1.40–2.60×, uncertain`` when the
    interval is wider than ±``SETTLED_WIDTH`` (``up to 1.45×, uncertain`` when it reaches 0: ``describe_range``),
    ``not measured`` without a figure."""
    if speedup is None or low is None or high is None:
        return "not measured"
    if high - low <= 1e-9 * max(1.0, speedup):
        return f"{speedup:.2f}×"
    if speedup_is_settled(speedup, low, high):
        return f"{speedup:.2f}× ({low:.2f}–{high:.2f})"
    return f"{describe_range(low, high)}, uncertain"


def describe_range(low: float, high: float) -> str:
    """``1.40–2.60×``; ``up to 1.45×`` when the interval reaches down to 0 (a reply of a few passes that met a
    load: "0.00–1.45×" would read as a measured standstill)."""
    if round(low, 2) <= 0:
        return f"up to {high:.2f}×"
    return f"{low:.2f}–{high:.2f}×"


@dataclasses.dataclass(frozen=True)
class PassTiming:
    """One decoding step as the estimate sees it (seconds).

    Attributes:
        batch: tokens the target evaluated in the step's pass (1 + drafted tokens; 1 is a plain pass).
        target_s: the step without the drafter: the target pass, verification, sampling and bookkeeping.
        step_s: the whole step, drafting included. Invariant: step_s >= target_s.
        pass_tokens: tokens the pass yielded (emitted, plus an end-of-generation token that ended the reply).
        threads: llama.cpp CPU threads the pass ran with (0: not known). A change splits the reply into
            stretches as a load shift does: a pass's cost depends on it.
        contended: the pass ran while other processes kept these threads waiting for a CPU, the evidence on which
            the thread count then stepped down (``threads.ThreadGovernor.contended_passes``). Such passes are a
            stretch of their own, valued at their own cost: a plain reply meeting the same load pays it too.
    """

    batch: int
    target_s: float
    step_s: float
    pass_tokens: int
    threads: int = 0
    contended: bool = False


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
