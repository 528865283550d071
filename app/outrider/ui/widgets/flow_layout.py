"""A layout that places its widgets in a row and wraps them onto the next line when the row is too narrow.

Qt has none built in (its documentation carries one as an example). A row of controls in a ``QHBoxLayout`` makes
the window as wide as the whole row: the reply controls (provenance toggle, the colour legend, four buttons) alone
kept the window from being narrower than ~1,100 px, so it could not be tiled to half a 1920-px screen. Here the
narrowest the row can be is its widest single item.
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QSizePolicy, QWidget


class FlowLayout(QLayout):
    """Items left to right, wrapping; ``right_align_last``: the last item sits at the right end of its line (the
    action buttons, where a user expects them)."""

    def __init__(self, parent: QWidget | None = None, *, spacing: int = 6, right_align_last: bool = False) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._gap = spacing
        self.right_align_last = right_align_last
        self.setContentsMargins(QMargins(0, 0, 0, 0))

    # -- QLayout's interface --------------------------------------------------------------------------------------
    def addItem(self, item: QLayoutItem) -> None:
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._arrange(QRect(0, 0, width, 0), place=False)

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._arrange(rect, place=True)

    def sizeHint(self) -> QSize:
        """One line of every item (what the row wants when there is room)."""
        visible = self._visible()
        width = sum(i.sizeHint().width() for i in visible) + self._gap * max(0, len(visible) - 1)
        height = max((i.sizeHint().height() for i in visible), default=0)
        m = self.contentsMargins()
        return QSize(width + m.left() + m.right(), height + m.top() + m.bottom())

    def minimumSize(self) -> QSize:
        """The widest single item: anything narrower wraps."""
        size = QSize()
        for item in self._visible():
            size = size.expandedTo(item.minimumSize())
        m = self.contentsMargins()
        return size + QSize(m.left() + m.right(), m.top() + m.bottom())

    # -- placing ----------------------------------------------------------------------------------------------------
    def _visible(self) -> list[QLayoutItem]:
        return [i for i in self._items if (w := i.widget()) is None or not w.isHidden()]

    def _arrange(self, rect: QRect, *, place: bool) -> int:
        """Lay the items out in ``rect`` (or only measure); returns the height used."""
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        lines: list[list[tuple[QLayoutItem, QSize]]] = [[]]
        used = 0
        for item in self._visible():
            hint = item.sizeHint()
            width = min(hint.width(), area.width())
            if lines[-1] and used + self._gap + width > area.width():
                lines.append([])
                used = 0
            used += (self._gap if lines[-1] else 0) + width
            lines[-1].append((item, QSize(width, hint.height())))
        y = area.y()
        for n, line in enumerate(lines):
            if not line:
                continue
            height = max(size.height() for _, size in line)
            x = area.x()
            for i, (item, size) in enumerate(line):
                last = n == len(lines) - 1 and i == len(line) - 1
                if last and self.right_align_last:
                    x = max(x, area.right() + 1 - size.width())
                if place:
                    top = y + (height - size.height()) // 2
                    item.setGeometry(QRect(QPoint(x, top), size))
                x += size.width() + self._gap
            y += height + self._gap
        return max(0, y - self._gap - area.y()) + m.top() + m.bottom()


def wrapping_policy() -> QSizePolicy:
    """For a widget holding a FlowLayout: its height follows its width (more lines when narrow)."""
    policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
    policy.setHeightForWidth(True)
    return policy
