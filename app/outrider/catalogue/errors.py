"""Typed download/store errors. Each has a ``kind`` (stable, for JSON and the GUI) and a user-facing message."""

from __future__ import annotations

import errno
import os
from pathlib import Path


class DownloadError(Exception):
    """A download failed. ``resumable``: the ``.part`` file was kept and a new start continues from it."""

    kind = "error"
    resumable = False

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.url = url

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "message": self.message, "resumable": self.resumable, "url": self.url or None}


class GatedError(DownloadError):
    """The repo is gated: no token, or the token is not approved (``url`` is the model page)."""

    kind = "gated"


class UnauthorizedError(DownloadError):
    """The Hugging Face token was rejected."""

    kind = "unauthorized"


class NotFoundError(DownloadError):
    kind = "not_found"


class NetworkError(DownloadError):
    """Connection lost, refused or stalled; the partial file is kept."""

    kind = "network"
    resumable = True


class DiskFullError(DownloadError):
    """Not enough space (preflight) or the disk filled up mid-download; installed models are untouched."""

    kind = "disk_full"


class ServerError(DownloadError):
    kind = "server"
    resumable = True


class CorruptedError(DownloadError):
    """The downloaded bytes do not match the expected sha256; the file was quarantined."""

    kind = "corrupted"


class MismatchError(DownloadError):
    """The server's file is not the one the catalogue pins (size or sha256 differ)."""

    kind = "mismatch"


class UnverifiableError(DownloadError):
    """No checksum is known for the file, so it would be installed unverified: refused."""

    kind = "unverifiable"


class CancelledError(DownloadError):
    kind = "cancelled"
    resumable = True


class BusyError(DownloadError):
    """Another process is downloading the same file and is not making progress."""

    kind = "busy"


class OfflineError(DownloadError):
    """Offline mode is on (``HF_HUB_OFFLINE``) and the file is not on disk."""

    kind = "offline"


class CutShortError(DownloadError):
    """The server keeps ending the transfer early without the file growing; the partial file is kept."""

    kind = "cut_short"
    resumable = True


class UnsafePathError(DownloadError, ValueError):
    """A repo, file or revision (from the catalogue, the command line or the server's ``X-Repo-Commit``) would
    put a file outside the model store, or is not a valid name: refused, nothing written."""

    kind = "unsafe_path"


class StoreWriteError(DownloadError):
    """The model store cannot be written: no permission, a read-only disk, a file where a folder must be."""

    kind = "store_write"


class InternalError(DownloadError):
    kind = "internal"


ERROR_CLASSES: dict[str, type[DownloadError]] = {
    cls.kind: cls
    for cls in (GatedError, UnauthorizedError, NotFoundError, NetworkError, DiskFullError, ServerError,
                CorruptedError, MismatchError, UnverifiableError, CancelledError, BusyError, OfflineError,
                CutShortError, UnsafePathError, StoreWriteError, InternalError)
}


def error_from_json(data: dict[str, object]) -> DownloadError:
    cls = ERROR_CLASSES.get(str(data.get("kind")), InternalError)
    return cls(str(data.get("message", "download failed")), url=str(data.get("url") or ""))


def map_hub_error(exc: Exception, url: str, page: str, has_token: bool) -> DownloadError:
    """A huggingface_hub exception (or any other failure of a request) as our typed error, for the user."""
    from huggingface_hub import errors as hf_errors

    if isinstance(exc, hf_errors.GatedRepoError):  # before RepositoryNotFoundError (its base class)
        if not has_token:
            return GatedError(f"this model is gated: log in with a Hugging Face token (hf auth login) and "
                              f"accept its licence at {page}", url=page)
        return GatedError(f"your Hugging Face token is not approved for this gated model yet: request access "
                          f"at {page}", url=page)
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return NotFoundError(f"repository not found (or private): {page}", url=page)
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return NotFoundError(f"revision not found in {page}", url=page)
    if isinstance(exc, hf_errors.EntryNotFoundError):
        return NotFoundError(f"file not found: {url}", url=page)
    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return OfflineError("offline mode is on (HF_HUB_OFFLINE): not downloaded; connect to download")
    if isinstance(exc, hf_errors.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        if status == 401:
            return UnauthorizedError("the Hugging Face token was rejected (invalid or expired): log in again")
        if status == 403:
            return GatedError(f"access denied by the server: check your token's access at {page}", url=page)
        if status == 404:
            return NotFoundError(f"file not found: {url}", url=page)
        if status >= 500 or status == 429:
            return ServerError(f"the server answered {status}; try again later (partial file kept)", url=page)
        return ServerError(f"the server answered {status}", url=page)
    return NetworkError(f"{network_words(exc, url)}; try again when the connection is back (a download resumes "
                        "where it stopped)", url=page)


def network_words(exc: BaseException, url: str = "") -> str:
    """A failed connection in words for the user, never a raw ``[Errno -2] …``: which of no network (the name
    does not resolve), refused, timed out or dropped, and the host it was trying to reach."""
    import socket
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or "" if url else ""
    where = "Hugging Face" if not host or host.endswith("huggingface.co") else host
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain and len(chain) < 20:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    names = " ".join(type(e).__name__ for e in chain).lower()
    text = " ".join(str(e) for e in chain).lower()
    if any(isinstance(e, socket.gaierror) for e in chain) or "name or service not known" in text or \
            "temporary failure in name resolution" in text or "nodename nor servname" in text or \
            "getaddrinfo" in text or "errno -2" in text or "errno -3" in text or "errno -5" in text:
        return f"no network: cannot reach {where}"
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "connection refused" in text:
        return f"cannot reach {where}: the connection was refused"
    if any(isinstance(e, TimeoutError) for e in chain) or "timeout" in names or "timed out" in text:
        return f"cannot reach {where}: no answer in time (slow or no network)"
    if "network is unreachable" in text or "no route to host" in text:
        return f"no network: cannot reach {where}"
    return f"the connection to {where} was lost"


def local_error(exc: OSError, where: str | os.PathLike[str] = "") -> DownloadError:
    """A failed file operation on this machine (the model store) as a typed error in words, never a raw
    ``[Errno 13] …``: a full disk is ``DiskFullError``, the rest ``StoreWriteError`` saying what is wrong and where
    (``exc.filename``, else ``where``) and what to do."""
    place = str(exc.filename or where or "the model store")
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return DiskFullError(f"the disk is full: cannot write {place}; free some space and download again")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return StoreWriteError(f"no permission to write {place}: fix its permissions, or keep models elsewhere "
                               "(OUTRIDER_HOME)")
    if exc.errno == errno.EROFS:
        return StoreWriteError(f"{place} is on a read-only disk: keep models elsewhere (OUTRIDER_HOME)")
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        blocking = next((p for p in Path(place).parents if p.is_file()), None)
        return StoreWriteError(f"{blocking or place} is a file where a folder is needed: move it away and download "
                               "again")
    if exc.errno == errno.ENAMETOOLONG:
        return StoreWriteError(f"the path is too long for this file system: {place[:200]}")
    reason = (exc.strerror or "input/output error").lower()
    return StoreWriteError(f"cannot write {place}: {reason}")
