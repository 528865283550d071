"""``outrider serve``: the pair over an OpenAI-compatible HTTP API on this machine (docs/server.md).

    outrider serve (--pair ID | --target T [--draft D | --lookup]) [--host 127.0.0.1] [--port 8080]
                   [--api-key KEY] [draft / sampling / hardware options as in generate]

The pair is loaded in the engine process before the port opens (a bad file is one line, exit 2); the options of
``generate`` are the defaults of every request, which may override ``temperature``, ``top_p``, ``top_k``,
``min_p``, ``seed``, ``max_tokens`` and ``stop``. After an engine crash the next request reloads the pair.
Ctrl-C stops the server (exit 130).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from outrider.commands.base import EXIT_BAD_INPUT, EXIT_RUNTIME, CliError, positive_int
from outrider.commands.engine_options import add_model_options, note, note_load, pair_spec, text_request
from outrider.engine.speedup import describe_speedup
from outrider.server import DEFAULT_STREAM_INTERVAL_S  # the package only: FastAPI loads when serving
from outrider.server.connections import DEFAULT_MAX_CONNECTIONS

API_KEY_ENV = "OUTRIDER_API_KEY"
DEFAULT_MAX_TOKENS_LIMIT = 4096


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the pair over an OpenAI-compatible HTTP API (localhost by default)")
    p.add_argument("--pair", help="a catalogue pair id (installed; see `outrider models list`) instead of --target")
    add_model_options(p)
    # --target is required by generate; here --pair may name the models instead (checked in cmd_serve).
    p._option_string_actions["--target"].required = False
    p._option_string_actions["--in-process"].help = argparse.SUPPRESS  # the server always uses the engine process
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; another host prints a warning)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080; 0 = any free port)")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' (visible to every user in the process list: prefer "
                        f"--api-key-file or ${API_KEY_ENV})")
    p.add_argument("--api-key-file", type=Path, default=None,
                   help=f"read the API key from this file (its first line); default ${API_KEY_ENV} when set")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="serve requests whose Host header is NAME too (besides localhost and IP addresses; "
                        "repeatable): e.g. this machine's name on the network")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from ORIGIN (e.g. http://localhost:3000; '*' for any) use the server "
                        "(repeatable; by default a page on another origin is refused)")
    p.add_argument("--max-connections", type=positive_int, default=DEFAULT_MAX_CONNECTIONS,
                   help=f"open connections at most (default {DEFAULT_MAX_CONNECTIONS}; more get 503 and are closed)")
    p.add_argument("--max-tokens-limit", type=positive_int, default=DEFAULT_MAX_TOKENS_LIMIT,
                   help="the largest max_tokens a request may ask for, and the default when it asks for none "
                        f"(default {DEFAULT_MAX_TOKENS_LIMIT}, at most the context size)")
    p.add_argument("--max-request-bytes", type=positive_int, default=1 << 20,
                   help="the largest request body in bytes (default 1 MiB)")
    p.add_argument("--max-queued", type=int, default=16,
                   help="requests that may wait for the engine behind the running one (default 16; more get 429)")
    p.add_argument("--name", help="the model id /v1/models reports (default: the pair id or the target's file name)")
    p.add_argument("--stream-interval-ms", type=float, default=DEFAULT_STREAM_INTERVAL_S * 1000.0,
                   help="a stream sends text at most this often; steps in between are joined (default "
                        f"{DEFAULT_STREAM_INTERVAL_S * 1000:g}; 0 = a chunk per engine step)")
    p.add_argument("--quiet", action="store_true", help="no line on stderr per reply")
    p.set_defaults(func=cmd_serve, max_tokens=1)


def _resolve_pair(args: argparse.Namespace) -> None:
    """``--pair ID``: fill in target/draft/lookup (and the pair's recommended k, unless --k was given)."""
    if args.pair is None:
        if args.target is None:
            raise CliError("serve needs --pair ID or --target T")
        return
    if args.target is not None or args.draft is not None or args.lookup or args.mtp or args.mtp_head:
        raise CliError("--pair names the models itself: give --pair, or --target with --draft/--lookup/--mtp/"
                       "--mtp-head, not both")
    from outrider.catalogue import ModelStore, load_catalogue
    from outrider.catalogue.schema import CatalogueError

    try:
        catalogue = load_catalogue()
        pair = catalogue.get(args.pair)
    except CatalogueError as exc:
        raise CliError(f"the catalogue cannot be read: {exc}") from None
    except KeyError as exc:
        raise CliError(str(exc.args[0])) from None
    state = ModelStore().pair_state(pair)
    if not state.installed or state.target_path is None:
        raise CliError(f"pair {pair.id} is not installed: run `outrider models download {pair.id}`")
    args.target = str(state.target_path)
    draft = str(state.draft_path) if state.draft_path is not None else None
    kind = pair.draft_kind  # model, lookup, mtp (heads in the target) or mtp-head (the head file is the draft)
    args.draft = draft if kind == "model" else None
    args.mtp_head = draft if kind == "mtp-head" else None
    args.mtp = kind == "mtp"
    args.lookup = kind == "lookup"
    if args.k is None and isinstance(pair.settings.k, int):
        args.k = pair.settings.k
    if args.draft_min == 0:
        args.draft_min = pair.settings.draft_min


API_KEY_ARGV_WARNING = ("--api-key on the command line is visible to every user of this machine in the process "
                        f"list; use --api-key-file FILE or ${API_KEY_ENV} instead")


def _api_key(args: argparse.Namespace) -> str | None:
    """The key from ``--api-key-file``, ``--api-key`` (with a warning: argv is public) or ``$OUTRIDER_API_KEY``."""
    from outrider.server.runner import api_key_problem

    if args.api_key is not None and args.api_key_file is not None:
        raise CliError("give --api-key or --api-key-file, not both")
    key: str | None
    if args.api_key_file is not None:
        try:
            text = args.api_key_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read the API key file {args.api_key_file}: "
                           f"{getattr(exc, 'strerror', None) or exc}") from None
        key = text.splitlines()[0].strip() if text.strip() else ""
        if not key:
            raise CliError(f"the API key file {args.api_key_file} is empty")
    elif args.api_key is not None:
        key = args.api_key
    else:
        key = os.environ.get(API_KEY_ENV) or None
    problem = None if key is None else api_key_problem(key)
    if problem is not None:
        raise CliError(problem)
    if args.api_key is not None:
        sys.stderr.write(f"outrider: warning: {API_KEY_ARGV_WARNING}\n")
    return key


def cmd_serve(args: argparse.Namespace) -> int:
    from outrider.server.app import ServerConfig, create_app
    from outrider.server.connections import ConnectionLimits
    from outrider.server.guard import AccessPolicy
    from outrider.server.requests import Defaults
    from outrider.server.runner import BindError, bind, host_warning, serve_forever, url_of
    from outrider.server.scheduler import EngineScheduler

    _resolve_pair(args)
    if args.in_process:
        raise CliError("serve always runs the engine in its own process (--in-process is for generate)")
    if args.max_queued < 0:
        raise CliError(f"--max-queued must be >= 0, got {args.max_queued}")
    if not 0 <= args.stream_interval_ms <= 1000:
        raise CliError(f"--stream-interval-ms must be between 0 and 1000, got {args.stream_interval_ms:g}")
    key = _api_key(args)
    _log_refusals()
    spec = pair_spec(args)
    probe = text_request(args, prompt="")  # sampling and draft options, checked before anything loads
    name = args.name or args.pair or Path(args.target).name
    try:
        sock = bind(args.host, args.port)  # before loading: a busy port is known at once
    except BindError as exc:
        raise CliError(str(exc)) from None
    warning = host_warning(args.host, sock.getsockname()[1], key)
    if warning:
        sys.stderr.write(f"outrider: warning: {warning}\n")
    engine = _ServedEngine(spec)
    try:
        n_ctx = engine.load()
        # No reply can be longer than the context: the limit (and the default of a request without max_tokens).
        defaults = Defaults(sampling=probe.sampling, draft=probe.draft,
                            max_tokens_limit=min(args.max_tokens_limit, n_ctx))
        scheduler = EngineScheduler(engine.client, max_queued=args.max_queued, prepare=engine.reload_if_needed,
                                    on_finished=None if args.quiet else _log_reply)
        limits = ConnectionLimits(max_connections=args.max_connections)
        # the name it listens on is this machine's own (``--host mybox.lan``)
        access = AccessPolicy(allowed_hosts=(*args.allowed_host, args.host), cors_origins=tuple(args.cors_origin))
        app = create_app(scheduler, ServerConfig(model_name=lambda: name, api_key=key, defaults=defaults,
                                                 max_request_bytes=args.max_request_bytes,
                                                 stream_interval_s=args.stream_interval_ms / 1000.0,
                                                 access=access, limits=limits))
        url = url_of(sock)
        sys.stderr.write(f"outrider: serving {name} at {url}/v1 (OpenAI-compatible; Ctrl-C to stop)\n")
        sys.stderr.flush()
        try:
            serve_forever(app, sock, limits)
        finally:
            scheduler.close(timeout=5.0)
    finally:
        engine.close()
        sock.close()
    return 0


def _log_refusals() -> None:
    """The server's one-line notes (a refused connection, Host or Origin) on stderr, as ``outrider: …``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("outrider: %(message)s"))
    logger = logging.getLogger("outrider.server")
    logger.addHandler(handler)
    logger.propagate = False


def reply_line(job: Any) -> str:
    """One line per finished reply: its number, tokens, how it ended, speed and the speculative figures."""
    from outrider.engine.events import DoneEvent

    result = job.result
    if not isinstance(result, DoneEvent):
        return f"reply {job.number}: failed: {getattr(result, 'error', result)}"
    st = result.stats
    parts = [f"reply {job.number}: {st.generated} tokens, {result.stop_reason}"]
    if st.decode_tps is not None:
        parts.append(f"{st.decode_tps:.1f} tok/s")
    if st.acceptance_rate is not None:
        parts.append(f"acceptance {st.acceptance_rate:.0%} ({st.accepted}/{st.drafted})")
    if st.speedup is not None:
        parts.append(f"speed-up {describe_speedup(st.speedup, st.speedup_low, st.speedup_high)}")
    return ", ".join(parts)


def _log_reply(job: Any) -> None:
    sys.stderr.write(f"outrider: {reply_line(job)}\n")
    sys.stderr.flush()


class _ServedEngine:
    """The engine process for ``serve``: loads the pair, reloads it after a crash (on the scheduler's thread)."""

    def __init__(self, spec: Any) -> None:
        from outrider.worker.client import EngineClient

        self.client = EngineClient()
        self._spec = spec
        self._lock = threading.Lock()
        self._noted: set[str] = set()

    def load(self) -> int:
        """Load the pair (notes on stderr); returns the context size llama.cpp gave, in tokens."""
        from outrider.worker.errors import EngineCrashed, EngineRequestError, WorkerError

        try:
            info = self.client.load(self._spec)
        except EngineRequestError as exc:
            raise CliError(str(exc), EXIT_BAD_INPUT) from None
        except (EngineCrashed, WorkerError) as exc:
            raise CliError(str(exc), EXIT_RUNTIME) from None
        note_load(info, self._spec.context.n_ctx, self._noted)
        return info.n_ctx

    def reload_if_needed(self) -> None:
        """Before each reply: a crashed engine is started again with the same pair (one note on stderr)."""
        with self._lock:
            if self.client.running and self.client.loaded is not None:
                return
            note("the engine process had stopped; loading the pair again")
            self.client.load(self._spec)

    def close(self) -> None:
        self.client.stop(timeout=5.0)
