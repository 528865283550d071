"""The GUI's one background task runner: blocking work on named threads, results on the GUI thread (Anki ``taskman``
style).

``QtTaskRunner.submit(fn, on_done, on_error)`` runs ``fn()`` on a worker thread and calls ``on_done(result)`` or
``on_error(exc)`` on the GUI thread through a queued signal. With one worker (the default) work for one resource is
serialised in submission order (the history store's writes); the download manager uses two, so a pause does not
wait behind a cancel. Callbacks bound to a deleted QObject are skipped (calling into a
deleted widget crashes the app), and every callback still
pending when the runner is closed is dropped, so a result that arrives after its window closed never touches
deleted widgets. Threads start on first use; a closed runner starts them again when it is used again (a dialog
shown again).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, Signal, Slot


def _alive(callback: Callable[..., Any] | None) -> bool:
    owner = getattr(callback, "__self__", None)
    return callback is not None and (not isinstance(owner, QObject) or shiboken6.isValid(owner))


class QtTaskRunner(QObject):
    """A small executor whose results arrive as signals on the GUI thread.

    Signals:
        error(Exception): a task failed and had no ``on_error`` callback.
    """

    error = Signal(object)
    _delivered = Signal(int, object, object, bool)  # generation, callback, value, is_error

    def __init__(self, name: str, parent: QObject | None = None, *, max_workers: int = 1) -> None:
        super().__init__(parent)
        self._name = name
        self._max_workers = max_workers
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._generation = 0  # bumped by close(): deliveries of an earlier generation are dropped
        self._pending = 0
        self._delivered.connect(self._on_delivered)

    @property
    def busy(self) -> bool:
        """Some submitted task has not delivered its result yet."""
        return self._pending > 0

    def submit(self, fn: Callable[[], Any], on_done: Callable[[Any], None] | None = None,
               on_error: Callable[[Exception], None] | None = None) -> concurrent.futures.Future[Any]:
        if self._pool is None:  # first use, or used again after close()
            self._pool = concurrent.futures.ThreadPoolExecutor(self._max_workers, thread_name_prefix=self._name)
        generation = self._generation
        self._pending += 1

        def run() -> Any:
            try:
                value = fn()
            except Exception as exc:  # errors travel back as values, typed at the source
                self._deliver(generation, on_error, exc, True)
                raise
            self._deliver(generation, on_done, value, False)
            return value

        return self._pool.submit(run)

    def _deliver(self, generation: int, callback: Callable[[Any], None] | None, value: Any,
                 is_error: bool) -> None:
        """On the worker thread: queue the delivery, unless this runner is gone or closed meanwhile."""
        if generation != self._generation or not shiboken6.isValid(self):
            return
        with contextlib.suppress(RuntimeError):  # deleted between the check and the emit
            self._delivered.emit(generation, callback, value, is_error)

    @Slot(int, object, object, bool)
    def _on_delivered(self, generation: int, callback: Callable[[Any], None] | None, value: Any,
                      is_error: bool) -> None:
        if generation != self._generation:
            return  # closed since: the callback belongs to a window that is gone
        self._pending = max(0, self._pending - 1)
        if callback is None:
            if is_error:
                self.error.emit(value)
            return
        if _alive(callback):
            callback(value)

    def close(self, *, cancel_pending: bool = False) -> None:
        """Wait for the work (``cancel_pending``: only for the running tasks; queued ones are dropped), stop the
        threads and drop every callback not delivered yet."""
        pool, self._pool = self._pool, None
        self._generation += 1
        self._pending = 0
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=cancel_pending)
