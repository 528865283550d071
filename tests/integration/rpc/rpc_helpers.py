"""Two ``outrider rpc-worker`` processes on loopback (CPU devices), for the RPC tests.

A helper module, not a conftest: a module named conftest could resolve to another directory's in the whole suite.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from outrider.engine.errors import ModelLoadError
from outrider.engine.llama.rpc import probe
from support.processes import cpu_seconds

START_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port nothing listens on now (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def outrider_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "outrider.cli", *args]


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """CPU time the worker process has run so far, in seconds: the scheduler's nanosecond count (its serving
        thread computes), not ``stat``'s clock ticks, which on a loaded machine sample short bursts as 0."""
        return cpu_seconds(self.proc.pid)


def start_worker(log_dir: Path, threads: int = 1) -> Worker:
    port = free_port()
    log = log_dir / f"rpc-worker-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(outrider_command("rpc-worker", "--port", str(port), "--threads", str(threads)),
                                stdout=out, stderr=subprocess.STDOUT)
    worker = Worker(proc, port, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"rpc-worker exited with {proc.returncode}: {log.read_text()}")
        try:
            probe(worker.endpoint, timeout=1.0)
            return worker
        except ModelLoadError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"rpc-worker did not answer within {START_TIMEOUT_S} s: {log.read_text()}") \
                    from None
            time.sleep(0.1)


@contextmanager
def two_workers(log_dir: Path, threads: int = 1) -> Iterator[tuple[Worker, Worker]]:
    workers: list[Worker] = []
    try:
        workers.append(start_worker(log_dir, threads))
        workers.append(start_worker(log_dir, threads))
        yield workers[0], workers[1]
    finally:
        for w in workers:
            w.proc.kill()
            w.proc.wait(timeout=10)


@contextmanager
def listening_socket() -> Iterator[int]:
    """A loopback port that accepts connections and never answers (like a worker busy with another client)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        yield int(s.getsockname()[1])
