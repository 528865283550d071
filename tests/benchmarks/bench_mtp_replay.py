"""Automatic depth's cold start replayed on a real MTP head's guesses, with the timings held still.

    python tests/benchmarks/bench_mtp_replay.py [--setup "hybrid agreeing"] [--prompts N] [--tokens 24]
                                                [--layers 8] [--width 768] [--seeds N] [--jitter 0.05]
                                                [--load-shift-ms 0] [--threads 2] [--burner] [--recapture]

``bench_mtp.py`` times every configuration live, and on a shared machine a 24-token reply's time moves by +-15 %
between rounds: a cold start's policy, which decides from a handful of passes, is judged there through noise that
20 rounds barely average out. This splits the two things apart.

**Capture** (once per model and prompt set, cached in ``.cache/bench-mtp/replay-*.json``): on the generated model of
a ``bench_mtp`` setup, loaded with ``--mtp``, for each prompt the target's greedy reply, the head's score on the
prompt (what ``observe_prompt`` is given), and for every reply position p how many of the head's chained guesses from
p match the reply (a fixed-depth draft of ``CAPTURE_DEPTH`` made at p, after the prompt and the reply's first p
tokens were evaluated); and the costs the replies themselves time: the lower median per batch size of fixed-depth
replies' verify passes, per draft length (``Costs``), per scoring of the head on plain steps, and a plain engine's
one-token pass; and a drafted token as the load times it.

**Replay** (no model, milliseconds): the decoder's loop as ``SpeculativeDecoder.generate`` runs it — the plain-rate
meter's forced plain runs (``PlainRateMeter``), the policy's choice, a draft kept as far as the captured match at
its position, the head scored on the plain steps since the last scoring every ``shadow_interval``, a head put to rest
(or asleep through a reply: ``sleeps_through_next_reply``) no longer followed — with each pass timed as the captured
cost times a seeded log-normal jitter (``--jitter``), and a cold start's load-time timings (``seed_costs``) the
captured passes plus ``--load-shift-ms`` (a load timed in a busier moment than the reply runs in: contention adds
about the same time to a pass of any size). Configurations:
plain (``Costs.plain_pass``), depth 1/2/3, auto (one policy per seed carried from reply to reply, through every
prompt once before the timed replies, as a loaded pair runs it) and auto cold (a fresh policy per reply). Per prompt
and configuration it prints seconds per reply (the median over the seeds) and the ratios auto / best depth, auto
cold / best depth and auto cold / plain, per prompt and over the prompts' summed time.

What it leaves out: the head's confidence gate (``first_min``: no confidences are captured), and any cost a live
reply has that a table does not (a pass slowed by the step before it, Python's own time). It decides between
variants of the policy on the same guesses and costs; ``bench_mtp.py`` remains the measurement of the product.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mtp

from outrider.engine.autodraft import MTP_K_START, AutoDraftLength
from outrider.engine.engine import Engine
from outrider.engine.params import DraftParams
from outrider.engine.pass_costs import PASS_SIZES
from outrider.engine.speculative import PLAIN_PROBE_EVERY, DoneEvent, FixedDraftLength, StepEvent
from outrider.engine.stats import GenerationStats, PlainRateMeter

CAPTURE_DEPTH = 6  # chained guesses captured per reply position: longer drafts than a cold start makes in 24 tokens
EXTRA_PROMPTS = ["for i in range ( n ) : print", "the cat sat on the mat and the", "1 2 3 4 5 6 7 8",
                 "def main ( ) : return the model"]
CONFIGS = ("plain", "depth 1", "depth 2", "depth 3", "auto", "auto cold")


@dataclasses.dataclass(frozen=True)
class Costs:
    """Seconds, as the replies timed them: ``verify[n]`` a pass of n tokens on the MTP engine (an awake head's copy
    of the hidden states included) right after a pass of the same size, ``switched[n]`` one right after a pass of
    another size — on a CPU llama.cpp builds its graph anew when the batch's shape changes: on the 8 x 768 hybrid,
    live, 4.4 against 4.9 ms for one token, 5.7 against 6.4 for 2, 6.3 against 6.7 for 3; taken together, a policy
    that changes its depth from step to step replayed as cheap as one that holds it, and the replay's plain steps
    7 % dearer than the plain engine's. ``plain`` a one-token pass of the engine loaded without ``--mtp``,
    ``draft[k]`` a draft of k tokens (the decoder's ``drafting_s``: the head's catch-up on the last pass's cells,
    then a chained guess per token), ``scoring`` a scoring of the head on plain steps, ``follow`` the copy in a
    one-token pass; and ``draft_at_load``, a drafted token as timed at load (``MtpDraft.time_draft_token``: one
    chained guess), what a fresh policy is seeded with.

    Per draft length, not per token: a draft's catch-up costs about what its first guess does whatever its length
    (on the 8 x 768 hybrid, live: 1.4 ms for a draft of 1, 2.1 for 2, 3.1 for 4, 3.7 for 6), and at one cost per
    token drafts of 2 replayed a third cheaper than they ran — a first reply went on drafting 2 where the live one,
    on its own timings, decoded plainly."""

    verify: dict[int, float]
    switched: dict[int, float]
    plain: float
    draft: dict[int, float]
    draft_at_load: float
    scoring: float
    follow: float

    def pass_cost(self, n: int, switched: bool = False) -> float:
        """A pass of ``n`` tokens (``switched``: right after a pass of another size): as captured, or on the line
        through the two largest captured sizes beyond."""
        return _on_line(self.switched if switched else self.verify, n)

    @property
    def plain_pass(self) -> float:
        """A plain engine's one-token pass: the MTP engine's, without the head's copy. Timed on their own, in one
        reply of each prompt after the MTP engine's, the two engines' passes read 3 % apart either way from one
        capture to the next; interleaved live (bench_mtp.py's "dense low", 736 passes each) they were 4.29 and 4.34
        ms — loading the head costs a pass nothing while it rests. ``plain`` is printed beside it."""
        return self.pass_cost(1) - self.follow

    def draft_cost(self, k: int) -> float:
        """A draft of ``k`` tokens: as captured, or on the line through the two longest captured beyond."""
        return _on_line(self.draft, k)


def _on_line(costs: dict[int, float], n: int) -> float:
    """``costs[n]``, or beyond the sizes captured the line through the two largest."""
    if n in costs:
        return costs[n]
    sizes = sorted(costs)
    a, b = sizes[-2], sizes[-1]
    slope = (costs[b] - costs[a]) / (b - a)
    return costs[b] + slope * (n - b)


@dataclasses.dataclass(frozen=True)
class Captured:
    text: str
    prompt_score: tuple[int, int]  # (hits, trials) of the head on the prompt
    match: list[int]  # per reply position: the head's chained guesses from there that match the reply


def _lower_median(xs: list[float]) -> float:
    return statistics.median_low(xs)


def capture(args: argparse.Namespace, path: Path) -> tuple[list[Captured], Costs]:
    """Capture (see the module docstring) on the setup's generated model and save to ``path``."""
    target = bench_mtp.make_target(args.setup, args.layers, args.width)
    plain_engine = bench_mtp.load(target, mtp=False, threads=args.threads, gpu=0)
    engine = bench_mtp.load(target, mtp=True, threads=args.threads, gpu=0)
    try:
        texts = (bench_mtp.PROMPTS + EXTRA_PROMPTS)[: args.prompts]
        captured, costs = capture_engines(engine, plain_engine, texts, args.tokens)
    finally:
        engine.unload()
        plain_engine.unload()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"prompts": [dataclasses.asdict(c) for c in captured],
                                "costs": dataclasses.asdict(costs)}, indent=1))
    return captured, costs


def capture_engines(engine: Engine, plain_engine: Engine, texts: list[str], tokens: int
                    ) -> tuple[list[Captured], Costs]:
    """Capture on ``engine`` (loaded with ``--mtp``) and ``plain_engine`` (the same file without): per text of
    ``texts`` its head's prompt score and guesses over a ``tokens``-token greedy reply, and the replies' costs."""
    decoder = engine._decoder_or_raise()
    steps: list[dict[str, Any]] = []
    original_observe = FixedDraftLength.observe

    def recording_observe(self: FixedDraftLength, **kw: Any) -> None:
        steps.append(kw)
        original_observe(self, **kw)

    scores: list[tuple[int, int, float | None]] = []
    original_prompt = AutoDraftLength.observe_prompt
    original_shadow = AutoDraftLength.observe_shadow

    def recording_prompt(self: AutoDraftLength, hits: int, trials: int, seconds: float = 0.0) -> None:
        scores.append((hits, trials, None))
        original_prompt(self, hits, trials, seconds)

    def recording_shadow(self: AutoDraftLength, hits: int, trials: int, seconds: float | None = None) -> None:
        scores.append((hits, trials, seconds))
        original_shadow(self, hits, trials, seconds)

    FixedDraftLength.observe = recording_observe  # type: ignore[method-assign]
    AutoDraftLength.observe_prompt = recording_prompt  # type: ignore[method-assign]
    AutoDraftLength.observe_shadow = recording_shadow  # type: ignore[method-assign]
    captured: list[Captured] = []
    verify: dict[int, list[float]] = {}
    switched: dict[int, list[float]] = {}
    draft: dict[int, list[float]] = {}
    follow: list[float] = []
    plain: list[float] = []
    scoring: list[float] = []
    decoder.time_passes()
    draft_at_load = _lower_median(decoder.draft_token_costs)
    try:
        for text in texts:
            ids = engine.tokenize_prompt(text)
            reply = _greedy(engine, ids, tokens + CAPTURE_DEPTH + 1)  # a match may run past the reply's end
            decoder.reset()
            decoder.auto_policy = None
            scores.clear()
            _run(engine, ids, tokens, DraftParams(k=None))
            prompt_score = scores[0][:2]
            scoring += [s for _, _, s in scores[1:] if s is not None]
            match: list[int] = []
            for p in range(tokens):
                steps.clear()
                decoder.reset()
                out = _run(engine, ids + reply[:p], CAPTURE_DEPTH + 1, DraftParams(k=CAPTURE_DEPTH))
                m = int(steps[0]["accepted"])
                if out[: m + 1] != reply[p: p + m + 1]:
                    raise RuntimeError(f"the reply from position {p} of {text!r} is not the greedy reply: "
                                       f"{out[: m + 1]} != {reply[p: p + m + 1]}")
                match.append(m)
            captured.append(Captured(text, (int(prompt_score[0]), int(prompt_score[1])), match))
            for depth in range(CAPTURE_DEPTH + 2):
                steps.clear()
                decoder.reset()
                _run(engine, ids, tokens, DraftParams(k=depth))
                for before, s in itertools.pairwise(steps):  # a reply's first step is its coldest
                    kept_in = verify if s["batch"] == before["batch"] else switched
                    kept_in.setdefault(int(s["batch"]), []).append(float(s["verify_s"]))
                    if s["drafted"]:
                        draft.setdefault(int(s["drafted"]), []).append(float(s["draft_s"]))
                    elif s["follow_s"]:
                        follow.append(float(s["follow_s"]))
            steps.clear()
            plain_engine._decoder_or_raise().reset()
            _run(plain_engine, ids, tokens, DraftParams(k=0), plain=True)
            plain += [float(s["verify_s"]) for s in steps[1:] if s["batch"] == 1]
    finally:
        FixedDraftLength.observe = original_observe  # type: ignore[method-assign]
        AutoDraftLength.observe_prompt = original_prompt  # type: ignore[method-assign]
        AutoDraftLength.observe_shadow = original_shadow  # type: ignore[method-assign]
    costs = Costs({n: _lower_median(v) for n, v in sorted(verify.items())},
                  {n: _lower_median(v) for n, v in sorted(switched.items())}, _lower_median(plain),
                  {k: _lower_median(v) for k, v in sorted(draft.items())}, draft_at_load,
                  _lower_median(scoring) if scoring else 0.0, _lower_median(follow) if follow else 0.0)
    return captured, costs


def _greedy(engine: Engine, ids: list[int], tokens: int) -> list[int]:
    engine._decoder_or_raise().reset()
    return _run(engine, ids, tokens, DraftParams(k=0), plain=True)


def _run(engine: Engine, ids: list[int], tokens: int, draft: DraftParams, plain: bool = False
         ) -> list[int]:
    out: list[int] = []
    for event in engine.generate(ids, max_tokens=tokens, draft=draft, plain=plain, ignore_eos=True):
        if isinstance(event, StepEvent):
            out.extend(event.tokens)
        elif isinstance(event, DoneEvent):
            break
    return out


def load_capture(path: Path) -> tuple[list[Captured], Costs] | None:
    """The capture saved at ``path``; None for one saved before drafts were timed per length and passes apart
    after a size change (capture again)."""
    data = json.loads(path.read_text())
    prompts = [Captured(p["text"], tuple(p["prompt_score"]), p["match"]) for p in data["prompts"]]  # type: ignore[arg-type]
    c = data["costs"]
    if "draft" not in c or "switched" not in c:
        return None
    sizes = {name: {int(n): s for n, s in c[name].items()} for name in ("verify", "switched", "draft")}
    costs = Costs(sizes["verify"], sizes["switched"], c["plain"], sizes["draft"], c["draft_at_load"], c["scoring"],
                  c["follow"])
    return prompts, costs


def capture_name(args: argparse.Namespace) -> str:
    """The cache file of a capture: its model, prompts, length, threads and load."""
    load = "-burner" if args.burner else ""
    return (f"replay-{args.setup.replace(' ', '-')}-{args.layers}x{args.width}-{args.prompts}p-{args.tokens}t-"
            f"{args.threads}threads{load}.json")


PolicyFactory = Callable[[Costs, float], AutoDraftLength]


def fresh_policy(costs: Costs, load_shift: float) -> AutoDraftLength:
    """A cold start's policy as the decoder makes it, seeded with the load's timings: the passes of
    ``pass_costs.PASS_SIZES``, each ``load_shift`` seconds dearer than
    the replies pay, and a drafted token as timed at load."""
    policy = AutoDraftLength(k_max=16, score_first=True, k_start=MTP_K_START)
    policy.seed_costs({n: [costs.pass_cost(n) + load_shift] * 3 for n in PASS_SIZES}, [costs.draft_at_load] * 3)
    return policy


def replay(c: Captured, costs: Costs, config: str, rng: random.Random, jitter: float, load_shift: float,
           factory: PolicyFactory = fresh_policy, steps: list[tuple[int, int, int]] | None = None,
           carried: AutoDraftLength | None = None) -> float:
    """Seconds one reply of len(c.match) tokens decodes in, under ``config`` (see CONFIGS; "auto" runs the policy
    ``carried``, which the reply goes on teaching); each step's (reply position, tokens drafted, tokens kept)
    appended to ``steps``."""
    tokens = len(c.match)

    def timed(seconds: float) -> float:
        return seconds * math.exp(rng.gauss(0.0, jitter)) if jitter > 0 else seconds

    if config == "plain":
        return sum(timed(costs.plain_pass) for _ in range(tokens))
    if config == "auto" and carried is None:
        raise ValueError("a warm reply needs the policy it carries")
    auto = config in ("auto", "auto cold")
    fixed = 0 if auto else int(config.split()[1])
    policy = carried if config == "auto" else factory(costs, load_shift) if auto else None
    if policy is not None:
        # As the decoder: a carried policy may sleep through the reply (its prompt not scored, the head resting);
        # a fresh one is made after that question is asked, awake.
        asleep = config == "auto" and policy.sleeps_through_next_reply()
        policy.start_reply()
        policy.observe_prompt(*((0, 0) if asleep else c.prompt_score), seconds=0.0)
    meter = PlainRateMeter(GenerationStats(prompt_tokens=1, draft_mode="mtp", threads=1), load_probes=False)
    seconds = 0.0
    position = shadow_from = 0
    previous = 0  # the last pass's size (the prompt's, for the first: another size): ``Costs.switched``
    while position < tokens:
        forced = meter.wants_plain_probe(PLAIN_PROBE_EVERY)
        chosen = 0 if forced else (policy.choose() if policy is not None else fixed)
        k = max(0, min(chosen, tokens - position - 1))
        follow = costs.follow
        scoring_s = 0.0
        if k > 0:
            accepted = min(c.match[position], k)
            draft_s = timed(costs.draft_cost(k))
            verify_s = timed(costs.pass_cost(k + 1, previous != k + 1))
        else:
            accepted, draft_s = 0, 0.0
            if policy is not None and policy.should_rest():
                follow = 0.0
            elif policy is not None and position - shadow_from >= policy.shadow_interval:
                hits = sum(c.match[q] >= 1 for q in range(shadow_from, position))
                scoring_s = timed(costs.scoring)
                policy.observe_shadow(hits, position - shadow_from, seconds=scoring_s)
                shadow_from = position
            verify_s = timed(costs.pass_cost(1, previous != 1) - costs.follow + follow)
        if policy is not None:
            policy.observe(batch=k + 1, verify_s=verify_s, drafted=k, accepted=accepted, draft_s=draft_s,
                           follow_s=follow if k == 0 else costs.follow)
        previous = k + 1
        step = draft_s + scoring_s + verify_s
        meter.add_step(batch=k + 1, pass_tokens=accepted + 1, step_s=step, target_s=verify_s)
        if steps is not None:
            steps.append((position, k, accepted))
        seconds += step
        position += accepted + 1
        if k > 0:
            shadow_from = position
    return seconds


def table(prompts: list[Captured], costs: Costs, args: argparse.Namespace,
          factory: PolicyFactory = fresh_policy) -> dict[str, dict[str, float]]:
    """Per prompt (and "all": the prompts' summed time), per configuration: the median seconds over the seeds."""
    out: dict[str, dict[str, float]] = {}
    sums: dict[str, list[float]] = {name: [0.0] * args.seeds for name in CONFIGS}
    shift = args.load_shift_ms / 1000
    carried = [factory(costs, shift) for _ in range(args.seeds)]
    for seed, policy in enumerate(carried):  # warmed through every prompt once, untimed
        for c in prompts:
            replay(c, costs, "auto", random.Random(f"{c.text}|warm-up|{seed}"), args.jitter, shift, carried=policy)
    for c in prompts:
        row: dict[str, float] = {}
        for name in CONFIGS:
            times = [replay(c, costs, name, random.Random(f"{c.text}|{name}|{seed}"), args.jitter, shift, factory,
                            carried=carried[seed]) for seed in range(args.seeds)]
            for seed, t in enumerate(times):
                sums[name][seed] += t
            row[name] = statistics.median(times)
        out[c.text] = row
    out["all prompts"] = {name: statistics.median(v) for name, v in sums.items()}
    return out


def print_table(rows: dict[str, dict[str, float]]) -> None:
    print(f"| prompt | {' | '.join(CONFIGS)} | auto / best depth | cold / best depth | cold / plain |")
    print("|---|" + "---:|" * (len(CONFIGS) + 3))
    for text, row in rows.items():
        best = min(row[f"depth {d}"] for d in (1, 2, 3))
        cells = " | ".join(f"{1000 * row[n]:.1f}" for n in CONFIGS)
        print(f"| {text[:32]} | {cells} | {best / row['auto']:.3f} | {best / row['auto cold']:.3f} | "
              f"{row['plain'] / row['auto cold']:.3f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", default="hybrid agreeing", choices=bench_mtp.SETUPS)
    ap.add_argument("--prompts", type=int, default=8, help="of bench_mtp.PROMPTS and then EXTRA_PROMPTS")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads for the capture")
    ap.add_argument("--seeds", type=int, default=20, help="jittered replays per prompt and configuration")
    ap.add_argument("--jitter", type=float, default=0.05, help="log-normal sigma of each pass's timing")
    ap.add_argument("--load-shift-ms", type=float, default=0.0, help="what each pass timed at load costs more "
                    "than the replies' (negative: timed in a quieter moment)")
    ap.add_argument("--burner", action="store_true", help="capture beside one CPU-bound background process")
    ap.add_argument("--recapture", action="store_true", help="capture again even if cached")
    args = ap.parse_args()
    path = bench_mtp.CACHE / capture_name(args)
    loaded = None if args.recapture or not path.exists() else load_capture(path)
    if loaded is None:
        with bench_mtp.cpu_burner(args.burner):
            loaded = capture(args, path)
    prompts, costs = loaded
    print(f"# bench_mtp_replay: {args.setup}, {args.layers} x {args.width}, {args.tokens} tokens, {len(prompts)} "
          f"prompts, {args.seeds} seeds, jitter {args.jitter}, load shift {args.load_shift_ms} ms")
    print("# costs (ms): " + ", ".join(f"pass {n} {1000 * s:.2f}" for n, s in costs.verify.items())
          + "; after another size: " + ", ".join(f"{n} {1000 * s:.2f}" for n, s in costs.switched.items())
          + f"; plain {1000 * costs.plain_pass:.2f} (the plain engine's own {1000 * costs.plain:.2f}); "
          + ", ".join(f"draft {k} {1000 * s:.2f}" for k, s in costs.draft.items())
          + f"; drafted token at load {1000 * costs.draft_at_load:.2f}; scoring "
          f"{1000 * costs.scoring:.2f}; follow {1000 * costs.follow:.3f}")
    for c in prompts:
        print(f"# {c.text!r}: prompt {c.prompt_score[0]}/{c.prompt_score[1]}, match {c.match}")
    print_table(table(prompts, costs, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
