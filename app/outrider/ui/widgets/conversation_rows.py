"""What one row of the conversation list says and how it is drawn (no model, no view).

``ConversationRow`` is a conversation (or a search hit) as the list shows it: a title over a second line saying
when it last changed ("14:05", "yesterday", "Mon", "3 Nov", "3 Nov 2024") and its message count, or, for a search
result, the best matching message as plain words (``plain_snippet``: no Markdown fences, emphasis or link syntax,
no search markers) starting near the match (``focus_on_match``). ``ConversationDelegate`` paints it: the title in
bold over a muted line, both elided to the width, the matched words in bold (``highlight_words``).
"""

from __future__ import annotations

import dataclasses
import enum
import html
import re
import time
from collections.abc import Callable

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, QRect, QSize, Qt
from PySide6.QtGui import QAbstractTextDocumentLayout, QFont, QFontMetrics, QPainter, QPalette, QTextDocument
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, QStyleOptionViewItem

from outrider.history import ConversationSummary, UnreadableRecord

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


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
    """Item-data roles of the conversation list (from ``Qt.UserRole + 1``)."""

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
        # From font metrics alone: Qt asks every row when the list is filled (2,000 conversations at start-up),
        # so no text layout here. Two lines (bold title, detail) unless the row has no detail line.
        bold = QFont(option.font)
        bold.setBold(True)
        height = QFontMetrics(bold).lineSpacing()
        if row.snippet or row.readable or row.updated_at is not None:
            height += QFontMetrics(option.font).lineSpacing()
        return QSize(max(option.rect.width(), 100), height + 6)
