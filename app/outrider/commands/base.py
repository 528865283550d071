"""Shared pieces of the CLI commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from outrider.exit_status import EXIT_BAD_INPUT as EXIT_BAD_INPUT
from outrider.exit_status import EXIT_ENGINE_CRASHED as EXIT_ENGINE_CRASHED
from outrider.exit_status import EXIT_RUNTIME as EXIT_RUNTIME
from outrider.exit_status import CliError as CliError

T = TypeVar("T")


def print_json(obj: Any) -> None:
    """One JSON object per line on stdout, flushed (consumers read it live)."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def whole_number(text: str) -> int:
    """An argparse type: any whole number (bad input is argparse's one-line error, exit 2)."""
    import argparse

    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def in_range(n: int, low: int, high: int, what: str, unit: str = "") -> int:
    """``n`` when ``low <= n <= high``, else argparse's one-line error (exit 2): "``what`` must be between ``low``
    and ``high````unit``, got ``n``" (``unit``: what the bounds are, e.g. " (this machine's CPUs)")."""
    import argparse

    if not low <= n <= high:
        raise argparse.ArgumentTypeError(f"{what} must be between {low} and {high}{unit}, got {n}")
    return n


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    import argparse

    n = whole_number(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def seed_int(text: str) -> int:
    """An argparse type: a random seed, a whole number >= 0."""
    import argparse

    n = whole_number(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"seed must be >= 0, got {n}")
    return n


def _parsed_by(parse: Callable[[str], T], text: str) -> T:
    """``parse(text)``, its ``ValueError`` (already in words) as argparse's one-line error."""
    import argparse

    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def rpc_list(text: str) -> tuple[str, ...]:
    """An argparse type: "HOST:PORT[,HOST:PORT…]", the llama.cpp RPC workers (``outrider rpc-worker``)."""
    from outrider.engine.params import parse_rpc_list

    return _parsed_by(parse_rpc_list, text)


def split_list(text: str) -> tuple[float, ...]:
    """An argparse type: "3,1", the share of the offloaded target layers per device."""
    from outrider.engine.params import parse_split

    return _parsed_by(parse_split, text)


def add_rpc_options(p: Any) -> None:
    """``--rpc`` and ``--split``: the target spread over this machine's GPUs and RPC workers (docs/rpc.md)."""
    p.add_argument("--rpc", type=rpc_list, default=(), metavar="HOST:PORT[,HOST:PORT...]",
                   help="llama.cpp RPC workers (outrider rpc-worker) that hold part of the target's offloaded "
                        "layers (--gpu-layers); the draft stays on this machine")
    p.add_argument("--split", type=split_list, default=(), metavar="P[,P...]",
                   help="share of the target's offloaded layers per device: this machine's GPUs first, then the "
                        "RPC workers in order (default: by free memory)")
