"""The pair a command loads: the model options, the requests they make, and the engine they open.

Shared by ``generate``, ``bench``, ``verify``, ``ask`` and ``serve``. ``add_model_options`` adds the options;
``pair_spec`` and ``text_request`` turn them into the engine's ``PairSpec`` and ``TextRequest`` (bad values are a
``CliError``: one line, exit 2); ``open_engine`` / ``running_engine`` load the pair in the engine process
(``WorkerEngine``: a crash is exit 3) or, with ``--in-process``, in this one. What the engine notes about a load
goes to stderr as ``note: …`` lines, each once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from outrider.commands.base import (
    EXIT_BAD_INPUT,
    EXIT_ENGINE_CRASHED,
    CliError,
    add_rpc_options,
    in_range,
    positive_int,
    seed_int,
)
from outrider.engine.params import DEFAULT_SAMPLER, SAMPLERS

RPC_FAULTS = frozenset({"rpc_unreachable", "rpc_busy", "rpc_version"})  # ErrorKind values: exit 3
LLAMA_MIN_CTX = 256  # llama.cpp raises a smaller context to this, and rounds a larger one up to a multiple of it


class CommandEngine(Protocol):
    """What these commands need from an engine, in-process or in the worker process.

    ``close(quick=True)`` (after Ctrl-C) does not wait for a stuck or stopped engine: it is killed."""

    def run(self, request: Any) -> Iterator[Any]: ...

    def score(self, request: Any, tokens: Sequence[int]) -> Sequence[Sequence[float]]: ...

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


def k_value(text: str) -> int | None:
    """An argparse type: the draft length k, a count from 0 to 64 or ``auto`` (None)."""
    if text == "auto":
        return None
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None
    return in_range(k, 0, 64, "draft length")


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


def add_model_options(p: argparse.ArgumentParser) -> None:
    """The options of every command that loads a pair: the models, where they run, context, k, sampling."""
    p.add_argument("--target", required=True, help="target model (GGUF)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--draft", help="draft model (GGUF) of the same family")
    src.add_argument("--lookup", action="store_true", help="draft by prompt lookup (n-gram) instead of a model")
    src.add_argument("--mtp", action="store_true",
                     help="draft with the target's own MTP (NextN) heads, when its file carries them")
    src.add_argument("--mtp-head", metavar="FILE",
                     help="draft with a separate MTP head file (GGUF) made for the target")
    p.add_argument("--lookup-history", nargs="?", const="", default=None, metavar="HISTORY",
                   help="draft from the chat history too (history lookup, tried before prompt lookup and the draft "
                        "model); HISTORY is a history.sqlite3, by default the app's own")
    p.add_argument("--threads", type=int, default=0,
                   help=f"CPU threads, 0 to {max_threads()} (this machine's CPU count; 0 = automatic: the CPUs "
                        "other processes leave free, one fewer than the CPUs when they are busy, re-chosen before "
                        "each reply; the count used is in the stats)")
    p.add_argument("--gpu-layers", type=int, default=-1, help="target layers on the GPU (-1 = all)")
    p.add_argument("--draft-gpu-layers", type=int, default=-1, help="draft layers on the GPU (-1 = all)")
    add_rpc_options(p)
    p.add_argument("--ctx", type=positive_int, default=4096,
                   help=f"context size in tokens (llama.cpp raises it to at least {LLAMA_MIN_CTX}, with a note)")
    p.add_argument("--ngram-min", type=positive_int, default=1, help="prompt lookup: smallest n-gram")
    p.add_argument("--ngram-max", type=positive_int, default=3, help="prompt lookup: largest n-gram")
    p.add_argument("--cold-start", action="store_true",
                   help="automatic draft length starts from nothing: what it learned about this pair at earlier "
                        "loads is neither read nor saved (bench and verify always start cold)")
    p.add_argument("--k", type=k_value, default=None, metavar="K|auto",
                   help="draft length k: a fixed count (0 = plain decoding) or auto (the default)")
    p.add_argument("--k-max", type=positive_int, default=DEFAULT_K_MAX, metavar="N",
                   help=f"the largest k automatic k may choose (default {DEFAULT_K_MAX})")
    # The old name of --k (it meant the same: a fixed k or auto), kept for scripts and docs that use it.
    p.add_argument("--draft-max", type=k_value, dest="k", action=_RenamedOption, new_name="--k",
                   help=argparse.SUPPRESS)
    p.add_argument("--draft-min", type=int, default=0, help="drop drafts shorter than this")
    p.add_argument("--draft-p-min", type=float, default=0.0, help="stop drafting below this draft confidence")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--seed", type=seed_int, default=None, help="random seed (>= 0) for sampled output")
    p.add_argument("--sampler", choices=SAMPLERS, default=DEFAULT_SAMPLER,
                   help="how drafts are verified when sampling (both exact in distribution): coupled = Gumbel-max "
                        "coupling, a seeded reply is the same text with any draft and any k; rejection = classic "
                        "speculative sampling (higher acceptance with a draft model); auto (default) = coupled with "
                        "--seed, rejection without")
    p.add_argument("--in-process", action="store_true", help="run the engine in this process (debugging)")


# -- building requests ----------------------------------------------------------------------------------------
def has_drafter(args: argparse.Namespace) -> bool:
    """Whether the options choose a drafter (a draft model, prompt lookup, MTP heads or an MTP head file)."""
    return bool(args.draft or args.lookup or args.mtp or args.mtp_head)


DRAFTER_CHOICES = "--draft D, --lookup, --mtp or --mtp-head FILE"


def pair_spec(args: argparse.Namespace) -> Any:
    """The ``PairSpec`` of the model options; missing files and bad settings are a ``CliError`` (exit 2)."""
    from outrider.engine.params import ContextSettings, LookupSettings, ModelSettings, PairSpec

    for path in (args.target, args.draft, args.mtp_head):
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
            mtp=args.mtp,
            mtp_head=args.mtp_head,
            target_settings=ModelSettings(gpu_layers=args.gpu_layers, rpc=args.rpc, split=args.split),
            draft_settings=ModelSettings(gpu_layers=args.draft_gpu_layers),
            context=ContextSettings(n_ctx=args.ctx, threads=args.threads),
            lookup_settings=LookupSettings(args.ngram_min, args.ngram_max),
            lookup_history=history_database(getattr(args, "lookup_history", None)),
            learned_draft=learned_draft(args),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None


def learned_draft(args: argparse.Namespace) -> str | None:
    """The file of learned draft lengths (``PairSpec.learned_draft``), or None for a cold start: with
    ``--cold-start``, and for a command that measures (``learns_across_loads`` False: bench and verify, whose
    figures must not depend on what earlier runs taught)."""
    if getattr(args, "cold_start", False) or not getattr(args, "learns_across_loads", True):
        return None
    from outrider import paths

    return str(paths.learned_draft_file())


def history_database(option: str | None) -> str | None:
    """The history database ``--lookup-history`` names: None without the option, the app's own history for a
    bare ``--lookup-history`` (it may not exist yet: history lookup then has nothing to draft from), else the
    given file, which must exist."""
    if option is None:
        return None
    from outrider.history import DB_FILENAME

    if not option:
        from outrider import paths

        return str(paths.data_dir() / DB_FILENAME)
    path = Path(option)
    if path.is_dir():
        path = path / DB_FILENAME
    if not path.is_file():
        raise CliError(f"no chat history at {option} (--lookup-history takes a history.sqlite3 or its folder)")
    return str(path)


def add_prompt_options(p: argparse.ArgumentParser) -> None:
    """What to answer, one of ``--prompt`` (raw text) or ``--chat`` (one user message, ``--system`` with it): the
    ``prompt``/``chat`` that ``text_request`` takes."""
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", help="raw text, tokenised with the model's BOS rule")
    what.add_argument("--chat", help="one user message through the model's chat template")
    p.add_argument("--system", help="system prompt (with --chat)")


def text_request(args: argparse.Namespace, *, prompt: str | None = None, chat: str | None = None,
                  history: Sequence[Any] | None = None, plain: bool = False) -> Any:
    """A TextRequest from the command's options: raw ``prompt``, one ``chat`` message, or a whole ``history``."""
    from outrider.engine.params import ChatMessage, DraftParams, SamplingParams, TextRequest

    try:
        sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p, args.seed,
                                  getattr(args, "sampler", DEFAULT_SAMPLER))
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
        note_load(info, spec.context.n_ctx, self._noted)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        from outrider.worker.errors import EngineCrashed, EngineRequestError, WorkerError

        try:
            yield
        except EngineRequestError as exc:
            # A worker that cannot be reached is a fault of the run, like a crash, not bad input (docs/rpc.md).
            raise CliError(str(exc), EXIT_ENGINE_CRASHED if exc.kind in RPC_FAULTS else EXIT_BAD_INPUT) from None
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

    def score(self, request: Any, tokens: Sequence[int]) -> Sequence[Sequence[float]]:
        with self._errors():
            return self._client.score(request, tokens)

    def close(self, *, quick: bool = False) -> None:
        self._client.stop(timeout=0.5 if quick else 10.0)


class InProcessEngine:
    """The engine in this process (``--in-process``, for debugging): engine errors become exit status 2."""

    def __init__(self, spec: Any) -> None:
        from outrider.engine.engine import Engine
        from outrider.engine.errors import EngineError

        self._engine = Engine()
        self._noted: set[str] = set()
        try:
            info = self._engine.load(spec)
        except EngineError as exc:
            self._engine.close()
            raise CliError(str(exc)) from None
        note_load(info, spec.context.n_ctx, self._noted)

    def run(self, request: Any) -> Iterator[Any]:
        from outrider.engine.errors import EngineError

        try:
            events = self._engine.run(request)
            for text in self._engine.take_chat_notes():  # the template may have been replaced just now
                note(text, self._noted)
            yield from events
        except EngineError as exc:
            raise CliError(str(exc)) from None

    def score(self, request: Any, tokens: Sequence[int]) -> Sequence[Sequence[float]]:
        from outrider.engine.errors import EngineError

        try:
            return self._engine.score(request, tokens)
        except EngineError as exc:
            raise CliError(str(exc)) from None

    def close(self, *, quick: bool = False) -> None:
        self._engine.close()


def note_load(info: Any, requested_ctx: int, seen: set[str]) -> None:
    """What the engine noted about a load (``LoadedPair.notes``), and the context it gave if it is not the
    ``requested_ctx`` tokens asked for, as ``note:`` lines (each once per ``seen``)."""
    for text in info.notes:
        note(text, seen)
    raised = context_note(requested_ctx, info.n_ctx)
    if raised:
        note(raised, seen)
    if info.target.remote_devices:  # the target uses RPC workers: where each part went, and their memory
        note(info.placement_text(), seen)


def open_engine(args: argparse.Namespace) -> CommandEngine:
    """Load the pair in the engine process, or in this process with ``--in-process``."""
    spec = pair_spec(args)
    if args.in_process:
        return InProcessEngine(spec)
    return WorkerEngine(spec)


@contextlib.contextmanager
def running_engine(args: argparse.Namespace) -> Iterator[CommandEngine]:
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
