"""An independent reference for the engine's exactness tests: plain llama.cpp, one token at a time.

Nothing here uses Outrider's engine (no ``ModelContext``, no ``SpeculativeDecoder``, no ``sampling.py``): the model
is driven through llama-cpp-python's low-level API directly (``llama_batch_get_one`` + ``llama_decode``, one token
per call, exactly as target-only decoding would), the filter chain is re-implemented from llama.cpp's samplers
(top-k -> top-p -> min-p -> temperature, ``src/llama-sampling.cpp``), and target distributions are computed
exactly — at later positions as exact marginals, by enumerating every prefix in the filtered support.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Sequence
from pathlib import Path

import llama_cpp.llama_cpp as ll
import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float64]


@dataclasses.dataclass(frozen=True)
class Filters:
    """llama.cpp's default chain order: top-k, top-p, min-p, then temperature (0 / 1.0 / 0.0 disable)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0


class AmbiguousFilterError(AssertionError):
    """A filter threshold falls (numerically) on a candidate: batched and single-token logits could disagree."""


def filtered_distribution(
    logits: Sequence[float] | np.ndarray, f: Filters, *, margin: float = 1e-6, tie: float | None = None
) -> dict[int, float]:
    """token -> probability after llama.cpp's top-k, top-p, min-p and temperature (a written-out reference).

    Raises AmbiguousFilterError when a threshold lies within ``margin`` of a candidate, or (``tie``, in logits,
    ``margin`` if not given) two candidates either side of a top-k or top-p cut, or a candidate and the min-p
    threshold, are that close: so that a test never depends on rounding at a filter boundary. A batched pass moves
    a logit by up to a few thousandths on a CPU (``ReferenceModel.batch_noise``): a tie of 4e-5 logits across a
    top-p cut let the engine sample the token the reference cut (an AMD EPYC).
    """
    tie = margin if tie is None else tie
    row = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-row, kind="stable")
    if f.top_k > 0:
        if f.top_k < len(order) and abs(row[order[f.top_k - 1]] - row[order[f.top_k]]) < tie:
            raise AmbiguousFilterError(f"top-k boundary tie at rank {f.top_k}")
        order = order[: f.top_k]
    cand = row[order]
    probs = np.exp(cand - cand[0])
    probs /= probs.sum()
    keep = len(order)
    if f.top_p < 1.0:
        # llama_sampler_top_p: keep the smallest prefix whose cumulative probability reaches top_p.
        cum = np.cumsum(probs)
        keep = int(np.argmax(cum >= f.top_p)) + 1 if cum[-1] >= f.top_p else len(order)
        if np.any(np.abs(cum[: len(order) - 1] - f.top_p) < margin):
            raise AmbiguousFilterError("top-p boundary within the margin")
        if keep < len(order) and cand[keep - 1] - cand[keep] < tie:
            raise AmbiguousFilterError(f"a tie across the top-p cut at rank {keep}")
    if f.min_p > 0.0:
        # llama_sampler_min_p: keep logits >= max logit + log(min_p)
        threshold = cand[0] + np.log(f.min_p)
        if np.any(np.abs(cand[:keep] - threshold) < tie):
            raise AmbiguousFilterError("min-p boundary within the margin")
        keep = min(keep, int(np.count_nonzero(cand[:keep] >= threshold)))
    keep = max(1, keep)
    kept = cand[:keep]
    scaled = np.exp((kept - kept[0]) / f.temperature)
    scaled /= scaled.sum()
    return {int(t): float(p) for t, p in zip(order[:keep], scaled, strict=True)}


class ReferenceModel:
    """A llama.cpp model and one context, decoded one token per ``llama_decode`` call (no batching)."""

    def __init__(self, path: str | os.PathLike[str], *, n_ctx: int = 256, threads: int = 1) -> None:
        ll.llama_backend_init()
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self._model = ll.llama_model_load_from_file(os.fsencode(str(Path(path))), mparams)
        if not self._model:
            raise RuntimeError(f"reference: cannot load {path}")
        self._vocab = ll.llama_model_get_vocab(self._model)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self._vocab))
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_ctx
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        self._ctx = ll.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise RuntimeError("reference: cannot create a context")
        self._mem = ll.llama_get_memory(self._ctx)
        self._cached: list[int] = []
        self._last: Logits | None = None

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        buf = (ll.llama_token * (len(data) + 8))()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, len(buf), add_special, False)
        assert n >= 0
        return list(buf[:n])

    def _decode_one(self, token: int) -> None:
        arr = (ll.llama_token * 1)(token)
        batch = ll.llama_batch_get_one(arr, 1)
        status = ll.llama_decode(self._ctx, batch)
        if status != 0:
            raise RuntimeError(f"reference: llama_decode returned {status}")
        ptr = ll.llama_get_logits_ith(self._ctx, -1)
        self._last = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64)
        self._cached.append(token)

    def logits_after(self, tokens: Sequence[int]) -> Logits:
        """Logits for the position after ``tokens`` (keeps the longest cached prefix, one token per decode)."""
        tokens = list(tokens)
        keep = 0
        limit = min(len(self._cached), len(tokens))
        while keep < limit and self._cached[keep] == tokens[keep]:
            keep += 1
        if keep == len(tokens) == len(self._cached) and self._last is not None:
            return self._last
        keep = min(keep, len(tokens) - 1)  # the last token is always re-evaluated, for its logits
        if keep < len(self._cached):
            if not ll.llama_memory_seq_rm(self._mem, 0, keep, -1):
                # A recurrent state cannot be rolled back (this context keeps no snapshots): start afresh.
                ll.llama_memory_clear(self._mem, True)
                keep = 0
            del self._cached[keep:]
        for token in tokens[keep:]:
            self._decode_one(token)
        assert self._last is not None
        return self._last

    def greedy(self, prompt: Sequence[int], n: int) -> list[int]:
        """Target-only greedy decoding: ``n`` tokens, each the argmax of a one-token evaluation."""
        out: list[int] = []
        for _ in range(n):
            out.append(int(np.argmax(self.logits_after([*prompt, *out]))))
        return out

    def batched_rows(self, tokens: Sequence[int], start: int, chunk: int) -> list[Logits]:
        """Logits for every position after ``tokens[:start]``, evaluated afresh in batches as a verify pass does:
        ``tokens[:start]`` at once, then ``chunk`` tokens per decode. (The one place this model batches: to
        measure what batching changes, ``batch_noise``; the cache is cleared before and after.)"""
        ll.llama_memory_clear(self._mem, True)
        self._cached, self._last = [], None
        rows: list[Logits] = []
        bounds = [0, start, *range(start + chunk, len(tokens), chunk), len(tokens)]
        for lo, hi in itertools.pairwise(bounds):
            if hi <= lo:
                continue
            batch = ll.llama_batch_init(hi - lo, 0, 1)
            try:
                for j, token in enumerate(tokens[lo:hi]):
                    batch.token[j] = token
                    batch.pos[j] = lo + j
                    batch.n_seq_id[j] = 1
                    batch.seq_id[j][0] = 0
                    batch.logits[j] = 1
                batch.n_tokens = hi - lo
                status = ll.llama_decode(self._ctx, batch)
                if status != 0:
                    raise RuntimeError(f"reference: llama_decode returned {status}")
                first = max(start - 1, lo) - lo
                for j in range(first, hi - lo):
                    ptr = ll.llama_get_logits_ith(self._ctx, j)
                    rows.append(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64).copy())
            finally:
                ll.llama_batch_free(batch)
        ll.llama_memory_clear(self._mem, True)
        return rows

    def batch_noise(self, sequences: Sequence[tuple[Sequence[int], Sequence[int]]], chunk: int = 4) -> float:
        """The largest difference of one logit between this model's one-token evaluation and a batched one of the
        same position, over (prompt, continuation) ``sequences``: how far batching alone moves a logit on this
        CPU. Measured: 0.0028 (``lfm2``) and 0.0032 (``qwen35``) for the generated hybrid families on an AMD EPYC,
        where a fixed 0.001 tie threshold failed a greedy identity test on a top-2 gap of 0.0014."""
        worst = 0.0
        for prompt, continuation in sequences:
            seq = [*prompt, *continuation]
            one = [self.logits_after(seq[:i]).copy() for i in range(len(prompt), len(seq) + 1)]
            batched = self.batched_rows(seq, len(prompt), chunk)
            for a, b in zip(one, batched, strict=True):
                worst = max(worst, float(np.max(np.abs(a - b))))
        return worst

    def top2_gap(self, tokens: Sequence[int]) -> float:
        row = np.sort(self.logits_after(tokens))
        return float(row[-1] - row[-2])

    def distribution(self, tokens: Sequence[int], f: Filters, *, tie: float | None = None) -> dict[int, float]:
        return filtered_distribution(self.logits_after(tokens), f, tie=tie)

    def marginals(self, prompt: Sequence[int], f: Filters, n_positions: int, *,
                  tie: float | None = None) -> list[dict[int, float]]:
        """Exact marginal distribution of each of the first ``n_positions`` sampled tokens (prefix enumeration);
        ``tie``: as ``filtered_distribution``'s, for every prefix."""
        out: list[dict[int, float]] = [{} for _ in range(n_positions)]
        frontier: list[tuple[list[int], float]] = [([], 1.0)]
        for pos in range(n_positions):
            nxt: list[tuple[list[int], float]] = []
            for prefix, weight in frontier:
                dist = self.distribution([*prompt, *prefix], f, tie=tie)
                for token, prob in dist.items():
                    out[pos][token] = out[pos].get(token, 0.0) + weight * prob
                    if pos + 1 < n_positions:
                        nxt.append(([*prefix, token], weight * prob))
            frontier = nxt
        return out

    def close(self) -> None:
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> ReferenceModel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def tie_gap(noise: float) -> float:
    """Two top logits closer than this are a tie that batching may flip: twice the measured ``batch_noise`` (each of
    the two may move by it), never below 0.001. A wrong rollback or cache moves the top-2 gap far more."""
    return max(1e-3, 2.0 * noise)


def sample_reference(rng: np.random.Generator, dist: dict[int, float]) -> int:
    """One draw from ``dist`` (the reference sampler of plain decoding)."""
    tokens = list(dist)
    probs = np.fromiter(dist.values(), dtype=np.float64)
    return int(tokens[int(rng.choice(len(tokens), p=probs / probs.sum()))])

