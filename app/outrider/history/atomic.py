"""Atomic file writes: temp file in the same directory, fsync, ``os.replace``, fsync of the directory.

A reader (or a crash at any instant) sees either the old file or the whole new one, never a truncated or
NUL-filled file (LM Studio bug tracker #2343; Jan #8019 truncate-then-rewrite).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (no-op where directories cannot be opened, e.g. Windows)."""
    if sys.platform == "win32":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably."""
    path = Path(path)
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_directory(directory)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically and durably."""
    atomic_write_bytes(path, text.encode("utf-8"))
