"""Models that crashed the engine while loading: remembered so the app does not auto-load them next start.

A small JSON file, ``unsafe_models.json`` under ``outrider.paths.data_dir()``. Entries are keyed by the real path
and remember the file's size and modification time: a re-downloaded (changed) file is no longer considered
unsafe. Writes are atomic and durable (``outrider.fileio``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from outrider import paths
from outrider.fileio import atomic_write_json

FILE_NAME = "unsafe_models.json"
MAX_BYTES = 4 * 1024 * 1024  # a registry is a few entries; anything larger is not ours
log = logging.getLogger(__name__)


def _key(model_path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(model_path))


def _identity(model_path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(model_path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class UnsafeModels:
    """The registry. Thread-safe within a process; last writer wins between processes."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path if self._path is not None else paths.data_dir() / FILE_NAME

    def _read(self) -> dict[str, Any]:
        """The entries; a missing, damaged, oversized or too deeply nested file reads as empty (with a note in the
        log) and is replaced by the next write."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
        except OSError:
            return {}
        if len(raw) > MAX_BYTES:
            log.warning("%s is larger than %d bytes: ignored", self.path, MAX_BYTES)
            return {}
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            log.warning("%s is not a readable registry (%s): ignored", self.path, type(exc).__name__)
            return {}
        if not isinstance(data, dict):
            return {}
        # entries keep only their flat fields (a nested value could not be written back without deep recursion)
        return {k: {f: x for f, x in v.items() if isinstance(x, (str, int, float, bool)) or x is None}
                for k, v in data.items() if isinstance(v, dict)}

    def _write(self, data: dict[str, Any]) -> None:
        atomic_write_json(self.path, data, indent=2, sort_keys=True)

    def mark(self, model_path: str | os.PathLike[str], reason: str) -> None:
        """Remember ``model_path`` as unsafe (``reason``: the one-line crash message)."""
        key = _key(model_path)
        ident = _identity(key)
        with self._lock:
            data = self._read()
            data[key] = {"reason": reason, "when": time.time(), "size": ident[0] if ident else None,
                         "mtime_ns": ident[1] if ident else None}
            self._write(data)

    def reason(self, model_path: str | os.PathLike[str]) -> str | None:
        """Why ``model_path`` is unsafe, or None (also None when the file changed since it crashed)."""
        key = _key(model_path)
        with self._lock:
            entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        ident = _identity(key)
        if ident is not None and entry.get("size") is not None and (entry["size"], entry.get("mtime_ns")) != ident:
            return None
        reason = entry.get("reason")
        return reason if isinstance(reason, str) else "it crashed the engine"

    def is_unsafe(self, model_path: str | os.PathLike[str]) -> bool:
        return self.reason(model_path) is not None

    def clear(self, model_path: str | os.PathLike[str]) -> None:
        key = _key(model_path)
        with self._lock:
            data = self._read()
            if data.pop(key, None) is not None:
                self._write(data)

    def entries(self) -> dict[str, Any]:
        with self._lock:
            return self._read()
