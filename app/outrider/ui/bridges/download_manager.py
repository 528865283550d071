"""Pair downloads for the GUI: start / pause / resume / cancel, and the model of their progress.

Each file downloads in its own child process (``outrider.catalogue.DownloadManager``); its events arrive on
reader threads. Those threads only append to a queue; a ``QTimer`` on the GUI thread drains it four times a
second (never one repaint per event) and updates ``DownloadsModel`` with ``dataChanged`` for the changed rows.
Stopping a child waits for it to exit, so pause and cancel run on the manager's ``QtTaskRunner``, never in a slot.

Pause and cancel both stop the child; pause keeps the ``.part`` file (resume continues with ``Range``), cancel
removes it. The table that shows these downloads is ``outrider.ui.picker.downloads_tab.DownloadsView``.
"""

from __future__ import annotations

import dataclasses
import enum
import queue
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, Qt, QTimer, Signal

from outrider.catalogue import DownloadError, DownloadEvent, Pair, PairDownload
from outrider.catalogue.memory import format_bytes
from outrider.catalogue.service import CatalogueService
from outrider.ui.bridges.tasks import QtTaskRunner
from outrider.ui.models.table_model import HeaderedTableModel

Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()
DRAIN_INTERVAL_MS = 250


def format_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:  # None or NaN
        return "—"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class DownloadState(enum.Enum):
    """Lifecycle of one pair's download. ``value`` is the text shown."""

    STARTING = "starting"
    RUNNING = "downloading"
    VERIFYING = "verifying"
    PAUSING = "pausing…"
    PAUSED = "paused"
    CANCELLING = "cancelling…"
    CANCELLED = "cancelled"
    FAILED = "failed"
    DONE = "done"


ACTIVE = frozenset({DownloadState.STARTING, DownloadState.RUNNING, DownloadState.VERIFYING})
STOPPING = frozenset({DownloadState.PAUSING, DownloadState.CANCELLING})


@dataclasses.dataclass(frozen=True)
class DownloadItem:
    """One pair's download as shown: bytes over both files, the file now in flight, speed, ETA and state."""

    pair: Pair
    state: DownloadState = DownloadState.STARTING
    file: str = ""
    bytes_done: int = 0
    speed: float = 0.0
    eta: float | None = None
    message: str = ""
    error_kind: str = ""
    resumable: bool = False

    @property
    def total(self) -> int:
        return self.pair.size

    @property
    def fraction(self) -> float:
        return min(1.0, self.bytes_done / self.total) if self.total else 0.0

    @property
    def can_pause(self) -> bool:
        return self.state in ACTIVE

    @property
    def can_resume(self) -> bool:
        return self.state in (DownloadState.PAUSED, DownloadState.CANCELLED) or (
            self.state is DownloadState.FAILED and self.resumable)

    @property
    def can_retry(self) -> bool:
        """A failed download can be started again (from its partial file when it is resumable)."""
        return self.state is DownloadState.FAILED

    @property
    def can_cancel(self) -> bool:
        return self.state in ACTIVE or self.state in (DownloadState.PAUSED, DownloadState.FAILED)


class DownloadRole(enum.IntEnum):
    PairId = Qt.ItemDataRole.UserRole + 1
    Item = enum.auto()  # the DownloadItem
    Progress = enum.auto()  # float 0..1
    State = enum.auto()  # DownloadState


class DownloadColumn(enum.IntEnum):
    Pair = 0
    Progress = 1
    Speed = 2
    Eta = 3
    State = 4


class DownloadsModel(HeaderedTableModel):
    """Downloads since the app started, newest last; a thin adapter over ``DownloadItem`` snapshots."""

    headers = (("Pair", ""), ("Progress", ""), ("Speed", ""), ("Time left", ""), ("State", ""))

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._items: list[DownloadItem] = []

    def upsert(self, item: DownloadItem) -> None:
        row = self.row_of(item.pair.id)
        if row is None:
            self.beginInsertRows(_ROOT, len(self._items), len(self._items))
            self._items.append(item)
            self.endInsertRows()
            return
        if self._items[row] == item:
            return
        self._items[row] = item
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(self.headers) - 1))

    def remove(self, pair_id: str) -> None:
        row = self.row_of(pair_id)
        if row is not None:
            self.beginRemoveRows(_ROOT, row, row)
            del self._items[row]
            self.endRemoveRows()

    def row_of(self, pair_id: str) -> int | None:
        for i, it in enumerate(self._items):
            if it.pair.id == pair_id:
                return i
        return None

    def item(self, pair_id: str) -> DownloadItem | None:
        row = self.row_of(pair_id)
        return None if row is None else self._items[row]

    @property
    def items(self) -> tuple[DownloadItem, ...]:
        return tuple(self._items)

    def _row_count(self) -> int:
        return len(self._items)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not self.is_valid(index):
            return None
        it = self._items[index.row()]
        col = DownloadColumn(index.column())
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(it, col)
        if role == Qt.ItemDataRole.ToolTipRole:  # the whole cell, which a narrow column elides, then the detail
            shown = self._display(it, col)
            detail = it.message or f"{it.pair.name}: {it.state.value}"
            return detail if shown in detail else f"{shown}\n{detail}"
        if role == DownloadRole.PairId:
            return it.pair.id
        if role == DownloadRole.Item:
            return it
        if role == DownloadRole.Progress:
            return it.fraction
        if role == DownloadRole.State:
            return it.state
        return None

    @staticmethod
    def _display(it: DownloadItem, col: DownloadColumn) -> str:
        if col is DownloadColumn.Pair:
            return str(it.pair.name)
        if col is DownloadColumn.Progress:
            return f"{format_bytes(it.bytes_done)} / {format_bytes(it.total)} ({it.fraction:.0%})"
        running = it.state is DownloadState.RUNNING
        if col is DownloadColumn.Speed:
            return f"{format_bytes(int(it.speed))}/s" if running and it.speed > 0 else "—"
        if col is DownloadColumn.Eta:
            return format_duration(it.eta) if running else "—"
        if it.state is DownloadState.FAILED:
            return f"failed: {it.message}"
        return str(it.state.value)


class QtDownloadManager(QObject):
    """Starts, pauses, resumes and cancels pair downloads; turns child-process events into model updates.

    Signals:
        download_changed(str): a pair's ``DownloadItem`` changed (at most every ``DRAIN_INTERVAL_MS``).
        download_finished(str): both files of the pair are installed and verified.
        download_failed(str, object): the pair id and the typed ``DownloadError`` (message for the user).
        download_paused(str): the child stopped; the partial file is kept.
        download_cancelled(str): the child stopped and the partial file was removed.
    """

    download_changed = Signal(str)
    download_finished = Signal(str)
    download_failed = Signal(str, object)
    download_paused = Signal(str)
    download_cancelled = Signal(str)

    def __init__(self, service: CatalogueService, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.service = service
        self.model = DownloadsModel(self)
        self._runner = QtTaskRunner("outrider-downloads", self, max_workers=2)
        self._running: dict[str, PairDownload] = {}
        self._file_bytes: dict[str, dict[str, int]] = {}
        self._events: queue.SimpleQueue[tuple[str, DownloadEvent]] = queue.SimpleQueue()
        self._timer = QTimer(self)
        self._timer.setInterval(DRAIN_INTERVAL_MS)
        self._timer.timeout.connect(self._on_timer_timeout)

    # -- commands -------------------------------------------------------------------------------------------
    def start(self, pair: Pair) -> None:
        """Start (or resume) ``pair``. A preflight failure (disk space) is reported through ``download_failed``."""
        current = self.model.item(pair.id)
        if pair.id in self._running or (current is not None and current.state in STOPPING):
            return
        self._file_bytes[pair.id] = {}
        kept = current.bytes_done if current is not None and current.state is DownloadState.PAUSED else 0
        self._set(DownloadItem(pair, DownloadState.STARTING, bytes_done=kept,
                               message="resuming" if kept else "starting"))
        try:
            self._running[pair.id] = self.service.downloads.download_pair(pair, self._queue_for(pair.id))
        except DownloadError as exc:
            self._fail(pair.id, exc)
            return
        self._timer.start()

    def _queue_for(self, pair_id: str) -> Callable[[DownloadEvent], None]:
        """The callback for a child's reader thread: only a queue put, never a Qt call."""

        def put(ev: DownloadEvent) -> None:
            self._events.put((pair_id, ev))

        return put

    def resume(self, pair_id: str) -> None:
        """Resume a paused download, or retry a failed one (``DownloadItem.can_retry``)."""
        item = self.model.item(pair_id)
        if item is not None and (item.can_resume or item.can_retry):
            self.start(item.pair)

    def pause(self, pair_id: str) -> None:
        self._stop(pair_id, DownloadState.PAUSING)

    def cancel(self, pair_id: str) -> None:
        item = self.model.item(pair_id)
        if item is None:
            return
        if pair_id not in self._running:  # paused or failed: only the partial file is left
            if item.can_cancel:
                self._set(dataclasses.replace(item, state=DownloadState.CANCELLING))
                self._runner.submit(lambda: self.service.discard_partial(item.pair),
                                    lambda _r: self._on_stopped(pair_id, DownloadState.CANCELLED))
            return
        self._stop(pair_id, DownloadState.CANCELLING)

    def shutdown(self) -> None:
        """Stop every child (partial files kept) and wait for the stop tasks: the owner is closing."""
        self._timer.stop()
        running, self._running = dict(self._running), {}
        for dl in running.values():
            dl.cancel()
        self._runner.close(cancel_pending=True)

    @property
    def active(self) -> frozenset[str]:
        """Pair ids whose download is running or stopping."""
        return frozenset(it.pair.id for it in self.model.items if it.state in ACTIVE | STOPPING)

    # -- internals ------------------------------------------------------------------------------------------
    def _stop(self, pair_id: str, how: DownloadState) -> None:
        dl = self._running.get(pair_id)
        item = self.model.item(pair_id)
        if dl is None or item is None or item.state in STOPPING:
            return
        self._set(dataclasses.replace(item, state=how, speed=0.0, eta=None))
        final = DownloadState.PAUSED if how is DownloadState.PAUSING else DownloadState.CANCELLED

        def stop() -> None:
            dl.cancel()  # terminates the child and waits for it: not on the GUI thread
            if final is DownloadState.CANCELLED:
                self.service.discard_partial(dl.pair)

        self._runner.submit(stop, lambda _r: self._on_stopped(pair_id, final),
                            lambda exc: self._fail(pair_id, exc))

    def _on_stopped(self, pair_id: str, final: DownloadState) -> None:
        self._running.pop(pair_id, None)
        self._drain()  # events the child sent before it stopped
        item = self.model.item(pair_id)
        if item is None:
            return
        msg = ("paused; the partial file is kept and resuming continues from it" if final is DownloadState.PAUSED
               else "cancelled; the partial file was removed")
        self._set(dataclasses.replace(item, state=final, speed=0.0, eta=None, message=msg, resumable=True,
                                      bytes_done=item.bytes_done if final is DownloadState.PAUSED else 0))
        if final is DownloadState.PAUSED:
            self.download_paused.emit(pair_id)
        else:
            self.download_cancelled.emit(pair_id)

    def _set(self, item: DownloadItem) -> None:
        self.model.upsert(item)
        self.download_changed.emit(item.pair.id)

    def _fail(self, pair_id: str, exc: BaseException) -> None:
        self._running.pop(pair_id, None)
        item = self.model.item(pair_id)
        if item is not None:
            kind = exc.kind if isinstance(exc, DownloadError) else "internal"
            self._set(dataclasses.replace(item, state=DownloadState.FAILED, speed=0.0, eta=None,
                                          message=str(exc), error_kind=kind,
                                          resumable=isinstance(exc, DownloadError) and exc.resumable))
        self.download_failed.emit(pair_id, exc)

    def _on_timer_timeout(self) -> None:
        self._drain()
        for pair_id, dl in list(self._running.items()):
            item = self.model.item(pair_id)
            if item is None or item.state in STOPPING:
                continue
            try:
                dl.wait(0)
            except TimeoutError:
                continue
            except DownloadError as exc:
                self._fail(pair_id, exc)
                continue
            self._running.pop(pair_id, None)
            self._set(dataclasses.replace(item, state=DownloadState.DONE, bytes_done=item.total, speed=0.0,
                                          eta=None, message="installed and verified"))
            self.download_finished.emit(pair_id)
        if not self._running:
            self._timer.stop()

    def _drain(self) -> None:
        changed: dict[str, DownloadItem] = {}
        while True:
            try:
                pair_id, ev = self._events.get_nowait()
            except queue.Empty:
                break
            item = changed.get(pair_id) or self.model.item(pair_id)
            if item is None or item.state not in ACTIVE:
                continue  # a late event from a child being stopped
            changed[pair_id] = self._apply(item, ev)
        for item in changed.values():
            self._set(item)

    def _apply(self, item: DownloadItem, ev: DownloadEvent) -> DownloadItem:
        files = self._file_bytes.setdefault(item.pair.id, {})
        if ev.type == "error":
            # Failed now, not "downloading" with Pause on offer until the child has exited and its typed error
            # is read (``_on_timer_timeout`` then fills in the reason and whether it can resume).
            return dataclasses.replace(item, state=DownloadState.FAILED, speed=0.0, eta=None,
                                       message=ev.message or item.message)
        files[ev.file] = ev.total if ev.type == "done" else ev.bytes_done
        done = sum(files.values())
        state = {"verifying": DownloadState.VERIFYING, "done": DownloadState.RUNNING}.get(ev.type,
                                                                                          DownloadState.RUNNING)
        remaining = item.total - done
        eta = ev.eta
        if ev.speed > 0:
            eta = remaining / ev.speed  # over both files, not just the one in flight
        message = ev.message or (f"{ev.file}: {format_bytes(ev.bytes_done)} of {format_bytes(ev.total)}"
                                 if ev.total else ev.file)
        return dataclasses.replace(item, state=state, file=ev.file, bytes_done=done, speed=ev.speed, eta=eta,
                                   message=message)
