"""Token choice for the target and the draft, and the exact speculative-sampling acceptance rule.

Temperature 0 is greedy (argmax). Temperature > 0 builds a sparse distribution in llama.cpp's default chain
order — top-k, top-p, min-p, then temperature — and applies exactly the same transform to target (p) and draft
(q), which is what makes speculative sampling preserve the target distribution:

    accept draft token x ~ q with probability min(1, p(x) / q(x));
    on rejection sample from normalise(max(p - q, 0));  after k acceptances sample the bonus token from p.

(Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"; Chen et al. 2023.)
Everything works on numpy views of llama.cpp's logits; only the surviving candidates are copied.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import numpy.typing as npt

from outrider.engine.params import SamplingParams

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
ProbArray = npt.NDArray[np.float64]

CONFIDENCE_TOP_K = 10  # llama.cpp's draft sampler: top-k 10, then the top probability is compared with p-min
CONFIDENCE_WINDOW = 12.0  # nats below the top logit that top_probability looks at




@dataclasses.dataclass(frozen=True)
class SparseDist:
    """A distribution over distinct ``ids``; ``probs`` sums to 1. ``distribution`` sorts by decreasing probability
    when a filter cuts the row (not for a whole unfiltered row); ``residual`` sorts by id."""

    ids: IntArray
    probs: ProbArray

    def prob_of(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    @staticmethod
    def point(token: int) -> SparseDist:
        """All mass on one token: the proposal distribution of a deterministic drafter (prompt lookup)."""
        return SparseDist(np.array([token], dtype=np.int64), np.array([1.0]))


def greedy_token(logits: FloatArray) -> int:
    return int(np.argmax(logits))


def top_probability(logits: FloatArray) -> float:
    """The draft's confidence in its greedy choice, as llama.cpp's draft sampler defines it (top-k 10, then
    softmax at temperature 1): the probability of the top token among the 10 most likely. Used by p-min.

    Only logits within ``CONFIDENCE_WINDOW`` nats of the top are looked at (one vectorised comparison instead of a
    partition of the whole vocabulary): a token further below adds at most e^-12 each to the denominator, so
    with fewer than 10 tokens inside the window the result is within 1e-4 of the top-10 softmax.
    """
    top = float(logits.max())
    near = logits[logits >= top - CONFIDENCE_WINDOW].astype(np.float64)
    if near.shape[0] > CONFIDENCE_TOP_K:
        near = near[np.argpartition(near, near.shape[0] - CONFIDENCE_TOP_K)[-CONFIDENCE_TOP_K:]]
    return float(1.0 / np.exp(near - top).sum())


def distribution(logits: FloatArray, params: SamplingParams) -> SparseDist:
    """The sampling distribution after top-k, top-p, min-p and temperature (llama.cpp's order).

    Semantics (unchanged from a plain sort of the whole row): the top-k survivors U, sorted by logit; top-p keeps
    the shortest prefix of U whose softmax mass (normalised over U) reaches ``top_p``; min-p keeps, within it, the
    tokens with probability >= ``min_p`` × the top one; at least one token survives; temperature rescales what is
    left. Cost: the survivors are found by comparisons against thresholds (top − δ, widened until enough tokens
    pass) and only they are sorted, so a 152k-token row costs a few vectorised passes, not an O(n log n) sort.
    """
    n = logits.shape[0]
    top = float(logits.max())
    if 0 < params.top_k < n:
        universe = _largest(logits, top, params.top_k)
        z = float(np.exp(logits[universe].astype(np.float64) - top).sum())
    else:
        universe = None  # the whole row
        z = float(np.exp(logits - np.float32(top), dtype=np.float32).sum(dtype=np.float64))
    # Candidates for the kept prefix: every kept token passes min-p (logit >= top + ln(min_p)) and lies in the
    # top-p prefix; gather a superset that is a prefix of the sorted order, then sort only that.
    if params.min_p > 0.0:
        pool = _at_least(logits, universe, top + math.log(params.min_p))
    elif params.top_p < 1.0:
        pool = _mass_pool(logits, universe, top, z * params.top_p)
    else:
        pool = universe if universe is not None else np.arange(n)
    if universe is None and params.top_p >= 1.0 and params.min_p <= 0.0:
        # No filter at all: the whole row, in id order (sorting 152k ids would cost ~20 ms).
        scaled = np.exp((logits - np.float32(top)) / np.float32(params.temperature)).astype(np.float64)
        return SparseDist(np.arange(n, dtype=np.int64), scaled / scaled.sum())
    values = logits[pool].astype(np.float64)
    order = np.argsort(-values, kind="stable")
    ids, values = pool[order].astype(np.int64), values[order]
    keep = ids.shape[0]
    if params.top_p < 1.0:
        cumulative = np.cumsum(np.exp(values - top)) / z
        keep = min(keep, int(np.searchsorted(cumulative, params.top_p)) + 1)
    keep = max(1, keep)
    ids, values = ids[:keep], values[:keep]
    scaled = np.exp((values - values[0]) / params.temperature)
    return SparseDist(ids, scaled / scaled.sum())


def _at_least(logits: FloatArray, universe: IntArray | None, threshold: float) -> IntArray:
    """Ids (of ``universe``, or the whole row) whose logit is >= ``threshold``."""
    if universe is None:
        return np.flatnonzero(logits >= threshold).astype(np.int64)
    return universe[logits[universe] >= threshold]


def _largest(logits: FloatArray, top: float, k: int) -> IntArray:
    """Ids of the ``k`` largest logits: keep those above a threshold (widened below the top until at least k
    pass, then narrowed by bisection while far more than k pass), and partition only those few."""
    window = 8.0
    pool = np.flatnonzero(logits >= top - window)
    while pool.shape[0] < k:
        window *= 2
        pool = np.flatnonzero(logits >= top - window) if window < 1e4 else np.arange(logits.shape[0])
    low, high = top - window, top
    values = logits[pool]
    while pool.shape[0] > 4 * k + 64 and high - low > 1e-3:
        mid = (low + high) / 2
        above = values >= mid
        n_above = int(np.count_nonzero(above))
        if n_above >= k:
            pool, values, low = pool[above], values[above], mid
        else:
            high = mid
    part = np.argpartition(values, pool.shape[0] - k)[pool.shape[0] - k :]
    return pool[part].astype(np.int64)


def _mass_pool(logits: FloatArray, universe: IntArray | None, top: float, mass: float) -> IntArray:
    """A prefix-closed set of ids (all logits >= some threshold) whose unnormalised mass reaches ``mass``."""
    window = 8.0
    while True:
        pool = _at_least(logits, universe, top - window) if math.isfinite(window) else (
            universe if universe is not None else np.arange(logits.shape[0]))
        if not math.isfinite(window) or float(np.exp(logits[pool].astype(np.float64) - top).sum()) >= mass:
            return pool
        window = window * 4 if window < 512 else math.inf


def sample(dist: SparseDist, rng: np.random.Generator) -> int:
    """Draw one token id from ``dist``."""
    u = rng.random()
    idx = int(np.searchsorted(np.cumsum(dist.probs), u, side="right"))
    return int(dist.ids[min(idx, len(dist.ids) - 1)])


def accept_draft_token(token: int, p: SparseDist, q: SparseDist, rng: np.random.Generator) -> bool:
    """Accept a draft token x ~ q with probability min(1, p(x)/q(x))."""
    px, qx = p.prob_of(token), q.prob_of(token)
    if qx <= 0.0:
        return False
    return bool(rng.random() < min(1.0, px / qx))


def residual(p: SparseDist, q: SparseDist) -> SparseDist:
    """normalise(max(p - q, 0)): where to sample after a rejection. Falls back to p if p == q exactly."""
    ids = np.union1d(p.ids, q.ids)
    dense_p = np.zeros(ids.shape[0])
    dense_q = np.zeros(ids.shape[0])
    dense_p[np.searchsorted(ids, p.ids)] = p.probs
    dense_q[np.searchsorted(ids, q.ids)] = q.probs
    r = np.maximum(dense_p - dense_q, 0.0)
    total = r.sum()
    if total <= 0.0:
        return p
    keep = r > 0
    return SparseDist(ids[keep].astype(np.int64), r[keep] / total)
