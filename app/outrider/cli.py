"""``outrider …`` terminal commands. This module only dispatches; each command family lives in
``outrider.commands.<name>`` and exposes ``register(subparsers)``.

Exit statuses (a contract): 0 success, 1 runtime failure, 2 bad input (one line on stderr, no traceback),
3 the engine process crashed, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from outrider.commands.base import CliError

# Command families, each a module with ``register(subparsers)``.
COMMAND_MODULES = (
    "outrider.commands.generate",
    "outrider.commands.models",
    "outrider.commands.chats",
    "outrider.commands.ask",
    "outrider.commands.verify",
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments with exit status 2 and one line (its default, kept explicit)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"outrider: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="outrider", description="Local chat with speculative decoding made visible.")
    parser.add_argument("--smoke-test", action="store_true", help="open the app, send one message, print stats")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a family not built yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        return _launch_app(args)
    try:
        result: int = args.func(args)
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
    try:
        app_main = importlib.import_module("outrider.ui.app")
    except ModuleNotFoundError as exc:
        if exc.name != "outrider.ui.app":
            raise
        # Until the GUI exists, show the engine on the offline demo model.
        from outrider.commands.generate import run_demo

        return run_demo()
    status: int = app_main.main(smoke_test=args.smoke_test)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
