"""``outrider rpc-worker``: serve this machine's devices to another machine's target over llama.cpp RPC.

It runs the installed llama.cpp's own RPC server (``ggml_backend_rpc_start_server``, through ctypes) and blocks
until stopped (Ctrl-C or a signal). Loopback by default: the RPC protocol has no authentication and no encryption,
so any other host is served only when asked for, with a warning. See docs/rpc.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outrider.commands.base import EXIT_RUNTIME, CliError, in_range, whole_number

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50052
LOOPBACK = ("127.0.0.1", "localhost")
SECURITY_WARNING = (
    "warning: serving {host}:{port} beyond this machine. The llama.cpp RPC protocol has no authentication and "
    "no encryption: anyone who can reach this port can use this machine's devices and memory and send it "
    "crafted data. Use it only on a trusted private network (or a tunnel); see docs/rpc.md."
)


def _port(text: str) -> int:
    """An argparse type: a TCP port, 1 to 65535."""
    return in_range(whole_number(text), 1, 65535, "a port")


def _threads(text: str) -> int:
    """An argparse type: CPU threads for the worker, 1 to this machine's CPU count."""
    return in_range(whole_number(text), 1, os.cpu_count() or 1, "threads", " (this machine's CPUs)")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "rpc-worker", help="serve this machine's devices to a target on another machine (llama.cpp RPC)",
        description="Serve this machine's GPUs (or else its CPU) to an Outrider on another machine, which then "
                    "places part of its target model here (--rpc HOST:PORT there). Runs until stopped (Ctrl-C). "
                    "The RPC protocol has no authentication: loopback unless --host says otherwise.",
    )
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}; 0.0.0.0 = every interface — unsafe on "
                        f"an untrusted network)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument("--threads", type=_threads, default=None,
                   help="CPU threads when serving the CPU (default: all CPUs)")
    p.add_argument("--cache", type=Path, default=None, metavar="DIR",
                   help="keep received weights in DIR, so a model is sent over the network once, not each load")
    p.set_defaults(func=cmd_rpc_worker)


def _check_address(host: str, port: int) -> None:
    """A clear error now for a port in use or an address not of this machine (llama.cpp would only log it)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, port))
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_RUNTIME) from None


def _cache_dir(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot use {path} as the cache: {exc.strerror or exc}", EXIT_RUNTIME) from None
    if not os.access(path, os.W_OK):
        raise CliError(f"cannot use {path} as the cache: not writable", EXIT_RUNTIME)
    return str(path.resolve())


def _ggml(factory: Callable[[], Any]) -> Any:
    """llama.cpp's ggml device API with its RPC backend, or a CliError saying why not (exit 1)."""
    try:
        ggml = factory()
    except OSError as exc:
        raise CliError(f"cannot use llama.cpp's RPC backend: {exc}", EXIT_RUNTIME) from None
    if not ggml.has_rpc:
        raise CliError("this llama.cpp was built without RPC (GGML_RPC=on); run `make setup` again", EXIT_RUNTIME)
    return ggml


def cmd_rpc_worker(args: argparse.Namespace) -> int:
    if ":" in args.host:
        raise CliError("llama.cpp's RPC listens on a host name or IPv4 address, not IPv6")
    cache = _cache_dir(args.cache)
    from outrider.engine.llama.rpc import Ggml

    ggml = _ggml(Ggml)
    _check_address(args.host, args.port)
    if args.host not in LOOPBACK:
        sys.stderr.write(SECURITY_WARNING.format(host=args.host, port=args.port) + "\n")
    devices = ggml.serving_devices()
    threads = args.threads or os.cpu_count() or 1
    for handle in devices:
        d = ggml.describe(handle)
        sys.stderr.write(f"serving {d.name} ({d.description}): {d.memory_free / 2**30:.1f} GiB free of "
                         f"{d.memory_total / 2**30:.1f} GiB\n")
    sys.stderr.write(f"rpc-worker listening on {args.host}:{args.port}"
                     f"{f', cache {cache}' if cache else ''}; Ctrl-C stops it\n")
    sys.stderr.flush()
    # The server blocks in C: Python's own SIGINT handler would never run. The default action ends the process.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    ggml.start_server(f"{args.host}:{args.port}", cache, threads, devices)
    return EXIT_RUNTIME  # start_server returns only if it could not serve


def worker_memory(endpoints: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each worker's devices and memory, asked over RPC: ``{endpoint, device, free, total}`` (bytes).

    Unreachable or busy workers are a CliError (exit 3) within seconds, never a hang or an abort."""
    from outrider.commands.base import EXIT_ENGINE_CRASHED
    from outrider.engine.errors import ModelLoadError
    from outrider.engine.llama.rpc import Ggml, probe

    ggml = _ggml(Ggml)
    rows = []
    for endpoint in endpoints:
        try:
            probe(endpoint)
        except ModelLoadError as exc:
            raise CliError(str(exc), EXIT_ENGINE_CRASHED) from None
        for handle in ggml.add_server(endpoint):
            d = ggml.describe(handle)
            rows.append({"endpoint": endpoint, "device": d.name, "free": d.memory_free, "total": d.memory_total})
    return rows


def placement_lines(rows: list[dict[str, Any]], target_bytes: int) -> list[str]:
    """Words for ``models check --rpc``: where each model would live and whether the workers have room."""
    free = sum(int(r["free"]) for r in rows)
    lines = ["draft: on this machine",
             f"target: its offloaded layers spread over this machine's GPUs and {len(rows)} RPC device(s):"]
    lines += [f"  {r['device']} at {r['endpoint']}: {r['free'] / 2**30:.1f} GiB free of {r['total'] / 2**30:.1f} GiB"
              for r in rows]
    verdict = "fit" if target_bytes <= free else "do NOT fit"
    lines.append(f"the target's weights ({target_bytes / 2**30:.1f} GiB) {verdict} in the workers' free memory "
                 f"({free / 2**30:.1f} GiB)")
    return lines
