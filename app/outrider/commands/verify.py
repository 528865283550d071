"""``outrider verify``: check the exactness guarantee on the user's own pair (a contract: see README, docs/engine.md).

One engine process, one load. Greedy identity first (speculative vs plain at temperature 0, token ids compared),
then ``--samples`` speculative and plain samples of ``--tokens`` tokens at the given sampling settings: every
speculative token is compared with the target's exact distribution at its position (the engine re-scores the
sampled prefix), pooled over positions and samples, the samples per position, and — coupled sampler — each
speculative sample with the plain one of the same seed (``outrider.engine.measure.verify_stats``). With
``--json-schema FILE`` or ``--grammar FILE`` every reply is decoded under that grammar (structured output) and the
reference is the target's grammar-masked distribution (``SpeculativeDecoder.score(grammar=…)``). Exit 0 exact,
1 not exact or inconclusive (nothing drafted), 2 bad input, 3 the engine crashed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from outrider.commands.base import EXIT_RUNTIME, CliError, positive_int, print_json
from outrider.commands.engine_options import (
    DRAFTER_CHOICES,
    add_model_options,
    add_prompt_options,
    has_drafter,
    is_done,
    pair_spec,
    running_engine,
    text_request,
)

DEFAULT_SAMPLES = 400
DEFAULT_TOKENS = 16
DEFAULT_SEED = 0
DEFAULT_TEMPERATURE = 0.7


def _alpha(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {value:g}")
    return value


def register(sub: Any) -> None:
    ver = sub.add_parser(
        "verify", help="check that speculative decoding of a pair is exact (greedy identity, sampled distribution)",
        description="Greedy identity (speculative vs plain at temperature 0) and, at the given sampling settings, "
                    "a per-position chi-square comparison of speculative and plain samples. Exit 0 exact, 1 not "
                    "exact or inconclusive (nothing drafted), 2 bad input.",
    )
    add_model_options(ver)
    add_prompt_options(ver)
    ver.add_argument("--samples", type=positive_int, default=DEFAULT_SAMPLES,
                     help=f"speculative and plain samples each (default {DEFAULT_SAMPLES})")
    ver.add_argument("--tokens", type=positive_int, default=DEFAULT_TOKENS,
                     help=f"tokens per sample = positions compared (default {DEFAULT_TOKENS})")
    ver.add_argument("--alpha", type=_alpha, default=0.01,
                     help="family-wise significance level (Bonferroni over the positions; default 0.01)")
    ver.add_argument("--json", action="store_true", help="print one JSON object")
    shape = ver.add_mutually_exclusive_group()
    shape.add_argument("--json-schema", metavar="FILE",
                       help="decode under this JSON schema's grammar (structured output): every sample is compared "
                            "with the target's grammar-masked distribution")
    shape.add_argument("--grammar", metavar="FILE", help="decode under this GBNF grammar (llama.cpp's format), "
                                                         "compared as --json-schema is")
    # Sampling is what the distribution check is about: temperature 1 unless asked otherwise; a fixed seed.
    # Temperature 0.7, not 1: a sampler that applies the temperature wrongly (e.g. accepts at temperature 1) is
    # invisible at temperature 1.
    # The rejection sampler by default: the one unseeded replies use (``auto``), and the one whose exactness rests on
    # the acceptance rule; the check adds coupled identity pairs, so both samplers are checked.
    ver.set_defaults(func=cmd_verify, temperature=DEFAULT_TEMPERATURE, seed=DEFAULT_SEED, sampler="rejection",
                     learns_across_loads=False)


def _check_args(args: argparse.Namespace) -> None:
    if not has_drafter(args):
        raise CliError(f"verify needs a drafter: {DRAFTER_CHOICES}")
    if args.temperature <= 0:
        raise CliError("verify needs --temperature > 0 for the sampling check (temperature 0 is always checked)")
    if args.k == 0:
        raise CliError("--k 0 drafts nothing: there would be nothing to verify")
    if args.sampler == "auto":
        args.sampler = "coupled"  # every verify sample is seeded


def grammar_of(args: argparse.Namespace) -> Any:
    """The ``GrammarSpec`` of ``--json-schema FILE`` / ``--grammar FILE`` (None without either); a missing file or
    a schema that is not JSON is ``CliError`` (exit 2) before the pair loads. A schema the converter refuses, or a
    grammar llama.cpp cannot parse, is refused by the engine on the first reply (exit 2 as well)."""
    from outrider.engine.params import GrammarSpec

    path = args.json_schema or args.grammar
    if path is None:
        return None
    option = "--json-schema" if args.json_schema else "--grammar"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{option}: cannot read {path}: {exc}") from None
    if args.grammar:
        if not text.strip():
            raise CliError(f"--grammar: {path} is empty")
        return GrammarSpec("gbnf", text)
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise CliError(f"--json-schema: {path} is not JSON: {exc}") from None
    if not isinstance(schema, dict | bool):
        raise CliError(f"--json-schema: {path} must hold a JSON schema (an object)")
    return GrammarSpec("json_schema", json.dumps(schema))


def _job_request(args: argparse.Namespace, job: Any, grammar: Any = None) -> Any:
    overrides: dict[str, Any] = {"max_tokens": args.tokens, "seed": job.seed}
    if job.greedy:
        overrides["temperature"] = 0.0
    if job.stage == "identity":
        overrides["sampler"] = "coupled"
    request = text_request(argparse.Namespace(**{**vars(args), **overrides}), prompt=args.prompt, chat=args.chat,
                           plain=job.plain)
    # Every sample has exactly --tokens positions: cutting a sample at an end token would drop exactly the values
    # that decide where it ends from the pooled test.
    # Under a grammar, an end token is allowed only where the grammar is complete, and then it is the only token
    # allowed: the sample goes on through point masses, which the tests count as certain (they change nothing).
    return dataclasses.replace(request, ignore_eos=not job.greedy, grammar=grammar)


def cmd_verify(args: argparse.Namespace) -> int:
    from outrider.engine.measure.verify_stats import VerifyCollector

    _check_args(args)
    pair_spec(args)  # missing files and bad settings fail before the load
    grammar = grammar_of(args)
    collector = VerifyCollector(args.samples, args.tokens, args.seed, args.alpha, args.sampler)
    requests = [_job_request(args, job, grammar) for job in collector.jobs]
    progress = not args.json and sys.stderr.isatty()
    try:
        with running_engine(args) as engine:
            for n, (job, request) in enumerate(zip(collector.jobs, requests, strict=True), 1):
                tokens: list[int] = []
                done: Any = None
                for event in engine.run(request):
                    if is_done(event):
                        done = event
                    else:
                        tokens.extend(event.tokens)
                if done is None or done.stop_reason == "cancelled":
                    raise CliError("the engine stopped the generation", EXIT_RUNTIME)
                scores = None
                if job.stage == "sampling" and not job.plain and tokens:
                    scores = engine.score(request, tokens[: args.tokens])
                collector.record(job, tokens, drafted=done.stats.drafted, accepted=done.stats.accepted,
                                 scores=scores)
                if progress:
                    sys.stderr.write(f"\rverify: {n}/{collector.total} generations")
                    sys.stderr.flush()
    finally:
        if progress:
            sys.stderr.write("\n")
    report = collector.report()
    if args.json:
        print_json(report.to_dict())
    else:
        print(format_report(report, args))
    if report.verdict == "inconclusive":
        why = ("nothing was drafted at the sampling stage" if report.drafted == 0 else
               "no position had tokens frequent enough to compare (raise --samples or lower --top-k)")
        sys.stderr.write(f"outrider: verify: inconclusive — {why}\n")
    return 0 if report.exact else EXIT_RUNTIME


def _top(counts: dict[str, int], n: int = 3) -> str:
    total = sum(counts.values()) or 1
    return " ".join(f"{tok}:{c / total:.0%}" for tok, c in list(counts.items())[:n])


def format_report(report: Any, args: argparse.Namespace) -> str:
    """The readable summary: the greedy line, a per-position table and the verdict."""
    if report.greedy_identical:
        greedy = f"identical over {report.greedy_tokens} tokens"
    else:
        greedy = f"DIVERGES at token {report.first_divergence}"
    acc = f"{report.greedy_accepted}/{report.greedy_drafted} drafted tokens accepted"
    lines = [
        f"greedy (temperature 0): {greedy} ({acc})",
        f"sampling ({args.sampler} sampler, temperature {args.temperature:g}, top-k {args.top_k}, top-p "
        f"{args.top_p:g}, min-p {args.min_p:g}, seed {args.seed}): {report.samples} speculative + {report.samples} "
        f"plain samples of {report.tokens} tokens; {report.accepted}/{report.drafted} drafted tokens accepted",
    ]
    if args.json_schema or args.grammar:
        what = f"the JSON schema {args.json_schema}" if args.json_schema else f"the grammar {args.grammar}"
        lines.insert(0, f"under {what}: every distribution below is the target's grammar-masked one")
    pit = report.pit
    if pit is not None:
        lines.append(
            f"against the target's exact distribution ({pit.values} tokens): KS D {pit.ks_d:.4f} (p {pit.ks_p:.3g}), "
            f"likeliest token drawn {pit.top_drawn} vs {pit.top_expected:.1f} expected (p {pit.top_p:.3g}), "
            f"draft direction z {pit.draft_z:+.2f} over {pit.draft_positions} positions (p {pit.draft_p:.3g}), "
            f"{pit.outside} outside the support; each p must exceed {report.pit_threshold:.3g}; detectable: TV "
            f"{pit.detectable_tv:.3f} along the ranking, {pit.detectable_top:.3f} on the likeliest token")
    if report.identity_pairs:
        lines.append(f"coupled identity (same seed, with and without drafting): "
                     f"{report.identity_pairs - len(report.identity_mismatches)}/{report.identity_pairs} pairs "
                     f"identical")
    lines += [
        "",
        f"{'pos':>4} {'p-value':>9} {'TV':>6}  {'speculative (top tokens)':<30} {'plain (top tokens)':<30}",
    ]
    for p in report.positions:
        flag = "  ✗" if p.p_value <= report.threshold else ""
        lines.append(f"{p.position:>4} {p.p_value:>9.3g} {p.tv:>6.3f}  {_top(p.speculative):<30} "
                     f"{_top(p.plain):<30}{flag}")
    lines += ["", report.explanation()]
    return "\n".join(lines)
