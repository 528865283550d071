"""Self-drafts: what ``--layers auto`` finds, which layers a self-draft should keep, and what it buys against plain
decoding, prompt lookup and a family draft.

    python tests/benchmarks/bench_selfdraft.py [--quick] [--acceptance-only] [--time-all] [--rounds N] [--tokens N]
                                               [--threads N] [--prompts N] [--layers N] [--width N]

Targets: the real SmolLM2-135M-Instruct and generated families (``support/tiny_gguf.py``: --layers x --width F16,
8 x 256 by default, two acceptance levels; the family draft is the target's first layer, so on these families
the prefix shape has an advantage by construction — SmolLM2 is the real test of the shapes). --quick: the first
family only, one size in the shape study, one round (under a minute on a quiet 2-core machine); the full run
(both families and SmolLM2) is sized for about 5 minutes there.

For each target the script

1. runs the ``auto`` search exactly as ``outrider models self-draft`` does (``SelfDraftBuild``: the build process
   writes each candidate with llama.cpp's ``llama_model_quantize`` + ``prune_layers`` and measures it on the
   calibration prompts): each candidate's acceptance there, and the predicted speed-up from the measured costs
   (a timing: on a loaded machine auto's choice among close predictions is noise);
2. **acceptance** (deterministic: greedy, k = 4 fixed, counts only — publishable from any machine): every auto
   candidate, the family draft and prompt lookup on the evaluation prompts (not the calibration prompts: the
   bundled set is split in two), and the **shape study** — at each size, the subset that keeps the first and last
   blocks and drops the middle (the literature's finding: Draft & Verify, SWIFT), the one that drops the last
   blocks (an early exit, "prefix"), the one that drops the first blocks ("suffix") and an even spread;
3. **speed** (skipped with --acceptance-only; run it on a quiet machine): plain decoding, prompt lookup
   (automatic k), the family draft, auto's choice at k = 4 and with automatic k (--time-all: every auto
   candidate at k = 4 too), interleaved in rotating order
   within each round. Ratios are medians over rounds of the ratio within one round (the machine's speed drifts
   between rounds); tok/s is decode speed, prompt excluded.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from outrider.catalogue.selfdraft import SelfDraftBuild, neutral_prompts, preview  # noqa: E402
from outrider.catalogue.store import ModelStore  # noqa: E402
from outrider.engine.engine import Engine, PairSpec  # noqa: E402
from outrider.engine.llama.runtime import Backend  # noqa: E402
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams  # noqa: E402
from outrider.engine.selfdraft import (  # noqa: E402
    CALIBRATION_K,
    DraftType,
    LayerPlan,
    middle_plan,
    prefix_plan,
    spread_plan,
)
from outrider.engine.selfdraft_calibrate import build_plan  # noqa: E402
from outrider.engine.speculative import DoneEvent  # noqa: E402
from support.tiny_gguf import TinyShape, make_family  # noqa: E402

FAMILY_PROMPTS = ("the model is fast and the draft is", "hello world this is the text of the code")
SHAPES = ("middle", "prefix", "suffix", "spread")
SHAPE_NAMES = {"middle": "drop the middle (first + last kept)", "prefix": "drop the last (prefix)",
               "suffix": "drop the first (suffix)", "spread": "spread"}


def smollm2_path() -> Path | None:
    from outrider.demo import demo_model_path

    return demo_model_path()


def suffix_plan(n_layer: int, n_keep: int) -> LayerPlan:
    """Keep the last ``n_keep`` blocks (drop the first ones): the shape the literature's finding argues against."""
    return LayerPlan(n_layer, tuple(range(n_layer - n_keep, n_layer)), "suffix")


def shape_plan(shape: str, n_layer: int, n_keep: int) -> LayerPlan:
    return {"middle": middle_plan, "prefix": prefix_plan, "suffix": suffix_plan, "spread": spread_plan}[shape](
        n_layer, n_keep)


def study_sizes(n_layer: int, quick: bool) -> list[int]:
    """Blocks kept in the shape study: half, and (full run) one and three blocks dropped — on SmolLM2 the
    informative range (any subset of 8-21 of its 30 blocks accepts under 3 %)."""
    sizes = [n_layer // 2] if quick else [n_layer - 1, n_layer - 3, n_layer // 2]
    return sorted({s for s in sizes if 2 <= s < n_layer}, reverse=True)


def reply(engine: Engine, prompt: list[int], tokens: int, *, k: int | None, plain: bool = False) -> DoneEvent:
    done = None
    for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=k), plain=plain, ignore_eos=True):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done


def tokens_of(engine: Engine, text: str, chat: bool) -> list[int]:
    return engine.tokenize_chat([ChatMessage("user", text)]) if chat else engine.tokenize_prompt(text)


def auto_search(target: Path, prompts: tuple[str, ...], threads: int, tokens: int) -> tuple[list[dict[str, Any]],
                                                                                            float]:
    with tempfile.TemporaryDirectory() as home:
        store = ModelStore(Path(home))
        t0 = time.monotonic()
        build = SelfDraftBuild(store, preview(store, target, "auto"), prompts, threads=threads, max_tokens=tokens)
        result = build.wait()
        return list(result.measures), time.monotonic() - t0


@dataclasses.dataclass
class Counts:
    """Greedy speculation's counters over the evaluation prompts."""

    accepted: int = 0
    drafted: int = 0
    pass_tokens: int = 0
    passes: int = 0

    def add(self, done: DoneEvent) -> None:
        s = done.stats
        self.accepted, self.drafted = self.accepted + s.accepted, self.drafted + s.drafted
        self.pass_tokens, self.passes = self.pass_tokens + s.pass_tokens, self.passes + s.passes

    @property
    def acceptance(self) -> str:
        return f"{self.accepted / self.drafted:.0%}" if self.drafted else "–"

    @property
    def tokens_per_pass(self) -> str:
        return f"{self.pass_tokens / self.passes:.2f}" if self.passes else "–"


@dataclasses.dataclass
class Target:
    label: str
    path: Path
    family: Path | None
    chat: bool
    eval_prompts: tuple[str, ...]
    calib_prompts: tuple[str, ...]


class Bench:
    """One target's measurements (see the module docstring)."""

    def __init__(self, t: Target, args: argparse.Namespace, backend: Backend, workdir: Path) -> None:
        self.t, self.args, self.backend, self.workdir = t, args, backend, workdir
        self.ctx = ContextSettings(n_ctx=1024, threads=args.threads)
        self._built: dict[tuple[int, ...], Path] = {}
        self.prompts: list[list[int]] = []

    def engine(self, **spec: Any) -> Engine:
        e = Engine(self.backend)
        e.load(PairSpec(target=str(self.t.path), context=self.ctx, **spec))
        if not self.prompts:
            self.prompts = [tokens_of(e, p, self.t.chat) for p in self.t.eval_prompts]
        return e

    def draft_of(self, plan: LayerPlan) -> Path:
        """The self-draft keeping ``plan.keep`` (Q8_0, as the command builds), written once."""
        if plan.keep not in self._built:
            path = self.workdir / f"{self.t.label.replace(' ', '_').replace(',', '')}-{len(self._built)}.gguf"
            build_plan(self.backend, self.t.path, path, plan, DraftType.Q8_0, threads=self.args.threads)
            self._built[plan.keep] = path
        return self._built[plan.keep]

    def counts(self, **spec: Any) -> Counts:
        """Greedy k = 4 on every evaluation prompt: counts only (deterministic)."""
        e = self.engine(**spec)
        try:
            c = Counts()
            for prompt in self.prompts:
                c.add(reply(e, prompt, self.args.tokens, k=CALIBRATION_K))
            return c
        finally:
            e.unload()

    def acceptance_rows(self, measures: list[dict[str, Any]], n_layer: int) -> list[str]:
        rows = []
        baselines = [("prompt lookup (k = 4)", {"lookup": True})]
        if self.t.family is not None:
            baselines.append(("family draft", {"draft": str(self.t.family)}))
        for name, spec in baselines:
            c = self.counts(**spec)
            rows.append(f"| {self.t.label} | {name} |  |  | {c.acceptance} | {c.tokens_per_pass} |")
        for i, m in enumerate(measures):
            plan = LayerPlan(n_layer, tuple(m["keep"]), m["shape"])
            c = self.counts(draft=str(self.draft_of(plan)))
            mark = " **(auto's choice)**" if i == 0 else ""
            rows.append(f"| {self.t.label} | self {m['layers']}{mark} | {m['shape']}, {len(m['keep'])}/{n_layer} | "
                        f"{m['acceptance']:.0%} / {m['predicted_speedup']:.2f}× | {c.acceptance} | "
                        f"{c.tokens_per_pass} |")
        return rows

    def shape_rows(self, n_layer: int) -> list[str]:
        rows = []
        for n_keep in study_sizes(n_layer, self.args.quick):
            cells = []
            for shape in SHAPES:
                plan = shape_plan(shape, n_layer, n_keep)
                c = self.counts(draft=str(self.draft_of(plan)))
                cells.append(f"{c.acceptance} ({c.tokens_per_pass}) `{plan.label}`")
            rows.append(f"| {self.t.label} | {n_keep}/{n_layer} | " + " | ".join(cells) + " |")
        return rows

    def speed_rows(self, measures: list[dict[str, Any]], n_layer: int) -> list[str]:
        chosen = measures[0]
        engines: dict[str, tuple[Engine, int | None]] = {"prompt lookup": (self.engine(lookup=True), None)}
        if self.t.family is not None:
            engines["family draft"] = (self.engine(draft=str(self.t.family)), CALIBRATION_K)
        for i, m in enumerate(measures if self.args.time_all else measures[:1]):
            own = self.engine(draft=str(self.draft_of(LayerPlan(n_layer, tuple(m["keep"]), m["shape"]))))
            engines[f"self {m['layers']}" + (" (auto's choice)" if i == 0 else "")] = (own, CALIBRATION_K)
            if i == 0:
                engines[f"self {chosen['layers']} (auto's choice, auto k)"] = (own, None)
        plain_engine = engines["prompt lookup"][0]
        names = ["plain", *engines]
        for e, _ in engines.values():
            reply(e, self.prompts[0], 8, k=2)  # page the weights in
        tps: dict[str, list[float]] = {n: [] for n in names}
        ratio: dict[str, list[float]] = {n: [] for n in names}
        for r in range(self.args.rounds):
            for prompt in self.prompts:
                row: dict[str, float] = {}
                for name in names[r % len(names):] + names[:r % len(names)]:
                    if name == "plain":
                        done = reply(plain_engine, prompt, self.args.tokens, k=0, plain=True)
                    else:
                        e, k = engines[name]
                        done = reply(e, prompt, self.args.tokens, k=k)
                    row[name] = done.stats.decode_tps or 0.0
                for name in names:
                    tps[name].append(row[name])
                    ratio[name].append(row[name] / row["plain"] if row["plain"] else 0.0)
        for e in {id(e): e for e, _ in engines.values()}.values():
            e.unload()

        def med(name: str) -> float:
            return statistics.median(ratio[name])

        rows = []
        for name in names:
            vs_family = f"{med(name) / med('family draft'):.2f}×" if "family draft" in ratio else "n/a"
            rows.append(f"| {self.t.label} | {name} | {statistics.median(tps[name]):.1f} | {med(name):.2f}× | "
                        f"{med(name) / med('prompt lookup'):.2f}× | {vs_family} |")
        return rows


def targets(args: argparse.Namespace, work: Path) -> list[Target]:
    bundled = neutral_prompts()
    calib, held_out = bundled[: len(bundled) // 2], bundled[len(bundled) // 2:]
    found: list[Target] = []
    for scale, label in ((0.1, "family, high"), (0.3, "family, medium")):
        fam = make_family(work / label.replace(", ", "-"), extra_layer_scale=scale,
                          shape=TinyShape(n_layer=args.layers, n_embd=args.width, n_head=4, n_ff=2 * args.width))
        found.append(Target(f"tiny {args.layers}x{args.width} {label}", fam.target, fam.draft, False,
                            FAMILY_PROMPTS[: args.prompts], FAMILY_PROMPTS))
        if args.quick:
            return found
    smol = smollm2_path()
    if smol is not None:
        found.append(Target("SmolLM2-135M", smol, None, True, held_out[: args.prompts], calib))
    return found


def _table(head: Sequence[str]) -> str:
    return "| " + " | ".join(head) + " |\n|" + "---|" * len(head)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="the first tiny family only, one shape-study size, one round, 32 tokens (a smoke run)")
    ap.add_argument("--acceptance-only", action="store_true",
                    help="the deterministic columns only (no speed rounds)")
    ap.add_argument("--time-all", action="store_true",
                    help="time every auto candidate, not only auto's choice (a longer run: about 3 minutes more)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48, help="tokens per reply")
    ap.add_argument("--calib-tokens", type=int, default=32, help="tokens per calibration prompt in the search")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=2, help="evaluation prompts per target")
    ap.add_argument("--layers", type=int, default=8, help="blocks of the generated family targets")
    ap.add_argument("--width", type=int, default=256, help="embedding width of the generated family targets")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.tokens, args.prompts, args.calib_tokens = 1, 32, 1, 16
    backend = Backend()

    def uptime() -> str:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()

    t_start = time.monotonic()
    print(f"## Self-drafts — CPU {platform.machine()}, {args.threads} thread(s), {time.strftime('%Y-%m-%d')}\n")
    print(f"`python tests/benchmarks/bench_selfdraft.py {' '.join(sys.argv[1:])}`; {args.tokens} tokens per reply, "
          f"{args.rounds} rounds x {args.prompts} prompts, k = {CALIBRATION_K} for the model drafts; "
          f"{os.cpu_count()} CPUs; `uptime` at the start: {uptime()}\n", flush=True)
    acceptance, shapes, speed, notes = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for t in targets(args, work):
            measures, search_s = auto_search(t.path, t.calib_prompts, args.threads, args.calib_tokens)
            n_layer = int(measures[0]["n_layer"])
            bench = Bench(t, args, backend, work)
            acceptance += bench.acceptance_rows(measures, n_layer)
            shapes += bench.shape_rows(n_layer)
            if not args.acceptance_only:
                speed += bench.speed_rows(measures, n_layer)
            notes.append(f"- {t.label}: auto searched {len(measures)} subsets in {search_s:.0f} s "
                         f"({len(t.calib_prompts)} calibration prompts x {args.calib_tokens} tokens)")
            # as it goes (stderr): on a loaded machine a full run takes long, and rows cut short still say something
            print(f"{t.label} done at {time.monotonic() - t_start:.0f} s:\n" + "\n".join(acceptance + shapes + speed),
                  file=sys.stderr, flush=True)
    print("Acceptance (greedy, k = 4: deterministic counts):\n")
    print(_table(["target", "drafter", "layers kept", "auto's calibration: acceptance / predicted", "acceptance",
                  "tokens/pass"]))
    print("\n".join(acceptance))
    print("\nWhich blocks to keep — acceptance (tokens per pass) `blocks kept`, greedy, k = 4:\n")
    print(_table(["target", "blocks kept", *(SHAPE_NAMES[s] for s in SHAPES)]))
    print("\n".join(shapes))
    if speed:
        print("\nSpeed (interleaved rounds; a timing — quiet machine only):\n")
        print(_table(["target", "drafter", "tok/s", "vs plain", "vs prompt lookup", "vs family draft"]))
        print("\n".join(speed))
    print()
    print("\n".join(notes))
    print(f"- {time.monotonic() - t_start:.0f} s in all; `uptime` at the end: {uptime()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
