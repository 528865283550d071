"""Conversations: a thin list model over the store's summaries, and the side panel (search, new, rename, delete,
export).

Each row shows the title and, on a second line, when the conversation last changed ("14:05", "yesterday", "Mon",
"3 Nov", "3 Nov 2024") with its message count; a search result shows the best matching message as plain text
(``plain_snippet``: no Markdown fences, emphasis or link syntax, no search markers). Search uses the store's
full-text index (FTS5); a search result row is the conversation with the best snippet, and an empty result says so.
Delete is the store's soft delete, with an "Undo" bar for a few seconds (``restore_conversation``).
"""

from __future__ import annotations

import dataclasses
import enum
import html
import re
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QByteArray,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSize,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QFont,
    QFontMetrics,
    QKeySequence,
    QPainter,
    QPalette,
    QShortcut,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from outrider.history import ConversationSummary, SearchHit, UnreadableRecord

UNDO_MS = 8000
DATE_REFRESH_MS = 60_000  # how often the list repaints, so its relative dates follow the clock
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
NO_CONVERSATIONS_TEXT = "No conversations yet: type a message to start one."


def date_label(ts: float, now: float | None = None) -> str:
    """A short local date for the list: the time today, "yesterday", the weekday within a week, "3 Nov" this year,
    "3 Nov 2024" before. ``ts`` and ``now`` are Unix seconds (``now`` defaults to the clock)."""
    when = time.localtime(ts)
    today = time.localtime(time.time() if now is None else now)
    days = _day_number(today) - _day_number(when)
    if days == 0:
        return f"{when.tm_hour:02d}:{when.tm_min:02d}"
    if days == 1:
        return "yesterday"
    if 1 < days < 7:
        return _WEEKDAYS[when.tm_wday]
    if when.tm_year == today.tm_year and days > 0:
        return f"{when.tm_mday} {_MONTHS[when.tm_mon - 1]}"
    return f"{when.tm_mday} {_MONTHS[when.tm_mon - 1]} {when.tm_year}"


def full_date(ts: float) -> str:
    """The local date and time for a tooltip: ``2026-12-01 14:05``."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _day_number(t: time.struct_time) -> int:
    """Days since the epoch of a local date (comparable across months and years)."""
    return int(time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 12, 0, 0, 0, 0, -1)) // 86400)


_FENCE_RE = re.compile(r"```[\w+#.-]*|~~~[\w+#.-]*")
_LINK_RE = re.compile(r"!?\[([^\[\]]*)\]\([^()\s]*\)")
_TAG_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
_LINE_MARK_RE = re.compile(r"(^|\n)[ \t]*(?:#{1,6}[ \t]+|>[ \t]?|[-*+][ \t]+|\d+[.)][ \t]+)")
_EMPHASIS_RE = re.compile(r"\*\*|__|~~|(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])|(?<!\w)_(?=\S)|(?<=\S)_(?!\w)")
_SPACE_RE = re.compile(r"\s+")


def plain_snippet(snippet: str) -> str:
    """A search snippet as plain words: no code fences, backticks, emphasis, headings, list or quote marks, link
    or image syntax (the link text stays), HTML tags, nor the search index's ``[`` ``]`` match markers; runs of
    white space become one space."""
    text = _FENCE_RE.sub(" ", snippet)
    text = _LINK_RE.sub(r"\1", text)
    text = _TAG_RE.sub(" ", text)
    text = _LINE_MARK_RE.sub(r"\1", text)
    text = text.replace("`", "")
    text = _EMPHASIS_RE.sub("", text)
    text = text.replace("[", "").replace("]", "")
    return _SPACE_RE.sub(" ", text).strip()


class ConversationRole(enum.IntEnum):
    ID = Qt.ItemDataRole.UserRole + 1
    TITLE = Qt.ItemDataRole.UserRole + 2
    SNIPPET = Qt.ItemDataRole.UserRole + 3
    READABLE = Qt.ItemDataRole.UserRole + 4
    UPDATED_AT = Qt.ItemDataRole.UserRole + 5
    ROW = Qt.ItemDataRole.UserRole + 6  # the ConversationRow


@dataclasses.dataclass(frozen=True)
class ConversationRow:
    """One line of the list. ``snippet`` is plain text (search results only); ``updated_at`` is Unix seconds (the
    last change of the conversation, or the matching message's time for a search result; None when unknown)."""

    id: int
    title: str
    snippet: str = ""
    readable: bool = True
    message_count: int = 0
    updated_at: float | None = None

    @classmethod
    def of(cls, item: ConversationSummary | UnreadableRecord) -> ConversationRow:
        if isinstance(item, UnreadableRecord):
            return cls(item.id, f"(conversation {item.id} {item.label})", readable=False)
        return cls(item.id, item.title or "New chat", message_count=item.message_count, updated_at=item.updated_at)

    def detail(self, now: float | None = None, query: str = "") -> str:
        """The second line: when, and the message count or the matching words (starting shortly before the
        first word that matches ``query``, so a narrow list still shows it)."""
        parts = [date_label(self.updated_at, now)] if self.updated_at is not None else []
        if self.snippet:
            parts.append(focus_on_match(self.snippet, query))
        elif self.readable:
            parts.append(f"{self.message_count} message" + ("" if self.message_count == 1 else "s"))
        return " · ".join(parts)

    def display(self) -> str:
        """The plain text of the row: the title, and the detail line under it when there is one."""
        detail = self.detail()
        return f"{self.title}\n{detail}" if detail else self.title

    def tooltip(self) -> str:
        """The snippet (or title and count) and the full date: what was cut to fit the list."""
        text = self.snippet or f"{self.title} — {self.message_count} messages"
        if self.updated_at is None:
            return text
        return f"{text}\n{'matching message of' if self.snippet else 'last changed'} {full_date(self.updated_at)}"


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
    """Rows are ``ConversationRow``s; ``set_rows`` replaces them (the store is the source of truth)."""

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
        """One row per conversation, with its best hit's snippet as plain text (hits come best first)."""
        seen: dict[int, ConversationRow] = {}
        for hit in hits:
            if hit.conversation_id not in seen:
                seen[hit.conversation_id] = ConversationRow(hit.conversation_id, hit.conversation_title or "New chat",
                                                            snippet=plain_snippet(hit.snippet) or "…",
                                                            updated_at=hit.created_at)
        return list(seen.values())


def _query_pattern(query: str) -> re.Pattern[str] | None:
    """Words that start with a word of ``query`` (the index matches word prefixes); None for no words."""
    words = [w for w in re.findall(r"\w+", query) if w]
    if not words:
        return None
    return re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\w*", re.IGNORECASE)


def focus_on_match(text: str, query: str, words_before: int = 2) -> str:
    """``text`` from ``words_before`` words before its first word matching ``query`` (with "…" for what was cut),
    so the match is seen in a narrow list; ``text`` itself when nothing matches or little comes before."""
    pattern = _query_pattern(query)
    m = pattern.search(text) if pattern is not None else None
    if m is None:
        return text
    before = text[:m.start()].split()
    if len(before) <= words_before:
        return text
    return "…" + " ".join(before[-words_before:]) + " " + text[m.start():]


def highlight_words(text: str, query: str) -> str:
    """``text`` as HTML with each word that starts with a word of ``query`` in bold (what the search matched:
    the index matches word prefixes); the rest escaped."""
    pattern = _query_pattern(query)
    if pattern is None:
        return html.escape(text, quote=False)
    out: list[str] = []
    last = 0
    for m in pattern.finditer(text):
        out += [html.escape(text[last:m.start()], quote=False), f"<b>{html.escape(m.group(0), quote=False)}</b>"]
        last = m.end()
    return "".join([*out, html.escape(text[last:], quote=False)])


class ConversationDelegate(QStyledItemDelegate):
    """Paints a row as its title (bold) over a muted second line (date, count or snippet), with the words the
    search matched in bold; both lines are elided to the width, never wrapped.

    Attributes:
        query: returns the search text (the words to highlight).
    """

    def __init__(self, query: Callable[[], str], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.query = query

    def document(self, option: QStyleOptionViewItem, row: ConversationRow, width: int) -> QTextDocument:
        """The two lines as a rich-text document for ``width`` pixels (elided, highlighted, coloured)."""
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        palette = option.palette
        main = palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        muted = main if selected else palette.color(QPalette.ColorRole.PlaceholderText)
        bold = QFont(option.font)
        bold.setBold(True)
        title = QFontMetrics(bold).elidedText(row.title, Qt.TextElideMode.ElideRight, max(width, 1))
        query = self.query()
        detail = QFontMetrics(option.font).elidedText(row.detail(query=query), Qt.TextElideMode.ElideRight,
                                                      max(width, 1))
        doc = QTextDocument()  # no parent: freed with the paint that made it
        doc.setDefaultFont(option.font)
        doc.setDocumentMargin(0)
        doc.setHtml(f'<div style="white-space:pre; color:{main.name()}"><b>{html.escape(title, quote=False)}</b>'
                    + (f'<br><span style="color:{muted.name()}">{highlight_words(detail, query)}</span>'
                       if detail else "") + "</div>")
        return doc

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
              ) -> None:
        row = index.data(ConversationRole.ROW)
        if not isinstance(row, ConversationRow):
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        style = opt.widget.style() if opt.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, opt.widget).adjusted(2, 1, -2, -1)
        doc = self.document(opt, row, rect.width())
        painter.save()
        painter.translate(rect.topLeft())
        painter.setClipRect(QRect(0, 0, rect.width(), rect.height()))
        doc.documentLayout().draw(painter, QAbstractTextDocumentLayout.PaintContext())
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        row = index.data(ConversationRole.ROW)
        if not isinstance(row, ConversationRow):
            return super().sizeHint(option, index)
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        height = int(self.document(opt, row, 10_000).size().height()) + 6
        return QSize(max(opt.rect.width(), 100), height)


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
