"""The one way the picker's tabs build their tables: whole rows, one at a time, no row numbers, Tab leaves."""

from __future__ import annotations

from PySide6.QtCore import QAbstractItemModel
from PySide6.QtWidgets import QAbstractItemView, QTableView, QWidget


def row_table(model: QAbstractItemModel, name: str, parent: QWidget) -> QTableView:
    """A table over ``model`` (object name ``name``) that selects one whole row; Tab moves on to the next widget
    and the arrow keys move inside (keyboard users are not trapped in it)."""
    table = QTableView(parent)
    table.setObjectName(name)
    table.setModel(model)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.verticalHeader().hide()
    table.setTabKeyNavigation(False)
    return table
