"""``outrider generate`` and ``outrider bench``: the engine from the terminal (a contract: see README)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from outrider.commands.base import CliError, positive_int, print_json
from outrider.commands.engine_options import (
    DRAFTER_CHOICES,
    CommandEngine,
    add_model_options,
    add_prompt_options,
    has_drafter,
    is_done,
    running_engine,
    text_request,
)
from outrider.engine.measure.bench import DEFAULT_BENCH_PROMPTS, bench_row, bench_summary
from outrider.engine.speedup import describe_speedup

GREEN, RESET = "\x1b[32m", "\x1b[0m"


def register(sub: Any) -> None:
    gen = sub.add_parser("generate", help="generate text with speculative decoding")
    add_model_options(gen)
    add_prompt_options(gen)
    gen.add_argument("--max-tokens", type=positive_int, default=256)
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--json", action="store_true", help="one JSON object per line")
    gen.add_argument("--ignore-eos", action="store_true",
                     help="generate through end-of-text tokens, exactly --max-tokens (replies of one length, to time)")
    gen.set_defaults(func=cmd_generate)

    bench = sub.add_parser("bench", help="plain vs speculative on a set of prompts")
    add_model_options(bench)
    bench.add_argument("--prompts", type=Path, help="prompts file: a JSON list, or one prompt per line")
    bench.add_argument("--max-tokens", type=positive_int, default=128)
    bench.add_argument("--runs", type=positive_int, default=2)
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(func=cmd_bench, learns_across_loads=False)


# -- generate ---------------------------------------------------------------------------------------------------
def cmd_generate(args: argparse.Namespace) -> int:
    request = dataclasses.replace(text_request(args, prompt=args.prompt, chat=args.chat),
                                  ignore_eos=args.ignore_eos)
    with running_engine(args) as engine:
        return _stream(engine, request, as_json=args.json)


def _stream(engine: CommandEngine, request: Any, *, as_json: bool) -> int:
    colour = sys.stdout.isatty() and not as_json
    for event in engine.run(request):
        if is_done(event):
            if as_json:
                print_json({"event": "done", "stop_reason": event.stop_reason, "stats": event.stats.to_dict()})
            else:
                sys.stdout.write("\n")
                sys.stdout.flush()
                sys.stderr.write(format_summary(event.stats.to_dict(), event.stop_reason) + "\n")
            continue
        if as_json:
            print_json({"event": "step", "tokens": event.tokens, "text": event.text, "drafted": event.drafted,
                        "k": event.k})
        else:
            pieces = event.pieces or [event.text]
            for piece, drafted in zip(pieces, [*event.drafted, False], strict=False):
                sys.stdout.write(f"{GREEN}{piece}{RESET}" if colour and drafted and piece else piece)
            sys.stdout.flush()
    return 0


def _fmt(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def format_speedup(s: dict[str, Any]) -> str:
    """The engine's in-reply speed-up with its interval and the plain rate it was measured against."""
    speedup = s.get("speedup")
    if speedup is None:
        return "speed-up not measured (no plain cost in this reply yet)"
    text = "speed-up " + describe_speedup(speedup, s.get("speedup_low"), s.get("speedup_high"))
    plain = s.get("plain_tps")
    plain_text = f"plain {plain:.1f} tok/s" if plain is not None else "plain"
    return (f"{text} vs {plain_text} measured in this reply ({s.get('passes', 0)} passes, "
            f"{s.get('plain_steps', 0)} plain)")


def format_summary(s: dict[str, Any], stop_reason: str) -> str:
    """The stats summary printed after a streamed reply (definitions in docs/metrics.md)."""
    lines = [
        f"-- {s['generated']} tokens, stop: {stop_reason}, draft: {s['draft_mode']}",
        f"   decode {_fmt(s['decode_tps'], '.1f')} tok/s · prompt {_fmt(s['prompt_tps'], '.1f')} tok/s "
        f"({s['prompt_tokens']} tokens, {s['prompt_tokens_reused']} reused) · first token "
        f"{_fmt(s['ttft_s'], '.3f')} s" + (f" · {s['threads']} threads" if s.get("threads") else ""),
        f"   acceptance {_fmt(s['acceptance_rate'], '.1%')} ({s['accepted']}/{s['drafted']}) · per-token a "
        f"{_fmt(s.get('token_acceptance'), '.1%')} · {_fmt(s['tokens_per_pass'], '.2f')} tokens/pass · mean k "
        f"{_fmt(s['k_mean'], '.2f')}",
        f"   time: draft {s['draft_s']:.3f} s · verify {s['verify_s']:.3f} s · other {s['other_s']:.3f} s",
        f"   {format_speedup(s)}",
    ]
    by_drafter = s.get("by_drafter") or {}
    if len(by_drafter) > 1 or "+" in str(s.get("draft_mode", "")):  # a chain: who drafted what
        parts = [f"{DRAFTER_NAMES.get(kind, kind)} {c['accepted']}/{c['drafted']}" for kind, c in by_drafter.items()]
        lines.append("   accepted/drafted by drafter: " + (" · ".join(parts) or "nothing drafted"))
    return "\n".join(lines)


DRAFTER_NAMES = {"lookup": "prompt lookup", "history": "history lookup", "model": "draft model", "mtp": "MTP"}


# -- bench ------------------------------------------------------------------------------------------------------
def load_prompts(path: Path | None) -> list[tuple[str, str]]:
    """Prompts from a file (a JSON list of strings, or one prompt per non-empty line) or the default set."""
    if path is None:
        return list(DEFAULT_BENCH_PROMPTS)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read prompts file {path}: {exc}") from None
    prompts: list[str]
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(f"prompts file {path} is not valid JSON: {exc}") from None
        if not isinstance(data, list) or not all(isinstance(p, str) and p.strip() for p in data):
            raise CliError(f"prompts file {path} must be a JSON list of non-empty strings")
        prompts = data
    else:
        prompts = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not prompts:
        raise CliError(f"prompts file {path} has no prompts")
    return [(f"#{i + 1}", p) for i, p in enumerate(prompts)]


def cmd_bench(args: argparse.Namespace) -> int:
    if not has_drafter(args):
        raise CliError(f"bench needs a drafter: {DRAFTER_CHOICES}")
    prompts = load_prompts(args.prompts)
    rows: list[dict[str, Any]] = []
    with running_engine(args) as engine:
        for label, prompt in prompts:
            runs: dict[str, list[dict[str, Any]]] = {"plain": [], "spec": []}
            for _ in range(args.runs):  # interleaved: machine drift hits both alike
                for mode in ("plain", "spec"):
                    request = text_request(args, chat=prompt, plain=mode == "plain")
                    for event in engine.run(request):
                        if is_done(event):
                            runs[mode].append(event.stats.to_dict())
            rows.append(bench_row(label, prompt, runs))
            if not args.json:
                sys.stderr.write(f"  {label}: A/B speed-up {rows[-1]['ab_speedup']:.2f}×\n")
    if args.json:
        for row in rows:
            print_json({"event": "prompt", **row})
        print_json({"event": "summary", **bench_summary(rows)})
    else:
        print(format_bench_table(rows))
    return 0


def format_bench_table(rows: list[dict[str, Any]]) -> str:
    """The bench table: measured A/B speed-up (plain vs speculative runs) next to the cost model's prediction
    from the per-token acceptance a, and their ratio; docs/metrics.md defines every column."""
    head = (f"{'prompt':<12} {'accept':>7} {'a':>6} {'tok/pass':>8} {'plain t/s':>10} {'spec t/s':>9} "
            f"{'A/B speed-up':>12} {'predicted':>9} {'ratio':>6}")
    out = [head, "-" * len(head)]
    for r in rows:
        ratio = r["measured_over_predicted"]
        predicted = r["predicted_speedup"]
        a = r.get("token_acceptance")
        out.append(
            f"{r['label']:<12} {r['acceptance_rate']:>7.1%} {'—' if a is None else format(a, '.1%'):>6} "
            f"{r['tokens_per_pass']:>8.2f} {r['plain_decode_tps']:>10.1f} {r['spec_decode_tps']:>9.1f} "
            f"{r['ab_speedup']:>11.2f}× "
            f"{'—' if not predicted else format(predicted, '.2f') + '×':>9} "
            f"{'—' if ratio is None else format(ratio, '.2f'):>6}"
        )
    s = bench_summary(rows)
    out.append(f"median A/B speed-up {s['median_ab_speedup']:.2f}× · median acceptance {s['median_acceptance']:.1%}")
    out.append("A/B speed-up = speculative ÷ plain decode tok/s of interleaved runs (measured); predicted = "
               "E(a, k) · c_plain / (k · c_draft + c_verify) with a = accepted / (accepted + rejections)")
    return "\n".join(out)
