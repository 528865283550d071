"""The window tiles to half a 1920-px screen: 960 px wide and narrower, every control still there.

Before: the reply controls were one row (provenance toggle, legend, four buttons) and the window could not be
narrower than ~1,120 px (``minimumSizeHint``): the first test failed at 1124 > 900, and the side panels could
not be hidden.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QLabel, QPushButton, QWidget

from outrider.ui.main_window import ACTION_SHOW_CONVERSATIONS, ACTION_SHOW_STATISTICS, MainWindow
from outrider.ui.widgets.flow_layout import FlowLayout, wrapping_policy


def _window(qtbot: Any, app_parts: dict[str, Any]) -> MainWindow:
    win = MainWindow(app_parts["bridge"], app_parts["store"], app_parts["settings"])
    qtbot.addWidget(win)
    win.show()
    return win


def _inside(widget: QWidget, window: QWidget) -> bool:
    top_left = widget.mapTo(window, QPoint(0, 0))
    return window.rect().contains(QRect(top_left, widget.size()))


def test_the_window_fits_half_a_screen_with_every_button_shown(qtbot: Any, app_parts: dict[str, Any]) -> None:
    win = _window(qtbot, app_parts)
    assert win.minimumSizeHint().width() <= 900
    win.resize(960, 700)
    qtbot.waitUntil(lambda: win.width() == 960)
    c = win.chat
    for button in (c.send_button, c.stop_button, c.regenerate_button):
        assert button.isVisible() and _inside(button, win), button.text()
        assert button.width() >= button.sizeHint().width()  # not squeezed into a sliver
    assert _inside(c.composer, win) and _inside(c.provenance_box, win)


def test_the_side_panels_can_be_hidden_and_shown_again(qtbot: Any, app_parts: dict[str, Any]) -> None:
    win = _window(qtbot, app_parts)
    for ident, pane in ((ACTION_SHOW_CONVERSATIONS, win.conversations), (ACTION_SHOW_STATISTICS, win.stats)):
        action = win.actions_by_id[ident]
        assert action.isCheckable() and action.isChecked() and pane.isVisible()
        action.trigger()
        assert not pane.isVisible() and not action.isChecked()
        action.trigger()
        assert pane.isVisible()
    win.resize(960, 700)
    qtbot.waitUntil(lambda: win.width() == 960)
    before = win.chat.width()
    win.actions_by_id[ACTION_SHOW_CONVERSATIONS].trigger()
    win.actions_by_id[ACTION_SHOW_STATISTICS].trigger()
    qtbot.waitUntil(lambda: win.chat.width() > before + 300)  # the chat gets the room


def test_a_flow_layout_wraps_instead_of_widening(qtbot: Any) -> None:
    host = QWidget()
    qtbot.addWidget(host)
    layout = FlowLayout(host, right_align_last=True)
    labels = [QLabel(f"item number {i}", host) for i in range(6)]
    for label in labels:
        layout.addWidget(label)
    button = QPushButton("Send", host)
    layout.addWidget(button)
    host.setSizePolicy(wrapping_policy())
    widest = max(w.sizeHint().width() for w in [*labels, button])
    assert layout.minimumSize().width() == widest
    one_line = layout.sizeHint().width()
    assert layout.heightForWidth(one_line) < layout.heightForWidth(widest)  # narrower: more lines
    host.resize(widest + 10, layout.heightForWidth(widest + 10))
    host.show()
    qtbot.waitExposed(host)
    assert all(host.rect().contains(w.geometry()) for w in [*labels, button])
    assert button.geometry().right() >= host.width() - 2  # the last item at the right end of its line


def test_every_chart_keeps_its_height_in_a_half_screen_window(qtbot: Any, app_parts: dict[str, Any]) -> None:
    """At 960 x 700 the reply's chart and the tabs below it (conversation, "You are here") each keep at least
    ``CHART_MIN_HEIGHT``. Before (seen in the 960 x 700 screenshot under Xvfb): the tabs, their size policy
    Ignored and no minimum of their own, got no height at all. This test did not reproduce that (with the tabs'
    minimum taken out it still passed, offscreen and under xcb): it holds the heights the fix guarantees, and the
    screenshot script's picture is the check of the original case."""
    from outrider.engine.stats import DrafterCounts, GenerationStats
    from outrider.ui.widgets.stats_panel import CHART_MIN_HEIGHT

    win = _window(qtbot, app_parts)
    win.resize(960, 700)
    qtbot.waitUntil(lambda: win.width() == 960)
    stats = win.stats
    # A reply's figures, the slower-than-plain warning and a chain's per-drafter line: the numbers at their tallest
    win.meter.begin_reply()
    win.meter.finish_reply(GenerationStats(
        generated=64, drafted=60, accepted=6, rejections=20, passes=40, pass_tokens=64, k_sum=200, decode_s=2.0,
        step_s=2.0, draft_mode="history+lookup", speedup=0.7, speedup_low=0.6, speedup_high=0.8, plain_tps=40.0,
        by_drafter={"history": DrafterCounts(30, 3, 10), "lookup": DrafterCounts(30, 3, 10)}))
    stats.refresh()
    assert stats.warning.isVisibleTo(win)
    qtbot.waitUntil(lambda: stats.lower_tabs.height() > 0, timeout=5000)
    assert stats.reply_chart.height() >= CHART_MIN_HEIGHT
    assert stats.lower_tabs.currentWidget().height() >= CHART_MIN_HEIGHT
    assert _inside(stats.lower_tabs, win)
