"""Micro-benchmark: the cost of building a sampling distribution and of p-min's confidence on a large row.

    python tests/benchmarks/bench_sampling.py [--vocab 152064] [--repeat 300]

Prints a table (median microseconds per call) for a Qwen-sized vocabulary. Goals ([truth] issue): a row well
under 1 ms with every filter setting, top-k 0 included; p-min's confidence under 0.1 ms per draft token. The
"full sort" row is the previous implementation's approach (argsort of the whole row), for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from outrider.engine.params import SamplingParams
from outrider.engine.sampling import distribution, top_probability


def _median_us(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=152064)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    # Logits shaped like a language model's: a few plausible tokens well above a broad low tail.
    logits = (rng.standard_normal(args.vocab) * 2.5).astype(np.float32)
    logits[rng.choice(args.vocab, 20, replace=False)] += 12.0
    cases = {
        "defaults (top-k 40, top-p 0.95, min-p 0.05)": SamplingParams(1.0, 40, 0.95, 0.05),
        "top-k 0, top-p 0.95, min-p 0.05": SamplingParams(1.0, 0, 0.95, 0.05),
        "top-k 0, top-p 0.95, min-p 0": SamplingParams(1.0, 0, 0.95, 0.0),
        "top-k 0, top-p 1, min-p 0 (no filter)": SamplingParams(1.0, 0, 1.0, 0.0),
    }
    print(f"vocabulary {args.vocab}, median of {args.repeat} calls")
    print("| operation | µs per call |")
    print("|---|---|")
    for name, params in cases.items():
        print(f"| distribution: {name} | {_median_us(lambda p=params: distribution(logits, p), args.repeat):.0f} |")
    print(f"| p-min confidence (top_probability) | {_median_us(lambda: top_probability(logits), args.repeat):.0f} |")
    full_sort = _median_us(lambda: np.argsort(-logits, kind="stable"), max(10, args.repeat // 10))
    print(f"| for comparison: full sort of the row | {full_sort:.0f} |")


if __name__ == "__main__":
    main()
