"""Atomic, durable file writes: the one implementation every part of Outrider uses (no Qt, stdlib only).

``atomic_write_bytes``/``atomic_write_text``: a temp file with a unique name in the target's own directory
(``mkstemp``: never shared by two writers, never on another file system), written and fsynced, renamed over the
target with ``os.replace``, then the directory fsynced so the rename itself survives a power cut. A reader (or a
crash at any instant) sees either the old file or the whole new one, never a truncated or NUL-filled file
(LM Studio bug tracker #2343; Jan #8019 truncate-then-rewrite). A failed write leaves the old file and no temp.

Files are owner-only (``0600``) unless ``mode`` says otherwise: everything Outrider writes lives in its private
data folders or is a person's chat or benchmark export.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

PRIVATE_FILE_MODE: Final = 0o600


def _fsync_path(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (no-op where directories cannot be opened, e.g. Windows)."""
    if sys.platform == "win32":
        return
    _fsync_path(directory, os.O_RDONLY)


def fsync_file(path: Path) -> None:
    """Make the content of a file another writer wrote (SQLite's backup) durable, before it is renamed into place.
    Raises ``OSError``."""
    _fsync_path(path, os.O_RDWR if sys.platform == "win32" else os.O_RDONLY)  # Windows flushes writable handles only


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = PRIVATE_FILE_MODE) -> None:
    """Write ``data`` to ``path`` atomically and durably; the file gets exactly ``mode`` (POSIX permissions).

    Missing parent folders are created. Raises ``OSError`` (the old file, if any, is then untouched).
    """
    path = Path(path)
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)  # created 0600
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode != PRIVATE_FILE_MODE and os.name == "posix":
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_directory(directory)


def atomic_write_text(path: Path, text: str, *, mode: int = PRIVATE_FILE_MODE) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically and durably (see ``atomic_write_bytes``)."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(path: Path, data: Any, *, indent: int | None = 2, sort_keys: bool = False,
                      mode: int = PRIVATE_FILE_MODE) -> None:
    """Write ``data`` as JSON (UTF-8) to ``path`` atomically and durably (see ``atomic_write_bytes``)."""
    atomic_write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys), mode=mode)


def move_into_place(tmp: Path, path: Path) -> None:
    """Make ``tmp`` (a finished file another writer produced in ``path``'s folder, e.g. llama.cpp's quantiser)
    durable and rename it over ``path``, then fsync the folder: the same guarantee as ``atomic_write_bytes`` for
    content too large or too foreign to pass through Python. Raises ``OSError`` (``tmp`` is then left to the
    caller, ``path`` untouched)."""
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_directory(path.parent)
