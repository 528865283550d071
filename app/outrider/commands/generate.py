"""``outrider generate`` and ``outrider bench``: the engine from the terminal (a contract: see README)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from outrider.commands.base import EXIT_BAD_INPUT, EXIT_ENGINE_CRASHED, CliError, add_rpc_options, print_json
from outrider.engine.measure.bench import DEFAULT_BENCH_PROMPTS, bench_row, bench_summary

GREEN, RESET = "\x1b[32m", "\x1b[0m"

LLAMA_MIN_CTX = 256  # llama.cpp raises a smaller context to this, and rounds a larger one up to a multiple of it


class EngineLike(Protocol):
    """What these commands need from an engine, in-process or in the worker process.

    ``close(quick=True)`` (after Ctrl-C) does not wait for a stuck or stopped engine: it is killed."""

    def run(self, request: Any) -> Iterator[Any]: ...

    def close(self, *, quick: bool = False) -> None: ...


def max_threads() -> int:
    """The largest ``--threads``: this machine's CPU count."""
    return max(1, os.cpu_count() or 1)


def note(text: str, seen: set[str] | None = None) -> None:
    """One ``note: …`` line on stderr (once per text when ``seen`` is given)."""
    if seen is not None:
        if text in seen:
            return
        seen.add(text)
    sys.stderr.write(f"note: {text}\n")
    sys.stderr.flush()


def context_note(requested: int, actual: int) -> str | None:
    """What to say when llama.cpp gave another context size than asked for (it never gives less)."""
    if actual <= requested:
        return None
    if requested < LLAMA_MIN_CTX:
        return f"context raised to {actual} tokens (llama.cpp's minimum)"
    return f"context rounded up to {actual} tokens (llama.cpp uses multiples of {LLAMA_MIN_CTX})"


def _k_value(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None
    if not 0 <= k <= 64:
        raise argparse.ArgumentTypeError(f"draft length must be between 0 and 64, got {k}")
    return k


def _seed(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"seed must be >= 0, got {n}")
    return n


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


DEFAULT_K_MAX = 16  # DraftParams.k_max's default


class _RenamedOption(argparse.Action):
    """An option's old name: stores like the new one and prints one note that the option was renamed."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new_name: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new_name = new_name

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        note(f"{option_string} is now {self.new_name}")
        setattr(namespace, self.dest, values)


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="target model (GGUF)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--draft", help="draft model (GGUF) of the same family")
    src.add_argument("--lookup", action="store_true", help="draft by prompt lookup (n-gram) instead of a model")
    p.add_argument("--threads", type=int, default=0,
                   help=f"CPU threads, 0 to {max_threads()} (this machine's CPU count; 0 = llama.cpp's default)")
    p.add_argument("--gpu-layers", type=int, default=-1, help="target layers on the GPU (-1 = all)")
    p.add_argument("--draft-gpu-layers", type=int, default=-1, help="draft layers on the GPU (-1 = all)")
    add_rpc_options(p)
    p.add_argument("--ctx", type=_positive, default=4096,
                   help=f"context size in tokens (llama.cpp raises it to at least {LLAMA_MIN_CTX}, with a note)")
    p.add_argument("--ngram-min", type=_positive, default=1, help="prompt lookup: smallest n-gram")
    p.add_argument("--ngram-max", type=_positive, default=3, help="prompt lookup: largest n-gram")
    p.add_argument("--k", type=_k_value, default=None, metavar="K|auto",
                   help="draft length k: a fixed count (0 = plain decoding) or auto (the default)")
    p.add_argument("--k-max", type=_positive, default=DEFAULT_K_MAX, metavar="N",
                   help=f"the largest k automatic k may choose (default {DEFAULT_K_MAX})")
    # The old name of --k (it meant the same: a fixed k or auto), kept for scripts and docs that use it.
    p.add_argument("--draft-max", type=_k_value, dest="k", action=_RenamedOption, new_name="--k",
                   help=argparse.SUPPRESS)
    p.add_argument("--draft-min", type=int, default=0, help="drop drafts shorter than this")
    p.add_argument("--draft-p-min", type=float, default=0.0, help="stop drafting below this draft confidence")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--seed", type=_seed, default=None, help="random seed (>= 0) for sampled output")
    p.add_argument("--in-process", action="store_true", help="run the engine in this process (debugging)")


def register(sub: Any) -> None:
    gen = sub.add_parser("generate", help="generate text with speculative decoding")
    _add_model_options(gen)
    what = gen.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", help="raw text, tokenised with the model's BOS rule")
    what.add_argument("--chat", help="one user message through the model's chat template")
    gen.add_argument("--system", help="system prompt (with --chat)")
    gen.add_argument("--max-tokens", type=_positive, default=256)
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--json", action="store_true", help="one JSON object per line")
    gen.set_defaults(func=cmd_generate)

    bench = sub.add_parser("bench", help="plain vs speculative on a set of prompts")
    _add_model_options(bench)
    bench.add_argument("--prompts", type=Path, help="prompts file: a JSON list, or one prompt per line")
    bench.add_argument("--max-tokens", type=_positive, default=128)
    bench.add_argument("--runs", type=_positive, default=2)
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(func=cmd_bench)


# -- building requests ----------------------------------------------------------------------------------------
def _pair_spec(args: argparse.Namespace) -> Any:
    from outrider.engine.params import ContextSettings, LookupSettings, ModelSettings, PairSpec

    for path in (args.target, args.draft):
        if path is not None and not Path(path).exists():
            raise CliError(f"file not found: {path}")
    if not 0 <= args.threads <= max_threads():
        raise CliError(f"threads must be between 0 and {max_threads()} (this machine's CPU count), "
                       f"got {args.threads}")
    try:
        return PairSpec(
            target=args.target,
            draft=args.draft,
            lookup=args.lookup,
            target_settings=ModelSettings(gpu_layers=args.gpu_layers, rpc=args.rpc, split=args.split),
            draft_settings=ModelSettings(gpu_layers=args.draft_gpu_layers),
            context=ContextSettings(n_ctx=args.ctx, threads=args.threads),
            lookup_settings=LookupSettings(args.ngram_min, args.ngram_max),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _text_request(args: argparse.Namespace, *, prompt: str | None = None, chat: str | None = None,
                  history: Sequence[Any] | None = None, plain: bool = False) -> Any:
    """A TextRequest from the command's options: raw ``prompt``, one ``chat`` message, or a whole ``history``."""
    from outrider.engine.params import ChatMessage, DraftParams, SamplingParams, TextRequest

    try:
        sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p, args.seed)
        draft = DraftParams(k=args.k, k_max=args.k_max, draft_min=args.draft_min, p_min=args.draft_p_min)
        messages = tuple(history) if history is not None else None
        if chat is not None:
            system = getattr(args, "system", None)
            msgs = [ChatMessage("system", system)] if system else []
            messages = (*msgs, ChatMessage("user", chat))
        return TextRequest(
            prompt=prompt, messages=messages, max_tokens=args.max_tokens, sampling=sampling, draft=draft,
            stop=tuple(getattr(args, "stop", ())), plain=plain,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None


def is_done(event: Any) -> bool:
    """The final event of a reply (in-process ``DoneEvent`` or the worker protocol's)."""
    return hasattr(event, "stop_reason")


class WorkerEngine:
    """The engine in its own process (the default): a crash becomes exit status 3 with one line.

    The engine's notes (the model's chat template replaced by the built-in one, no draft for a recurrent model,
    the context raised to llama.cpp's minimum…) go to stderr as ``note: …`` lines, each once."""

    def __init__(self, spec: Any) -> None:
        from outrider.worker.client import EngineClient

        self._client = EngineClient()
        self._noted: set[str] = set()
        try:
            with self._errors():
                info = self._client.load(spec)
        except BaseException:
            self.close(quick=True)  # a refused model leaves no engine process and no log behind
            raise
        for text in info.notes:
            note(text, self._noted)
        raised = context_note(spec.context.n_ctx, info.n_ctx)
        if raised:
            note(raised, self._noted)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        from outrider.worker.errors import EngineCrashed, EngineRequestError, WorkerError

        try:
            yield
        except EngineRequestError as exc:
            raise CliError(str(exc), EXIT_BAD_INPUT) from None
        except EngineCrashed as exc:
            raise CliError(str(exc), EXIT_ENGINE_CRASHED) from None
        except WorkerError as exc:
            raise CliError(str(exc), EXIT_ENGINE_CRASHED) from None

    def run(self, request: Any) -> Iterator[Any]:
        from outrider.engine.events import StepBatch

        with self._errors(), self._client.generate(request) as generation:
            for event in generation:
                for text in generation.notes:
                    note(text, self._noted)
                if isinstance(event, StepBatch):  # one wire message: its steps, as the in-process engine yields
                    yield from event.steps
                else:
                    yield event

    def close(self, *, quick: bool = False) -> None:
        self._client.stop(timeout=0.5 if quick else 10.0)


class InProcessEngine:
    """The engine in this process (``--in-process``, for debugging): engine errors become exit status 2."""

    def __init__(self, spec: Any) -> None:
        from outrider.engine.errors import EngineError
        from outrider.engine.session import Engine

        self._engine = Engine()
        self._noted: set[str] = set()
        try:
            info = self._engine.load(spec)
        except EngineError as exc:
            self._engine.close()
            raise CliError(str(exc)) from None
        for text in info.notes:
            note(text, self._noted)
        raised = context_note(spec.context.n_ctx, info.n_ctx)
        if raised:
            note(raised, self._noted)

    def run(self, request: Any) -> Iterator[Any]:
        from outrider.engine.errors import EngineError

        try:
            events = self._engine.run(request)
            for text in self._engine.take_chat_notes():  # the template may have been replaced just now
                note(text, self._noted)
            yield from events
        except EngineError as exc:
            raise CliError(str(exc)) from None

    def close(self, *, quick: bool = False) -> None:
        self._engine.close()


def open_engine(args: argparse.Namespace) -> EngineLike:
    """Load the pair in the engine process, or in this process with ``--in-process``."""
    spec = _pair_spec(args)
    if args.in_process:
        return InProcessEngine(spec)
    return WorkerEngine(spec)


@contextlib.contextmanager
def engine_session(args: argparse.Namespace) -> Iterator[EngineLike]:
    """``open_engine`` as a context manager: closed at the end; after Ctrl-C closed at once (a stopped or stuck
    engine is killed, not waited for), so the command exits 130 promptly."""
    engine = open_engine(args)
    quick = False
    try:
        yield engine
    except KeyboardInterrupt:
        quick = True
        raise
    finally:
        engine.close(quick=quick)


# -- generate ---------------------------------------------------------------------------------------------------
def cmd_generate(args: argparse.Namespace) -> int:
    request = _text_request(args, prompt=args.prompt, chat=args.chat)
    with engine_session(args) as engine:
        return _stream(engine, request, as_json=args.json)


def _stream(engine: EngineLike, request: Any, *, as_json: bool) -> int:
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
    """The engine's in-reply speed-up with its standard error and the plain rate it was measured against."""
    speedup = s.get("speedup")
    if speedup is None:
        return "speed-up not measured (no plain step in this reply)"
    error = s.get("speedup_error")
    text = f"speed-up {speedup:.2f}×" + (f" ± {error:.2f}" if error is not None else "")
    plain = s.get("plain_tps")
    plain_text = f"plain {plain:.1f} tok/s" if plain is not None else "plain"
    return f"{text} vs {plain_text} measured in this reply ({s.get('plain_steps', 0)} plain steps)"


def format_summary(s: dict[str, Any], stop_reason: str) -> str:
    """The stats summary printed after a streamed reply (definitions in docs/metrics.md)."""
    lines = [
        f"-- {s['generated']} tokens, stop: {stop_reason}, draft: {s['draft_mode']}",
        f"   decode {_fmt(s['decode_tps'], '.1f')} tok/s · prompt {_fmt(s['prompt_tps'], '.1f')} tok/s "
        f"({s['prompt_tokens']} tokens, {s['prompt_tokens_reused']} reused) · first token "
        f"{_fmt(s['ttft_s'], '.3f')} s",
        f"   acceptance {_fmt(s['acceptance_rate'], '.1%')} ({s['accepted']}/{s['drafted']}) · per-token a "
        f"{_fmt(s.get('token_acceptance'), '.1%')} · {_fmt(s['tokens_per_pass'], '.2f')} tokens/pass · mean k "
        f"{_fmt(s['k_mean'], '.2f')}",
        f"   time: draft {s['draft_s']:.3f} s · verify {s['verify_s']:.3f} s · other {s['other_s']:.3f} s",
        f"   {format_speedup(s)}",
    ]
    return "\n".join(lines)


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
    if not args.draft and not args.lookup:
        raise CliError("bench needs --draft D or --lookup")
    prompts = load_prompts(args.prompts)
    rows: list[dict[str, Any]] = []
    with engine_session(args) as engine:
        for label, prompt in prompts:
            runs: dict[str, list[dict[str, Any]]] = {"plain": [], "spec": []}
            for _ in range(args.runs):  # interleaved: machine drift hits both alike
                for mode in ("plain", "spec"):
                    request = _text_request(args, chat=prompt, plain=mode == "plain")
                    for event in engine.run(request):
                        if is_done(event):
                            runs[mode].append(event.stats.to_dict())
            rows.append(bench_row(label, prompt, runs))
            if not args.json:
                sys.stderr.write(f"  {label}: A/B speed-up {rows[-1]['speedup']:.2f}×\n")
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
            f"{r['tokens_per_pass']:>8.2f} {r['plain_tps']:>10.1f} {r['spec_tps']:>9.1f} {r['speedup']:>11.2f}× "
            f"{'—' if not predicted else format(predicted, '.2f') + '×':>9} "
            f"{'—' if ratio is None else format(ratio, '.2f'):>6}"
        )
    s = bench_summary(rows)
    out.append(f"median A/B speed-up {s['median_speedup']:.2f}× · median acceptance {s['median_acceptance']:.1%}")
    out.append("A/B speed-up = speculative ÷ plain decode tok/s of interleaved runs (measured); predicted = "
               "E(a, k) · c_plain / (k · c_draft + c_verify) with a = accepted / (accepted + rejections)")
    return "\n".join(out)
