"""Shared pieces of the CLI commands."""

from __future__ import annotations

import json
import sys
from typing import Any

from outrider.exit_status import EXIT_BAD_INPUT as EXIT_BAD_INPUT
from outrider.exit_status import EXIT_ENGINE_CRASHED as EXIT_ENGINE_CRASHED
from outrider.exit_status import EXIT_RUNTIME as EXIT_RUNTIME
from outrider.exit_status import CliError as CliError


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
