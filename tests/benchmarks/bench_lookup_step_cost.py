"""What history lookup costs per decoding step, without a model: the index's search, and the chain's whole step.

    python tests/benchmarks/bench_lookup_step_cost.py [--corpus N] [--steps N] [--quick]

On free prose history lookup finds nothing and automatic k switches prompt lookup off, so what the chain costs
there is pure overhead on every step of a reply (the goal: never below 0.97x plain decoding). This measures it
deterministically, with ``time.perf_counter_ns`` over many calls (a timing: run it on a quiet machine):

- ``longest_match`` on an index of --corpus tokens (Zipf-distributed ids over a 49,152-token vocabulary, as text
  is): a query that matches nothing, one whose last 4 tokens are frequent in the corpus but extend no further, and
  a 64-token copy of the corpus (the longest match there is);
- the chain history lookup + prompt lookup with automatic k (``ChainDraft.propose`` + ``settle``, as the decoder
  calls them) on a prose-like stream (Zipf ids, nothing repeated), each verify pass priced at 15 ms and 10 % more
  per extra token (SmolLM2-135M on this CPU), after automatic k has settled: per step, and as a share of the
  15 ms pass.

Run it against another checkout (``PYTHONPATH=<that tree>/app``) to compare implementations.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from outrider.engine.chain_draft import ChainDraft
from outrider.engine.drafters import PromptLookupDraft
from outrider.engine.history_draft import HistoryLookupDraft
from outrider.engine.history_index import HistoryIndex
from outrider.engine.params import SamplingParams

VOCAB = 49152
PASS_S = 0.015  # one target pass of SmolLM2-135M on this CPU
PER_TOKEN = 0.10  # extra verify cost per extra token of a batch, as a share of a pass


def zipf_tokens(rng: np.random.Generator, n: int) -> list[int]:
    """Token ids distributed like words of text (Zipf, exponent 1.1), within the vocabulary."""
    return [int(t) % VOCAB for t in rng.zipf(1.1, n)]


def per_call_ns(call: Callable[[], object], repeats: int) -> float:
    """Median over 5 rounds of the mean time of ``repeats`` calls (ns)."""
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(repeats):
            call()
        rounds.append((time.perf_counter_ns() - t0) / repeats)
    return statistics.median(rounds)


def search_costs(corpus_tokens: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    index = HistoryIndex(Path("unused.npz"))
    per_message = 500
    index.add((i, i, 0.0, zipf_tokens(rng, per_message)) for i in range(max(1, corpus_tokens // per_message)))
    corpus = index.corpus.tolist()
    index.longest_match(corpus[:64])  # build the sorted hashes once
    nothing = [VOCAB + 1, VOCAB + 2, VOCAB + 3, VOCAB + 4]
    values, counts = np.unique(np.array([t for t in corpus[:20000] if t >= 0]), return_counts=True)
    common = [int(v) for v in values[np.argsort(-counts)[:4]]]
    frequent = next(([int(x) for x in corpus[i - 4 : i]] for i in range(4, len(corpus))
                     if corpus[i - 4] in common and all(t >= 0 for t in corpus[i - 4 : i])), common)
    copy = corpus[1000:1064]
    return {
        "no match": per_call_ns(lambda: index.longest_match(nothing), repeats),
        "frequent 4 tokens": per_call_ns(lambda: index.longest_match([VOCAB + 9, *frequent]), repeats),
        "64-token copy": per_call_ns(lambda: index.longest_match(copy), repeats),
    }


def chain_step_cost(steps: int) -> tuple[float, list[int]]:
    """Mean ns of ``propose`` + ``settle`` per step over ``steps`` steps after a 400-step warm-up; the members'
    k after the warm-up."""
    rng = np.random.default_rng(1)
    index = HistoryIndex(Path("unused.npz"))
    index.add((i, i, 0.0, zipf_tokens(rng, 500)) for i in range(20))  # an earlier history of other texts
    chain = ChainDraft([HistoryLookupDraft(index, None, lambda text: []), PromptLookupDraft()])
    chain.set_automatic(16)
    committed = zipf_tokens(rng, 60)
    stream = zipf_tokens(rng, steps + 400)
    chain.prefill(committed)
    greedy, draw = SamplingParams(), np.random.default_rng(0)

    def step(i: int) -> None:
        draft = chain.propose(committed, 16, greedy, draw, 0.0, 0, reach=16)
        accepted = 0
        while accepted < len(draft.tokens) and draft.tokens[accepted] == stream[i + accepted]:
            accepted += 1
        batch = 1 + len(draft.tokens)
        chain.settle(draft, accepted, batch=batch, verify_s=PASS_S * (1 + PER_TOKEN * (batch - 1)))
        committed.append(stream[i])

    for i in range(400):
        step(i)
    caps = [m.cap for m in chain.members]
    t0 = time.perf_counter_ns()
    for i in range(400, 400 + steps):
        step(i)
    return (time.perf_counter_ns() - t0) / steps, caps


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--corpus", type=int, default=1_000_000, help="tokens in the history index")
    ap.add_argument("--steps", type=int, default=20000, help="decoding steps timed for the chain")
    ap.add_argument("--quick", action="store_true", help="a 100k-token index, 2000 steps")
    args = ap.parse_args()
    corpus, steps = (100_000, 2000) if args.quick else (args.corpus, args.steps)
    repeats = max(200, steps // 10)
    print(f"{platform.machine()}, Python {platform.python_version()}, load average {os.getloadavg()}, "
          f"outrider from {Path(sys.modules['outrider'].__file__ or '').parent}")
    searches = search_costs(corpus, repeats)
    print(f"\n| longest_match on {corpus:,} tokens | µs per call |\n|---|---|")
    for name, ns in searches.items():
        print(f"| {name} | {ns / 1000:.1f} |")
    ns, caps = chain_step_cost(steps)
    print(f"\n| chain history + prompt lookup, automatic k, prose | µs per step | share of a {PASS_S * 1000:.0f} ms "
          f"pass | members' k after warm-up |\n|---|---|---|---|")
    print(f"| propose + settle | {ns / 1000:.1f} | {ns / 1e9 / PASS_S:.2%} | {caps} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
