"""RPC benchmark: the target local vs split across two loopback ``outrider rpc-worker`` processes; plain vs speculative.

The draft always runs locally. Each target pass over RPC costs network round trips on top of the compute, so
verifying several drafted tokens per pass should gain more over RPC than locally. Greedy, ``ignore_eos``; tokens/s
are decode speed (prompt excluded), the median of ``--runs`` interleaved runs. Prints a Markdown section and, with
``--out``, appends it to docs/benchmarks.md.

Usage: python tests/benchmarks/bench_rpc.py [--quick] [--runs N] [--tokens N] [--k K] [--threads N] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "integration" / "rpc"))

from rpc_helpers import two_workers  # noqa: E402

from outrider.engine.engine import Engine, PairSpec  # noqa: E402
from outrider.engine.llama.runtime import Backend  # noqa: E402
from outrider.engine.params import ContextSettings, ModelSettings  # noqa: E402
from outrider.engine.speculative import DoneEvent, DraftParams  # noqa: E402
from support.tiny_gguf import TinyShape, make_family  # noqa: E402

PROMPT = "the model is fast and the draft is"


def decode_tps(engine: Engine, tokens: int, k: int) -> tuple[float, float | None]:
    """(decode tokens/s, acceptance) of one greedy reply; k = 0 is plain decoding."""
    prompt = engine.tokenize_prompt(PROMPT)
    done = None
    for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=k), plain=k == 0, ignore_eos=True):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done.stats.decode_tps or 0.0, done.stats.acceptance_rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller target, fewer tokens (a smoke run)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--out", type=Path, default=None, help="append the section to this file (docs/benchmarks.md)")
    args = ap.parse_args()
    shape = TinyShape(n_layer=4, n_embd=256, n_head=4, n_ff=512) if args.quick else TinyShape(
        n_layer=12, n_embd=1024, n_head=16, n_ff=2816)
    tokens = 32 if args.quick else args.tokens
    with tempfile.TemporaryDirectory() as tmp:
        family = make_family(Path(tmp) / "models", shape=shape, extra_layer_scale=0.03, prefix="bench")
        context = ContextSettings(n_ctx=512, threads=args.threads)
        backend = Backend()
        with two_workers(Path(tmp), args.threads) as workers:
            endpoints = tuple(w.endpoint for w in workers)
            engines = {}
            for where, rpc in (("local", ()), ("2 loopback workers", endpoints)):
                engine = Engine(backend)
                engine.load(PairSpec(target=str(family.target), draft=str(family.draft),
                                     target_settings=ModelSettings(rpc=rpc), context=context))
                engines[where] = engine
            results: dict[tuple[str, int], list[float]] = {}
            acceptance: dict[str, float | None] = {}
            for engine in engines.values():  # warm-up
                decode_tps(engine, 8, 0)
                decode_tps(engine, 8, args.k)
            for _ in range(args.runs):
                for where, engine in engines.items():
                    for k in (0, args.k):
                        tps, acc = decode_tps(engine, tokens, k)
                        results.setdefault((where, k), []).append(tps)
                        if k:
                            acceptance[where] = acc
            for engine in engines.values():
                engine.unload()
    section = _table(results, acceptance, args, shape, tokens)
    print(section)
    if args.out is not None:
        with args.out.open("a", encoding="utf-8") as f:
            f.write("\n" + section)
    return 0


def _table(results: dict[tuple[str, int], list[float]], acceptance: dict[str, float | None],
           args: argparse.Namespace, shape: TinyShape, tokens: int) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        f"## RPC: target on two loopback workers vs local — CPU {platform.machine()}, {args.threads} threads, {today}",
        "",
        f"`python tests/benchmarks/bench_rpc.py{' --quick' if args.quick else ''} --threads {args.threads} "
        f"--runs {args.runs} --tokens {tokens} --k {args.k}`. Target {shape.n_layer} layers "
        f"× {shape.n_embd} (F16), draft 1 layer (the target's first, always local), greedy, {tokens} tokens, "
        f"median of {args.runs} interleaved runs, k = {args.k}. The workers are `outrider rpc-worker` processes "
        f"on 127.0.0.1 serving their CPU with {args.threads} thread(s) each; the target's layers are split "
        f"between them by llama.cpp (by free memory).",
        "",
        "| target | acceptance | plain tok/s | speculative tok/s | speculative gain |",
        "|---|---|---|---|---|",
    ]
    for where in ("local", "2 loopback workers"):
        plain = statistics.median(results[(where, 0)])
        spec = statistics.median(results[(where, args.k)])
        acc = acceptance.get(where)
        lines.append(f"| {where} | {acc:.2f} | {plain:.1f} | {spec:.1f} | {spec / plain:.2f}× |"
                     if acc is not None else f"| {where} | — | {plain:.1f} | {spec:.1f} | {spec / plain:.2f}× |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
