"""Light and dark themes: a QPalette, a QSS file (``resources/<name>.qss``) and the document colours.

Resources are read with ``importlib.resources`` so they work from a wheel, a zip or a frozen build.
Provenance colours are chosen per theme for contrast with the text colour on both backgrounds.
"""

from __future__ import annotations

import dataclasses
import importlib.resources

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QStyleOption, QWidget

RESOURCES = "outrider.ui.resources"


@dataclasses.dataclass(frozen=True)
class ThemeColours:
    """Colours the chat document and charts use (hex strings)."""

    name: str
    text: str
    muted: str
    background: str
    draft_bg: str  # accepted draft tokens
    target_bg: str  # target tokens
    code_bg: str
    link: str
    pygments_style: str
    chart_tps: str
    chart_accept: str
    warning: str
    # Accepted draft tokens by drafter (``draft_bg`` is the draft model's and an unnamed drafter's): hues apart
    # from the green and the orange, light enough (dark enough in the dark theme) for the text colour on them.
    lookup_bg: str = "#cfe2ff"  # prompt lookup
    history_bg: str = "#e6d8f5"  # history lookup
    mtp_bg: str = "#c8ece6"  # MTP heads
    focus: str = "#1a73e8"  # the keyboard focus frame (``FocusFrameStyle``; the QSS :focus borders use it too)

    def provenance_bg(self, kind: str) -> str:
        """The background of a token of this provenance (``engine.events.PROVENANCE``)."""
        return {"target": self.target_bg, "lookup": self.lookup_bg, "history": self.history_bg,
                "mtp": self.mtp_bg}.get(kind, self.draft_bg)


LIGHT = ThemeColours("light", "#1f1f1f", "#5f6368", "#ffffff", "#c6efce", "#fde9c8", "#f3f4f6", "#1a56c4",
                     "friendly", "#1a73e8", "#188038", "#b06000")
DARK = ThemeColours("dark", "#e3e3e3", "#9aa0a6", "#1e1f22", "#1f5130", "#5a4317", "#2b2d31", "#8ab4f8",
                    "monokai", "#8ab4f8", "#81c995", "#fdd663", lookup_bg="#1c3a63", history_bg="#45305e",
                    mtp_bg="#17464a", focus="#8ab4f8")
THEMES = {"light": LIGHT, "dark": DARK}


def colours(name: str) -> ThemeColours:
    return THEMES.get(name, LIGHT)


def read_resource(name: str) -> str:
    return importlib.resources.files(RESOURCES).joinpath(name).read_text(encoding="utf-8")


def app_icon() -> QIcon:
    data = importlib.resources.files(RESOURCES).joinpath("outrider.svg").read_bytes()
    pixmap = QPixmap()
    pixmap.loadFromData(data, "SVG")
    return QIcon(pixmap)


def _palette(c: ThemeColours) -> QPalette:
    pal = QPalette()
    if c.name == "dark":
        window, base, button = QColor("#26272b"), QColor(c.background), QColor("#303136")
    else:
        window, base, button = QColor("#f5f5f7"), QColor(c.background), QColor("#ececef")
    text = QColor(c.text)
    for role, colour in ((QPalette.ColorRole.Window, window), (QPalette.ColorRole.Base, base),
                         (QPalette.ColorRole.AlternateBase, button), (QPalette.ColorRole.Button, button),
                         (QPalette.ColorRole.WindowText, text), (QPalette.ColorRole.Text, text),
                         (QPalette.ColorRole.ButtonText, text), (QPalette.ColorRole.ToolTipBase, base),
                         (QPalette.ColorRole.ToolTipText, text), (QPalette.ColorRole.Link, QColor(c.link)),
                         (QPalette.ColorRole.PlaceholderText, QColor(c.muted))):
        pal.setColor(role, colour)
    # Selections: white on a mid blue in both themes (reads whichever text colour a style picks).
    pal.setColor(QPalette.ColorRole.Highlight, QColor("#35558f" if c.name == "dark" else "#1a56c4"))
    pal.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    _disabled(pal, c, window)
    return pal


def _disabled(pal: QPalette, c: ThemeColours, window: QColor) -> None:
    """What cannot be used looks it: dimmed text, fields flat with the window, a grey selection.

    ``setColor(role, colour)`` above sets every colour group, the disabled one too, so a disabled menu item,
    button or field looked exactly like an enabled one; the disabled group is set here after it, as the
    platform's own palettes do (text at about half the contrast, no accent)."""
    disabled = QPalette.ColorGroup.Disabled
    dim = QColor("#6f7278" if c.name == "dark" else "#a2a5ab")
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText,
                 QPalette.ColorRole.PlaceholderText):
        pal.setColor(disabled, role, dim)
    pal.setColor(disabled, QPalette.ColorRole.Base, window)
    pal.setColor(disabled, QPalette.ColorRole.Button, window)
    pal.setColor(disabled, QPalette.ColorRole.Link, dim)
    pal.setColor(disabled, QPalette.ColorRole.Highlight, QColor("#4a4c52" if c.name == "dark" else "#c4c7cc"))
    pal.setColor(disabled, QPalette.ColorRole.HighlightedText, QColor(c.text))


FOCUS_PEN_PX = 2


class FocusFrameStyle(QProxyStyle):
    """Fusion, with the keyboard focus of buttons, check boxes, tabs and table cells drawn as a solid 2-px frame in
    the theme's focus colour.

    Fusion draws that frame in its selection colour, darkened, at 30-80 of 255 alpha: on the dark theme's
    #26272b window it was all but invisible (contrast about 1.3:1; a focus indicator needs 3:1). Like Fusion's,
    the frame shows only after the keyboard moved the focus (a click does not frame the button clicked).
    """

    def __init__(self, focus: str) -> None:
        super().__init__("Fusion")
        self.focus_colour = QColor(focus)

    def drawPrimitive(self, element: QStyle.PrimitiveElement, option: QStyleOption, painter: QPainter,
                      widget: QWidget | None = None) -> None:  # Qt override: check boxes, tabs, table cells
        if element != QStyle.PrimitiveElement.PE_FrameFocusRect:
            super().drawPrimitive(element, option, painter, widget)
            return
        if option.state & QStyle.StateFlag.State_KeyboardFocusChange:
            self._frame(painter, QRectF(option.rect))

    def drawControl(self, element: QStyle.ControlElement, option: QStyleOption, painter: QPainter,
                    widget: QWidget | None = None) -> None:  # Qt override: push buttons
        super().drawControl(element, option, painter, widget)
        # Fusion marks a focused button only by the faint outline of its bevel (no focus rectangle): framed here.
        focused = QStyle.StateFlag.State_HasFocus | QStyle.StateFlag.State_KeyboardFocusChange
        if element == QStyle.ControlElement.CE_PushButton and option.state & focused == focused:
            self._frame(painter, QRectF(option.rect))

    def _frame(self, painter: QPainter, rect: QRectF) -> None:
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setPen(QPen(self.focus_colour, FOCUS_PEN_PX))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        half = FOCUS_PEN_PX / 2
        painter.drawRoundedRect(rect.adjusted(half, half, -half, -half), 2, 2)
        painter.restore()


def apply_theme(app: QApplication, name: str) -> ThemeColours:
    c = colours(name)
    app.setStyle(FocusFrameStyle(c.focus))
    app.setPalette(_palette(c))
    app.setStyleSheet(read_resource(f"{c.name}.qss"))
    return c
