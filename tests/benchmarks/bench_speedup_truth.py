"""The speed-up a reply reports, against an interleaved A/B of the same replies, quiet and under load.

    python tests/benchmarks/bench_speedup_truth.py [--quick] [--rounds N] [--lengths 24,48,96,192] [--threads N]
                                                  [--only NAMES] [--no-load | --load-only] [--out FILE]

For each pair and reply length, ``--rounds`` rounds of a plain reply then a speculative reply of the same prompt
and the same length (``ignore_eos``), run back to back in one process. The truth is the A/B: the median over the
rounds of plain decode time / speculative decode time (wall time first step to last, prompt excluded; both
replies emit the same tokens). Each speculative reply reports its own speed-up (``GenerationStats.speedup``,
docs/metrics.md) with its 95 % interval; the table shows the median reported figure over the A/B's median,
the worst single reply (the larger of reported/A/B and A/B/reported), how many intervals covered the A/B's
median and how many were shown as one figure (interval within ±20 %).

Loaded: the same, with one CPU-bound background process (``while True: pass``, started once and kept stopped:
``Burner``) resumed when each reply (plain and speculative alike) has emitted half its tokens, and stopped when it
ends: both sides of the A/B see the same half-quiet, half-loaded reply, and the estimate must see what the A/B
sees. Each loaded reply follows ``QUIET_GAP_S`` of quiet. Threads are automatic by default (``--threads 0``, what
the app and the commands use: re-chosen before each reply and stepped down within a reply whose threads wait for
a CPU, engine/threads.py); ``--threads N`` fixes them.

Pairs: generated families (target and its first layer as the draft, tests/support/tiny_gguf.py) at two
acceptance levels, the same target with an unrelated draft, and prompt lookup on the real SmolLM2-135M-Instruct
on a copying task. Goals ([truth] issue): reported within ±15 % of the A/B quiet, ±25 % loaded, never off by more
than 1.5x on any single reply. The default run takes about 5 minutes on a quiet 2-core machine; --quick is a
smoke run (small models, short replies, 3 rounds).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import signal
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
from outrider.engine.stats import GenerationStats  # noqa: E402
from support.tiny_gguf import TinyShape, make_family  # noqa: E402

CACHE = ROOT / ".cache" / "bench"
BURN = "while True:\n    pass\n"
# Seconds of quiet before each loaded reply: with automatic threads (the default) the count is re-chosen before
# each reply from the last second's load, so without a gap every loaded reply would start on the count the
# previous reply's load chose; with it, each starts on the quiet choice and the load arrives mid-reply.
QUIET_GAP_S = 1.2
FAMILY_PROMPT = "the model is fast and the draft is"
COPY_TEXT = (
    "The lighthouse stood on a rock at the edge of the bay. Every evening the keeper climbed the spiral stairs, "
    "trimmed the wick, wound the clockwork that turned the lens, and wrote the weather in a leather book. Ships "
    "passing in the night saw the beam sweep across the water every ten seconds, and knew where the reef was."
)


@dataclasses.dataclass
class Cell:
    """One pair at one length, quiet or loaded: the A/B ratio of each round and what each speculative reply said."""

    pair: str
    tokens: int
    loaded: bool
    ab: list[float] = dataclasses.field(default_factory=list)
    reported: list[tuple[float | None, float | None, float | None]] = dataclasses.field(default_factory=list)
    threads: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (plain, speculative) at their ends

    @property
    def truth(self) -> float:
        return statistics.median(self.ab)

    def figures(self) -> list[float]:
        return [s for s, _, _ in self.reported if s is not None]

    def ratio(self) -> float | None:
        figures = self.figures()
        return statistics.median(figures) / self.truth if figures else None

    def worst(self) -> float | None:
        figures = self.figures()
        return max(max(f / self.truth, self.truth / f) for f in figures) if figures else None

    def worst_shown(self) -> float | None:
        """The worst single reply as the user saw it: a settled figure (interval within ±20 %) against the A/B;
        an unsettled one is shown as its range only (``1.40–2.60×, uncertain``), off by its nearer end when the
        A/B lies outside it and not at all when inside."""
        off = []
        for s, lo, hi in self.reported:
            if s is None or lo is None or hi is None:
                continue
            if lo >= 0.8 * s and hi <= 1.2 * s:
                off.append(max(s / self.truth, self.truth / s))
            elif self.truth < lo:
                off.append(lo / self.truth)
            elif self.truth > hi:
                off.append(self.truth / hi if hi > 0 else math.inf)
            else:
                off.append(1.0)
        return max(off) if off else None

    def covered(self) -> int:
        return sum(1 for _, lo, hi in self.reported if lo is not None and hi is not None and lo <= self.truth <= hi)

    def settled(self) -> int:
        return sum(1 for s, lo, hi in self.reported if s is not None and lo is not None and hi is not None
                   and lo >= 0.8 * s and hi <= 1.2 * s)


class Burner:
    """One CPU-bound background process, started once and kept stopped (SIGSTOP) between replies.

    ``resume`` (SIGCONT) puts it on a CPU at once. A process started with ``Popen`` at the middle of a reply
    first spends 20-50 ms starting Python, longer than the second half of a 24-token speculative reply: the load
    then reached the longer plain reply and not the speculative one, and the A/B measured that asymmetry, not the
    drafter. A stopped burner starts burning the instant it is resumed, for both sides alike.
    """

    def __init__(self) -> None:
        self._process = subprocess.Popen([sys.executable, "-c", BURN])
        time.sleep(0.5)  # into its loop before the first stop: the interpreter's start-up is not load we measure
        self.pause()

    def resume(self) -> None:
        self._process.send_signal(signal.SIGCONT)

    def pause(self) -> None:
        self._process.send_signal(signal.SIGSTOP)

    def close(self) -> None:
        self._process.kill()
        self._process.wait()


def one_reply(engine: Engine, prompt: list[int], tokens: int, draft: DraftParams, *, plain: bool,
              burner: Burner | None) -> GenerationStats:
    """One reply of exactly ``tokens`` tokens; with a ``burner``, it burns from the reply's middle to its end."""
    done = None
    burning = False
    try:
        for event in engine.generate(prompt, max_tokens=tokens, draft=draft, plain=plain, ignore_eos=True):
            if isinstance(event, DoneEvent):
                done = event
            elif burner is not None and not burning and event.stats.generated * 2 >= tokens:
                burner.resume()
                burning = True
    finally:
        if burner is not None and burning:
            burner.pause()
    assert done is not None and done.stats.generated == tokens, "the reply stopped short"
    return done.stats


def measure(engine: Engine, pair: str, prompt: list[int], draft: DraftParams, lengths: list[int], rounds: int,
            loaded: bool) -> list[Cell]:
    cells = []
    one_reply(engine, prompt, 8, draft, plain=False, burner=None)  # page the weights in
    burner = Burner() if loaded else None

    def quiet_before() -> None:
        if loaded:  # a second of quiet, as between a user's messages: each reply starts with the quiet choice
            time.sleep(QUIET_GAP_S)
    for tokens in lengths:
        cell = Cell(pair, tokens, loaded)
        for _ in range(rounds):
            quiet_before()
            plain = one_reply(engine, prompt, tokens, draft, plain=True, burner=burner)
            quiet_before()
            spec = one_reply(engine, prompt, tokens, draft, plain=False, burner=burner)
            assert spec.drafted > 0, f"{pair}: nothing was drafted"
            cell.ab.append(plain.decode_s / spec.decode_s)
            cell.reported.append((spec.speedup, spec.speedup_low, spec.speedup_high))
            cell.threads.append((plain.threads, spec.threads))
        print(f"{pair} {tokens} {'loaded' if loaded else 'quiet'}: A/B {cell.truth:.2f}x, reported "
              + ", ".join("—" if s is None else f"{s:.2f} [{lo:.2f}-{hi:.2f}]" for s, lo, hi in cell.reported)
              + "; threads at the end (plain/spec) " + " ".join(f"{a}/{b}" for a, b in cell.threads), flush=True)
        cells.append(cell)
    if burner is not None:
        burner.close()
    return cells


def table(cells: list[Cell], loaded: bool, goal: float) -> list[str]:
    lines = ["| pair | tokens | A/B (median) | reported (median) | reported / A/B | worst reply | worst as shown | "
             "interval covers A/B | shown as a figure |", "|---|---|---|---|---|---|---|---|---|"]
    for c in (c for c in cells if c.loaded is loaded):
        ratio, worst, figures, shown = c.ratio(), c.worst(), c.figures(), c.worst_shown()
        mark = "" if ratio is None or abs(ratio - 1) <= goal else " ✗"
        lines.append(
            f"| {c.pair} | {c.tokens} | {c.truth:.2f}× | "
            f"{'—' if not figures else format(statistics.median(figures), '.2f') + '×'} | "
            f"{'—' if ratio is None else format(ratio, '.2f')}{mark} | "
            f"{'—' if worst is None else format(worst, '.2f') + '×'} | "
            f"{'—' if shown is None else format(shown, '.2f') + '×'} | {c.covered()}/{len(c.reported)} | "
            f"{c.settled()}/{len(c.reported)} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small models, short replies, 3 rounds (a smoke run)")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--lengths", help="reply lengths in tokens (default 24,48,96,192; --quick 24,48)")
    ap.add_argument("--threads", type=int, default=0,
                    help="llama.cpp threads (default 0: automatic, as the app and every command use them)")
    ap.add_argument("--only", default="", help="comma-separated pairs: high, medium, unrelated, copy")
    ap.add_argument("--no-load", action="store_true", help="skip the loaded half")
    ap.add_argument("--load-only", action="store_true", help="skip the quiet half")
    ap.add_argument("--out", type=Path, help="append the Markdown tables to this file")
    args = ap.parse_args()
    rounds = args.rounds or (3 if args.quick else 5)
    lengths = [int(n) for n in (args.lengths or ("24,48" if args.quick else "24,48,96,192")).split(",")]
    shape = TinyShape(n_layer=4, n_embd=256, n_head=4, n_ff=512) if args.quick else TinyShape(
        n_layer=8, n_embd=512, n_head=8, n_ff=1408)
    models = CACHE / "models" / ("truth-quick" if args.quick else "truth")
    ctx = ContextSettings(n_ctx=1024, threads=args.threads)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    halves = [True] if args.load_only else [False] if args.no_load else [False, True]
    started = time.perf_counter()
    load_before = os.getloadavg()
    cells: list[Cell] = []
    backend = "CPU"  # what the engine ran on (a GPU build offloads every layer: ModelSettings' default)
    specs: list[tuple[str, str, Path | None, bool]] = [
        ("high", "family draft, high acceptance", None, False),
        ("medium", "family draft, medium acceptance", None, False),
        ("unrelated", "unrelated draft", None, True),
    ]
    for key, label, _, unrelated in specs:
        if only and key not in only:
            continue
        scale = 0.03 if key == "high" else 0.3
        fam = make_family(models / f"s{scale}", shape=shape, extra_layer_scale=scale, prefix="truth")
        engine = Engine()
        engine.load(PairSpec(target=str(fam.target), draft=str(fam.unrelated if unrelated else fam.draft),
                             context=ctx))
        backend = engine.info.backend if engine.info is not None else backend
        prompt = engine.tokenize_prompt(FAMILY_PROMPT)
        for loaded in halves:
            cells += measure(engine, label, prompt, DraftParams(k=4), lengths, rounds, loaded)
        engine.unload()
    smol = demo_model_path()
    if smol is not None and (not only or "copy" in only):
        engine = Engine()
        engine.load(PairSpec(target=str(smol), lookup=True, context=ctx))
        prompt = engine.tokenize_chat([ChatMessage("user", "Repeat this text exactly, word for word:\n\n" + COPY_TEXT)])
        for loaded in halves:
            cells += measure(engine, "copying, SmolLM2 + prompt lookup", prompt, DraftParams(k=8), lengths, rounds,
                             loaded)
        engine.unload()
    minutes = (time.perf_counter() - started) / 60
    load_after = os.getloadavg()
    command = "python tests/benchmarks/bench_speedup_truth.py" + (" --quick" if args.quick else "")
    lines = [
        f"## The reported speed-up against an A/B — {backend} {platform.machine()}, "
        f"{f'{args.threads} threads' if args.threads else 'automatic threads'}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"`{command}` ({minutes:.1f} min; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after). "
        f"Each row: {rounds} rounds of a plain then a speculative reply of the same prompt and length; A/B = "
        "median over rounds of plain ÷ speculative decode wall time; reported = the speculative replies' own "
        "figure (median); worst reply = the single reply furthest from the A/B (either way); worst as shown = the "
        "same for what the user saw (a settled figure; an unsettled reply's range, off only when the A/B lies "
        "outside it); covers = its 95 % "
        "interval held the A/B; figure = its interval within ±20 % (shown as a number, else as a range). "
        "Fixed k = 4 for the model drafts, k = 8 for prompt lookup.",
        "",
        "Quiet (goal: reported / A/B within 0.85–1.15, no reply off by more than 1.5×):",
        "",
        *table(cells, False, 0.15),
    ]
    if not args.no_load:
        lines += ["", "One CPU-bound background process from the middle of each reply to its end (goal: within "
                  "0.75–1.25, no reply off by more than 1.5×):", "", *table(cells, True, 0.25)]
    quiet = [c for c in cells if not c.loaded]
    loaded_cells = [c for c in cells if c.loaded]

    def met(group: list[Cell], goal: float) -> str:
        ratios = [c.ratio() for c in group]
        worst = [c.worst() for c in group]
        shown = [c.worst_shown() for c in group]
        inside = sum(1 for r in ratios if r is not None and abs(r - 1) <= goal)
        return (f"{inside}/{len(group)} rows within ±{goal:.0%}, worst single reply "
                f"{max((w for w in worst if w is not None), default=float('nan')):.2f}× "
                f"({max((w for w in shown if w is not None), default=float('nan')):.2f}× as shown), "
                "intervals covering the "
                f"A/B {sum(c.covered() for c in group)}/{sum(len(c.reported) for c in group)}")

    lines += ["", f"Quiet: {met(quiet, 0.15)}." + (f" Loaded: {met(loaded_cells, 0.25)}." if loaded_cells else "")]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
