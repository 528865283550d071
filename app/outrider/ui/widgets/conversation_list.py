"""Conversations: a thin list model over the store's summaries, and the side panel (search, new, rename, delete,
export).

What a row says and how it is drawn is ``conversation_rows`` (``ConversationRow``, ``ConversationDelegate``).
Search uses the store's full-text index (FTS5); a search result row is the conversation with the best snippet, and
an empty result says so. Delete is the store's soft delete, with an "Undo" bar for a few seconds
(``restore_conversation``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QByteArray,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from outrider.history import SearchHit
from outrider.ui.widgets.conversation_rows import (
    ConversationDelegate,
    ConversationRole,
    ConversationRow,
    plain_snippet,
)

__all__ = [  # the row types are re-exported: the list's users need not know where rows are made
    "DATE_REFRESH_MS", "NO_CONVERSATIONS_TEXT", "UNDO_MS", "ConversationListModel", "ConversationListView",
    "ConversationRole", "ConversationRow",
]

UNDO_MS = 8000
DATE_REFRESH_MS = 60_000  # how often the list repaints, so its relative dates follow the clock
NO_CONVERSATIONS_TEXT = "No conversations yet: type a message to start one."


# What each role of the list shows, by row (one table instead of a chain of role tests).
_ROLE_DATA: dict[int, Callable[[ConversationRow], Any]] = {
    Qt.ItemDataRole.DisplayRole: ConversationRow.display,
    Qt.ItemDataRole.ToolTipRole: ConversationRow.tooltip,
    Qt.ItemDataRole.AccessibleTextRole: lambda r: f"{r.title}, {r.detail()}",
    ConversationRole.ID: lambda r: r.id,
    ConversationRole.TITLE: lambda r: r.title,
    ConversationRole.SNIPPET: lambda r: r.snippet,
    ConversationRole.READABLE: lambda r: r.readable,
    ConversationRole.UPDATED_AT: lambda r: r.updated_at,
    ConversationRole.ROW: lambda r: r,
}
_ROLE_NAMES = {Qt.ItemDataRole.DisplayRole: b"display", ConversationRole.ID: b"conversationId",
               ConversationRole.TITLE: b"title", ConversationRole.SNIPPET: b"snippet",
               ConversationRole.READABLE: b"readable", ConversationRole.UPDATED_AT: b"updatedAt",
               ConversationRole.ROW: b"row"}


class ConversationListModel(QAbstractListModel):
    """Rows are ``ConversationRow``s; ``set_rows`` brings them to the store's list (the source of truth) by row
    changes, never a reset: rows gone are removed, new ones inserted, a conversation that moved (a reply made it
    the newest) is moved and a changed one updated — so the view keeps its selection, scroll position and current
    row, and redraws only what changed."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: list[ConversationRow] = []

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        getter = _ROLE_DATA.get(role)
        return None if getter is None else getter(self._rows[index.row()])

    def roleNames(self) -> dict[int, QByteArray]:
        return {int(k): QByteArray(v) for k, v in _ROLE_NAMES.items()}

    def set_rows(self, rows: list[ConversationRow]) -> None:
        """Make the rows ``rows`` (a conversation listed twice keeps its first row) with few row signals:
        removals, then, top down, a move or an insertion where the row at a position is not the one wanted,
        ``dataChanged`` where it is but changed."""
        wanted: list[ConversationRow] = []
        wanted_ids: set[int] = set()
        for row in rows:
            if row.id not in wanted_ids:
                wanted_ids.add(row.id)
                wanted.append(row)
        for i in range(len(self._rows) - 1, -1, -1):  # bottom up: the indices above stay valid
            if self._rows[i].id not in wanted_ids:
                self.beginRemoveRows(QModelIndex(), i, i)
                del self._rows[i]
                self.endRemoveRows()
        for i, row in enumerate(wanted):
            if i < len(self._rows) and self._rows[i].id == row.id:
                if self._rows[i] != row:
                    self._rows[i] = row
                    self.dataChanged.emit(self.index(i, 0), self.index(i, 0))
                continue
            j = self.row_of(row.id, start=i + 1)
            if j >= 0:
                self.beginMoveRows(QModelIndex(), j, j, QModelIndex(), i)
                self._rows.insert(i, self._rows.pop(j))
                self.endMoveRows()
                if self._rows[i] != row:
                    self._rows[i] = row
                    self.dataChanged.emit(self.index(i, 0), self.index(i, 0))
            else:
                self.beginInsertRows(QModelIndex(), i, i)
                self._rows.insert(i, row)
                self.endInsertRows()

    def row_of(self, conversation_id: int, start: int = 0) -> int:
        """The row of ``conversation_id`` (from row ``start`` on), or -1."""
        for i in range(start, len(self._rows)):
            if self._rows[i].id == conversation_id:
                return i
        return -1

    def rows(self) -> list[ConversationRow]:
        return list(self._rows)

    @staticmethod
    def rows_from_hits(hits: list[SearchHit]) -> list[ConversationRow]:
        """One row per conversation, with its best hit's snippet as plain text (hits come best first)."""
        seen: dict[int, ConversationRow] = {}
        for hit in hits:
            if hit.conversation_id not in seen:
                seen[hit.conversation_id] = ConversationRow(hit.conversation_id, hit.conversation_title or "New chat",
                                                            snippet=plain_snippet(hit.snippet) or "…",
                                                            updated_at=hit.created_at)
        return list(seen.values())


class ConversationListView(QWidget):
    """Search field, list (with a line saying why it is empty) and buttons; a context menu on a conversation
    offers Export, Rename and Delete; in the list, F2 renames and Delete deletes the selected conversation.

    Signals:
        conversation_selected(int): open this conversation.
        new_requested(): start a new conversation.
        rename_requested(int, str), delete_requested(int), restore_requested(int): list actions.
        export_requested(int): save this conversation to a file (Markdown or JSON).
        search_changed(str): the search text changed (empty: show all).
    """

    conversation_selected = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    restore_requested = Signal(int)
    export_requested = Signal(int)
    search_changed = Signal(str)

    def __init__(self, model: ConversationListModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.search = QLineEdit(self)
        self.search.setPlaceholderText("Search all messages")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("Full-text search over every message of every conversation")
        self.search.setAccessibleName("Search all messages")
        self.search.textChanged.connect(self.search_changed)
        self.list = QListView(self)
        self.list.setModel(model)
        self.delegate = ConversationDelegate(self.search.text, self.list)
        self.list.setItemDelegate(self.delegate)
        self.list.setAccessibleName("Conversations")
        self.list.setUniformItemSizes(False)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)  # long titles end in "…", no sideways scrolling
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._on_list_context_menu_requested)
        self.list.activated.connect(self._on_list_activated)
        self.list.clicked.connect(self._on_list_activated)
        self.empty_label = QLabel(NO_CONVERSATIONS_TEXT, self)
        self.empty_label.setObjectName("conversationsEmpty")
        self.empty_label.setWordWrap(True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.new_button = QPushButton("New", self)
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        self.rename_button = QPushButton("Rename", self)
        self.rename_button.setToolTip("Rename the selected conversation (F2 in the list)")
        self.rename_button.clicked.connect(self._on_rename_clicked)
        self.delete_button = QPushButton("Delete", self)
        self.delete_button.setToolTip("Delete the selected conversation (Delete in the list; can be undone for a "
                                      "few seconds)")
        self.delete_button.clicked.connect(self._on_delete_clicked)
        for key, slot in ((Qt.Key.Key_F2, self._on_rename_clicked), (Qt.Key.Key_Delete, self._on_delete_clicked)):
            shortcut = QShortcut(QKeySequence(key), self.list)
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)  # only while the list has the focus
            shortcut.activated.connect(slot)
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
        layout.addWidget(self.empty_label)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.undo_bar)
        layout.addLayout(buttons)
        self.setTabOrder(self.search, self.list)
        self.setTabOrder(self.list, self.new_button)
        self.setMinimumWidth(200)
        self._clock = QTimer(self)  # "14:05" becomes "yesterday" after midnight: the labels are made when painted
        self._clock.setInterval(DATE_REFRESH_MS)
        self._clock.timeout.connect(self.list.viewport().update)
        self._clock.start()
        model.modelReset.connect(self._update_empty_label)
        model.rowsInserted.connect(self._update_empty_label)
        model.rowsRemoved.connect(self._update_empty_label)
        # An empty list stays empty (no row signal) while the search changes: the line names the new words. This
        # runs after ``search_changed`` (connected first), once the list has the new search's rows.
        self.search.textChanged.connect(self._update_empty_label)
        self._update_empty_label()

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

    def empty_text(self) -> str:
        """Why the list is empty ("" when it is not): no match for the search, or no conversation yet."""
        if self.model.rowCount():
            return ""
        query = self.search.text().strip()
        if query:
            return f"No message matches “{query}”. Try other words, or clear the search to see every conversation."
        return NO_CONVERSATIONS_TEXT

    def context_menu(self, index: QModelIndex) -> QMenu | None:
        """The menu of the conversation at ``index`` (None when ``index`` is not a readable conversation)."""
        if not index.isValid() or not self.model.data(index, ConversationRole.READABLE):
            return None
        self.list.setCurrentIndex(index)
        cid = int(self.model.data(index, ConversationRole.ID))
        menu = QMenu(self)
        menu.addAction("&Export…", lambda: self.export_requested.emit(cid))
        menu.addAction("&Rename…", self._on_rename_clicked).setShortcut(QKeySequence(Qt.Key.Key_F2))
        menu.addAction("&Delete", self._on_delete_clicked).setShortcut(QKeySequence(Qt.Key.Key_Delete))
        return menu

    @Slot()
    def _update_empty_label(self) -> None:
        text = self.empty_text()
        self.empty_label.setText(text)
        self.empty_label.setVisible(bool(text))

    @Slot(QPoint)
    def _on_list_context_menu_requested(self, pos: QPoint) -> None:
        menu = self.context_menu(self.list.indexAt(pos))
        if menu is not None:
            menu.exec(self.list.viewport().mapToGlobal(pos))
            menu.deleteLater()

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
        text = self._ask_title(title)
        if text:
            self.rename_requested.emit(cid, text)

    RENAME_WIDTH = 420  # px: a title of a few words fits whole (the platform's default dialog was ~170 px)

    def _ask_title(self, title: str) -> str | None:
        """The new title the user typed (stripped), or None when cancelled or left blank."""
        dialog = QInputDialog(self)
        dialog.setWindowTitle("Rename conversation")
        dialog.setLabelText("Title:")
        dialog.setTextEchoMode(QLineEdit.EchoMode.Normal)
        dialog.setTextValue(title)
        dialog.setMinimumWidth(self.RENAME_WIDTH)
        if dialog.exec() != QInputDialog.DialogCode.Accepted:
            return None
        return dialog.textValue().strip() or None

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
