"""The client's errors and their one-line messages (``str()`` is what the CLI prints and the GUI shows).

``EngineRequestError``: the engine refused a request, the process is alive. ``EngineCrashed``: the process died
(signal, abort, OOM kill, a protocol violation); its subclasses ``EngineStuck`` (a request outlived its timeout)
and ``EngineUnresponsive`` (no heartbeat for ``heartbeat_timeout`` seconds) were killed by the client.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from outrider.engine.events import ErrorKind


class WorkerError(Exception):
    """Base class of the client's errors."""


class EngineRequestError(WorkerError):
    """The engine refused a request; the process is alive. ``kind`` is an ``ErrorKind`` (docs/process.md)."""

    def __init__(self, kind: ErrorKind | str, message: str, log_tail: tuple[str, ...] = (),
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = ErrorKind.parse(kind)
        self.message = message
        self.log_tail = log_tail
        self.details: dict[str, Any] = details or {}


def request_error(msg: dict[str, Any]) -> EngineRequestError:
    """The ``EngineRequestError`` of an ``error`` message from the engine (malformed fields tolerated)."""
    tail = msg.get("log_tail") or []
    details = msg.get("details")
    return EngineRequestError(
        ErrorKind.parse(msg.get("kind", "engine")), str(msg.get("message", "engine error")),
        tuple(str(x) for x in tail) if isinstance(tail, list) else (),
        details if isinstance(details, dict) else {},
    )


RPC_FAULT_MARKER = "Remote RPC server crashed"  # ggml-rpc's abort message when a worker's socket breaks


class EngineCrashed(WorkerError):
    """The engine process died (or was stopped because it hung). ``str()`` is the one-line message."""

    def __init__(self, cause: str, phase: str, model: str | None = None, *, exitcode: int | None = None,
                 log_tail: tuple[str, ...] = (), log_path: str | None = None) -> None:
        self.cause = cause  # "SIGSEGV", "SIGKILL", "exit status 1", ...
        self.phase = phase  # "loading", "generating", "unloading", "starting", "idle"
        self.model = model
        self.exitcode = exitcode
        self.log_tail = log_tail
        self.log_path = log_path
        self.detail = _key_line(log_tail)  # the most telling log line (GGML_ASSERT, fatal error, ...) or ""
        super().__init__(self._message())

    def _message(self) -> str:
        where = {"loading": f" while loading {Path(self.model).name}" if self.model else " while loading",
                 "generating": " while generating",
                 "unloading": " while unloading", "starting": " while starting"}.get(self.phase, "")
        # ggml-rpc aborts the process when a worker's connection breaks
        if any(RPC_FAULT_MARKER in line for line in self.log_tail):
            return f"engine crashed ({self.cause}){where}: an RPC worker stopped answering (stopped, or the " \
                   f"network to it failed)"
        return f"engine crashed ({self.cause}){where}"


def _key_line(lines: tuple[str, ...]) -> str:
    for marker in ("GGML_ASSERT", "GGML_ABORT", "Fatal Python error", "terminate called", "error", "failed"):
        for line in reversed(lines):
            if marker.lower() in line.lower():
                return line.strip()
    return ""


def signal_name(exitcode: int | None) -> str:
    """The cause of a crash as ``EngineCrashed`` names it: ``SIGSEGV``, ``signal 99``, ``exit status 1``."""
    if exitcode is None:
        return "unknown"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


class EngineStuck(EngineCrashed):
    """A request took longer than its timeout; the engine process was killed."""

    def __init__(self, phase: str, model: str | None, seconds: float, **kwargs: Any) -> None:
        self.seconds = seconds
        super().__init__("timed out", phase, model, **kwargs)

    def _message(self) -> str:
        what = f"loading {Path(self.model).name}" if self.phase == "loading" and self.model else self.phase
        return f"engine stopped: {what} did not finish within {self.seconds:g} s"


class EngineIgnoredCancel(EngineStuck):
    """A reply did not stop within ``seconds`` of Stop, though the engine still sent its heartbeat: it is blocked
    inside llama.cpp (an RPC worker that stopped answering without closing its connection, a hung GPU driver).
    The engine process was killed; what was streamed is the consumer's; the next ``load`` starts a new process."""

    def _message(self) -> str:
        return (f"engine stopped: the reply did not stop within {self.seconds:g} s of being asked to, so the "
                "engine was ended (is an RPC worker or the GPU not answering?)")


class EngineUnresponsive(EngineCrashed):
    """The engine sent nothing — not even its heartbeat — for ``seconds``: stopped (SIGSTOP) or frozen. It was
    killed; the next ``load`` starts a new process."""

    def __init__(self, phase: str, model: str | None, seconds: float, *, stopped: bool = False,
                 **kwargs: Any) -> None:
        self.seconds = seconds
        self.stopped = stopped
        super().__init__("no heartbeat", phase, model, **kwargs)

    def _message(self) -> str:
        where = {"loading": f" while loading {Path(self.model).name}" if self.model else " while loading",
                 "generating": " while generating", "unloading": " while unloading"}.get(self.phase, "")
        how = "the engine process was stopped; " if self.stopped else ""
        return f"engine stopped responding ({how}no heartbeat for {self.seconds:g} s){where}"


class EngineNotRunning(WorkerError):
    """A request other than ``load`` was made while no engine process is running."""
