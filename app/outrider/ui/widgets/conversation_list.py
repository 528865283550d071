"""Conversations: a thin list model over the store's summaries, and the side panel (search, new, rename, delete).

Search uses the store's full-text index (FTS5); a search result row is the conversation with the best snippet.
Delete is the store's soft delete, with an "Undo" bar for a few seconds (``restore_conversation``).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from PySide6.QtCore import QAbstractListModel, QByteArray, QModelIndex, QPersistentModelIndex, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListView,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from outrider.history import ConversationSummary, SearchHit, UnreadableRecord

UNDO_MS = 8000


class ConversationRole(enum.IntEnum):
    ID = Qt.ItemDataRole.UserRole + 1
    TITLE = Qt.ItemDataRole.UserRole + 2
    SNIPPET = Qt.ItemDataRole.UserRole + 3
    READABLE = Qt.ItemDataRole.UserRole + 4


@dataclasses.dataclass(frozen=True)
class ConversationRow:
    id: int
    title: str
    snippet: str = ""
    readable: bool = True
    message_count: int = 0

    @classmethod
    def of(cls, item: ConversationSummary | UnreadableRecord) -> ConversationRow:
        if isinstance(item, UnreadableRecord):
            return cls(item.id, f"(conversation {item.id} {item.label})", readable=False)
        return cls(item.id, item.title or "New chat", message_count=item.message_count)


class ConversationListModel(QAbstractListModel):
    """Rows are ``ConversationRow``s; ``set_rows`` replaces them (the store is the source of truth)."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: list[ConversationRow] = []

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return row.title if not row.snippet else f"{row.title}\n{row.snippet}"
        if role == Qt.ItemDataRole.ToolTipRole:
            return row.snippet or f"{row.title} — {row.message_count} messages"
        if role == ConversationRole.ID:
            return row.id
        if role == ConversationRole.TITLE:
            return row.title
        if role == ConversationRole.SNIPPET:
            return row.snippet
        if role == ConversationRole.READABLE:
            return row.readable
        return None

    def roleNames(self) -> dict[int, QByteArray]:
        names = {Qt.ItemDataRole.DisplayRole: b"display", ConversationRole.ID: b"conversationId",
                 ConversationRole.TITLE: b"title", ConversationRole.SNIPPET: b"snippet",
                 ConversationRole.READABLE: b"readable"}
        return {int(k): QByteArray(v) for k, v in names.items()}

    def set_rows(self, rows: list[ConversationRow]) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self.endResetModel()

    def row_of(self, conversation_id: int) -> int:
        for i, row in enumerate(self._rows):
            if row.id == conversation_id:
                return i
        return -1

    def rows(self) -> list[ConversationRow]:
        return list(self._rows)

    @staticmethod
    def rows_from_hits(hits: list[SearchHit]) -> list[ConversationRow]:
        seen: dict[int, ConversationRow] = {}
        for hit in hits:
            if hit.conversation_id not in seen:
                seen[hit.conversation_id] = ConversationRow(hit.conversation_id, hit.conversation_title or "New chat",
                                                            snippet=hit.snippet)
        return list(seen.values())


class ConversationListView(QWidget):
    """Search field, list and buttons.

    Signals:
        conversation_selected(int): open this conversation.
        new_requested(): start a new conversation.
        rename_requested(int, str), delete_requested(int), restore_requested(int): list actions.
        search_changed(str): the search text changed (empty: show all).
    """

    conversation_selected = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    restore_requested = Signal(int)
    search_changed = Signal(str)

    def __init__(self, model: ConversationListModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.search = QLineEdit(self)
        self.search.setPlaceholderText("Search all messages")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("Full-text search over every message of every conversation")
        self.search.textChanged.connect(self.search_changed)
        self.list = QListView(self)
        self.list.setModel(model)
        self.list.setAccessibleName("Conversations")
        self.list.setUniformItemSizes(False)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)  # long titles end in "…", no sideways scrolling
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.activated.connect(self._on_list_activated)
        self.list.clicked.connect(self._on_list_activated)
        self.new_button = QPushButton("New", self)
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        self.rename_button = QPushButton("Rename", self)
        self.rename_button.clicked.connect(self._on_rename_clicked)
        self.delete_button = QPushButton("Delete", self)
        self.delete_button.setToolTip("Delete the selected conversation (can be undone for a few seconds)")
        self.delete_button.clicked.connect(self._on_delete_clicked)
        self.undo_bar = QWidget(self)
        ul = QHBoxLayout(self.undo_bar)
        ul.setContentsMargins(0, 0, 0, 0)
        self.undo_label = QLabel("", self.undo_bar)
        self.undo_button = QPushButton("Undo", self.undo_bar)
        self.undo_button.clicked.connect(self._on_undo_clicked)
        ul.addWidget(self.undo_label, 1)
        ul.addWidget(self.undo_button)
        self.undo_bar.hide()
        self._deleted: int | None = None
        self._undo_timer = QTimer(self)
        self._undo_timer.setSingleShot(True)
        self._undo_timer.setInterval(UNDO_MS)
        self._undo_timer.timeout.connect(self.undo_bar.hide)

        buttons = QHBoxLayout()
        for b in (self.new_button, self.rename_button, self.delete_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.undo_bar)
        layout.addLayout(buttons)
        self.setTabOrder(self.search, self.list)
        self.setTabOrder(self.list, self.new_button)
        self.setMinimumWidth(200)

    def selected_id(self) -> int | None:
        index = self.list.currentIndex()
        if not index.isValid():
            return None
        value = self.model.data(index, ConversationRole.ID)
        return int(value) if value is not None else None

    def select(self, conversation_id: int | None) -> None:
        row = -1 if conversation_id is None else self.model.row_of(conversation_id)
        if row >= 0:
            self.list.setCurrentIndex(self.model.index(row, 0))
        else:
            self.list.clearSelection()

    @Slot(QModelIndex)
    def _on_list_activated(self, index: QModelIndex) -> None:
        value = self.model.data(index, ConversationRole.ID)
        if value is not None and self.model.data(index, ConversationRole.READABLE):
            self.conversation_selected.emit(int(value))

    @Slot()
    def _on_rename_clicked(self) -> None:
        cid = self.selected_id()
        if cid is None:
            return
        title = str(self.model.data(self.list.currentIndex(), ConversationRole.TITLE) or "")
        text, ok = QInputDialog.getText(self, "Rename conversation", "Title:", QLineEdit.EchoMode.Normal, title)
        if ok and text.strip():
            self.rename_requested.emit(cid, text.strip())

    @Slot()
    def _on_delete_clicked(self) -> None:
        cid = self.selected_id()
        if cid is None:
            return
        title = str(self.model.data(self.list.currentIndex(), ConversationRole.TITLE) or "")
        self._deleted = cid
        self.undo_label.setText(f"Deleted “{title}”")
        self.undo_bar.show()
        self._undo_timer.start()
        self.delete_requested.emit(cid)

    @Slot()
    def _on_undo_clicked(self) -> None:
        if self._deleted is not None:
            self.restore_requested.emit(self._deleted)
        self._deleted = None
        self.undo_bar.hide()
