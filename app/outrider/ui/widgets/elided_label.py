"""A one-line label that elides its text at the right instead of being cut off or widening its window."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class ElidedLabel(QLabel):
    """A label that shows as much of its text as fits, ending in "…", with the whole text in its tooltip.

    A plain ``QLabel`` asks for its whole text's width as its minimum: in a status bar that held a 960-px window
    wider than the screen half it was tiled to, and the text was cut at the window's right edge. This one asks
    for no minimum width and elides.

    ``text()`` is the whole text (what was set); ``shown_text()`` what is drawn. ``explanation`` (optional) is
    added to the tooltip under the whole text.
    """

    def __init__(self, text: str = "", parent: QWidget | None = None, *, explanation: str = "") -> None:
        super().__init__(parent)
        self._full = ""
        self._explanation = explanation
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setText(text)

    def setText(self, text: str) -> None:  # Qt override: keep the whole text, draw what fits
        self._full = text
        self._elide()

    def text(self) -> str:  # Qt override: the whole text, whatever is drawn
        return self._full

    def shown_text(self) -> str:
        """The text as drawn (elided when the label is narrower than it)."""
        return QLabel.text(self)

    def sizeHint(self) -> QSize:  # Qt override: room for the whole text when there is some
        m = self.contentsMargins()
        return QSize(self.fontMetrics().horizontalAdvance(self._full) + m.left() + m.right() + 2,
                     super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:  # Qt override: any width; the text is elided to fit
        return QSize(0, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # Qt override
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        width = max(0, self.contentsRect().width())
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, width)
        if shown != QLabel.text(self):
            QLabel.setText(self, shown)
        tip = self._full if shown != self._full else ""
        if self._explanation:
            tip = f"{tip}\n\n{self._explanation}" if tip else self._explanation
        self.setToolTip(tip)
