"""MTP drafting against plain decoding, at depth 1, 2, 3 and automatic, on generated MTP models.

    python tests/benchmarks/bench_mtp.py [--quick] [--runs N] [--tokens N] [--threads N] [--heads H,...] [--cuda]

Models (``tests/support/mtp_gguf.py``, dense ``glm4moe``: a trunk of --layers x --width F16 blocks and one NextN
block): an agreeing head (the target's next token ~90% of the time), and an unrelated head (hidden-state noise
large enough that its drafts are almost never accepted: MTP cannot pay). Each run resets automatic k (a cold
start, as after a load) and times, interleaved in one process: plain decoding, MTP at depth 1, 2, 3, and automatic
depth — long replies (--tokens) and short ones (--short tokens). Tokens/s are decode speed (prompt excluded),
medians over the runs; the ratios are computed within this run.

Goals ([reach] issue): automatic depth >= 0.95x the best fixed depth where MTP pays, and >= 0.97x plain where it
cannot (the unrelated head). ``--cuda`` offloads every layer (the numbers then mean a GPU; the script is the same).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from outrider.engine.params import ContextSettings, DraftParams, ModelSettings  # noqa: E402
from outrider.engine.session import Engine, PairSpec  # noqa: E402
from outrider.engine.speculative import DoneEvent  # noqa: E402
from support.mtp_gguf import MtpShape, make_mtp_models  # noqa: E402

CACHE = ROOT / ".cache" / "bench-mtp"
PROMPT = "the model is fast and the draft is"
DEPTHS: list[int | None] = [1, 2, 3, None]
HEADS = {"agreeing head": {"hidden_noise": 0.05}, "unrelated head": {"hidden_noise": 2.0}}


def one_reply(engine: Engine, prompt: list[int], tokens: int, k: int | None, *, plain: bool = False) -> float:
    """Decode tok/s of one reply; ``k=None`` is automatic depth from a cold start."""
    if k is None:
        engine._decoder_or_raise().auto_policy = None
    done = None
    for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=k), plain=plain, ignore_eos=True):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done.stats.decode_tps or 0.0


def label(k: int | None) -> str:
    return "auto" if k is None else f"depth {k}"


def measure(engine: Engine, prompt: list[int], tokens: int, runs: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {}
    one_reply(engine, prompt, 8, 2)  # page the weights in
    for _ in range(runs):
        samples.setdefault("plain", []).append(one_reply(engine, prompt, tokens, 0, plain=True))
        for k in DEPTHS:
            samples.setdefault(label(k), []).append(one_reply(engine, prompt, tokens, k))
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=192)
    ap.add_argument("--short", type=int, default=16, help="tokens of the short replies")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="2 runs, 96 tokens")
    ap.add_argument("--cuda", action="store_true", help="offload every layer to the GPU")
    ap.add_argument("--heads", default=",".join(HEADS),
                    help=f"which heads, comma-separated (default: {', '.join(HEADS)})")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.tokens = 2, 96
    gpu_layers = -1 if args.cuda else 0
    shape = MtpShape(n_layer=args.layers, n_embd=args.width, n_head=max(1, args.width // 64), n_ff=2 * args.width,
                     n_ff_exp=args.width // 2)
    print(f"# bench_mtp: {platform.machine()}, {os.cpu_count()} CPUs, threads {args.threads}, "
          f"{'GPU' if args.cuda else 'CPU'}, target {args.layers} x {args.width} F16 + 1 NextN block, "
          f"{args.runs} runs, load {os.getloadavg()[0]:.2f}")
    print()
    print("| head | reply | plain tok/s | depth 1 | depth 2 | depth 3 | auto | auto / best depth | auto / plain |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    goals: list[str] = []
    chosen = [h.strip() for h in args.heads.split(",") if h.strip()]
    unknown = [h for h in chosen if h not in HEADS]
    if unknown:
        ap.error(f"unknown head {unknown[0]!r}: choose from {', '.join(HEADS)}")
    for name in chosen:
        knobs = HEADS[name]
        models = make_mtp_models(CACHE / name.replace(" ", "-"), shape=shape, **knobs)  # type: ignore[arg-type]
        engine = Engine()
        engine.load(PairSpec(target=str(models.target), mtp=True,
                             target_settings=ModelSettings(gpu_layers=gpu_layers),
                             draft_settings=ModelSettings(gpu_layers=gpu_layers),
                             context=ContextSettings(n_ctx=1024, threads=args.threads)))
        prompt = engine.tokenize_prompt(PROMPT)
        for reply, tokens in (("long", args.tokens), ("short", args.short)):
            tps = measure(engine, prompt, tokens, args.runs)
            best = max(tps[label(k)] for k in DEPTHS if k is not None)
            plain = tps["plain"]
            auto = tps["auto"]
            cells = " | ".join(f"{tps[label(k)]:.1f}" for k in DEPTHS)
            print(f"| {name} | {reply} ({tokens} tokens) | {plain:.1f} | {cells} | {auto / best:.2f}x | "
                  f"{auto / plain:.2f}x |")
            if reply == "long":
                pays = best > plain
                goal, ratio = (0.95, auto / best) if pays else (0.97, auto / plain)
                what = "the best depth" if pays else "plain"
                goals.append(f"{name}, long replies: auto / {what} = {ratio:.2f} (goal >= {goal}): "
                             + ("met" if ratio >= goal else "NOT met"))
        engine.unload()
    print()
    for line in goals:
        print(f"- {line}")
    print(f"\n# load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
