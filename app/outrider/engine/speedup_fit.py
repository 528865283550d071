"""The robust fit of the in-reply speed-up (``estimate_speedup``; the model and its reasons are in ``speedup``'s
docstring, with its constants and types).

Kept apart because it needs numpy, which only the engine process (where replies are measured) has to load: the
app imports ``speedup`` (figures, formatting) before its first paint, where numpy's import must not be.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from outrider.engine.speedup import (
    ANCHOR_STALL,
    CONFIDENCE,
    LOCAL_STEPS,
    MIN_SIGMA_SHARE,
    MODEL_ERROR,
    SEGMENT_DEPTH,
    SEGMENT_MIN,
    SEGMENT_SHIFT,
    STALL_RATIO,
    WINSOR_SIGMAS,
    PassTiming,
    SpeedupEstimate,
    student_t_quantile,
)
from outrider.engine.threads import CONTENDED_WINDOWS, CONTENTION_WINDOW_S

STEP_DOWN_S = CONTENDED_WINDOWS * CONTENTION_WINDOW_S  # seconds of contention before the threads step down

Floats = npt.NDArray[np.float64]


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


def _growth(batch: Floats, target: Floats, block: npt.NDArray[np.intp]) -> float:
    """The relative cost of each further token in a pass, never below 0: the median growth through pairs of
    passes at most ``LOCAL_STEPS`` apart in one ``block`` (``_thread_blocks``: a pair across a known boundary of
    the pass cost, a quiet pass and a contended one, would read the load as growth), else (no such pair) through
    the median costs of the batch sizes."""
    first, second = _near_pairs(len(batch))
    same = block[first] == block[second]
    first, second = first[same], second[same]
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


def _fit_once(batch: Floats, target: Floats, block: npt.NDArray[np.intp],
              calm: npt.NDArray[np.bool_]) -> tuple[float, Floats, Floats, float]:
    """The growth fitted to the ``calm`` passes (pairs within a ``block``), then for every pass: its estimate of
    c1 (the residual), the local level (running median of those) and the robust sigma of the residuals about it."""
    growth = _growth(batch[calm], target[calm], block[calm])
    residuals = target / (1 + growth * (batch - 1))
    level = _running(residuals, "median")
    mad = float(np.median(np.abs(residuals - level)))
    return growth, residuals, level, max(1.4826 * mad, MIN_SIGMA_SHARE * float(np.median(residuals)))


def _drafting_stalls(steps: Sequence[PassTiming]) -> float:
    """Seconds of drafting that were stalls: a step whose drafting took more than ``STALL_RATIO`` times the
    running median of the steps that drafted (a drafter descheduled mid-step) counts its time above that median
    out of both sides, like a target stall. Slower drafting below that bound stays charged to speculation: a
    load that slows every draft pass is a real cost of drafting, and the A/B sees it. The first step counts
    here too."""
    drafting = np.array([p.step_s - p.target_s for p in steps], dtype=np.float64)
    drafted = drafting[drafting > 0]
    if drafted.size == 0:
        return 0.0
    level = _running(drafted, "median")
    return float(np.where(drafted > STALL_RATIO * level, drafted - level, 0.0).sum())


def _steady(steps: Sequence[PassTiming], settle: int = 1) -> npt.NDArray[np.bool_]:
    """For each step after the first: a one-token pass right after ``settle`` other one-token passes (what plain
    decoding costs). The first pass after a verify pass also pays for llama.cpp rebuilding its graph for the new
    size; on a CUDA back-end the second one pays for capturing it as a CUDA graph, which only the third replays
    (``speedup.settle_passes``)."""
    plain = np.array([p.batch <= 1 for p in steps], dtype=np.bool_)
    steady = plain[1:].copy()
    for back in range(1, settle + 1):
        earlier = np.zeros(len(steady), dtype=np.bool_)
        earlier[back - 1:] = plain[: len(plain) - back]
        steady &= earlier
    return steady


def _segments(x: Floats, steady: npt.NDArray[np.bool_], start: int, stop: int,
              depth: int) -> list[tuple[int, int]]:
    """Split ``x[start:stop]`` (log costs of one-token-pass equivalents) where its level moves by more than
    ``SEGMENT_SHIFT``: the split that best separates two means (each side at least ``SEGMENT_MIN`` passes),
    kept when the medians of the two sides differ that much too; recursively, ``depth`` levels. A stretch with
    steady one-token passes of its own (the decoder measures plain decoding again when the passes' cost moves:
    ``PlainRateMeter``) is valued at them; one without (a load that came two passes before the end of the reply,
    or a cluster of stalls) scales the plain cost by its passes' level, which for stalls is the same as taking
    them out of both sides."""
    n = stop - start
    if depth == 0 or n < 2 * SEGMENT_MIN:
        return [(start, stop)]
    part = x[start:stop]
    total = np.cumsum(part)
    k = np.arange(1, n)
    left_mean = total[:-1] / k
    right_mean = (total[-1] - total[:-1]) / (n - k)
    score = np.abs(left_mean - right_mean) * np.sqrt(k * (n - k) / n)
    allowed = (k >= SEGMENT_MIN) & (n - k >= SEGMENT_MIN)
    if not allowed.any():
        return [(start, stop)]
    cut = int(k[allowed][np.argmax(score[allowed])])
    if abs(float(np.median(part[:cut])) - float(np.median(part[cut:]))) <= math.log1p(SEGMENT_SHIFT):
        return [(start, stop)]
    middle = start + cut
    return _segments(x, steady, start, middle, depth - 1) + _segments(x, steady, middle, stop, depth - 1)


def _plain_values(segments: Sequence[_Segment], counts: Sequence[float], contended: Sequence[bool]) -> list[float]:
    """Seconds plain decoding would have spent on each segment's ``counts`` tokens: each at its segment's c1,
    except in a ``contended`` stretch (passes that met a load on the thread count before a step down) followed by
    a cheaper one. A plain reply meeting the same load would have run contended only until its own threads
    stepped down, ``STEP_DOWN_S`` of contention later, and at the cheaper stretch's cost after that: a contended
    9-token verify pass must not value all its tokens at what the governor spares a plain reply after 90 ms."""
    values: list[float] = []
    budget = STEP_DOWN_S
    for i, (g, n) in enumerate(zip(segments, counts, strict=True)):
        after = next((h for h, c in zip(segments[i + 1:], contended[i + 1:], strict=True) if not c), None)
        if not contended[i] or after is None or after.plain_s >= g.plain_s or g.plain_s <= 0:
            budget = STEP_DOWN_S if not contended[i] else budget
            values.append(n * g.plain_s)
            continue
        own = min(n, budget / g.plain_s)
        budget -= own * g.plain_s
        values.append(own * g.plain_s + (n - own) * after.plain_s)
    return values


def _thread_blocks(fit: Sequence[PassTiming]) -> list[tuple[int, int]]:
    """``(start, stop)`` of each run of passes on one thread count (an unknown count, 0, joins its neighbours) and
    alike in being ``contended``: known boundaries of the pass cost, split before any split by the passes' level."""
    blocks: list[tuple[int, int]] = []
    start, current = 0, 0
    contended = bool(fit) and fit[0].contended
    for i, p in enumerate(fit):
        if (p.threads and current and p.threads != current) or p.contended != contended:
            blocks.append((start, i))
            start = i
        current = p.threads or current
        contended = p.contended
    blocks.append((start, len(fit)))
    return blocks


@dataclasses.dataclass(frozen=True)
class _Segment:
    """The plain cost over passes ``start:stop`` of the fit and what it rests on."""

    start: int
    stop: int
    plain_s: float  # c1 over the segment: a one-token pass, its mean with ordinary noise, stalls bounded
    stall_s: float  # target time above the segment's stall bound
    rel_error: float  # standard error of plain_s, relative
    df: int


def _segment(batch: Floats, target: Floats, steady: npt.NDArray[np.bool_], growth: float, start: int,
             stop: int, leverage: float) -> _Segment:
    """One stretch of steady load. c1 is the mean of its steady one-token passes when it has any (they are what
    plain decoding costs under this load, with the ordinary hiccups a plain reply has too: a pass that lost a
    scheduler tick to another process counts as it is), those above ``ANCHOR_STALL`` times the stretch's level
    from all its passes left out as stalls; the growth is then refitted to their median, as a load changes the
    cost of a pass's first token more than that of its further ones. Without such passes c1 comes from every
    pass at the reply's growth, times their mean ratio to it. A pass above ``STALL_RATIO`` times the stretch's
    model is a stall (a descheduled thread, another process's burst): its time above the model is out of both
    sides; slower passes below that are the machine's ordinary noise, in plain replies too, and count."""
    n, t, anchors = batch[start:stop], target[start:stop], target[start:stop][steady[start:stop]]
    verify = n > 1
    base = float(np.median(t / (1 + growth * (n - 1))))
    anchors = anchors[anchors <= ANCHOR_STALL * base]
    anchored = anchors.size > 0
    if anchored:
        base = float(np.median(anchors))
        if verify.any():
            growth = max(0.0, float(np.median((t[verify] / base - 1) / (n[verify] - 1))))
    predicted = base * (1 + growth * (n - 1))
    ratio = t / predicted
    sigma = max(1.4826 * float(np.median(np.abs(ratio - np.median(ratio)))), MIN_SIGMA_SHARE)
    bounded = np.where(ratio > STALL_RATIO, 1.0, ratio)  # a stalled pass counts as the model says
    stall_s = float(((ratio - bounded) * predicted).sum())
    plain_s = float(anchors.mean()) if anchored else base * float(bounded.mean())
    # The noise of the stretch for its interval: the spread of its passes up to ``WINSOR_SIGMAS`` robust sigmas
    # (the rarer stalls above are the model error's part).
    calm = np.minimum(ratio, 1 + WINSOR_SIGMAS * sigma)
    spread = max(float(np.std(calm, ddof=1)) if len(t) > 1 else 0.0, sigma)
    # The spread is the stretch's pooled residual spread (its degrees of freedom: every pass less the two fitted
    # costs), or the steady plain passes' own where they disagree more; c1 rests on those passes when there are
    # two or more, else it is extrapolated.
    if anchors.size >= 2:
        rel = spread / math.sqrt(anchors.size)
    else:
        rel = spread * math.sqrt(leverage + 1 / len(t))
    return _Segment(start, stop, plain_s, stall_s, rel, max(1, len(t) - 2))


def estimate_speedup(steps: Sequence[PassTiming], settle: int = 1) -> SpeedupEstimate | None:
    """The speed-up of ``steps`` against plain decoding (module docstring); None while not identified.
    ``settle``: one-token passes after a pass of another size before one costs what plain decoding costs."""
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
    steady = _steady(steps, settle)
    n_sizes = len(np.unique(batch))
    if n_sizes < 2 and not (batch == 1).any():
        return None  # passes of one size above 1 only: the cost of a plain pass cannot be told from them
    params = 1 if n_sizes == 1 else 2
    if len(fit) - params < 1:
        return None
    blocks = _thread_blocks(fit)
    block = np.zeros(len(fit), dtype=np.intp)
    for i, (start, stop) in enumerate(blocks):
        block[start:stop] = i
    # The reply's growth, twice: a stall in one of the few plain passes would tilt the first one.
    growth, residuals, level, sigma = _fit_once(batch, target, block, np.ones(len(fit), dtype=bool))
    growth, residuals, level, sigma = _fit_once(batch, target, block, residuals <= level + WINSOR_SIGMAS * sigma)
    x = np.log(np.minimum(residuals, level + WINSOR_SIGMAS * sigma))
    sxx = float(((batch - batch.mean()) ** 2).sum())
    leverage = (1 - float(batch.mean())) ** 2 / sxx if params == 2 and sxx > 0 else 0.0
    segments = [_segment(batch, target, steady, growth, a, b, leverage)
                for start, stop in blocks
                for a, b in _segments(x, steady, start, stop, SEGMENT_DEPTH)]
    yielded = np.array([p.pass_tokens for p in fit], dtype=np.float64)
    counts = [float(yielded[g.start:g.stop].sum()) for g in segments]
    counts[0] += steps[0].pass_tokens
    values = _plain_values(segments, counts, [fit[g.start].contended for g in segments])
    plain_tokens_s = math.fsum(values)
    c1 = plain_tokens_s / tokens
    if c1 <= 0:
        return None
    first = segments[0]
    cold_s = max(0.0, steps[0].target_s - first.plain_s * (1 + growth * (steps[0].batch - 1)))
    stall_s = sum(g.stall_s for g in segments) + _drafting_stalls(steps)
    plain_equiv_s = plain_tokens_s + cold_s
    speedup = plain_equiv_s / (step_s - stall_s)
    shares = [v / plain_tokens_s for v in values]
    df = max(1, min(g.df for g in segments))
    fitted = math.sqrt(sum((w * g.rel_error) ** 2 for w, g in zip(shares, segments, strict=True)))
    rel = math.hypot(student_t_quantile((1 + CONFIDENCE) / 2, df) * fitted, MODEL_ERROR)
    rel *= plain_tokens_s / plain_equiv_s  # the cold step is measured, not predicted
    return SpeedupEstimate(speedup, speedup * max(0.0, 1 - rel), speedup * (1 + rel), c1, plain_equiv_s, stall_s,
                           growth)
