"""Token choice for the target and the draft, and the exact speculative-sampling acceptance rule.

Temperature 0 is greedy (argmax). Temperature > 0 builds a sparse distribution in llama.cpp's default chain
order — top-k, top-p, min-p, then temperature — and applies exactly the same transform to target (p) and draft
(q), which is what makes speculative sampling preserve the target distribution:

    accept draft token x ~ q with probability min(1, p(x) / q(x));
    on rejection sample from normalise(max(p - q, 0));  after k acceptances sample the bonus token from p.

(Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"; Chen et al. 2023.)
Everything works on numpy views of llama.cpp's logits; only the surviving candidates are copied.

Two samplers (``SamplingParams.sampler``), both exact in distribution, both drawing every random number from a
counter-based generator keyed by (seed, absolute position, purpose) (:class:`KeyedDraws`), so no draw depends on how
many numbers earlier steps consumed:

* ``coupled`` — Gumbel-max coupling (Daliri et al. 2025, "Coupling without communication and drafter-invariant
  speculative decoding"): the token at position i is argmax_t log p_i(t) + G_i(t), with G_i(t) standard Gumbel noise
  fixed by (seed, i, t). The draft proposes argmax_t log q_i(t) + G_i(t) with the *same* noise, and a draft token is
  accepted iff it equals the target's own choice. The emitted token is thus the target's Gumbel-max choice whatever
  was drafted: a seeded reply is the same token for token with any drafter, any k, or none (drafter-invariant), and
  exactly distributed as p (Gumbel-max is exact sampling). Acceptance is at least (1 - TV) / (1 + TV).
* ``rejection`` — the speculative-sampling rule above, acceptance 1 - TV(p, q); with a fixed seed the text depends on
  what was drafted (on k, on automatic k's choices).
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import Callable, Sequence
from typing import Any

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
    """Draw one token id from ``dist`` with a uniform from ``rng``."""
    return sample_at(dist, rng.random())


def sample_at(dist: SparseDist, u: float) -> int:
    """The token whose cumulative-probability interval (in ``dist``'s order) holds ``u`` in [0, 1): inverse CDF."""
    idx = int(np.searchsorted(np.cumsum(dist.probs), u, side="right"))
    return int(dist.ids[min(idx, len(dist.ids) - 1)])


def accept_draft_token(token: int, p: SparseDist, q: SparseDist, u: float) -> bool:
    """Accept a draft token x ~ q with probability min(1, p(x)/q(x)), given a uniform ``u`` in [0, 1)."""
    px, qx = p.prob_of(token), q.prob_of(token)
    if qx <= 0.0:
        return False
    return bool(u < min(1.0, px / qx))


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


def rank_mass(dist: SparseDist, token: int) -> tuple[float, float, float]:
    """(mass ranked before ``token``, probability of ``token``, probability of the likeliest token) in ``dist``,
    tokens ranked by decreasing probability, ties by id: what a randomised probability-integral transform of
    ``token`` needs (``outrider verify``). A token outside the support gives (1.0, 0.0, top)."""
    top = float(dist.probs.max())
    hit = np.flatnonzero(dist.ids == token)
    if not hit.size:
        return 1.0, 0.0, top
    px = float(dist.probs[hit[0]])
    before = (dist.probs > px) | ((dist.probs == px) & (dist.ids < token))
    return float(dist.probs[before].sum()), px, top


# ======================================================================================== keyed draws ==
_MASK32 = np.uint64(0xFFFF_FFFF)
_PHILOX_M0, _PHILOX_M1 = np.uint64(0xD251_1F53), np.uint64(0xCD9E_8D57)
_PHILOX_W0, _PHILOX_W1 = 0x9E37_79B9, 0xBB67_AE85
PHILOX_ROUNDS = 10

STREAM_GUMBEL = 0  # coupled: the noise of token t at a position (counter word 0 = t)
STREAM_DRAFT = 1  # rejection: the uniform a draft model draws its token at a position with
STREAM_ACCEPT = 2  # rejection: the uniform of the accept/reject decision at a position
STREAM_TARGET = 3  # rejection: the uniform of the target's own draw (plain step, residual, bonus) at a position

# The largest Gumbel value a 53-bit uniform can give: u <= 1 - 2^-54, so -log(-log u) <= 54 ln 2 = 37.43. A token
# whose log-probability is this far below the best score found cannot win the argmax, so it needs no noise.
GUMBEL_MAX = 37.5
SMALL_SUPPORT = 256  # supports up to this size get noise for every token at once (one generator call)


def philox4x32(counter: tuple[npt.NDArray[Any], ...], key: tuple[int, int]) -> tuple[npt.NDArray[np.uint64], ...]:
    """Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"), vectorised.

    ``counter``: four uint64 arrays of 32-bit words (broadcastable); ``key``: two 32-bit words. Returns the four
    32-bit output words (as uint64 arrays). A bijection of the counter per key, so distinct counters give
    independent-looking outputs: token i's noise at position j is one evaluation, with no stream to advance.
    """
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in counter)
    k0, k1 = key[0] & 0xFFFF_FFFF, key[1] & 0xFFFF_FFFF
    for r in range(PHILOX_ROUNDS):
        if r:
            k0, k1 = (k0 + _PHILOX_W0) & 0xFFFF_FFFF, (k1 + _PHILOX_W1) & 0xFFFF_FFFF
        p0, p1 = _PHILOX_M0 * c0, _PHILOX_M1 * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & _MASK32, \
            (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & _MASK32
    return c0, c1, c2, c3


@dataclasses.dataclass(frozen=True)
class KeyedDraws:
    """Every random number of one seeded reply, as a pure function of (seed, absolute position, stream, token).

    The position is the token's index in the whole context (prompt included), so the draws of a position are the
    same whether earlier positions were decoded plainly, drafted, accepted or resampled, and whatever automatic k
    chose: that is what makes a seeded reply reproducible. Seeds are taken modulo 2^64 (the Philox key).
    """

    seed: int

    def _words(self, ids: npt.ArrayLike, positions: npt.ArrayLike, stream: int) -> tuple[npt.NDArray[np.uint64], ...]:
        pos = np.asarray(positions, dtype=np.uint64)
        key = (self.seed & 0xFFFF_FFFF, (self.seed >> 32) & 0xFFFF_FFFF)
        counter = (np.asarray(ids, dtype=np.uint64), pos & _MASK32, np.asarray(stream, dtype=np.uint64),
                   pos >> np.uint64(32))
        return philox4x32(counter, key)

    def uniforms(self, ids: npt.ArrayLike, positions: npt.ArrayLike, stream: int) -> ProbArray:
        """53-bit uniforms in (0, 1), one per (id, position) pair (broadcast)."""
        x0, x1, _, _ = self._words(ids, positions, stream)
        bits = (x0 << np.uint64(21)) | (x1 >> np.uint64(11))
        return (bits.astype(np.float64) + 0.5) * 2.0**-53

    def uniform(self, position: int, stream: int) -> float:
        """The one uniform of ``stream`` at ``position`` (the rejection sampler's draws)."""
        return float(self.uniforms(0, position, stream))

    def gumbel(self, ids: npt.ArrayLike, positions: npt.ArrayLike) -> ProbArray:
        """Standard Gumbel noise G(t) for tokens ``ids`` at ``positions``: -log(-log U)."""
        return -np.log(-np.log(self.uniforms(ids, positions, STREAM_GUMBEL)))


def resolve_seed(params: SamplingParams) -> SamplingParams:
    """``params`` with a concrete sampler and seed: ``auto`` is coupled for a seeded request, rejection for an
    unseeded one (decided before the seed is filled in); the seed is its own or a fresh random one (an unseeded
    reply is still one keyed stream, so the draft and the target share their noise)."""
    if params.sampler == "auto":
        params = dataclasses.replace(params, sampler="coupled" if params.seed is not None else "rejection")
    if params.seed is not None:
        return params
    return dataclasses.replace(params, seed=secrets.randbits(63))


def draws_of(params: SamplingParams) -> KeyedDraws:
    """The keyed draws of a request whose seed :func:`resolve_seed` made concrete."""
    if params.seed is None:
        raise ValueError("the seed is not resolved (resolve_seed)")
    return KeyedDraws(params.seed)


def gumbel_argmax(dists: Sequence[SparseDist], positions: Sequence[int], draws: KeyedDraws) -> list[int]:
    """For each (dist, position): argmax over the support of log dist(t) + G_position(t) — an exact sample of dist.

    Noise is computed only for tokens that can win: a support of up to ``SMALL_SUPPORT`` tokens gets noise for
    every token; a larger one (no filter) first scores its likeliest token, then only the tokens whose
    log-probability is within ``GUMBEL_MAX`` of that score. Two generator calls for all rows together.
    """
    logps = [np.log(np.maximum(d.probs, 1e-300)) for d in dists]
    heads: list[npt.NDArray[np.int64]] = []
    for d, lp in zip(dists, logps, strict=True):
        heads.append(np.arange(d.ids.shape[0]) if d.ids.shape[0] <= SMALL_SUPPORT else np.array([int(np.argmax(lp))]))
    noise = _noise_rows(dists, heads, positions, draws)
    choices: list[int] = []
    tails: list[npt.NDArray[np.int64]] = []
    best: list[tuple[float, int]] = []
    for d, lp, head, g in zip(dists, logps, heads, noise, strict=True):
        scores = lp[head] + g
        j = int(np.argmax(scores))
        best.append((float(scores[j]), int(head[j])))
        if head.shape[0] == d.ids.shape[0]:
            tails.append(np.empty(0, dtype=np.int64))
        else:
            tail = np.flatnonzero(lp > best[-1][0] - GUMBEL_MAX)
            tails.append(tail[tail != head[0]])
    tail_noise = _noise_rows(dists, tails, positions, draws)
    for d, lp, tail, g, (score, index) in zip(dists, logps, tails, tail_noise, best, strict=True):
        if tail.shape[0]:
            scores = lp[tail] + g
            j = int(np.argmax(scores))
            if scores[j] > score:
                index = int(tail[j])
        choices.append(int(d.ids[index]))
    return choices


def _noise_rows(dists: Sequence[SparseDist], rows: Sequence[npt.NDArray[np.int64]], positions: Sequence[int],
                draws: KeyedDraws) -> list[ProbArray]:
    """Gumbel noise of ``dists[r].ids[rows[r]]`` at ``positions[r]``, all rows in one generator call."""
    sizes = [r.shape[0] for r in rows]
    if not sum(sizes):
        return [np.empty(0) for _ in rows]
    ids = np.concatenate([d.ids[r] for d, r in zip(dists, rows, strict=True)])
    pos = np.repeat(np.asarray(positions, dtype=np.int64), sizes)
    flat = draws.gumbel(ids, pos)
    return list(np.split(flat, np.cumsum(sizes)[:-1]))


def draft_token(q: SparseDist, params: SamplingParams, position: int) -> int:
    """The token a sampling draft proposes at absolute ``position`` from its distribution ``q``: the Gumbel-max
    choice with the target's noise (coupled) or an inverse-CDF draw from the draft's own keyed stream (rejection)."""
    draws = draws_of(params)
    if params.sampler == "coupled":
        return gumbel_argmax([q], [position], draws)[0]
    return sample_at(q, draws.uniform(position, STREAM_DRAFT))


def verify_sampled(tokens: Sequence[int], target_dist: Callable[[int], SparseDist], qs: Sequence[SparseDist],
                   params: SamplingParams, position: int) -> tuple[int, int]:
    """The exact verification of a sampled draft: ``tokens`` proposed at ``position``, ``position + 1``, …, with
    proposal distributions ``qs``; ``target_dist(i)`` is the target's distribution at row i (0..len(tokens), the
    last one for the bonus token). Returns (tokens accepted, the target's token after them).

    coupled: the target's Gumbel-max choice at every row (noise for all rows in one generator call), accepted while
    the draft equals it. rejection: accept x with probability min(1, p(x)/q(x)); at the first rejection draw from
    the residual (rows after it are never computed).
    """
    draws = draws_of(params)
    n = len(tokens)
    if params.sampler == "coupled":
        choices = gumbel_argmax([target_dist(i) for i in range(n + 1)], [position + i for i in range(n + 1)], draws)
        for i, token in enumerate(tokens):
            if token != choices[i]:
                return i, choices[i]
        return n, choices[n]
    for i, token in enumerate(tokens):
        p, q = target_dist(i), qs[i]
        if not accept_draft_token(token, p, q, draws.uniform(position + i, STREAM_ACCEPT)):
            return i, sample_at(residual(p, q), draws.uniform(position + i, STREAM_TARGET))
    return n, sample_at(target_dist(n), draws.uniform(position + n, STREAM_TARGET))
