"""Run blocking work on one background thread and deliver results on the GUI thread (Anki ``taskman`` style).

``QtTaskRunner.submit(fn, on_done, on_error)`` runs ``fn()`` on a single worker thread (so work for one resource
is serialised in submission order) and calls ``on_done(result)`` or ``on_error(exc)`` on the GUI thread through a
queued signal. Callbacks bound to a deleted QObject are skipped (STYLE.md §8).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, Signal, Slot


def _alive(callback: Callable[..., Any] | None) -> bool:
    owner = getattr(callback, "__self__", None)
    return callback is not None and (not isinstance(owner, QObject) or shiboken6.isValid(owner))


class QtTaskRunner(QObject):
    """A one-thread executor whose results arrive as signals.

    Signals:
        error(Exception): a task failed and had no ``on_error`` callback.
    """

    error = Signal(object)
    _delivered = Signal(object, object, object)  # callback, value, is_error

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._delivered.connect(self._on_delivered)
        self._closed = False

    def submit(self, fn: Callable[[], Any], on_done: Callable[[Any], None] | None = None,
               on_error: Callable[[Exception], None] | None = None) -> concurrent.futures.Future[Any]:
        def run() -> Any:
            try:
                value = fn()
            except Exception as exc:
                if not self._closed:
                    self._delivered.emit(on_error, exc, True)
                raise
            if not self._closed and on_done is not None:
                self._delivered.emit(on_done, value, False)
            return value

        return self._pool.submit(run)

    @Slot(object, object, object)
    def _on_delivered(self, callback: Callable[[Any], None] | None, value: Any, is_error: bool) -> None:
        if self._closed:
            return
        if callback is None:
            if is_error:
                self.error.emit(value)
            return
        if _alive(callback):
            callback(value)

    def close(self) -> None:
        """Finish the queued work (it may hold a store write), then stop the thread."""
        self._pool.shutdown(wait=True)
        self._closed = True
