"""The Qt boilerplate shared by Outrider's table models: row/column counts and header titles with tooltips.

A subclass keeps its rows in whatever Python objects it adapts; it says how many there are (``_row_count``) and
what its columns are called (``headers``: one (title, tooltip) per column), and implements ``data``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

Index = QModelIndex | QPersistentModelIndex
ROOT = QModelIndex()


class HeaderedTableModel(QAbstractTableModel):
    """A flat table: ``headers`` name the columns (title, tooltip); ``_row_count`` gives the rows."""

    headers: ClassVar[tuple[tuple[str, str], ...]] = ()

    def _row_count(self) -> int:
        raise NotImplementedError

    def is_valid(self, index: Index) -> bool:
        """An index inside this table (flat: no children)."""
        return index.isValid() and index.row() < self._row_count() and index.column() < len(self.headers)

    def rowCount(self, parent: Index = ROOT) -> int:
        return 0 if parent.isValid() else self._row_count()

    def columnCount(self, parent: Index = ROOT) -> int:
        return 0 if parent.isValid() else len(self.headers)

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(self.headers):
            return None
        title, tip = self.headers[section]
        if role == Qt.ItemDataRole.DisplayRole:
            return title
        if role == Qt.ItemDataRole.ToolTipRole and tip:
            return tip
        return None
