"""One writer per data directory: an exclusive, non-blocking lock on a file next to the database.

The operating system drops the lock when the process dies (even on SIGKILL), so a crash never leaves a
stale lock behind, unlike a pid file.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from outrider.history.errors import StoreLockedError


class DirectoryLock:
    """An acquired lock; ``release`` (or process exit) frees it.

    Attributes:
        path: the lock file.
    """

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, path: Path, data_dir: Path) -> DirectoryLock:
        """Take the lock or raise ``StoreLockedError`` at once (never waits)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock_fd(fd)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            raise StoreLockedError(data_dir, path, holder) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # the pid is informational only
        return cls(fd, path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            _unlock_fd(fd)
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        data = os.pread(fd, 32, 0)
        return int(data.decode("ascii").strip() or "0") or None
    except (OSError, ValueError, AttributeError):
        return None


if sys.platform == "win32":
    import msvcrt

    def _lock_fd(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

    def _unlock_fd(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
