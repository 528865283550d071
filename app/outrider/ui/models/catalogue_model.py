"""The Qt item models of the pair picker: thin adapters over the snapshots ``CatalogueService`` produces.

The service (``outrider.catalogue.service``: pair statuses, memory fit, compatibility reasons) has no Qt; its
methods may block and run off the GUI thread through ``QtTaskRunner``. These models only hold what it returned.
One source of truth per domain, proxies per view, roles from ``Qt.UserRole + 1``:

* ``CatalogueModel``: one row per catalogue pair (``PairRow``), ``CatalogueFilterProxy`` over it;
* ``FoundFilesModel``: GGUF files found on disk (discovery).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from PySide6.QtCore import (
    QByteArray,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)

from outrider.catalogue import FoundFile
from outrider.catalogue.memory import MemoryInfo, describe_memory, format_bytes
from outrider.catalogue.service import PairRow, PairStatus
from outrider.ui.models.table_model import HeaderedTableModel

Index = QModelIndex | QPersistentModelIndex


# ============================================================================================ item models ==

_PERCENT_GAIN = re.compile(r"^\s*\+\s*(\d+(?:\.\d+)?)\s*%\s*")


def published_speedup_text(text: str) -> str:
    """A published speed-up as a factor, the way Outrider shows every speed-up: "+129% (RTX 3090)" reads
    "2.29× (RTX 3090)". Other published forms ("4.4 -> 5-9 tok/s") are shown as published."""
    m = _PERCENT_GAIN.match(text)
    if m is None:
        return text
    rest = text[m.end():]
    return f"{1 + float(m.group(1)) / 100:.2f}×" + (f" {rest}" if rest else "")

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
    CatalogueColumn.Status: ("State", "installed, downloadable, downloading, paused, download failed (why in "
                                      "the tooltip; Retry download) or incompatible"),
    CatalogueColumn.Size: ("Download", "Both files together"),
    CatalogueColumn.Memory: ("Memory", "Weights of both models + their KV caches at the pair's default context, "
                                       "compared with what is free (VRAM when known, else RAM)"),
    CatalogueColumn.Licence: ("Licence", "Licence of the files; 'gated' needs an approved Hugging Face token"),
    CatalogueColumn.Speedup: ("Published speed-up", "A speed-up someone measured and published, with its source; "
                                                    "yours depends on hardware and prompts: benchmark it"),
}

_STATUS_ORDER = {s: i for i, s in enumerate(PairStatus)}


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
            return r.memory_text
        if col is CatalogueColumn.Licence:
            return p.licence + (" · gated" if p.gated else "")
        return published_speedup_text(p.speedup) or "—"

    def _tooltip(self, r: PairRow, col: CatalogueColumn) -> str:
        p = r.pair
        if col is CatalogueColumn.Pair:
            return (f"{p.name}\n{p.id}\ntarget: {p.target.file}\ndrafter: {p.drafter_text}\nuse: {', '.join(p.tags)}"
                    + "".join(f"\n{note}" for note in p.architecture_notes)
                    + (f"\n{p.status_text}" if p.status_text else ""))
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
            if not p.speedup:
                return "nothing published for this pair yet"
            return f"{published_speedup_text(p.speedup)}\npublished at {p.speedup_source}"
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
               "folder": "your folder", "store": "Outrider's downloads",
               "package": "installed with Outrider"}

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
