"""Where a short MTP reply spends its time: per configuration, the steps of a reply and what each costs.

    python tests/benchmarks/bench_mtp_steps.py [--quick] [--setup "dense agreeing"] [--tokens 24] [--rounds N]
                                               [--layers 8] [--width 768] [--prompts N] [--cuda] [--policy]
                                               [--threads N] [--burner]

``bench_mtp.py`` says whether automatic depth meets its goals; this says why not. Configurations of one setup
(``bench_mtp.SETUPS``), interleaved in a rotating order per round: plain (no ``--mtp``), depth 1/2/3, auto (warm:
carried from reply to reply) and auto cold. Per configuration it prints, summed over its replies: decode tok/s,
steps per reply, plain steps before the first draft, the mean chosen depth, the seconds per plain step and per
drafting step, and the MTP head's own work while it does not draft — shadow scoring (``MtpDraft.observe``) and
the copies of the target's hidden states (``MtpDraft._capture``) — per plain step, as a share of a plain pass.
Timings: on a quiet machine, or under a load made on purpose: ``--burner --threads 0`` runs one CPU-bound process
beside it throughout, the threads chosen as the engine would (``bench_mtp.cpu_burner``). ``--quick``: 4 x 256
models, 2 rounds, for a smoke check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mtp

from outrider.engine.autodraft import AutoDraftLength
from outrider.engine.engine import Engine
from outrider.engine.mtp import MtpDraft
from outrider.engine.params import DraftParams
from outrider.engine.speculative import DoneEvent, StepEvent

FIRST = 8  # the first steps of a reply, shown one by one (seconds, tokens, depth)
CONFIGS = ("plain", "depth 1", "depth 2", "depth 3", "auto", "auto cold")


@dataclasses.dataclass
class Trace:
    """One configuration's totals over its replies."""

    replies: int = 0
    tokens: int = 0
    decode_s: float = 0.0
    prompt_s: float = 0.0
    steps: int = 0
    plain_steps: int = 0
    plain_s: float = 0.0
    draft_steps: int = 0
    draft_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    before_first: int = 0  # plain steps before a reply's first draft (all of them if it never drafts)
    observe_s: float = 0.0
    capture_s: float = 0.0
    policy_s: float = 0.0
    first: list[list[float]] = dataclasses.field(default_factory=lambda: [[0.0, 0.0, 0.0] for _ in range(FIRST)])


POLICY_S = [0.0]  # seconds spent in automatic depth's own calls (``time_policy``)


def time_policy() -> None:
    """Wrap AutoDraftLength's per-step calls (choose, observe, observe_shadow, should_rest) to add their time up."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                POLICY_S[0] += time.perf_counter() - t
        return timed

    for name in ("choose", "observe", "observe_shadow", "should_rest"):
        if hasattr(AutoDraftLength, name):  # (an older engine, measured for comparison, has fewer)
            setattr(AutoDraftLength, name, wrap(getattr(AutoDraftLength, name)))


class Meter:
    """Times the MTP drafter's calls by wrapping them on one drafter instance."""

    def __init__(self, drafter: MtpDraft) -> None:
        self.observe_s = 0.0
        self.capture_s = 0.0
        observe, capture = drafter.observe, drafter._capture

        def timed_observe(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return observe(*a, **kw)
            finally:
                self.observe_s += time.perf_counter() - t

        def timed_capture(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return capture(*a, **kw)
            finally:
                self.capture_s += time.perf_counter() - t

        drafter.observe = timed_observe  # type: ignore[method-assign]
        # On the instance: ``MtpDraft.rest(False)`` hooks ``self._capture`` back, which must stay the timed one.
        drafter._capture = timed_capture  # type: ignore[method-assign]
        drafter.target.after_decode = timed_capture


def reply(engine: Engine, prompt: list[int], tokens: int, k: int | None, trace: Trace, meter: Meter | None,
          warm: list[AutoDraftLength | None] | None, plain: bool) -> None:
    decoder = engine._decoder_or_raise()
    decoder.reset()  # a new conversation: its prompt is evaluated, as after a load (bench_mtp.reply)
    if k is None:
        decoder.auto_policy = warm[0] if warm is not None else None
    o0, c0 = (meter.observe_s, meter.capture_s) if meter is not None else (0.0, 0.0)
    p0 = POLICY_S[0]
    first_draft: int | None = None
    step = 0
    t = time.perf_counter()
    done: DoneEvent | None = None
    for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=k), plain=plain, ignore_eos=True):
        now = time.perf_counter()
        if isinstance(event, DoneEvent):
            done = event
            break
        assert isinstance(event, StepEvent)
        if not event.tokens:
            continue
        drafted = len(event.tokens) - 1 + int(all(event.drafted)) if event.k else 0
        if event.k > 0:
            trace.draft_steps += 1
            trace.draft_s += now - t
            if first_draft is None:
                first_draft = step
        else:
            trace.plain_steps += 1
            trace.plain_s += now - t
        del drafted
        if step < FIRST:
            trace.first[step][0] += now - t
            trace.first[step][1] += len(event.tokens)
            trace.first[step][2] += event.k
        step += 1
        t = now
    assert done is not None
    if k is None and warm is not None:
        warm[0] = decoder.auto_policy
    s = done.stats
    trace.replies += 1
    trace.tokens += s.generated
    trace.decode_s += s.decode_s
    trace.prompt_s += s.prompt_s
    trace.steps += step
    trace.drafted += s.drafted
    trace.accepted += s.accepted
    trace.before_first += step if first_draft is None else first_draft
    trace.policy_s += POLICY_S[0] - p0
    if meter is not None:
        trace.observe_s += meter.observe_s - o0
        trace.capture_s += meter.capture_s - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", default="dense agreeing", choices=bench_mtp.SETUPS)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads (0: chosen as the engine would)")
    ap.add_argument("--burner", action="store_true", help="one steady CPU-bound background process throughout")
    ap.add_argument("--quick", action="store_true", help="4 x 256 models, 2 rounds, 2 prompts")
    ap.add_argument("--cuda", action="store_true", help="offload every layer to the GPU")
    ap.add_argument("--policy", action="store_true", help="print what the warm automatic depth learned (its "
                    "snapshot: verify seconds per batch size, draft seconds per token, acceptance) after the table")
    args = ap.parse_args()
    if args.quick:
        args.layers, args.width, args.rounds, args.prompts = 4, 256, 2, 2
    if args.threads < 0:
        ap.error("--threads must be >= 0 (0: automatic)")
    with bench_mtp.cpu_burner(args.burner):
        traces, warm = measure(args)
    print(f"# bench_mtp_steps: {args.setup}, {args.tokens} tokens, {args.layers} x {args.width}, "
          f"{args.rounds} rounds x {args.prompts} prompts" + (", a CPU-bound background process throughout"
                                                             if args.burner else ""))
    print_tables(traces)
    if args.policy and warm[0] is not None:
        print("\nThe warm policy's snapshot (seconds):")
        print(json.dumps(warm[0].snapshot(), indent=None, default=str))
    return 0


def measure(args: argparse.Namespace) -> tuple[dict[str, Trace], list[AutoDraftLength | None]]:
    """Every configuration's trace over the rounds, and the warm policy as the last "auto" reply left it."""
    target = bench_mtp.make_target(args.setup, args.layers, args.width)
    gpu = -1 if args.cuda else 0
    plain_engine = bench_mtp.load(target, mtp=False, threads=args.threads, gpu=gpu)
    mtp_engine = bench_mtp.load(target, mtp=True, threads=args.threads, gpu=gpu)
    drafter = mtp_engine._decoder_or_raise().drafter
    assert isinstance(drafter, MtpDraft)
    meter = Meter(drafter)
    time_policy()
    traces = {c: Trace() for c in CONFIGS}
    warm: list[AutoDraftLength | None] = [None]
    runs: dict[str, Callable[[list[int]], None]] = {
        "plain": lambda ids: reply(plain_engine, ids, args.tokens, 0, traces["plain"], None, None, True),
        "auto": lambda ids: reply(mtp_engine, ids, args.tokens, None, traces["auto"], meter, warm, False),
        "auto cold": lambda ids: reply(mtp_engine, ids, args.tokens, None, traces["auto cold"], meter, None, False),
    }
    for d in (1, 2, 3):
        runs[f"depth {d}"] = (lambda depth: lambda ids: reply(
            mtp_engine, ids, args.tokens, depth, traces[f"depth {depth}"], meter, None, False))(d)
    try:
        ids0 = plain_engine.tokenize_prompt(bench_mtp.PROMPTS[0])
        reply(plain_engine, ids0, 8, 0, Trace(), None, None, True)
        reply(mtp_engine, ids0, 8, 2, Trace(), None, None, False)
        for r in range(args.rounds):
            for p, text in enumerate(bench_mtp.PROMPTS[: args.prompts]):
                ids = mtp_engine.tokenize_prompt(text)
                shift = (r + p) % len(CONFIGS)
                for name in CONFIGS[shift:] + CONFIGS[:shift]:
                    runs[name](ids)
    finally:
        plain_engine.unload()
        mtp_engine.unload()
    return traces, warm


def print_tables(traces: dict[str, Trace]) -> None:
    """The per-configuration table and the first steps of a reply, as Markdown."""
    print("| config | tok/s | steps/reply | plain before 1st draft | mean depth | acceptance | ms/plain step "
          "| ms/draft step | shadow ms/plain step | capture ms/step | auto k ms/step | prompt ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, t in traces.items():
        n = max(1, t.replies)
        acc = f"{t.accepted / t.drafted:.2f}" if t.drafted else "—"
        print(f"| {name} | {t.tokens / t.decode_s:.1f} | {t.steps / n:.1f} | {t.before_first / n:.1f} | "
              f"{t.drafted / max(1, t.steps):.2f} | {acc} | {1e3 * t.plain_s / max(1, t.plain_steps):.2f} | "
              f"{1e3 * t.draft_s / max(1, t.draft_steps):.2f} | {1e3 * t.observe_s / max(1, t.plain_steps):.3f} | "
              f"{1e3 * t.capture_s / max(1, t.steps):.3f} | {1e3 * t.policy_s / max(1, t.steps):.3f} | "
              f"{1e3 * t.prompt_s / n:.2f} |")
    print()
    print("The first steps of a reply, mean over replies: ms / tokens emitted / depth chosen")
    print("| config | " + " | ".join(f"step {i + 1}" for i in range(FIRST)) + " |")
    print("|---|" + "---:|" * FIRST)
    for name, t in traces.items():
        n = max(1, t.replies)
        cells = [f"{1e3 * s / n:.2f} / {tok / n:.1f} / {k / n:.1f}" for s, tok, k in t.first]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
