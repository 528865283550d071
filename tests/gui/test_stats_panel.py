"""The statistics panel: a one-line explanation per statistic, labelled charts with units and a legend, a plain
sentence instead of empty axes, tokens per pass as the engine defines it (never below 1), and a conversation chart
that follows the replies shown."""

from __future__ import annotations

import dataclasses
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


def test_prompt_speed_after_a_cache_reuse_says_how_much_was_cached(panel: Any) -> None:
    """A second turn reuses the first turn's KV cache: 412 of 421 prompt tokens are not read again, and a rate
    over the 9 new ones is meaningless. Broken on purpose (the rate shown whatever was reused): the panel read
    "14464 tok/s", as issue 23 saw."""
    widget, meter, _ = panel
    meter.begin_reply()
    meter.add(_stats(8, prompt_tokens=421, prompt_tokens_reused=412, prompt_s=9 / 14464), 3)
    widget.refresh()
    assert widget.values["prompt_tps"].text() == "412 cached"
    assert "tok/s" not in widget.values["prompt_tps"].text()
    meter.finish_reply(None)
    meter.begin_reply()  # a first turn: the whole prompt read, its rate is what the figure is for
    meter.add(_stats(8, prompt_tokens=400, prompt_s=0.5), 3)
    widget.refresh()
    assert widget.values["prompt_tps"].text() == "800 tok/s"


def _reference_speedup(a: float, k: int, draft_cost: float, growth: float) -> tuple[float, float]:
    """Tokens per pass and speed-up by the definition, not the closed form: the expected tokens of a pass are
    the sum over i = 0..k of P(the first i drafted tokens are all accepted) = a^i; a pass costs k drafted
    tokens plus a verify pass of k + 1 tokens, 1 + growth · k one-token passes; plain decoding yields one token
    per one-token pass."""
    tokens = sum(a**i for i in range(k + 1))
    return tokens, tokens / (k * draft_cost + 1 + growth * k)


def test_the_you_are_here_curves_are_the_cost_models() -> None:
    from outrider.ui.widgets.live_stats import you_are_here_curves

    xs, tokens, speed = you_are_here_curves(4, 0.1, 0.2)
    assert xs[0] == 0.0 and xs[-1] == 1.0 and speed is not None
    for a, e, s in zip(xs, tokens, speed, strict=True):
        ref_e, ref_s = _reference_speedup(a, 4, 0.1, 0.2)
        assert e == pytest.approx(ref_e) and s == pytest.approx(ref_s)
    assert speed[0] < 1.0 < speed[-1]  # below 1x at a = 0 (drafting only costs), 5 / 2.2 at a = 1
    assert you_are_here_curves(4, None, None)[2] is None  # no speed-up curve before the costs are measured


def _why_stats(generated: int, **kw: Any) -> GenerationStats:
    """A reply of per-token acceptance 0.8 (40 accepted, 10 rejections), 2.5 tokens per pass, a drafted token
    costing 0.05 of a plain pass (1.25 s for 50 tokens, plain 2 tok/s = 0.5 s a pass), pass growth 0.25, a mean
    k of 3."""
    base: dict[str, Any] = {"generated": generated, "drafted": 50, "accepted": 40, "rejections": 10, "passes": 20,
                            "k_sum": 60,
                            "pass_tokens": 50, "decode_s": 2.0, "step_s": 2.0, "draft_s": 1.25, "plain_tps": 2.0,
                            "pass_growth": 0.25, "speedup": 1.6, "speedup_low": 1.5, "speedup_high": 1.7,
                            "draft_mode": "model"}
    return GenerationStats(**{**base, **kw})


def test_you_are_here_shows_the_curves_for_the_current_k_and_the_measured_points(qtbot: Any, panel: Any) -> None:
    """The seed lesson's picture (issue 23, item 7): for the current k, tokens per pass and net speed-up against
    acceptance with this reply's costs, this reply's point on it, the conversation's earlier ones hollow. The
    current k is the reply's mean (automatic k's last step drafted 16, far from the reply's 3 on average).
    Broken on purpose (``_draw_why`` not called) the tab kept its sentence and no curve."""
    widget, meter, clock = panel
    assert widget.lower_tabs.tabText(1) == "You are here"
    meter.begin_reply()
    clock.now += 0.5
    meter.add(_why_stats(50), 16)
    widget.refresh()
    widget.lower_tabs.setCurrentIndex(1)
    assert widget.why_chart.currentWidget() is widget.why_plot
    why = widget._why
    xs, tokens = (list(v) for v in why["tokens"].getData())
    _, speed = (list(v) for v in why["speedup"].getData())
    for a, e, s in zip(xs, tokens, speed, strict=True):
        ref_e, ref_s = _reference_speedup(a, 3, 1.25 / 50 * 2.0, 0.25)
        assert e == pytest.approx(ref_e) and s == pytest.approx(ref_s)
    points = {tuple(round(v, 6) for v in p.pos()) for p in why["reply"].points()}
    assert points == {(0.8, 2.5), (0.8, 1.6)}  # this reply: measured a, tokens per pass and speed-up
    assert "k = 3" in why["plot"].plotItem.titleLabel.text
    meter.finish_reply(_why_stats(50))
    meter.begin_reply()  # a second reply: the first is an earlier point now
    clock.now += 0.5
    meter.add(_why_stats(40, accepted=10, rejections=30, pass_tokens=30, speedup=0.8, speedup_low=0.7,
                         speedup_high=0.9, k_sum=40), 0)
    widget.refresh()
    earlier = {tuple(round(v, 6) for v in p.pos()) for p in why["earlier"].points()}
    assert earlier == {(0.8, 2.5), (0.8, 1.6)}
    assert {tuple(round(v, 6) for v in p.pos()) for p in why["reply"].points()} == {(0.25, 1.5), (0.25, 0.8)}
    assert "k = 2" in why["plot"].plotItem.titleLabel.text


def test_a_new_reply_never_shows_the_previous_replys_chart(qtbot: Any, panel: Any) -> None:
    """The charts are redrawn once a second while a reply streams; a new reply must not show the previous one's
    curve and axes until then (issue 23: "the previous reply's axes shown into a new reply"). Broken on purpose
    (the redraw left to the one-second tick) the new reply showed the old reply's 20-s chart instead of its
    sentence."""
    widget, meter, clock = panel
    meter.begin_reply()
    for n in range(1, 81):
        clock.now += 0.25
        meter.add(_stats(4 * n), 3)
        widget.refresh()
    meter.finish_reply(_stats(320))
    widget.refresh()
    assert widget._ranges[0][1] == 20.0  # the first reply ran 20 s
    meter.begin_reply()
    widget._since_chart.restart()  # as if the chart had just been drawn: the one-second tick is far
    widget.refresh()
    assert widget.reply_chart.currentWidget() is widget.reply_empty  # nothing of the new reply yet: the sentence
    started = clock.now
    clock.now += 0.25
    meter.add(_stats(4), 3)
    clock.now += 0.25
    meter.add(_stats(8), 3)
    widget._since_chart.restart()
    widget.refresh()
    assert widget.reply_chart.currentWidget() is widget.reply_plot
    xs, _ys = widget._tps_curves[0].getData()
    assert len(xs) == 1 and xs[0] == pytest.approx(clock.now - started)
    assert widget._ranges[0][1] <= 1.0  # the new reply's own axis, not the old 20 s


def test_a_reopened_conversation_brings_its_replies_points_and_old_replies_bring_none(panel: Any) -> None:
    """The stored replies' per-token acceptance and tokens per pass (kept since the "you are here" chart) are the
    conversation's points; a reply stored before has none (it is not drawn at a made-up place)."""
    widget, meter, _ = panel
    new = ReplyStats(decode_tps=30.0, acceptance_rate=0.6, token_acceptance=0.7, tokens_per_pass=2.2,
                     speedup=1.4, speedup_low=1.3, speedup_high=1.5)
    old = ReplyStats(decode_tps=20.0, acceptance_rate=0.5)  # written by a version that did not keep them
    meter.load_conversation([_message(1, Role.USER), _message(2, Role.ASSISTANT, old), _message(3, Role.USER),
                             _message(4, Role.ASSISTANT, new)])
    assert meter.conversation_points == [(2, 0.7, 2.2, 1.4, None)]
    widget.refresh()  # after a restart: the stored replies on the curve of the last one's k (here none: k unknown)
    assert widget.why_chart.currentWidget() is widget.why_empty
    meter.load_conversation([_message(1, Role.USER),
                             _message(2, Role.ASSISTANT, dataclasses.replace(new, k_mean=3.6))])
    widget.refresh()
    why = widget._why
    assert widget.why_chart.currentWidget() is widget.why_plot and "k = 4" in why["plot"].plotItem.titleLabel.text
    assert {tuple(round(v, 6) for v in p.pos()) for p in why["earlier"].points()} == {(0.7, 2.2), (0.7, 1.4)}
    speed_xs = why["speedup"].getData()[0]
    assert len(why["reply"].points()) == 0 and (speed_xs is None or len(speed_xs) == 0)  # costs: measured live only
    from outrider.history.turns import reply_stats

    stored = reply_stats(_why_stats(50), "stop")
    assert (stored.token_acceptance, stored.tokens_per_pass) == (0.8, 2.5)
    assert ReplyStats.from_dict(stored.to_dict()) == stored


def test_no_figure_is_cut_off_in_the_narrowest_panel(qtbot: Any, panel: Any) -> None:
    """At the panel's minimum width, with the longest figures a reply gives (a cached prompt, a long k, a
    speed-up range), every value ends inside the numbers' viewport. Before (seen in the dark screenshot, every
    value cut at its right edge): the unwrapped caption under the speed-up (307 px) and a prompt figure "cached
    12000 tokens · 345 new" held the grid wider than the 286-px viewport; this test read "decode_now ends at 319
    of 286"; with the theme's 13-pt figures, the longest name beside the longest value still did (323 px: "ends
    at 311 of 286" under xcb) until the names wrap."""
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QApplication

    from outrider.ui.theme import apply_theme

    widget, meter, clock = panel
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    sheet = app.styleSheet()
    apply_theme(app, "light")  # the figures' own font (13 pt bold, the theme's QSS): what the window shows
    widget.resize(widget.minimumWidth(), 800)
    meter.begin_reply()
    clock.now += 0.5
    meter.add(_why_stats(50, prompt_tokens=12_345, prompt_tokens_reused=12_000, prompt_s=0.5, speedup=0.9,
                         speedup_low=0.5, speedup_high=1.4, k_sum=20 * 16), 16)
    widget.refresh()
    viewport = widget.numbers.viewport()
    qtbot.waitUntil(lambda: all(v.width() >= v.minimumSizeHint().width() for v in widget.values.values()))
    for key, value in widget.values.items():
        right = value.mapTo(viewport, QPoint(value.width(), 0)).x()
        assert right <= viewport.width(), f"{key} {value.text()!r} ends at {right} of {viewport.width()}"
        if not value.wordWrap():
            assert value.width() >= value.sizeHint().width(), f"{key} {value.text()!r} squeezed"
    app.setStyleSheet(sheet)
