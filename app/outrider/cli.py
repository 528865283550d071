"""The ``outrider`` entry point: no command opens the desktop app (``outrider.ui.app``), a command runs its
family in ``outrider.commands.<name>`` (each exposes ``register(subparsers)``). This module only dispatches; it
is the one place above both the GUI and the commands, which never import each other (pyproject.toml's import
contracts). The GUI is imported only to launch it, so the terminal commands never load Qt.

Exit statuses (a contract): 0 success, 1 runtime failure, 2 bad input (one line on stderr, no traceback),
3 the engine process crashed, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from outrider.commands.base import CliError

# Command families, each a module outrider.commands.<name> with ``register(subparsers)``, in the order ``--help``
# lists them. Imported only to parse a command: the desktop app starts without them (its start-up time).
COMMAND_NAMES = ("generate", "models", "chats", "ask", "verify", "serve", "rpc_worker")
# The options of the app itself; a command line of these alone launches it without building the full parser.
APP_FLAGS = frozenset({"--smoke-test", "--startup-probe"})


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments with exit status 2 and one line (its default, kept explicit)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"outrider: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="outrider", description="Local chat with speculative decoding made visible.")
    parser.add_argument("--smoke-test", action="store_true", help="open the app, send one message, print stats")
    parser.add_argument("--startup-probe", action="store_true",
                        help=argparse.SUPPRESS)  # print when the window was painted and the pair ready, then quit
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for name in COMMAND_NAMES:
        importlib.import_module(f"outrider.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if set(words) <= APP_FLAGS:  # the desktop app: no command module loaded, no parser built (start-up time)
        args = argparse.Namespace(command=None, smoke_test="--smoke-test" in words,
                                  startup_probe="--startup-probe" in words)
    else:
        args = build_parser().parse_args(words)
    try:
        # The app too: a data folder it cannot use (OUTRIDER_HOME a file, unwritable) is one line, exit 2.
        result: int = _launch_app(args) if args.command is None else args.func(args)
        return result
    except CliError as exc:
        sys.stderr.write(f"outrider: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("outrider: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


def _launch_app(args: argparse.Namespace) -> int:
    from outrider.ui.app import main as app_main  # here, not at the top: the commands never load Qt

    return app_main(smoke_test=args.smoke_test, startup_probe=args.startup_probe)


if __name__ == "__main__":
    raise SystemExit(main())
