"""The download process: one file from the Hugging Face Hub into the model store, resumable and verified.

huggingface_hub 2.4 neither resumes across processes nor checks sha256 nor can be cancelled in-process, so it
is used for what it does well (``hf_hub_url``, ``get_hf_file_metadata``, auth headers, its token store and HTTP
session, its typed errors) and the transfer is ours:

* bytes go to ``{dest}.part`` (with ``{dest}.part.json`` saying which file/size/sha256 it belongs to) and a new
  start continues with ``Range: bytes=N-``; a 200 answer to a Range request restarts from 0; a 416 means the
  part is complete (when its size is right) or stale (discarded);
* the sha256 is computed while writing and checked against the catalogue (or ``--sha256``, or the Hub's LFS
  sha256 from ``X-Linked-Etag``); a mismatch moves the file to quarantine; a match is moved into place with
  ``os.replace`` (atomic), so an installed file is never replaced by an unverified one;
* the child holds ``{dest}.lock`` with ``flock`` (released by the OS when the process dies, so a lock can never
  be left behind); a second process for the same file *joins*: it reports the other's progress and takes over
  when the other ends, and gives up (``busy``) when no byte arrives for ``join_stall_timeout`` seconds;
* each download is a child process (``python -m outrider.catalogue.download``, job on stdin, JSON events on
  stdout) that ends itself when its parent is gone; cancel terminates it (the ``.part`` stays for a later resume).

The parent side (starting, following and cancelling these processes) is ``outrider.catalogue.download_manager``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from outrider.catalogue.download_manager import DownloadEvent, DownloadOptions, FileRequest, gb, required_with_margin
from outrider.catalogue.errors import (
    BusyError,
    CorruptedError,
    CutShortError,
    DiskFullError,
    DownloadError,
    InternalError,
    MismatchError,
    NetworkError,
    OfflineError,
    ServerError,
    UnsafePathError,
    UnverifiableError,
    local_error,
    map_hub_error,
    network_words,
)
from outrider.catalogue.lifeline import die_with_parent
from outrider.catalogue.schema import REVISION_RE
from outrider.catalogue.store import ModelStore, fsync_dir, write_json_atomic

APP_SET_OFFLINE = "OUTRIDER_SET_HF_HUB_OFFLINE"


class _Emitter:
    def __init__(self, q: Any, file: str, interval: float) -> None:
        self.q = q
        self.file = file
        self.interval = interval
        self.last = 0.0
        self.window: list[tuple[float, int]] = []

    def send(self, ev: DownloadEvent) -> None:
        self.q.put(ev.to_json())

    def progress(self, done: int, total: int, *, kind: str = "progress", force: bool = False) -> None:
        now = time.monotonic()
        self.window.append((now, done))
        while len(self.window) > 2 and now - self.window[0][0] > 3.0:
            self.window.pop(0)
        if not force and now - self.last < self.interval:
            return
        self.last = now
        t0, b0 = self.window[0]
        speed = (done - b0) / (now - t0) if now > t0 and done >= b0 else 0.0
        eta = (total - done) / speed if speed > 0 and total else None
        self.send(DownloadEvent(kind, self.file, done, total, speed, eta))


def _is_disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


class _Transfer:
    """The download itself, inside the child process."""

    def __init__(self, job: dict[str, Any], q: Any) -> None:
        self.job = job
        self.req = FileRequest(**job["request"])
        self.opts = DownloadOptions(**job["options"])
        self.store = ModelStore(Path(job["store_root"]))
        self.emit = _Emitter(q, self.req.file, self.opts.progress_interval)

    # -- lock / join ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, dest: Path, size: int) -> Iterator[None]:
        import fcntl

        dest.parent.mkdir(parents=True, exist_ok=True)
        lock_path = dest.with_name(dest.name + ".lock")
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._join(dest, fd, size)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _join(self, dest: Path, fd: int, total: int) -> None:
        """Another process downloads this file (``total`` bytes): follow its progress until it ends, then lock."""
        import fcntl

        self.emit.send(DownloadEvent("joined", self.req.file, total=total,
                                     message="another download of this file is running; following it"))
        part = self.store.part_path(dest)
        last_size, last_change = -1, time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            size = part.stat().st_size if part.exists() else (dest.stat().st_size if dest.exists() else 0)
            now = time.monotonic()
            if size != last_size:
                last_size, last_change = size, now
            elif now - last_change > self.opts.join_stall_timeout:
                raise BusyError("another process is downloading this file and has made no progress for "
                                f"{self.opts.join_stall_timeout:.0f} s; try again later")
            self.emit.progress(size, total)
            time.sleep(0.1)

    # -- main -----------------------------------------------------------------------------------------------
    def run(self) -> Path:
        from huggingface_hub import constants, get_hf_file_metadata, get_token, hf_hub_url

        req = self.req
        endpoint = (self.opts.endpoint or constants.ENDPOINT).rstrip("/")
        page = f"{endpoint}/{req.repo}"
        pinned = len(req.revision) == 40 and all(c in "0123456789abcdef" for c in req.revision)
        if pinned:
            dest = self.store.path_for(req.repo, req.file, req.revision)
            if self._already_installed(dest):
                return dest
        if constants.HF_HUB_OFFLINE:
            raise OfflineError("offline mode is on (HF_HUB_OFFLINE): not downloaded; connect to download")
        token = get_token()
        try:
            url = hf_hub_url(req.repo, req.file, revision=req.revision, endpoint=endpoint)
        except ValueError as exc:  # HFValidationError: not a valid repo id
            raise UnsafePathError(f"not a valid Hugging Face repo id: {req.repo[:100]!r} ({exc})") from exc
        try:
            meta = get_hf_file_metadata(url, timeout=self.opts.connect_timeout, endpoint=endpoint)
        except Exception as exc:
            raise map_hub_error(exc, url, page, token is not None) from exc
        if pinned:
            commit = req.revision  # the folder is the pinned commit, whatever the server says
        else:
            # X-Repo-Commit names the folder the file goes to: only a 40-hex commit is accepted
            commit = meta.commit_hash or ""
            if not REVISION_RE.fullmatch(commit):
                shown = repr(commit[:100]) if commit else "no commit id"
                raise UnsafePathError(f"the server answered with {shown} instead of a 40-hex commit for "
                                      f"{req.repo}/{req.file}; refusing to use it as a folder name (nothing was "
                                      "written)", url=page)
            dest = self.store.path_for(req.repo, req.file, commit)
            if self._already_installed(dest):
                return dest
        size = req.size if req.size is not None else meta.size
        if size is None:
            raise ServerError("the server did not say how large the file is", url=page)
        if size <= 0:
            # No model file is empty: a download of it could only end in a checksum failure blamed on the bytes.
            raise ServerError(f"the server says {req.file} is {size} bytes, which no model file is; nothing was "
                              "downloaded", url=page)
        if meta.size is not None and meta.size != size:
            raise MismatchError(f"the server's {req.file} is {meta.size} bytes, the catalogue says {size}: "
                                "not the pinned file", url=page)
        hub_sha = meta.etag if meta.etag and len(meta.etag) == 64 else None
        expected_sha = req.sha256 or hub_sha
        if req.sha256 and hub_sha and req.sha256 != hub_sha:
            raise MismatchError(f"the server's sha256 for {req.file} differs from the expected one", url=page)
        git_sha1 = meta.etag if expected_sha is None and meta.etag and len(meta.etag) == 40 else None
        if expected_sha is None and git_sha1 is None:
            raise UnverifiableError(f"no checksum is known for {req.file}; refusing to install it unverified "
                                    "(pass --sha256)")
        with self._locked(dest, size):
            if self._already_installed(dest, expected_sha):
                return dest
            return self._transfer(url, page, dest, size, expected_sha, git_sha1, commit)

    def _already_installed(self, dest: Path, expected_sha: str | None = None) -> bool:
        if not dest.is_file():
            return False
        rec = self.store.recorded_sha256(dest)
        want = expected_sha or self.req.sha256
        if rec is None or (want is not None and rec != want):
            return False
        if self.req.size is not None and dest.stat().st_size != self.req.size:
            return False
        self.emit.send(DownloadEvent("done", self.req.file, dest.stat().st_size, dest.stat().st_size,
                                     path=str(dest), message="already installed"))
        return True

    def _check_space(self, dest: Path, remaining: int) -> None:
        free = shutil.disk_usage(dest.parent).free
        need = required_with_margin(remaining)
        if need > free:
            raise DiskFullError(f"needs {gb(need)}, {gb(free)} free on {dest.parent}")

    def _transfer(self, url: str, page: str, dest: Path, size: int, expected_sha: str | None,
                  git_sha1: str | None, commit: str) -> Path:
        import httpx2
        from huggingface_hub.errors import HfHubHTTPError
        from huggingface_hub.utils._headers import build_hf_headers
        from huggingface_hub.utils._http import get_session, hf_raise_for_status

        part = self.store.part_path(dest)
        meta_path = part.with_name(part.name + ".json")
        identity = {"repo": self.req.repo, "file": self.req.file, "size": size, "sha256": expected_sha,
                    "git_sha1": git_sha1}
        if part.exists():
            try:
                old = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                old = None
            if old != identity or part.stat().st_size > size:
                part.unlink()  # a part of some other file (changed revision/size): discard
        write_json_atomic(meta_path, identity)

        def new_hasher() -> Any:
            if expected_sha is not None:
                return hashlib.sha256()
            h = hashlib.sha1()
            h.update(f"blob {size}\0".encode())
            return h

        hasher = new_hasher()
        offset = part.stat().st_size if part.exists() else 0
        self._check_space(dest, size - offset)
        if offset:
            with open(part, "rb") as f:
                while chunk := f.read(4 * 1024 * 1024):
                    hasher.update(chunk)
        self.emit.send(DownloadEvent("start", self.req.file, offset, size, path=str(dest),
                                     message="resuming" if offset else "starting"))
        headers = build_hf_headers()
        headers["Accept-Encoding"] = "identity"
        timeout = httpx2.Timeout(self.opts.read_timeout, connect=self.opts.connect_timeout)
        http_client = get_session()  # huggingface_hub's shared httpx client (its proxies, headers, offline mode)
        budget = _RetryBudget(self.opts, offset)
        out = open(part, "ab")  # noqa: SIM115 - closed in finally
        try:
            while offset < size:
                h = dict(headers)
                if offset:
                    h["Range"] = f"bytes={offset}-"
                budget.attempt_started()
                try:
                    with http_client.stream("GET", url, headers=h, timeout=timeout, follow_redirects=True) as r:
                        if r.status_code == 416:
                            if offset == size:
                                break
                            out.truncate(0)
                            out.seek(0)
                            hasher, offset = new_hasher(), 0
                            raise _Retry("416 inside the file: restarting")
                        if r.status_code >= 400:
                            r.read()
                            hf_raise_for_status(r)
                        skip = 0
                        if offset and r.status_code == 200:
                            skip = offset  # the server ignored Range: skip what the .part already holds
                        elif r.status_code == 206:
                            start = _content_range_start(r.headers.get("Content-Range", ""))
                            if start != offset:
                                out.truncate(0)
                                out.seek(0)
                                hasher, offset = new_hasher(), 0
                                raise _Retry(f"bad Content-Range {r.headers.get('Content-Range')!r}")
                        # Each piece as it arrives (no fixed-size chunks): a connection that drops mid-chunk keeps
                        # every byte it delivered, so a flaky link still makes progress from attempt to attempt.
                        for chunk in r.iter_bytes():
                            budget.received(len(chunk))
                            if skip:
                                n = min(skip, len(chunk))
                                skip -= n
                                chunk = chunk[n:]
                                if not chunk:
                                    continue
                            if offset + len(chunk) > size:
                                chunk = chunk[: size - offset]
                            out.write(chunk)
                            hasher.update(chunk)
                            offset += len(chunk)
                            self.emit.progress(offset, size)
                            if offset >= size:
                                break
                        out.flush()
                        if offset < size:
                            raise _Retry("connection closed early")
                except HfHubHTTPError as exc:
                    mapped = map_hub_error(exc, url, page, True)
                    if not isinstance(mapped, ServerError):
                        raise mapped from exc
                    self._retry_or_fail(budget, offset, size, exc, page, mapped)
                except OSError as exc:
                    if _is_disk_full(exc):
                        raise
                    self._retry_or_fail(budget, offset, size, exc, page)
                except (httpx2.TooManyRedirects, httpx2.UnsupportedProtocol) as exc:
                    raise _redirect_error(exc, self.req.file, page) from exc
                except (_Retry, httpx2.TransportError) as exc:
                    out.flush()
                    self._retry_or_fail(budget, offset, size, exc, page)
            out.flush()
            os.fsync(out.fileno())
        except OSError as exc:
            if _is_disk_full(exc):
                out.close()
                with contextlib.suppress(OSError):
                    part.unlink()
                with contextlib.suppress(OSError):
                    meta_path.unlink()
                raise DiskFullError(f"the disk filled up while downloading {self.req.file} "
                                    f"({dest.parent}); the partial file was removed, installed models are "
                                    "untouched") from exc
            raise
        finally:
            out.close()
        self.emit.progress(offset, size, force=True)
        self.emit.send(DownloadEvent("verifying", self.req.file, offset, size))
        digest = hasher.hexdigest()
        if digest != (expected_sha or git_sha1):
            q = self.store.quarantine(part)
            with contextlib.suppress(OSError):
                meta_path.unlink()
            raise CorruptedError(f"downloaded file is corrupted — download again ({self.req.file}: sha256 "
                                 f"mismatch, moved to {q})", url=page)
        os.replace(part, dest)
        fsync_dir(dest.parent)
        with contextlib.suppress(OSError):
            meta_path.unlink()
        self.store.write_record(dest, digest if expected_sha else _sha256_path(dest),
                                source={"repo": self.req.repo, "file": self.req.file, "revision": commit})
        self.emit.send(DownloadEvent("done", self.req.file, size, size, path=str(dest)))
        return dest

    def _retry_or_fail(self, budget: _RetryBudget, offset: int, size: int, exc: BaseException, page: str,
                       mapped: DownloadError | None = None) -> None:
        """After a failed attempt: sleep and return (retry), or raise when the retry budget is spent."""
        verdict = budget.failed(offset)
        if verdict is None:
            time.sleep(min(self.opts.retry_backoff * (2 ** (budget.failures - 1)), 5.0))
            return
        if budget.cut_short:
            raise CutShortError(
                f"the server keeps cutting the download of {self.req.file} short ({verdict}: stuck at "
                f"{gb(budget.high_water)} of {gb(size)} after {budget.attempts} attempts); the partial file is "
                "kept and the next start resumes it", url=page)
        if mapped is not None:
            raise mapped
        raise NetworkError(f"{network_words(exc, page)} while downloading {self.req.file}; "
                           "the partial file is kept and the next start resumes it", url=page)


class _RetryBudget:
    """How many more attempts a download gets.

    ``retries`` failures in a row are allowed; the count goes back to zero only when the file grows past its
    high-water mark (the most bytes it ever held), so a server that keeps sending the same bytes and cutting the
    body short (ignoring Range, or advertising more than it sends) cannot keep a download alive forever. Also
    bounded: ``max_attempts`` requests in all and ``no_progress_timeout`` seconds without a new high-water mark.
    """

    def __init__(self, opts: DownloadOptions, offset: int) -> None:
        self.opts = opts
        self.high_water = offset
        self.failures = 0
        self.attempts = 0
        self.last_growth = time.monotonic()
        self._bytes_this_attempt = 0
        self.cut_short = False  # the failed attempts since the last growth received bytes (not a dead network)

    def attempt_started(self) -> None:
        self.attempts += 1
        self._bytes_this_attempt = 0

    def received(self, n: int) -> None:
        self._bytes_this_attempt += n

    def failed(self, offset: int) -> str | None:
        """Record a failed attempt that left ``offset`` bytes; None: retry; else why to give up."""
        now = time.monotonic()
        if offset > self.high_water:
            self.high_water = offset
            self.failures = 0
            self.last_growth = now
            self.cut_short = False
        elif self._bytes_this_attempt:
            self.cut_short = True
        self.failures += 1
        if self.failures > self.opts.retries:
            return f"{self.failures} attempts in a row without getting further"
        if self.attempts >= self.opts.max_attempts:
            return f"{self.attempts} attempts in all"
        if now - self.last_growth > self.opts.no_progress_timeout:
            return f"no new bytes for {now - self.last_growth:.0f} s"
        return None


def _redirect_error(exc: Exception, file: str, page: str) -> ServerError:
    """A redirect that cannot lead to the file, in words (it used to read as "the connection was lost")."""
    import httpx2

    if isinstance(exc, httpx2.TooManyRedirects):
        return ServerError(f"the server redirects the download of {file} in a loop (too many redirects); nothing "
                           "more was downloaded, try again later", url=page)
    target = ""
    request = getattr(exc, "request", None)
    if request is not None:
        target = str(request.url)[:200]
    return ServerError(f"the server redirected the download of {file} to {target or 'an address'} that is not "
                       "http(s); refused, nothing was read from it", url=page)


def _sha256_path(path: Path) -> str:
    from outrider.catalogue.store import sha256_file

    return sha256_file(path)


class _Retry(Exception):
    pass


def _content_range_start(value: str) -> int:
    # "bytes 100-199/200"
    try:
        return int(value.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return -1


class _LineQueue:
    """What the child reports through: one JSON object per line on stdout."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def put(self, obj: dict[str, Any]) -> None:
        with self.lock:
            self.stream.write(json.dumps(obj) + "\n")
            self.stream.flush()


def _child_main(job: dict[str, Any], q: Any) -> None:
    """Body of the download process (a fresh interpreter started by DownloadHandle)."""
    if os.environ.get(APP_SET_OFFLINE) == "1":  # the parent set HF_HUB_OFFLINE for its own offline paths
        os.environ.pop("HF_HUB_OFFLINE", None)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if job.get("endpoint"):
        os.environ["HF_ENDPOINT"] = job["endpoint"]
    limit = job["options"].get("fsize_limit")
    if limit:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        path = _Transfer(job, q).run()
        q.put({"type": "result", "path": str(path)})
    except DownloadError as exc:
        q.put({"type": "error", "file": job["request"]["file"], "error": exc.to_json(), "message": exc.message})
    except OSError as exc:  # words, never a raw [Errno …]: the network, or the store could not be written
        err = (NetworkError(f"{network_words(exc, job.get('endpoint') or '')}; a partial file is kept")
               if isinstance(exc, (ConnectionError, TimeoutError, socket.gaierror))
               else local_error(exc, job.get("store_root", "")))
        q.put({"type": "error", "file": job["request"]["file"], "error": err.to_json(), "message": err.message})
    except BaseException as exc:
        err = InternalError(f"download failed: {type(exc).__name__}: {exc}")
        q.put({"type": "error", "file": job["request"]["file"], "error": err.to_json(), "message": err.message})


def child_entry() -> int:
    """``python -m outrider.catalogue.download``: the job as JSON on stdin, events as JSON lines on stdout.

    The parent keeps stdin open while the download runs: its end closing (the parent died) ends this process.
    """
    job = json.loads(sys.stdin.readline())
    parent_pid = job.get("parent_pid")
    die_with_parent(parent_pid if isinstance(parent_pid, int) else None,
                     sys.stdin if job.get("parent_pipe") else None)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the event stream
    _child_main(job, _LineQueue(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(child_entry())
