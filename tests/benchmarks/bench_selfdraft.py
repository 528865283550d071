"""Self-drafts: what ``--layers auto`` finds, and what each layer subset buys against plain decoding, prompt
lookup and a family draft.

    python tests/benchmarks/bench_selfdraft.py [--quick] [--rounds N] [--tokens N] [--threads N] [--prompts N]
                                               [--layers N] [--width N]

For each target — the real SmolLM2-135M-Instruct and generated families (``support/tiny_gguf.py``: --layers x
--width F16, 8 x 256 by default, the family draft = the target's first layer, two acceptance levels; --quick: the
first family only) — the script

1. runs the ``auto`` search exactly as ``outrider models self-draft`` does (``SelfDraftBuild``: the build process
   writes each candidate with llama.cpp's ``llama_model_quantize`` + ``prune_layers`` and measures it on the
   calibration prompts), and reports each candidate's measured acceptance and predicted speed-up;
2. writes every candidate again in this process and times, interleaved in rotating order within each round,
   plain decoding, prompt lookup, the family draft (generated families only) and each self-draft, greedy, k = 4
   (the calibration k) and the chosen self-draft with automatic k too. Ratios are medians over rounds of the
   ratio within one round (this machine's speed drifts between rounds); tok/s is decode speed, prompt excluded.

The evaluation prompts are not the calibration prompts (the bundled set is split in two).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from outrider.catalogue.selfdraft import SelfDraftBuild, neutral_prompts, preview  # noqa: E402
from outrider.catalogue.store import ModelStore  # noqa: E402
from outrider.engine.llama.runtime import Backend  # noqa: E402
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams  # noqa: E402
from outrider.engine.selfdraft import CALIBRATION_K, DraftType, LayerPlan  # noqa: E402
from outrider.engine.selfdraft_calibrate import build_plan  # noqa: E402
from outrider.engine.session import Engine, PairSpec  # noqa: E402
from outrider.engine.speculative import DoneEvent  # noqa: E402
from support.tiny_gguf import TinyShape, make_family  # noqa: E402

FAMILY_PROMPTS = ("the model is fast and the draft is", "hello world this is the text of the code")


def smollm2_path() -> Path | None:
    from outrider.demo import demo_model_path

    return demo_model_path()


def reply(engine: Engine, prompt: list[int], tokens: int, *, k: int | None, plain: bool = False) -> DoneEvent:
    done = None
    for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=k), plain=plain, ignore_eos=True):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done


def tokens_of(engine: Engine, text: str, chat: bool) -> list[int]:
    return engine.tokenize_chat([ChatMessage("user", text)]) if chat else engine.tokenize_prompt(text)


def auto_search(target: Path, prompts: tuple[str, ...], threads: int, tokens: int) -> tuple[list[dict], float]:
    with tempfile.TemporaryDirectory() as home:
        store = ModelStore(Path(home))
        t0 = time.monotonic()
        build = SelfDraftBuild(store, preview(store, target, "auto"), prompts, threads=threads, max_tokens=tokens)
        result = build.wait()
        return list(result.measures), time.monotonic() - t0


def bench_target(label: str, target: Path, family: Path | None, *, chat: bool, eval_prompts: tuple[str, ...],
                 calib_prompts: tuple[str, ...], args: argparse.Namespace, backend: Backend,
                 workdir: Path) -> tuple[list[str], list[str]]:
    measures, search_s = auto_search(target, calib_prompts, args.threads, args.calib_tokens)
    ctx = ContextSettings(n_ctx=1024, threads=args.threads)
    engines: dict[str, tuple[Engine, int | None]] = {}

    def load(name: str, spec: PairSpec, k: int | None) -> None:
        e = Engine(backend)
        e.load(spec)
        engines[name] = (e, k)

    load("prompt lookup", PairSpec(target=str(target), lookup=True, context=ctx), None)
    if family is not None:
        load("family draft", PairSpec(target=str(target), draft=str(family), context=ctx), CALIBRATION_K)
    n_layer = measures[0]["n_layer"]
    for i, m in enumerate(measures):
        path = workdir / f"{label.replace(' ', '_')}-{i}.gguf"
        build_plan(backend, target, path, LayerPlan(n_layer, tuple(m["keep"])), DraftType.Q8_0, threads=args.threads)
        load(f"self {m['layers']}", PairSpec(target=str(target), draft=str(path), context=ctx), CALIBRATION_K)
        if i == 0:
            engines[f"self {m['layers']} (auto k)"] = (engines[f"self {m['layers']}"][0], None)
    plain_engine = engines["prompt lookup"][0]
    prompts = [tokens_of(plain_engine, p, chat) for p in eval_prompts]
    names = ["plain", *engines]
    for e, _ in engines.values():
        reply(e, prompts[0], 8, k=2)  # page the weights in
    tps: dict[str, list[float]] = {n: [] for n in names}
    ratio: dict[str, list[float]] = {n: [] for n in names}
    passes: dict[str, list[tuple[int, int, int, int]]] = {n: [] for n in names}
    for r in range(args.rounds):
        for prompt in prompts:
            order = names[r % len(names):] + names[:r % len(names)]
            row: dict[str, float] = {}
            for name in order:
                if name == "plain":
                    done = reply(plain_engine, prompt, args.tokens, k=0, plain=True)
                else:
                    e, k = engines[name]
                    done = reply(e, prompt, args.tokens, k=k)
                row[name] = done.stats.decode_tps or 0.0
                s = done.stats
                passes[name].append((s.accepted, s.drafted, s.pass_tokens, s.passes))
            for name in names:
                tps[name].append(row[name])
                ratio[name].append(row[name] / row["plain"])
    for e, _ in {id(e): (e, k) for e, k in engines.values()}.values():
        e.unload()

    def med(name: str) -> float:
        return statistics.median(ratio[name])

    def acc(name: str) -> str:
        a = sum(p[0] for p in passes[name])
        d = sum(p[1] for p in passes[name])
        return f"{a / d:.0%}" if d else "–"

    def tpp(name: str) -> str:
        t = sum(p[2] for p in passes[name])
        n = sum(p[3] for p in passes[name])
        return f"{t / n:.2f}" if n else "–"

    predicted = {f"self {m['layers']}": m for m in measures}
    rows = []
    for name in names:
        m = predicted.get(name) or predicted.get(name.removesuffix(" (auto k)"))
        shape = f"{m['shape']}, {len(m['keep'])}/{n_layer}" if m else ""
        calib = f"{m['acceptance']:.0%} / {m['predicted_speedup']:.2f}×" if m and name in predicted else ""
        vs_lookup = med(name) / med("prompt lookup")
        vs_family = f"{med(name) / med('family draft'):.2f}×" if "family draft" in ratio else "n/a"
        mark = " **(auto's choice)**" if m is measures[0] and name in predicted else ""
        rows.append(f"| {label} | {name}{mark} | {shape} | {calib} | {acc(name)} | {tpp(name)} | "
                    f"{statistics.median(tps[name]):.1f} | {med(name):.2f}× | {vs_lookup:.2f}× | {vs_family} |")
    notes = [f"- {label}: auto searched {len(measures)} subsets in {search_s:.0f} s "
             f"({len(calib_prompts)} calibration prompts x {args.calib_tokens} tokens)"]
    return rows, notes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny family only, fewer rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per timed reply")
    ap.add_argument("--calib-tokens", type=int, default=32, help="tokens per calibration prompt in the search")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=2, help="evaluation prompts per target")
    ap.add_argument("--layers", type=int, default=8, help="blocks of the generated family targets")
    ap.add_argument("--width", type=int, default=256, help="embedding width of the generated family targets")
    args = ap.parse_args()
    if args.quick:
        args.rounds = min(args.rounds, 2)
    backend = Backend()
    bundled = neutral_prompts()
    calib, held_out = bundled[: len(bundled) // 2], bundled[len(bundled) // 2:]

    def uptime() -> str:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()

    # printed as it goes: on a loaded machine a full run takes long, and a table cut short still says something
    print(f"## Self-drafts — CPU {platform.machine()}, {args.threads} thread(s), {time.strftime('%Y-%m-%d')}\n")
    print(f"`python tests/benchmarks/bench_selfdraft.py {' '.join(sys.argv[1:])}`; {args.tokens} tokens per reply, "
          f"{args.rounds} rounds x {args.prompts} prompts, k = {CALIBRATION_K} for the model drafts; "
          f"{os.cpu_count()} CPUs; `uptime` at the start: {uptime()}\n")
    print("| target | drafter | layers kept | auto's calibration: acceptance / predicted | acceptance | "
          "tokens/pass | tok/s | vs plain | vs prompt lookup | vs family draft |\n"
          "|---|---|---|---|---|---|---|---|---|---|", flush=True)
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        targets: list[tuple[str, Path, Path | None, bool, tuple[str, ...], tuple[str, ...]]] = []
        for scale, label in ((0.1, "family, high"), (0.3, "family, medium")):
            fam = make_family(work / label.replace(", ", "-"), extra_layer_scale=scale,
                              shape=TinyShape(n_layer=args.layers, n_embd=args.width, n_head=4, n_ff=2 * args.width))
            targets.append((f"tiny {args.layers}x{args.width} {label}", fam.target, fam.draft, False,
                            FAMILY_PROMPTS[: args.prompts], FAMILY_PROMPTS))
            if args.quick:
                break
        smol = smollm2_path()
        if smol is not None and not args.quick:
            targets.append(("SmolLM2-135M", smol, None, True, held_out[: args.prompts], calib))
        for label, target, family, chat, eval_prompts, calib_prompts in targets:
            rows, n = bench_target(label, target, family, chat=chat, eval_prompts=eval_prompts,
                                   calib_prompts=calib_prompts, args=args, backend=backend, workdir=work)
            print("\n".join(rows), flush=True)
            notes += n
    print()
    print("\n".join(notes))
    print(f"- `uptime` at the end: {uptime()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
