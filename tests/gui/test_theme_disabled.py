"""Disabled controls look disabled in both themes. Before: ``ui/theme.py`` set one colour for every palette group,
so a disabled menu item, "Use these files", a settings field that does not apply or the benchmark's Stop were
drawn exactly like enabled ones (these tests failed: the two renderings were identical)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import QApplication, QLineEdit, QPushButton, QWidget

from outrider.ui.theme import apply_theme


def _luminance(c: QColor) -> float:
    def channel(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())


def _contrast(a: QColor, b: QColor) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.fixture
def themed(qtbot: Any) -> Iterator[QApplication]:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    palette, sheet, style = app.palette(), app.styleSheet(), app.style().name()
    yield app
    app.setStyle(style)
    app.setPalette(palette)
    app.setStyleSheet(sheet)


def _render(widget: QWidget) -> QImage:
    widget.resize(widget.sizeHint())
    return widget.grab().toImage()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_disabled_text_has_about_half_the_contrast(themed: QApplication, theme: str) -> None:
    apply_theme(themed, theme)
    pal = themed.palette()
    window = pal.color(QPalette.ColorGroup.Active, QPalette.ColorRole.Window)
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText, QPalette.ColorRole.Text):
        enabled = _contrast(pal.color(QPalette.ColorGroup.Active, role), window)
        disabled = _contrast(pal.color(QPalette.ColorGroup.Disabled, role), window)
        assert disabled < 0.6 * enabled, (role, enabled, disabled)
        assert disabled > 1.5  # still legible: it says what it would do


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("make", [lambda: QPushButton("Use these files"), lambda: QLineEdit("4096")])
def test_a_disabled_control_is_drawn_differently(qtbot: Any, themed: QApplication, theme: str, make: Any) -> None:
    apply_theme(themed, theme)
    widget = make()
    qtbot.addWidget(widget)
    widget.show()
    enabled = _render(widget)
    widget.setEnabled(False)
    disabled = _render(widget)
    assert enabled.size() == disabled.size()
    assert enabled != disabled
