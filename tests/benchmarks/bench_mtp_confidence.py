"""Does an MTP head know when it is wrong? Acceptance of its drafted tokens by the head's own confidence.

    python tests/benchmarks/bench_mtp_confidence.py [--setups "dense agreeing,hybrid agreeing"] [--depth 4]
                                                    [--lengths 24,96] [--prompts 4] [--layers 8] [--width 768]

Why: under load on a CPU a verify pass of 2 tokens costs about as much as one of 5 (2.5x a one-token pass), so a
draft pays only when it is kept nearly whole, and one rejected at its first token loses most of a step
(docs/benchmarks.md, "The dense head's short replies under load, traced"). A drafter that could tell such a draft
from its own output before the target verifies it could stop there and decode plainly instead. This measures
whether the head's confidence tells: for every drafted token, the probability of its greedy choice as p-min reads
it (``sampling.top_probability``: llama.cpp's draft confidence, the top-10 softmax) against whether the target
kept it, at the draft's first position and at the later ones it reached (every token before it kept).

Per setup (``bench_mtp.SETUPS``, the target generated as ``bench_mtp.py`` makes it, loaded with ``--mtp``): one
greedy reply at fixed ``--depth`` per prompt and length, every draft's tokens and confidences recorded on the
drafter and matched with the step the target verified it in (how many of its tokens the step emitted as kept
draft tokens). Printed: a table per setup of drafted tokens and the share kept per confidence band, and what a
confidence gate at the first position would have done at each threshold (first drafts stopped that the target
would have rejected, and those it would have kept). Not timed: the shares are what decide, and they do not depend
on the machine's load.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mtp

from outrider.engine.draft import Draft
from outrider.engine.engine import Engine
from outrider.engine.mtp import MtpDraft
from outrider.engine.params import DraftParams
from outrider.engine.sampling import top_probability
from outrider.engine.speculative import DoneEvent, StepEvent

BANDS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)  # confidence band edges (the last band includes 1.0)
GATES = (0.1, 0.2, 0.3, 0.4, 0.5)  # first-position thresholds whose effect is printed


@dataclasses.dataclass(frozen=True)
class DraftedToken:
    """One drafted token: its position in the draft (1-based), the head's confidence, whether the target kept it."""

    position: int
    confidence: float
    kept: bool


class ConfidenceRecorder:
    """Records each draft's confidences on one MTP drafter (by wrapping its logits read and ``propose``)."""

    def __init__(self, drafter: MtpDraft) -> None:
        self.pending: list[float] | None = None  # the latest draft's confidences, until its step is seen
        self._reads: list[float] = []
        logits, propose = drafter._logits, drafter.propose

        def read(i: int = -1) -> Any:
            row = logits(i)
            self._reads.append(top_probability(row))
            return row

        def proposing(*a: Any, **kw: Any) -> Draft:
            self._reads = []
            draft = propose(*a, **kw)
            # propose reads the logits once per drafted token, before choosing it (and once more only when
            # p-min stops the draft, which this benchmark does not set).
            self.pending = self._reads[: len(draft.tokens)] if draft.tokens else None
            return draft

        drafter._logits = read  # type: ignore[method-assign]
        drafter.propose = proposing  # type: ignore[method-assign]


def kept_tokens(confidences: Sequence[float], kept: int) -> list[DraftedToken]:
    """The tokens a draft's target pass reached: the ``kept`` first, then the first rejected one (if any)."""
    reached = confidences[: min(len(confidences), kept + 1)]
    return [DraftedToken(i + 1, c, i < kept) for i, c in enumerate(reached)]


@dataclasses.dataclass
class Recording:
    """The drafted tokens the target reached, and the decoder's own count of the draft tokens it kept (a check)."""

    tokens: list[DraftedToken] = dataclasses.field(default_factory=list)
    accepted: int = 0


def record(engine: Engine, prompts: Sequence[list[int]], lengths: Sequence[int], depth: int) -> Recording:
    """One greedy reply at fixed ``depth`` per prompt and length (each from an empty cache), every draft's tokens
    matched with the step that verified it. The engine must have been loaded with an MTP head."""
    decoder = engine._decoder_or_raise()
    drafter = decoder.drafter
    if not isinstance(drafter, MtpDraft):
        raise ValueError("the engine drafts with no MTP head (load it with mtp=True or an mtp_head)")
    recorder = ConfidenceRecorder(drafter)
    out = Recording()
    for ids in prompts:
        for n in lengths:
            decoder.reset()
            for event in engine.generate(ids, max_tokens=n, draft=DraftParams(k=depth), ignore_eos=True):
                if isinstance(event, StepEvent) and event.tokens and recorder.pending is not None:
                    out.tokens += kept_tokens(recorder.pending, sum(event.drafted))
                    recorder.pending = None
                elif isinstance(event, DoneEvent):
                    out.accepted += event.stats.accepted
    return out


def record_setup(setup: str, args: argparse.Namespace) -> list[DraftedToken]:
    """``record`` on a setup's generated target (as ``bench_mtp.py`` makes it), loaded with its MTP head."""
    target = bench_mtp.make_target(setup, args.layers, args.width)
    engine = bench_mtp.load(target, mtp=True, threads=args.threads, gpu=0)
    try:
        prompts = [engine.tokenize_prompt(text) for text in bench_mtp.PROMPTS[: args.prompts]]
        return record(engine, prompts, args.lengths, args.depth).tokens
    finally:
        engine.unload()


def band_rows(tokens: Sequence[DraftedToken]) -> list[str]:
    """Markdown rows: per confidence band, drafted tokens and the share kept, at position 1 and after it."""
    rows = []
    for lo, hi in itertools.pairwise(BANDS):
        inside = [t for t in tokens if lo <= t.confidence < hi or (hi == BANDS[-1] and t.confidence == hi)]
        cells = []
        for group in ([t for t in inside if t.position == 1], [t for t in inside if t.position > 1]):
            cells.append(f"{len(group)} | {sum(t.kept for t in group) / len(group):.2f}" if group else "0 | —")
        rows.append(f"| {lo:.1f}–{hi:.1f} | " + " | ".join(cells) + " |")
    return rows


def gate_rows(tokens: Sequence[DraftedToken]) -> list[str]:
    """Markdown rows: per threshold, first drafted tokens below it that the target rejected / kept."""
    first = [t for t in tokens if t.position == 1]
    rejected = sum(not t.kept for t in first)
    kept = len(first) - rejected
    rows = []
    for gate in GATES:
        below = [t for t in first if t.confidence < gate]
        stopped_bad = sum(not t.kept for t in below)
        stopped_good = len(below) - stopped_bad
        rows.append(f"| {gate:.1f} | {stopped_bad} of {rejected} | {stopped_good} of {kept} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setups", default="dense agreeing,hybrid agreeing")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--lengths", default="24,96")
    ap.add_argument("--prompts", type=int, default=len(bench_mtp.PROMPTS))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads (the shares do not depend on them)")
    args = ap.parse_args()
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    unknown = [s for s in setups if s not in bench_mtp.SETUPS]
    if unknown:
        ap.error(f"unknown setup {unknown[0]!r}: choose from {', '.join(bench_mtp.SETUPS)}")
    if args.depth < 1:
        ap.error("--depth must be >= 1")
    args.lengths = [int(x) for x in args.lengths.split(",")]
    print(f"# bench_mtp_confidence: depth {args.depth}, lengths {args.lengths}, {args.prompts} prompts, "
          f"{args.layers} x {args.width}")
    for setup in setups:
        tokens = record_setup(setup, args)
        first = [t for t in tokens if t.position == 1]
        print(f"\n## {setup}: {len(tokens)} drafted tokens reached, {len(first)} drafts, "
              f"{sum(t.kept for t in first)} kept at position 1")
        print("| confidence | position 1: drafted | kept | later positions: drafted | kept |")
        print("|---|---:|---:|---:|---:|")
        print("\n".join(band_rows(tokens)))
        print("\nA gate at the first position: drafts stopped below the threshold that the target ...")
        print("| threshold | would have rejected | would have kept |")
        print("|---:|---:|---:|")
        print("\n".join(gate_rows(tokens)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
