"""Shared pieces of the CLI commands."""

from __future__ import annotations

import json
import sys
from typing import Any

EXIT_RUNTIME = 1
EXIT_BAD_INPUT = 2
EXIT_ENGINE_CRASHED = 3


class CliError(Exception):
    """A failure to report as one line on stderr with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def print_json(obj: Any) -> None:
    """One JSON object per line on stdout, flushed (consumers read it live)."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (bad input is argparse's one-line error, exit 2)."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n
