"""Benchmark maths shared by ``outrider bench`` and the GUI's "Benchmark this pair" (pure: no llama_cpp, no Qt).

A benchmark runs each prompt ``runs`` times plain and speculative, interleaved so that machine drift hits both
alike; each run contributes its ``stats.to_dict()`` (docs/metrics.md). ``bench_row`` turns one prompt's runs
into the row ``outrider bench --json`` prints (``event: prompt``), ``bench_summary`` the rows into its
``event: summary``; both front ends compute their numbers here, so they can never disagree.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from outrider.engine.autodraft import expected_tokens_per_pass

DEFAULT_BENCH_PROMPTS: tuple[tuple[str, str], ...] = (
    ("code", "Write a Python function that parses a CSV file and returns a list of dictionaries, with type hints "
             "and a docstring."),
    ("structured", "Return a JSON object describing three fictional books with fields title, author, year and "
                   "genres (a list)."),
    ("quoting", "Repeat the following sentence exactly, then summarise it in one line: 'The quick brown fox jumps "
                "over the lazy dog while the farmer watches from the porch and the sun sets behind the hills.'"),
    ("prose", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
)

Runs = Mapping[str, Sequence[Mapping[str, Any]]]  # {"plain": [stats dict, …], "spec": [stats dict, …]}


def stats_dict(stats: Any) -> dict[str, Any]:
    """A run's statistics as the dict the rows are computed from: a mapping, an object with ``to_dict()``
    (``GenerationStats``, the worker's ``Stats``) or another dataclass."""
    if isinstance(stats, Mapping):
        return dict(stats)
    if hasattr(stats, "to_dict"):
        return dict(stats.to_dict())
    return dataclasses.asdict(stats)


def median(values: Sequence[float | None]) -> float:
    """The median of the values that are not None (0.0 when there are none)."""
    clean = [float(v) for v in values if v is not None]
    return float(statistics.median(clean)) if clean else 0.0


def median_or_none(values: Sequence[float | None]) -> float | None:
    """The median of the values that are not None (None when there are none)."""
    clean = [float(v) for v in values if v is not None]
    return float(statistics.median(clean)) if clean else None


def predicted_speedup(spec: Mapping[str, Any], plain: Mapping[str, Any]) -> float | None:
    """Speed-up the cost model predicts from the measured per-token acceptance and costs (docs/metrics.md):
    E(a, k) * c_plain / (k * c_draft + c_verify), with k the mean drafted tokens per pass.

    ``a`` is ``token_acceptance`` = accepted / (accepted + rejections), the per-token acceptance the geometric
    E(a, k) assumes — not ``acceptance_rate`` (accepted / drafted), which also counts the draft tokens after a
    rejection that were never judged on their own, and so under-predicts. (Records from before
    ``token_acceptance`` existed fall back to ``acceptance_rate``.)"""
    if not spec["passes"] or not plain["passes"] or not spec["drafted"]:
        return 1.0 if not spec["drafted"] else None
    a = spec.get("token_acceptance")
    if a is None:
        a = spec.get("acceptance_rate") or 0.0
    k = spec["drafted"] / spec["passes"]
    c_plain = plain["verify_s"] / plain["passes"]
    c_draft = spec["draft_s"] / spec["drafted"]
    c_verify = spec["verify_s"] / spec["passes"]
    e = _expected_fractional(expected_tokens_per_pass, float(a), float(k))
    return float(e * c_plain / (k * c_draft + c_verify))


def _expected_fractional(fn: Callable[[float, int], float], a: float, k: float) -> float:
    """E(a, k) for a fractional mean draft length k: linear between the whole lengths either side."""
    lo = int(k)
    frac = k - lo
    value: float = (1 - frac) * fn(a, lo) + frac * fn(a, lo + 1)
    return value


def bench_row(label: str, prompt: str, runs: Runs) -> dict[str, Any]:
    """One prompt's results from its interleaved plain and speculative runs (``stats.to_dict()`` of each).

    ``ab_speedup`` is the measured A/B: ``spec_decode_tps`` (median speculative decode tok/s) over
    ``plain_decode_tps`` (median plain decode tok/s), from whole runs of each — named apart from the engine's
    in-reply ``speedup`` and ``plain_tps`` (``GenerationStats``), which are other figures. ``predicted_speedup``
    is the cost model's, from the per-token acceptance ``token_acceptance`` and the measured draft/verify costs.
    ``in_reply_speedup`` (median, with the medians of its intervals' ends ``in_reply_speedup_low``/``_high``) is
    the engine's own figure for the speculative runs.
    """
    plain_runs, spec_runs = runs["plain"], runs["spec"]
    plain_tps = median([r["decode_tps"] for r in plain_runs])
    spec_tps = median([r["decode_tps"] for r in spec_runs])
    measured = spec_tps / plain_tps if plain_tps else 0.0
    predicted = median([predicted_speedup(s, p) for s, p in zip(spec_runs, plain_runs, strict=True)])
    last = spec_runs[-1]
    return {
        "label": label,
        "prompt": prompt[:60],
        "plain_decode_tps": plain_tps,
        "spec_decode_tps": spec_tps,
        "acceptance_rate": median([r["acceptance_rate"] for r in spec_runs]),
        "token_acceptance": median_or_none([r.get("token_acceptance") for r in spec_runs]),
        "tokens_per_pass": median([r["tokens_per_pass"] for r in spec_runs]),
        "k_mean": last["k_mean"],
        "ab_speedup": measured,
        "predicted_speedup": predicted,
        "measured_over_predicted": measured / predicted if predicted else None,
        "in_reply_speedup": median_or_none([r.get("speedup") for r in spec_runs]),
        "in_reply_speedup_low": median_or_none([r.get("speedup_low") for r in spec_runs]),
        "in_reply_speedup_high": median_or_none([r.get("speedup_high") for r in spec_runs]),
    }


def bench_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The medians over every prompt's row."""
    return {
        "prompts": len(rows),
        "median_ab_speedup": median([r["ab_speedup"] for r in rows]),
        "median_predicted_speedup": median_or_none([r.get("predicted_speedup") for r in rows]),
        "median_acceptance": median([r["acceptance_rate"] for r in rows]),
        "median_token_acceptance": median_or_none([r.get("token_acceptance") for r in rows]),
    }


def slower_labels(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The prompts on which speculative decoding was slower than plain (measured speed-up below 1)."""
    return [str(r["label"]) for r in rows if r.get("ab_speedup") is not None and r["ab_speedup"] < 1.0]
