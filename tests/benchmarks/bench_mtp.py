"""MTP drafting: automatic depth against the best fixed depth and against plain decoding, and llama.cpp's own.

    python tests/benchmarks/bench_mtp.py [--quick] [--runs N] [--lengths 24,64,192] [--prompts N] [--threads N]
                                         [--setups S,...] [--no-native] [--cuda] [--burner]

What it decides ([reach] issue): **automatic depth >= 0.95x the best fixed depth** where MTP pays, and
**>= 0.97x plain** where it cannot (short replies, a head with low acceptance). It prints both ratios for every
cell and a verdict per cell; a cell's goal is the first where its best fixed depth beats plain, else the second.

Setups (generated at run time, ``tests/support/mtp_gguf.py`` and ``hybrid_gguf.py``, a trunk of --layers x --width
F16 blocks and one NextN block, loaded with ``--mtp``):

- ``dense agreeing``: dense ``glm4moe`` whose head drafts the target's next token ~90 % of the time;
- ``dense low``: the same trunk with a head whose hidden-state input is noise (acceptance near 0: MTP cannot pay);
- ``hybrid agreeing``: a ``qwen35`` hybrid target (gated delta-net + attention) with its NextN layer, rolling
  rejected drafts back through its recurrent-state snapshots.

Per setup, reply length (``--lengths``, tokens) and prompt (``--prompts`` of ``PROMPTS``), interleaved in one
process and in a rotating order each run: **plain** (the same file loaded *without* ``--mtp``: no hidden-state
output, no MTP context — what a user without MTP gets), MTP at **depth 1, 2, 3**, **auto** (automatic depth as a
loaded pair runs it: what it learned carries from reply to reply), **auto reloaded** (before every reply the
policy is saved and restored, as the first reply after a reload of a pair used before: ``PairSpec.learned_draft``),
**auto cold** (as the first reply of a pair never loaded before: a fresh policy, and the target's passes timed
anew as a load times them, ``SpeculativeDecoder.time_passes``, so that each cold reply's first judgement rests on
timings of its own — one timing shared by every cold reply of a run made the whole column one sample of the
machine's load at that moment: a busy moment at load made batches look cheap, and the run's cold replies drafted
at their first step, 0.88x plain, where runs timed in a quieter moment read 0.97-0.98x), and **native**
depth 1-3 (llama.cpp's ``llama-speculative-simple --spec-type draft-mtp``, built from the vendored source:
``native_llama.py``; its target keeps ``n_rs_seq`` = depth snapshots).
Every reply starts from an empty target cache (a new conversation: its prompt is evaluated).
Tokens/s are decode speed (prompt excluded): a configuration's tokens over its decode seconds, summed over the
prompts and runs of a cell, so every configuration is timed on the same work.

The ratios and the verdicts are **medians of paired ratios**: a run (round) times every configuration on every
prompt of a cell, interleaved, so each round gives one auto / depth-d and one auto / plain ratio measured within
seconds of each other; the median over rounds (quartiles beside it) leaves out the rounds a stall hit one side of,
which a ratio of sums does not (one stalled reply moved a cell by 10 % on the shared machine). Many short rounds
decide more than few long ones: split a table with ``--setups`` and ``--lengths`` to keep each run short.

``--quick`` (2 runs, 2 prompts, lengths 24 and 96, 4 x 256 models, no native column) takes under a minute. The
default (3 prompts, 24/64/192 tokens, 1 run, 4 x 384 models) under 6 minutes (about 7,500 decoded tokens per setup
at ~100 tok/s, 27 native processes); each ``--runs`` adds as much. The first run builds the native tool (slow on a
small machine); ``--no-native`` skips it. ``--cuda`` offloads every layer. ``--burner --threads 0`` measures a
busy machine: one CPU-bound process runs beside the whole run and the engines choose their threads as the app does.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))

from native_llama import build_native, run_native  # noqa: E402

from outrider.engine.autodraft import AutoDraftLength  # noqa: E402
from outrider.engine.engine import Engine, PairSpec  # noqa: E402
from outrider.engine.params import ContextSettings, DraftParams, ModelSettings  # noqa: E402
from outrider.engine.speculative import DoneEvent  # noqa: E402
from outrider.engine.threads import OtherLoadMeter, choose_threads, usable_cpus  # noqa: E402
from support.hybrid_gguf import Qwen35Shape, make_qwen35_mtp  # noqa: E402
from support.mtp_gguf import MtpShape, make_mtp_models  # noqa: E402

CACHE = ROOT / ".cache" / "bench-mtp"
PROMPTS = ["the model is fast and the draft is", "hello world def return class", "a b c x = y + z * 2 and the",
           "write the code for the model and return"]
DEPTHS = (1, 2, 3)
SETUPS = ("dense agreeing", "dense low", "hybrid agreeing")
OURS = ("plain", *(f"depth {d}" for d in DEPTHS), "auto", "auto reloaded", "auto cold")
N_CTX = 1024


@dataclasses.dataclass
class Tally:
    """One configuration's totals over a cell's replies."""

    tokens: int = 0
    seconds: float = 0.0
    drafted: int = 0
    accepted: int = 0
    k_sum: int = 0
    passes: int = 0

    def add(self, tokens: int, seconds: float, drafted: int, accepted: int, k_sum: int = 0, passes: int = 0
            ) -> None:
        self.tokens += tokens
        self.seconds += seconds
        self.drafted += drafted
        self.accepted += accepted
        self.k_sum += k_sum
        self.passes += passes

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def make_target(setup: str, layers: int, width: int) -> Path:
    """The target file (with its NextN block) of a setup."""
    if setup.startswith("dense"):
        shape = MtpShape(n_layer=layers, n_embd=width, n_head=max(1, width // 64), n_ff=2 * width,
                         n_ff_exp=width // 2)
        knobs = {"hidden_noise": 0.05} if setup == "dense agreeing" else {"hidden_noise": 2.0, "head_seed": 99}
        return make_mtp_models(CACHE / setup.replace(" ", "-"), shape=shape, **knobs).target  # type: ignore[arg-type]
    q_shape = Qwen35Shape(n_layer=layers, n_embd=width, n_ff=2 * width, ssm_d_state=64, ssm_n_group=2,
                          ssm_dt_rank=max(2, width // 64))
    return make_qwen35_mtp(CACHE / setup.replace(" ", "-"), shape=q_shape).target


def load(target: Path, *, mtp: bool, threads: int, gpu: int) -> Engine:
    engine = Engine()
    settings = ModelSettings(gpu_layers=gpu)
    engine.load(PairSpec(target=str(target), mtp=mtp, target_settings=settings, draft_settings=settings,
                         context=ContextSettings(n_ctx=N_CTX, threads=threads)))
    return engine


class WarmPolicy:
    """The automatic-depth policy of the "auto" replies, kept apart from the cold ones' (which start afresh).
    ``reload``: each reply starts from the last one's policy saved and restored through JSON (a reload)."""

    def __init__(self, reload: bool = False) -> None:
        self.policy: AutoDraftLength | None = None
        self.reload = reload


def reply(engine: Engine, prompt: list[int], tokens: int, k: int | None, tally: Tally, *,
          warm: WarmPolicy | None = None, plain: bool = False) -> None:
    """One reply into ``tally``; with ``k=None``: ``warm``'s policy, or a fresh one (cold: its passes timed anew)
    without it.

    Every reply starts from an empty target cache, as a new conversation's first reply does: its prompt is
    evaluated (and an MTP head scored on it), not found cached from the configuration before it."""
    decoder = engine._decoder_or_raise()
    decoder.reset()
    if k is None:
        decoder.auto_policy = warm.policy if warm is not None else None
        if warm is None:  # a cold start: its load's timings, as the first reply after a load has (module docstring)
            decoder.time_passes()
        if warm is not None and warm.reload and warm.policy is not None:
            decoder.auto_policy = AutoDraftLength.restore(json.loads(json.dumps(warm.policy.snapshot())))
    done = None
    for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=k), plain=plain, ignore_eos=True):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    if k is None and warm is not None:
        warm.policy = decoder.auto_policy
    s = done.stats
    tally.add(s.generated, s.decode_s, s.drafted, s.accepted, s.k_sum, s.passes)


Cells = dict[int, dict[str, list[Tally]]]
"""Per reply length, per configuration: one Tally per round."""


def run_setup(setup: str, args: argparse.Namespace, binary: Path | None) -> Cells:
    """Every configuration of one setup, per reply length and round."""
    gpu = -1 if args.cuda else 0
    target = make_target(setup, args.layers, args.width)
    plain_engine = load(target, mtp=False, threads=args.threads, gpu=gpu)
    mtp_engine = load(target, mtp=True, threads=args.threads, gpu=gpu)
    assert mtp_engine.info is not None and mtp_engine.info.draft_mode == "mtp", mtp_engine.info
    prompts = PROMPTS[: args.prompts]
    names = [*OURS, *([f"native {d}" for d in DEPTHS] if binary is not None else [])]
    cells: Cells = {n: {name: [Tally() for _ in range(args.runs)] for name in names} for n in args.lengths}
    try:
        warm = plain_engine.tokenize_prompt(prompts[0])
        reply(plain_engine, warm, 8, 0, Tally())  # page the weights in
        reply(mtp_engine, warm, 8, 2, Tally())
        warm_policy = WarmPolicy()  # automatic depth from a fresh load, then carried across its replies
        reloaded_policy = WarmPolicy(reload=True)
        for run in range(args.runs):
            for p, text in enumerate(prompts):
                ids = mtp_engine.tokenize_prompt(text)
                for n in args.lengths:
                    shift = (run + p + n) % len(names)  # a rotating order: no configuration always goes first
                    for name in names[shift:] + names[:shift]:
                        tally = cells[n][name][run]
                        if name == "plain":
                            reply(plain_engine, ids, n, 0, tally, plain=True)
                        elif name.startswith("depth "):
                            reply(mtp_engine, ids, n, int(name.split()[1]), tally)
                        elif name == "auto":
                            reply(mtp_engine, ids, n, None, tally, warm=warm_policy)
                        elif name == "auto reloaded":
                            reply(mtp_engine, ids, n, None, tally, warm=reloaded_policy)
                        elif name == "auto cold":
                            reply(mtp_engine, ids, n, None, tally)
                        else:
                            assert binary is not None
                            native_reply(binary, target, text, n, int(name.split()[1]), args, tally)
    finally:
        plain_engine.unload()
        mtp_engine.unload()
    return cells


def native_reply(binary: Path, target: Path, text: str, tokens: int, depth: int, args: argparse.Namespace,
                 tally: Tally) -> None:
    # Automatic threads (0): llama.cpp's tool is given what the engine would choose from the load right now.
    threads = args.threads or choose_threads(usable_cpus(), OtherLoadMeter().probe(0.2))
    r = run_native(binary, target, spec_type="draft-mtp", k=depth, prompt=text, tokens=tokens, threads=threads,
                   cuda=args.cuda, n_ctx=N_CTX)
    tally.add(r.decoded, r.decoded / r.tps if r.tps else 0.0, r.drafted, r.accepted)


def _rate(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def total(rounds: list[Tally]) -> Tally:
    """A configuration's Tally over every round of a cell."""
    out = Tally()
    for t in rounds:
        out.add(t.tokens, t.seconds, t.drafted, t.accepted, t.k_sum, t.passes)
    return out


@dataclasses.dataclass(frozen=True)
class Ratio:
    """The median over rounds of one configuration's tok/s over another's in the same round, and its quartiles.

    Paired: each round's two numbers were measured minutes apart at most, in an interleaved order, so a load that
    moves between rounds moves both; the median leaves out the rounds a stall hit one side of."""

    median: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.median:.2f}x ({self.low:.2f}-{self.high:.2f})"


def paired(cell: dict[str, list[Tally]], name: str, reference: str) -> Ratio:
    """``name``'s tok/s over ``reference``'s, round by round: their median and quartiles."""
    ratios = sorted(a.tps / b.tps for a, b in zip(cell[name], cell[reference], strict=True) if a.tps and b.tps)
    if not ratios:
        return Ratio(0.0, 0.0, 0.0)
    if len(ratios) < 4:
        return Ratio(statistics.median(ratios), ratios[0], ratios[-1])
    q = statistics.quantiles(ratios, n=4)
    return Ratio(statistics.median(ratios), q[0], q[2])


def best_depth(cell: dict[str, list[Tally]]) -> str:
    """The fixed depth with the most tok/s over all rounds of the cell."""
    return max((f"depth {d}" for d in DEPTHS), key=lambda c: total(cell[c]).tps)


def verdict(cell: dict[str, list[Tally]], name: str) -> tuple[Ratio, Ratio, str]:
    """(name / best fixed depth, name / plain, the verdict of the goal that applies to this cell): medians of
    paired ratios. The goal vs the best depth applies where that depth beats plain in its own paired median."""
    best = best_depth(cell)
    to_best, to_plain = paired(cell, name, best), paired(cell, name, "plain")
    if paired(cell, best, "plain").median > 1.0:
        goal = f"vs best depth ({best}) {to_best.median:.3f} (goal 0.95): " + (
            "met" if to_best.median >= 0.95 else "NOT met")
    else:
        goal = f"MTP cannot pay; vs plain {to_plain.median:.3f} (goal 0.97): " + (
            "met" if to_plain.median >= 0.97 else "NOT met")
    return to_best, to_plain, goal


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1, help="rounds over every prompt and length (each cell's "
                    "configurations run in a rotating order within a round)")
    ap.add_argument("--lengths", default="24,64,192", help="reply lengths in tokens, comma-separated")
    ap.add_argument("--prompts", type=int, default=3, help=f"how many of the {len(PROMPTS)} prompts")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads (0: automatic, as the app runs: "
                    "chosen from the CPUs the other processes leave free, re-chosen before each reply and mid-reply)")
    ap.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated, of: {', '.join(SETUPS)}")
    ap.add_argument("--quick", action="store_true", help="2 runs, 2 prompts, 24 and 96 tokens, 4 x 256 models, "
                    "no native column")
    ap.add_argument("--no-native", action="store_true", help="skip llama.cpp's llama-speculative-simple")
    ap.add_argument("--cuda", action="store_true", help="offload every layer to the GPU")
    ap.add_argument("--burner", action="store_true", help="one steady CPU-bound background process for the whole "
                    "run (a busy machine; pair it with --threads 0)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.prompts, args.lengths, args.layers, args.width = 2, 2, "24,96", 4, 256
        args.no_native = True
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    try:
        args.lengths = [int(n) for n in str(args.lengths).split(",")]
    except ValueError:
        ap.error(f"--lengths must be comma-separated token counts, got {args.lengths!r}")
    if not args.lengths or min(args.lengths) < 1 or max(args.lengths) > N_CTX // 2:
        ap.error(f"each reply length must be 1..{N_CTX // 2}")
    if not 1 <= args.prompts <= len(PROMPTS):
        ap.error(f"--prompts must be 1..{len(PROMPTS)}")
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    unknown = [s for s in setups if s not in SETUPS]
    if unknown:
        ap.error(f"unknown setup {unknown[0]!r}: choose from {', '.join(SETUPS)}")
    if args.threads < 0:
        ap.error("--threads must be >= 0 (0: automatic)")
    binary = None if args.no_native else build_native(args.cuda)
    with cpu_burner(args.burner):
        return run(args, setups, binary)


@contextlib.contextmanager
def cpu_burner(enabled: bool) -> Iterator[None]:
    """With ``enabled``: one steady CPU-bound background process while the block runs, started a second before
    it (running before the engines choose their threads, as a steady load would be) and killed after it."""
    if not enabled:
        yield
        return
    burner = subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"])
    try:
        time.sleep(1.0)
        yield
    finally:
        burner.kill()
        burner.wait()


def run(args: argparse.Namespace, setups: list[str], binary: Path | None) -> int:
    """Every setup's table and verdicts, under whatever load is running."""
    threads = "automatic" if args.threads == 0 else str(args.threads)
    print(f"# bench_mtp: {platform.machine()}, {os.cpu_count()} CPUs, threads {threads}, "
          f"{'GPU' if args.cuda else 'CPU'}, target {args.layers} x {args.width} F16 + 1 NextN block, "
          f"{args.runs} runs x {args.prompts} prompts, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
          + (", a CPU-bound background process throughout" if args.burner else ""),
          flush=True)
    native_cols = [f"native {d}" for d in DEPTHS] if binary is not None else []
    header = [*OURS, *native_cols]
    print()
    print("| setup | reply | " + " | ".join(header) + " | best depth / plain | auto / best depth | auto / plain "
          "| reloaded / best depth | reloaded / plain | cold / best depth | cold / plain "
          "| acceptance at depth 1/2/3; auto/reloaded/cold | mean depth auto/reloaded/cold |")
    print("|---|---|" + "---:|" * (len(header) + 9))
    goals: list[str] = []
    for setup in setups:
        for n, cell in run_setup(setup, args, binary).items():
            t = {name: total(rounds) for name, rounds in cell.items()}
            a_best, a_plain, a_goal = verdict(cell, "auto")
            r_best, r_plain, r_goal = verdict(cell, "auto reloaded")
            c_best, c_plain, c_goal = verdict(cell, "auto cold")
            acc = "/".join(_rate(t[f"depth {d}"].acceptance) for d in DEPTHS)
            if native_cols:
                acc += " (native " + "/".join(_rate(t[c].acceptance) for c in native_cols) + ")"
            automatic = ("auto", "auto reloaded", "auto cold")
            acc += "; " + "/".join(_rate(t[c].acceptance) for c in automatic)
            depth = "/".join(f"{t[c].k_sum / t[c].passes if t[c].passes else 0.0:.2f}" for c in automatic)
            cells = " | ".join(f"{t[c].tps:.1f}" for c in header)
            print(f"| {setup} | {n} tokens | {cells} | {paired(cell, best_depth(cell), 'plain')} | {a_best} | "
                  f"{a_plain} | {r_best} | {r_plain} | {c_best} | {c_plain} | {acc} | {depth} |", flush=True)
            goals.append(f"{setup}, {n} tokens: auto {a_goal}; auto reloaded {r_goal}; auto cold {c_goal}")
    print()
    for line in goals:
        print(f"- {line}")
    print(f"\n# load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
