"""Engine benchmark: Outrider's speculative loop against llama.cpp's own ``llama-speculative-simple``.

Builds ``llama-speculative-simple`` from the llama.cpp source vendored in the installed llama-cpp-python's sdist
(same version, same commit), generates target/draft families at several acceptance levels, and measures at the
same threads, k and prompt: plain target decoding, native speculative (fixed k), Outrider fixed k, Outrider auto.
Prints a Markdown table (``--out FILE`` appends it there). Runs unchanged with a CUDA build (``--cuda``: native
build with GGML_CUDA=on, and all layers offloaded).

Usage: python tests/benchmarks/bench_engine.py [--quick] [--cuda] [--runs N] [--tokens N] [--threads N]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.metadata
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))

from native_llama import build_native  # noqa: E402  (niced, cached: shared with bench_hybrid / bench_mtp)

from outrider.engine.engine import Engine, PairSpec  # noqa: E402
from outrider.engine.params import ContextSettings, ModelSettings  # noqa: E402
from outrider.engine.speculative import DoneEvent, DraftParams  # noqa: E402
from support.tiny_gguf import TinyShape, make_family  # noqa: E402

CACHE = ROOT / ".cache" / "bench"
PROMPT = "the model is fast and the draft is"


@dataclasses.dataclass
class Result:
    tps: float
    acceptance: float | None
    k_mean: float | None = None


def run_native(binary: Path, target: Path, draft: Path, k: int, tokens: int, threads: int, cuda: bool) -> Result:
    ngl = "99" if cuda else "0"
    cmd = [str(binary), "-m", str(target), "-md", str(draft), "-p", PROMPT, "-n", str(tokens),
           "--spec-type", "draft-simple", "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0",
           "--spec-draft-p-min", "0", "-t", str(threads), "-td", str(threads), "-c", "2048", "--temp", "0",
           "--top-k", "1", "-ngl", ngl, "-ngld", ngl, "--seed", "1", "--ignore-eos"]
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    out = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, check=False)
    log = out.stdout + out.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"llama-speculative-simple failed ({out.returncode}):\n{log[-2000:]}")
    acc = re.search(r"accept\s+=\s+([\d.]+)%", log)
    return Result(float(m.group(3)), float(acc.group(1)) / 100 if acc else None)


def run_ours(engine: Engine, tokens: int, *, k: int | None, plain: bool = False) -> Result:
    prompt = engine.tokenize_prompt(PROMPT)
    done = None
    for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=k), plain=plain, ignore_eos=True):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    s = done.stats
    return Result(s.decode_tps or 0.0, s.acceptance_rate, s.k_mean)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small models, few tokens (a smoke run)")
    ap.add_argument("--cuda", action="store_true", help="GPU build of the native tool; offload all layers")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--ks", default="2,4,8")
    ap.add_argument("--out", type=Path, help="append the Markdown table to this file (docs/benchmarks.md holds "
                    "every benchmark's tables, written by hand from the runs: never overwritten)")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    shape = TinyShape(n_layer=4, n_embd=256, n_head=4, n_ff=512) if args.quick else TinyShape(
        n_layer=12, n_embd=1024, n_head=16, n_ff=2816)
    tokens = 32 if args.quick else args.tokens
    binary = build_native(args.cuda)
    models = CACHE / "models" / ("quick" if args.quick else "full")
    # Output-projection scales of the target's extra layers: smaller keeps the target closer to its draft.
    levels = {"high (scale 0.03)": 0.03, "medium (scale 0.1)": 0.1, "low (scale 0.3)": 0.3}
    gpu = -1 if args.cuda else 0
    rows = []
    for label, scale in [*levels.items(), ("unrelated draft", 0.1)]:
        fam = make_family(models / f"s{scale}", shape=shape, extra_layer_scale=scale, prefix="bench")
        draft = fam.unrelated if label == "unrelated draft" else fam.draft
        engine = Engine()
        settings = ModelSettings(gpu_layers=gpu)
        engine.load(PairSpec(target=str(fam.target), draft=str(draft), target_settings=settings,
                             draft_settings=settings, context=ContextSettings(n_ctx=2048, threads=args.threads)))
        samples: dict[str, list[Result]] = {}
        run_ours(engine, 8, k=None)  # warm-up
        for rep in range(args.runs):  # interleaved, so drift hits every configuration alike
            samples.setdefault("plain", []).append(run_ours(engine, tokens, k=0, plain=True))
            for k in ks:
                runs = {
                    "native": functools.partial(run_native, binary, fam.target, draft, k, tokens, args.threads,
                                                args.cuda),
                    "ours": functools.partial(run_ours, engine, tokens, k=k),
                }
                # Alternate which side runs first, so neither always inherits the other's cache state.
                for name in ("native", "ours") if rep % 2 == 0 else ("ours", "native"):
                    samples.setdefault(f"{name} k={k}", []).append(runs[name]())
            samples.setdefault("ours auto", []).append(run_ours(engine, tokens, k=None))
        engine.unload()
        med = {name: statistics.median(r.tps for r in rs) for name, rs in samples.items()}
        acc = {name: rs[0].acceptance for name, rs in samples.items()}
        best_native_k = max(ks, key=lambda k: med[f"native k={k}"])
        best_ours_k = max(ks, key=lambda k: med[f"ours k={k}"])
        rows.append({
            "pair": label, "acceptance": acc[f"ours k={best_native_k}"], "plain": med["plain"],
            "native_k": best_native_k, "native": med[f"native k={best_native_k}"],
            "ours_at_native_k": med[f"ours k={best_native_k}"], "ours_best_k": best_ours_k,
            "ours_best": med[f"ours k={best_ours_k}"], "auto": med["ours auto"],
            "auto_k": statistics.median(r.k_mean or 0 for r in samples["ours auto"]), "all": med,
        })
        print(f"{label}: " + ", ".join(f"{n} {v:.1f}" for n, v in med.items()), flush=True)
    write_table(args, rows, shape, tokens)
    return 0


def write_table(args: argparse.Namespace, rows: list[dict], shape: TinyShape, tokens: int) -> None:
    lines = [
        f"## {'CUDA' if args.cuda else 'CPU'} — {platform.machine()}, {args.threads} threads, "
        f"{time.strftime('%Y-%m-%d')}",
        "",
        f"Target {shape.n_layer} layers × {shape.n_embd} (F16), draft 1 layer (the target's first), greedy, "
        f"{tokens} tokens, median of {args.runs} interleaved runs, prompt `{PROMPT}`. Tokens/s are decode speed "
        "(prompt excluded). Native = llama.cpp's `llama-speculative-simple` built from the llama.cpp that "
        f"llama-cpp-python {importlib.metadata.version('llama-cpp-python')} vendors.",
        "",
        "| pair | acceptance | plain tok/s | native best k | native tok/s | Outrider same k | Outrider/native |"
        " Outrider best fixed k | auto tok/s (mean k) | auto/best fixed | auto/plain |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        acc = "—" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        lines.append(
            f"| {r['pair']} | {acc} | {r['plain']:.1f} | {r['native_k']} | {r['native']:.1f} | "
            f"{r['ours_at_native_k']:.1f} | {r['ours_at_native_k'] / r['native']:.2f}× | "
            f"{r['ours_best_k']}: {r['ours_best']:.1f} | {r['auto']:.1f} ({r['auto_k']:.1f}) | "
            f"{r['auto'] / r['ours_best']:.2f}× | {r['auto'] / r['plain']:.2f}× |"
        )
    lines += ["", "All configurations (tok/s):", ""]
    for r in rows:
        lines.append(f"- {r['pair']}: " + ", ".join(f"{n} {v:.1f}" for n, v in r["all"].items()))
    lines.append("")
    print("\n".join(lines))
    if args.out is not None:
        with args.out.open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
