"""The statistics panel: a one-line explanation per statistic, labelled charts with units and a legend, a plain
sentence instead of empty axes, tokens per pass as the engine defines it (never below 1), and a conversation chart
that follows the replies shown."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from outrider.conversation.meter import ReplyMeter, reply_points
from outrider.engine.stats import GenerationStats
from outrider.history import Message, MessageStatus, ReplyStats, Role
from outrider.ui.widgets.live_stats import EXPLANATIONS
from outrider.ui.widgets.stats_panel import CONVERSATION_EMPTY, REPLY_EMPTY, ROWS, StatsPanel


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def panel(qtbot: Any) -> tuple[StatsPanel, ReplyMeter, Clock]:
    clock = Clock()
    meter = ReplyMeter(clock)
    widget = StatsPanel(meter)
    widget.timer.stop()  # the test refreshes by hand
    qtbot.addWidget(widget)
    widget.resize(340, 800)
    widget.show()
    return widget, meter, clock


def _stats(generated: int, **kw: Any) -> GenerationStats:
    base: dict[str, Any] = {"generated": generated, "drafted": generated, "accepted": generated // 2,
                            "rejections": generated // 4, "passes": max(1, generated // 2),
                            "pass_tokens": generated, "decode_s": generated / 40, "draft_mode": "model"}
    return GenerationStats(**{**base, **kw})


def _stream_reply(panel: StatsPanel, meter: ReplyMeter, clock: Clock, generated: int = 40) -> None:
    meter.begin_reply()
    for n in range(4, generated + 1, 4):
        clock.now += 0.25
        meter.add(_stats(n), 3)
        panel.refresh()
    meter.finish_reply(_stats(generated))
    panel.refresh()


def _message(mid: int, role: Role, stats: ReplyStats | None = None,
             status: MessageStatus = MessageStatus.COMPLETE) -> Message:
    return Message(mid, 1, role, f"m{mid}", status, 0.0, 0.0, stats)


def test_each_statistic_has_a_one_line_explanation(panel: Any) -> None:
    widget, _, _ = panel
    assert set(widget.explanations) == {key for key, _ in ROWS} | {"speedup"}
    for key, label in widget.explanations.items():
        assert label.text() == EXPLANATIONS[key] and label.isVisibleTo(widget), key
    assert "never below 1" in EXPLANATIONS["tokens_per_pass"]
    assert "below 1×" in EXPLANATIONS["speedup"]
    assert "drafted tokens" in EXPLANATIONS["acceptance_rate"]


def test_charts_say_what_will_appear_until_there_is_data(panel: Any) -> None:
    widget, meter, clock = panel
    widget.refresh()
    assert widget.reply_chart.currentWidget() is widget.reply_empty
    assert widget.conv_chart.currentWidget() is widget.conv_empty
    assert widget.reply_empty.text() == REPLY_EMPTY and widget.conv_empty.text() == CONVERSATION_EMPTY
    _stream_reply(widget, meter, clock)
    assert widget.reply_chart.currentWidget() is widget.reply_plot
    assert widget.conv_chart.currentWidget() is widget.conv_plot
    meter.reset_conversation()  # a new chat
    widget.refresh()
    assert widget.reply_chart.currentWidget() is widget.reply_empty
    assert widget.conv_chart.currentWidget() is widget.conv_empty


def test_chart_axes_have_units_and_a_legend(panel: Any) -> None:
    widget, _, _ = panel
    reply, conv = widget.reply_plot.getPlotItem(), widget.conv_plot.getPlotItem()
    assert (reply.getAxis("bottom").labelText, reply.getAxis("bottom").labelUnits) == ("time since the request", "s")
    assert conv.getAxis("bottom").labelText == "reply number" and not conv.getAxis("bottom").labelUnits
    for plot in (reply, conv):
        assert (plot.getAxis("left").labelText, plot.getAxis("left").labelUnits) == ("decode", "tok/s")
        assert plot.getAxis("right").labelText == "acceptance (0–1)"
    for legend in widget.legends:
        assert [label.text for _, label in legend.items] == ["tok/s", "acceptance"]


def test_tokens_per_pass_is_the_engines_and_never_below_one(panel: Any) -> None:
    widget, meter, _ = panel
    meter.begin_reply()
    # 99 tokens shown in 100 passes: the last pass yielded the end-of-generation token (docs/metrics.md).
    meter.add(GenerationStats(generated=99, passes=100, pass_tokens=100, decode_s=1.0, draft_mode="lookup"), 0)
    widget.refresh()
    assert widget.values["tokens_per_pass"].text() == "1.00"


def test_conversation_chart_numbers_replies_and_follows_the_replies_shown(panel: Any) -> None:
    widget, meter, clock = panel
    for _ in range(3):
        _stream_reply(widget, meter, clock)
    assert [p[0] for p in meter.conversation_series] == [1, 2, 3]
    stats = ReplyStats(decode_tps=30.0, acceptance_rate=0.5)
    shown = [_message(1, Role.USER), _message(2, Role.ASSISTANT, stats),
             _message(3, Role.USER), _message(4, Role.ASSISTANT, status=MessageStatus.INTERRUPTED),  # no stats
             _message(5, Role.USER)]
    assert reply_points(shown) == [(30.0, 0.5), (None, None)]
    meter.load_conversation(shown)  # an edit-and-resend of message 5: later replies are gone
    widget.refresh()
    assert meter.conversation_series == [(1, 30.0, 0.5)] and meter.replies == 2
    assert list(widget._tps_curves[1].getData()[0]) == [1]
    _stream_reply(widget, meter, clock)
    assert [p[0] for p in meter.conversation_series] == [1, 3]  # the new reply is the third of the chat


def test_the_warning_always_quotes_the_headline_and_goes_when_the_reply_recovers(qtbot: Any, panel: Any) -> None:
    from support.stats import measured_stats

    widget, meter, clock = panel
    meter.begin_reply()
    warned = []
    for speedup, accepted in ((0.62, 10), (0.93, 19), (1.06, 26)):
        clock.now += 0.25
        meter.add(measured_stats(generated=64, drafted=40, accepted=accepted, passes=20, pass_tokens=64,
                                 decode_s=1.0, draft_mode="model", speedup=speedup,
                                 speedup_low=speedup - 0.01, speedup_high=speedup + 0.01), 3)
        widget.refresh()
        headline = widget.speedup_label.text()
        acceptance = widget.values["acceptance_rate"].text().split("%")[0].strip()
        if widget.warning.isVisibleTo(widget):
            warned.append(headline)
            assert headline in widget.warning_label.text() and f"acceptance {acceptance} %" in \
                widget.warning_label.text()
    assert warned == ["0.62× (0.61–0.63)", "0.93× (0.92–0.94)"]
    assert widget.speedup_label.text() == "1.06× (1.05–1.07)" and not widget.warning.isVisibleTo(widget)
    widget.timer.start()  # from here on, only the panel's own timer redraws
    meter.finish_reply(measured_stats(generated=64, drafted=40, accepted=10, passes=20, pass_tokens=64,
                                      decode_s=1.0, draft_mode="model", speedup=0.6, speedup_low=0.59,
                                      speedup_high=0.61))
    qtbot.waitUntil(lambda: widget.warning.isVisibleTo(widget), timeout=2000)
    meter.reset_conversation()  # Ctrl+N
    qtbot.waitUntil(lambda: not widget.warning.isVisibleTo(widget), timeout=2000)
    assert widget.speedup_label.text() == "–" and widget.values["tokens_per_pass"].text() == "–"


def test_a_continued_reply_keeps_its_number_in_the_conversation_chart(panel: Any) -> None:
    widget, meter, clock = panel
    _stream_reply(widget, meter, clock)
    _stream_reply(widget, meter, clock, generated=20)
    assert [p[0] for p in meter.conversation_series] == [1, 2]
    meter.begin_reply(continuing=True)  # Continue after the token limit: the same message streams on
    clock.now += 0.25
    meter.add(_stats(80, decode_s=1.0), 3)
    meter.finish_reply(_stats(80, decode_s=1.0))
    assert meter.replies == 2
    assert [p[0] for p in meter.conversation_series] == [1, 2]
    assert meter.conversation_series[-1][1] == pytest.approx(80.0)  # the continued reply's point, updated
    _stream_reply(widget, meter, clock)
    assert [p[0] for p in meter.conversation_series] == [1, 2, 3]


@pytest.mark.parametrize("key", ["acceptance_rate", "token_acceptance", "tokens_per_pass", "decode_tps",
                                 "prompt_tps", "ttft_s", "generated", "by_drafter"])
def test_the_panels_definitions_are_those_of_docs_metrics(key: str) -> None:
    """Each figure's tooltip carries the formula of its row in docs/metrics.md (defined once, shown the same)."""
    import re
    from pathlib import Path

    from outrider.ui.widgets.live_stats import TOOLTIPS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if line.startswith(f"| `{key}`") or
               line.startswith(f"| **`{key}`**"))
    definition = row.split("|")[2].strip().strip("*")
    formula = re.split(r"\*\* — | — ", definition)[0].strip("* ")
    assert formula.replace("**", "") in TOOLTIPS[key]


def _slow_reply(widget: StatsPanel, meter: ReplyMeter) -> None:
    from support.stats import measured_stats

    meter.begin_reply()
    meter.finish_reply(measured_stats(generated=64, drafted=40, accepted=10, passes=20, pass_tokens=64,
                                      decode_s=1.0, draft_mode="model", speedup=0.6, speedup_low=0.59,
                                      speedup_high=0.61))
    widget.refresh()


def test_a_fix_taken_from_the_warning_says_when_it_applies(qtbot: Any, panel: Any) -> None:
    widget, meter, _ = panel
    _slow_reply(widget, meter)
    assert widget.warning.isVisibleTo(widget) and widget.draft_off_button.isEnabled()
    with qtbot.waitSignal(widget.draft_off_requested):
        widget.draft_off_button.click()
    assert "Drafting is off from the next reply." in widget.warning_label.text()
    assert not widget.draft_off_button.isEnabled() and not widget.draft_auto_button.isEnabled()
    widget.refresh()  # the panel's tick keeps saying so
    assert "Drafting is off from the next reply." in widget.warning_label.text()
    _slow_reply(widget, meter)  # the next reply, slow again: its warning offers the fixes again
    assert "from the next reply" not in widget.warning_label.text() and widget.draft_auto_button.isEnabled()
    with qtbot.waitSignal(widget.draft_auto_requested):
        widget.draft_auto_button.click()
    assert "Automatic k applies from the next reply." in widget.warning_label.text()


def test_the_panel_splits_acceptance_by_drafter(panel: Any) -> None:
    """A chain's reply shows accepted/drafted for each drafter, from the engine's ``by_drafter``. (Reading the
    totals instead showed one figure for all drafters.)"""
    from outrider.engine.stats import DrafterCounts

    widget, meter, _ = panel
    meter.begin_reply()
    meter.finish_reply(_stats(40, drafted=30, accepted=20, draft_mode="history+lookup+model",
                              by_drafter={"history": DrafterCounts(12, 12, 2), "lookup": DrafterCounts(8, 2, 3),
                                          "model": DrafterCounts(10, 6, 4)}))
    widget.refresh()
    assert widget.values["by_drafter"].text() == "history 12/12 · prompt 2/8 · model 6/10"
    meter.begin_reply()
    meter.finish_reply(_stats(40, by_drafter={}))
    widget.refresh()
    assert widget.values["by_drafter"].text() == "–"


def test_the_panel_fits_a_laptop_screen(panel: Any) -> None:
    """The numbers scroll rather than hold the window taller than a 768-pixel screen."""
    widget, meter, _ = panel
    _slow_reply(widget, meter)
    assert widget.warning.isVisibleTo(widget)
    assert widget.minimumSizeHint().height() <= 520
    widget.resize(340, 1400)  # room enough: everything shows, nothing scrolls
    widget.layout().activate()
    assert widget.numbers.height() >= widget.numbers.widget().sizeHint().height()


def test_chart_y_labels_do_not_overlap_on_a_short_screen(qtbot: Any, panel: Any) -> None:
    from PySide6.QtGui import QFontMetrics

    widget, meter, clock = panel
    widget.resize(340, 520)
    for _ in range(2):
        _stream_reply(widget, meter, clock)
    qtbot.wait(50)
    line = QFontMetrics(widget.font()).height()
    for plot in (widget.reply_plot.getPlotItem(), widget.conv_plot.getPlotItem()):
        pixels = plot.getViewBox().height()
        for side in ("left", "right"):
            values = sorted(v for v, _ in plot.getAxis(side)._tickLevels[0])
            view = plot.getViewBox() if side == "left" else plot.getAxis("right").linkedView()
            low, high = view.viewRange()[1]
            assert len(values) == 3 and values[0] == 0.0 and values[-1] == pytest.approx(high)
            gaps = [(b - a) / (high - low) * pixels for a, b in itertools.pairwise(values)]
            assert min(gaps) >= line, (side, gaps, line)


def test_the_charts_are_readable_legend_outside_seconds_always(qtbot: Any, panel: Any) -> None:
    """Before: ~80 px of plot under a legend drawn over the lines, and a short reply's time axis in ms."""
    widget, meter, clock = panel
    widget.resize(340, 900)
    widget.show()
    _stream_reply(widget, meter, clock)
    qtbot.waitUntil(lambda: widget.reply_plot.isVisible())
    for plot, legend in zip((widget.reply_plot, widget.conv_plot), widget.legends, strict=True):
        assert plot.height() >= 160
        view = plot.getPlotItem().getViewBox().sceneBoundingRect()
        assert not legend.sceneBoundingRect().intersects(view), "the legend covers the lines"
    assert widget.reply_plot.getAxis("bottom").autoSIPrefix is False  # "s", never "ms"


def test_a_long_per_drafter_line_wraps_instead_of_widening_the_panel(qtbot: Any, panel: Any) -> None:
    """Before: "prompt 0/4 · history 55/61 · model …" sat in the value column and widened it past the panel, so
    every value on the right was cut (seen in the 1600 px screenshot)."""
    widget, _, _ = panel
    label = widget.values["by_drafter"]
    assert label.wordWrap()
    box = widget.numbers.widget()
    before = box.minimumSizeHint().width()
    label.setText(" · ".join(f"drafter{i} {i}/{i * 7}" for i in range(12)))
    box.layout().invalidate()
    assert box.minimumSizeHint().width() <= before + 1  # the line wraps: the panel needs no more width
