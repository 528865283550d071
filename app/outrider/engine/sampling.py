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

import numpy as np
import numpy.typing as npt

from outrider.engine.params import SamplingParams

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
ProbArray = npt.NDArray[np.float64]




@dataclasses.dataclass(frozen=True)
class SparseDist:
    """A distribution over ``ids`` (sorted by decreasing probability); ``probs`` sums to 1."""

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


def greedy_confidence(logits: FloatArray, token: int) -> float:
    """Softmax probability of ``token`` under temperature 1 (the draft's confidence for ``p_min``)."""
    peak = float(logits[token])
    return float(1.0 / np.exp(logits - peak, dtype=np.float64).sum())


def distribution(logits: FloatArray, params: SamplingParams) -> SparseDist:
    """The sampling distribution after top-k, top-p, min-p and temperature (llama.cpp's order)."""
    n = logits.shape[0]
    if 0 < params.top_k < n:
        ids = np.argpartition(logits, n - params.top_k)[n - params.top_k :]
    else:
        ids = np.arange(n)
    cand = logits[ids].astype(np.float64)
    order = np.argsort(-cand, kind="stable")
    ids, cand = ids[order].astype(np.int64), cand[order]
    p = np.exp(cand - cand[0])
    p /= p.sum()
    keep = len(ids)
    if params.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), params.top_p) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(p[:keep] >= params.min_p * p[0])))
    keep = max(1, keep)
    ids, cand = ids[:keep], cand[:keep]
    scaled = np.exp((cand - cand[0]) / params.temperature)
    return SparseDist(ids, scaled / scaled.sum())


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
