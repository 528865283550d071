"""The live statistics panel beside the chat: numbers, three charts, the "slower than plain" warning.

It redraws on its own timer (``REFRESH_MS``, about 4 Hz) from a ``ReplyMeter`` and only when something
changed — never per token (a repaint costs more than a token); the charts at most once per ``CHART_MS``
while a reply streams, with axis ranges that grow in "nice" steps (a repaint whose axes did not change
replays their cached drawing).
Every label carries the definition from docs/metrics.md as tooltip and a one-line explanation under its name
(``EXPLANATIONS``). The charts have labelled axes with units (seconds since the request; reply number), a legend
for the two curves, and a plain sentence instead of empty axes until there is something to draw.

The third chart ("You are here", a tab beside the conversation's) is the lesson of speculative decoding: for the
current k, the tokens each target pass is expected to yield and the net speed-up expected over plain decoding,
against the per-token acceptance a, with the costs this reply measured (``you_are_here_curves``: the cost model of
automatic k), and on it this reply's and this conversation's measured points — why a text speeds up or not.
A new reply redraws the charts at once: the previous reply's axes never show into it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QElapsedTimer, QSize, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from outrider.conversation.meter import LiveStats, ReplyMeter
from outrider.ui.settings import QtSettings
from outrider.ui.theme import LIGHT, ThemeColours
from outrider.ui.widgets.live_stats import (
    EXPLANATIONS,
    TOOLTIPS,
    by_drafter_text,
    fmt,
    format_speedup,
    prompt_speed_text,
    speedup_shown_as_figure,
    you_are_here_curves,
)

if TYPE_CHECKING:  # pyqtgraph (and numpy) load with the charts, after the window's first paint: ``build_charts``
    import pyqtgraph as pg

REFRESH_MS = 250
CHART_MS = 1000  # chart redraws while streaming (a pyqtgraph repaint costs milliseconds)
WRAPPED_VALUES = frozenset({"by_drafter"})  # values of any length: on a line of their own under the name, wrapped
CHART_MIN_HEIGHT = 170  # px: axes, title and legend row leave a readable plot (at 120 it was ~80 px of lines)
REPLY_EMPTY = "This reply: decode tokens/s and acceptance appear here, second by second, while a reply streams."
CONVERSATION_EMPTY = "Conversation: each reply's tokens/s and acceptance appear here once it has finished."
WHY_EMPTY = ("You are here: once a reply drafts, the tokens per pass and the speed-up expected at each acceptance "
             "for its k, with this reply's and this conversation's measured points.")
WHY_X = (-0.03, 1.03)  # the acceptance axis, a little past 0 and 1: a point at a = 0.98 was drawn half off the edge
WHY_TIP = ("For the current draft length k, against the per-token acceptance a: the tokens each target pass is "
           "expected to yield, E(k) = (1 − a^(k+1)) / (1 − a) (line), and the net speed-up expected over plain "
           "decoding, E(k) / (k · c_draft + c_verify(k + 1)) with the draft and verify costs this reply measured "
           "(dashed; 1× = plain decoding). The filled marks are this reply's measured tokens per pass and "
           "speed-up at its measured a, the hollow ones the conversation's earlier replies. Left of where the "
           "dashed line crosses 1×, drafting costs more than it saves.")


def nice_ceil(value: float) -> float:
    """The smallest of 1, 2, 5 × 10^n that is >= value (axis ranges that change rarely)."""
    if not value > 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    for m in (1.0, 2.0, 5.0, 10.0):
        if value <= m * scale * (1 + 1e-9):
            return m * scale
    return 10.0 * scale

def axis_ticks(top: float) -> list[tuple[float, str]]:
    """Three y labels, 0, half and ``top``: a chart a hundred pixels high has room for no more (pyqtgraph's own
    choice stacked six labels on top of each other)."""
    return [(v, f"{v:g}") for v in (0.0, top / 2, top)]


ROWS = (
    ("decode_now", "Decode now"),
    ("decode_tps", "Reply average"),
    ("acceptance_rate", "Acceptance"),
    ("token_acceptance", "Per-token acceptance a"),
    ("tokens_per_pass", "Tokens / target pass"),
    ("k", "Current k"),
    ("plain_tps", "Plain (this reply)"),
    ("ttft_s", "Time to first token"),
    ("prompt_tps", "Prompt speed"),
    ("time_share", "Draft / verify / other"),
    ("by_drafter", "By drafter"),
    ("generated", "Generated"),
)


class FittingScrollArea(QScrollArea):
    """A scroll area as tall as its contents when there is room, scrolling only on a short screen (the numbers
    and their explanations would otherwise hold the window taller than a laptop's screen)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMinimumHeight(130)  # a few figures, then it scrolls: the charts below keep their height

    def sizeHint(self) -> QSize:  # Qt override
        inner = self.widget()
        if inner is None:
            return super().sizeHint()
        hint = inner.sizeHint()
        return QSize(hint.width() + self.verticalScrollBar().sizeHint().width(), hint.height())


class StatsPanel(QWidget):
    """Numbers and charts of the reply being streamed and of the conversation.

    Signals:
        draft_off_requested(): the warning's "Draft off" button.
        draft_auto_requested(): the warning's "Auto k" button.

    Attributes:
        meter: the ``ReplyMeter`` it reads.
        settings: the settings (optional): the warning offers "Auto k" only while k is fixed.
        snapshot: the last ``LiveStats`` shown.
    """

    draft_off_requested = Signal()
    draft_auto_requested = Signal()

    def __init__(self, meter: ReplyMeter, parent: QWidget | None = None, *,
                 settings: QtSettings | None = None) -> None:
        super().__init__(parent)
        self.meter = meter
        self.settings = settings
        self.snapshot = LiveStats()
        self.colours: ThemeColours = LIGHT
        self.setMinimumWidth(300)

        self.speedup_label = QLabel("–", self)
        self.speedup_label.setObjectName("speedupValue")
        self.speedup_label.setToolTip(TOOLTIPS["speedup"])
        self.speedup_label.setAccessibleName("Measured speed-up")
        caption = QLabel("speed-up vs plain decoding, measured in this reply", self)
        caption.setToolTip(TOOLTIPS["speedup"])
        caption.setWordWrap(True)  # unwrapped it held the numbers wider than a 300-px panel: values cut at the right
        self.speedup_label.setWordWrap(True)
        self.explanations: dict[str, QLabel] = {}
        speedup_help = self._explanation("speedup")

        self.values: dict[str, QLabel] = {}
        form = QGridLayout()
        form.setVerticalSpacing(0)
        form.setColumnStretch(0, 1)
        line = 0  # the grid's next row: a statistic takes two (name and value, its explanation), a wrapped one three
        for key, title in ROWS:
            name = QLabel(title, self)
            value = QLabel("–", self)
            value.setObjectName("statValue")
            value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
            for w in (name, value):
                w.setToolTip(TOOLTIPS[key])
            value.setAccessibleName(title)
            value.setAccessibleDescription(EXPLANATIONS[key])
            self.values[key] = value
            if key in WRAPPED_VALUES:  # one entry per drafter, as long as the chain: wrapped, under its name
                value.setWordWrap(True)
                value.setObjectName("statText")
                value.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
                form.addWidget(name, line, 0, 1, 2)
                form.addWidget(value, line + 1, 0, 1, 2)
                line += 2
            else:
                # The name wraps in a narrow panel: the longest name beside the longest value (two columns of
                # maxima) held the grid at 323 px in a 286-px viewport, every value cut at its right.
                name.setWordWrap(True)
                form.addWidget(name, line, 0)
                form.addWidget(value, line, 1)
                line += 1
            explanation = self._explanation(key)
            explanation.setContentsMargins(0, 0, 0, 2)
            form.addWidget(explanation, line, 0, 1, 2)
            line += 1

        self.warning = QFrame(self)
        self.warning.setObjectName("slowerWarning")
        wl = QVBoxLayout(self.warning)
        self.warning_label = QLabel("", self.warning)
        self.warning_label.setWordWrap(True)
        self.draft_off_button = QPushButton("Draft off", self.warning)
        self.draft_off_button.setToolTip("Decode plainly with the target alone (Settings: draft source none)")
        self.draft_off_button.clicked.connect(self._on_draft_off_button_clicked)
        self.draft_auto_button = QPushButton("Auto k", self.warning)
        self.draft_auto_button.setToolTip("Let the cost model choose k per step, including k = 0 "
                                          "(Settings: draft length k automatic)")
        self.draft_auto_button.clicked.connect(self._on_draft_auto_button_clicked)
        self._acted = ""  # what the user did about the warning shown, and for which reply (ReplyMeter.started)
        self._acted_on = -1
        self._dismissed_on = -1  # the reply (ReplyMeter.started) whose warning went with its pair (pair_changed)
        buttons = QHBoxLayout()
        buttons.addWidget(self.draft_off_button)
        buttons.addWidget(self.draft_auto_button)
        wl.addWidget(self.warning_label)
        wl.addLayout(buttons)
        self.warning.hide()

        self._plots: tuple[pg.PlotWidget, pg.PlotWidget] | None = None  # built by ``build_charts``
        self._tps_curves: list[Any] = []
        self._acc_curves: list[Any] = []
        self._why: dict[str, Any] = {}  # the "you are here" chart's items, by name
        self._drawn_reply = -1  # ReplyMeter.started of the reply the charts show
        self.legends: list[Any] = []
        self._ranges: dict[int, tuple[float, float, float, float]] = {}
        self._since_chart = QElapsedTimer()
        self._since_chart.start()

        head = QVBoxLayout()
        head.addWidget(self.speedup_label)
        head.addWidget(caption)
        head.addWidget(speedup_help)
        box = QGroupBox("Live statistics")
        bl = QVBoxLayout(box)
        bl.addLayout(head)
        bl.addWidget(self.warning)
        bl.addLayout(form)
        self.reply_chart, self.reply_empty = self._chart_stack(REPLY_EMPTY)
        self.conv_chart, self.conv_empty = self._chart_stack(CONVERSATION_EMPTY)
        self.why_chart, self.why_empty = self._chart_stack(WHY_EMPTY)
        # The conversation and "you are here" share the lower place (three charts at once leave too little height
        # for each in a 700-px window).
        self.lower_tabs = QTabWidget(self)
        self.lower_tabs.setDocumentMode(True)
        self.lower_tabs.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Ignored)
        self.lower_tabs.addTab(self.conv_chart, "Conversation")
        self.lower_tabs.addTab(self.why_chart, "You are here")
        self.lower_tabs.setTabToolTip(1, WHY_TIP)
        # Ignored (the numbers have the first claim on the height) ignores the contents' minimum too: without its
        # own, the tabs got no height at all in a 700-px window.
        self.lower_tabs.setMinimumHeight(CHART_MIN_HEIGHT + self.lower_tabs.tabBar().sizeHint().height())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.numbers = FittingScrollArea(self)
        self.numbers.setWidget(box)
        layout.addWidget(self.numbers)
        layout.addWidget(self.reply_chart, 1)
        layout.addWidget(self.lower_tabs, 1)

        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self._on_timer_timeout)
        self.timer.start()
        self.set_colours(LIGHT)

    def _explanation(self, key: str) -> QLabel:
        """The one-line explanation of statistic ``key`` (muted, small; ``EXPLANATIONS``)."""
        label = QLabel(EXPLANATIONS[key], self)
        label.setObjectName("statHelp")
        label.setWordWrap(True)
        label.setToolTip(TOOLTIPS[key])
        self.explanations[key] = label
        return label

    def _chart_stack(self, empty_text: str) -> tuple[QStackedWidget, QLabel]:
        """The chart, or a plain sentence in its place while it has nothing to draw (no meaningless axes)."""
        stack = QStackedWidget(self)
        # The numbers have the first claim on the height; a chart takes what is left, at least its minimum.
        stack.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Ignored)
        stack.setMinimumHeight(CHART_MIN_HEIGHT)
        empty = QLabel(empty_text, stack)
        empty.setObjectName("chartEmpty")
        empty.setWordWrap(True)
        empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        empty.setMinimumHeight(60)
        stack.addWidget(empty)
        return stack, empty

    @property
    def reply_plot(self) -> pg.PlotWidget:
        """The chart of this reply (built on first use)."""
        return self.build_charts()[0]

    @property
    def conv_plot(self) -> pg.PlotWidget:
        """The chart of the conversation (built on first use)."""
        return self.build_charts()[1]

    @property
    def why_plot(self) -> pg.PlotWidget:
        """The "you are here" chart (built with the others)."""
        self.build_charts()
        plot: pg.PlotWidget = self._why["plot"]
        return plot

    def build_charts(self) -> tuple[pg.PlotWidget, pg.PlotWidget]:
        """The two pyqtgraph charts, made the first time they are needed: with the first data to draw, or when
        the app calls this after the window's first paint (importing pyqtgraph and numpy takes about 0.4 s,
        which the start-up does not wait for). Idempotent."""
        if self._plots is not None:
            return self._plots
        import pyqtgraph as pg

        pg.setConfigOptions(antialias=True)
        reply_plot = pg.PlotWidget(self)
        reply_plot.setToolTip("This reply: decode tokens/s now (line) and acceptance so far (dashed, right "
                                   "axis, 0–1), against seconds since the request")
        conv_plot = pg.PlotWidget(self)
        conv_plot.setToolTip("This conversation: each reply's average decode tokens/s (line) and "
                                  "acceptance rate (dashed, right axis), by reply number")
        charts = ((reply_plot, "This reply", "time since the request", "s"),
                  (conv_plot, "Conversation", "reply number", ""))
        for plot, title, x_label, x_unit in charts:
            plot.setMinimumHeight(CHART_MIN_HEIGHT)
            plot.setMouseEnabled(x=False, y=False)
            plot.disableAutoRange()
            plot.hideButtons()
            plot.setTitle(title)
            plot.setLabel("left", "decode", units="tok/s")
            plot.getAxis("left").enableAutoSIPrefix(False)  # "ktok/s" reads as a typo
            plot.setLabel("bottom", x_label, units=x_unit or None)
            plot.getAxis("bottom").enableAutoSIPrefix(False)  # seconds always ("ms" on a short reply read wrong)
            # The legend in a row of its own under the chart, never over the lines.
            legend = pg.LegendItem(labelTextSize="8pt", colCount=2)
            plot.getPlotItem().layout.addItem(legend, 4, 1)
            self.legends.append(legend)
            tps = plot.plot([], [])
            legend.addItem(tps, "tok/s")
            self._tps_curves.append(tps)
            acc_view = pg.ViewBox()
            acc_view.disableAutoRange()
            acc_view.setYRange(0, 1, padding=0)
            acc_view.setMouseEnabled(x=False, y=False)
            plot.scene().addItem(acc_view)
            plot.getAxis("right").linkToView(acc_view)
            plot.getAxis("right").setTicks([axis_ticks(1.0), []])
            acc_view.setXLink(plot)
            plot.showAxis("right")
            plot.setLabel("right", "acceptance (0–1)")
            curve = pg.PlotDataItem([], [])
            acc_view.addItem(curve)
            legend.addItem(curve, "acceptance")
            self._acc_curves.append((acc_view, curve))
            plot.getViewBox().sigResized.connect(
                lambda vb=plot.getViewBox(), av=acc_view: av.setGeometry(vb.sceneBoundingRect()))

        self._plots = (reply_plot, conv_plot)
        self.reply_chart.addWidget(reply_plot)
        self.conv_chart.addWidget(conv_plot)
        self._build_why_chart(pg)
        self._colour_charts(self.colours)
        return self._plots

    def _build_why_chart(self, pg: Any) -> None:
        """The "you are here" chart: the curves of ``you_are_here_curves`` for the current k, a 1× line, and the
        measured points of this reply (filled) and of the conversation's earlier replies (hollow)."""
        plot = pg.PlotWidget(self)
        plot.setToolTip(WHY_TIP)
        plot.setMinimumHeight(CHART_MIN_HEIGHT)
        plot.setMouseEnabled(x=False, y=False)
        plot.disableAutoRange()
        plot.hideButtons()
        plot.setTitle("You are here")
        plot.setLabel("left", "tokens, ×")  # long labels were cut: the legend names the two curves
        plot.setLabel("bottom", "per-token acceptance a")
        plot.setRange(xRange=WHY_X, yRange=(0.0, 2.0), padding=0)
        plot.getAxis("bottom").setTicks([[(v, f"{v:g}") for v in (0.0, 0.25, 0.5, 0.75, 1.0)], []])
        legend = pg.LegendItem(labelTextSize="8pt", colCount=2)
        plot.getPlotItem().layout.addItem(legend, 4, 1)
        items = {"plot": plot, "legend": legend, "tokens": plot.plot([], []), "speedup": plot.plot([], []),
                 "plain": pg.InfiniteLine(pos=1.0, angle=0, movable=False),
                 "reply": pg.ScatterPlotItem(size=10), "earlier": pg.ScatterPlotItem(size=7)}
        plot.addItem(items["plain"])
        plot.addItem(items["earlier"])
        plot.addItem(items["reply"])
        legend.addItem(items["tokens"], "tokens / pass")
        legend.addItem(items["speedup"], "speed-up")
        legend.addItem(items["reply"], "this reply")
        legend.addItem(items["earlier"], "earlier replies")
        self._why = items
        self.why_chart.addWidget(plot)

    def set_colours(self, colours: ThemeColours) -> None:
        self.colours = colours
        if self._plots is not None:
            self._colour_charts(colours)
        muted = f"color: {colours.muted};"
        for label in (*self.explanations.values(), self.reply_empty, self.conv_empty):
            label.setStyleSheet(muted + (" font-size: 8pt;" if label.objectName() == "statHelp" else ""))
        self.meter._dirty = True
        self.refresh()

    def _colour_charts(self, colours: ThemeColours) -> None:
        import pyqtgraph as pg

        for plot in self._plots or ():
            plot.setBackground(colours.background)
            for axis in ("left", "bottom", "right"):
                plot.getAxis(axis).setTextPen(colours.text)
                plot.getAxis(axis).setPen(colours.muted)
            plot.setTitle(plot.plotItem.titleLabel.text, color=colours.text)
        for curve in self._tps_curves:
            curve.setPen(pg.mkPen(colours.chart_tps, width=2))
        for _, curve in self._acc_curves:
            curve.setPen(pg.mkPen(colours.chart_accept, width=2, style=pg.QtCore.Qt.PenStyle.DashLine))
        for legend in self.legends:
            legend.setLabelTextColor(colours.text)
        why = self._why
        if why:
            plot = why["plot"]
            plot.setBackground(colours.background)
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setTextPen(colours.text)
                plot.getAxis(axis).setPen(colours.muted)
            plot.setTitle(plot.plotItem.titleLabel.text, color=colours.text)
            why["legend"].setLabelTextColor(colours.text)
            why["tokens"].setPen(pg.mkPen(colours.chart_tps, width=2))
            why["speedup"].setPen(pg.mkPen(colours.chart_accept, width=2, style=pg.QtCore.Qt.PenStyle.DashLine))
            why["plain"].setPen(pg.mkPen(colours.muted, width=1, style=pg.QtCore.Qt.PenStyle.DotLine))
            why["reply"].setPen(pg.mkPen(colours.text, width=1))
            why["earlier"].setPen(pg.mkPen(colours.muted, width=1.5))
            why["earlier"].setBrush(pg.mkBrush(None))

    def pair_changed(self) -> None:
        """The pair the shown reply ran on is gone (another pair loading, a failed load, the engine stopped): the
        "slower than plain" verdict was about that pair, and its buttons would act on the next one. Dismissed
        until the next reply (it survived a pair switch and a crash, and Draft off then turned off the new
        pair's drafting)."""
        self._dismissed_on = self.meter.started
        self.refresh()

    @property
    def warning_applies(self) -> bool:
        """The warning (and its buttons) belong to the reply shown, on the pair loaded."""
        return self.snapshot.slower_than_plain and self._dismissed_on != self.meter.started

    @Slot()
    def _on_draft_off_button_clicked(self) -> None:
        if not self.warning_applies:
            return
        self._acted, self._acted_on = "Drafting is off", self.meter.started
        self.draft_off_requested.emit()
        self.refresh()

    @Slot()
    def _on_draft_auto_button_clicked(self) -> None:
        if not self.warning_applies:
            return
        self._acted, self._acted_on = "Automatic k applies", self.meter.started
        self.draft_auto_requested.emit()
        self.refresh()

    @Slot()
    def _on_timer_timeout(self) -> None:
        if self.meter.streaming or self.meter.take_dirty():
            self.refresh()

    def refresh(self) -> None:
        """Redraw from the meter (called by the timer; tests may call it directly)."""
        s = self.meter.tick()
        self.snapshot = s
        v = self.values
        v["decode_now"].setText(fmt(s.decode_now, ".1f", " tok/s"))
        v["decode_tps"].setText(fmt(s.decode_tps, ".1f", " tok/s"))
        v["acceptance_rate"].setText(fmt(None if s.acceptance_rate is None else s.acceptance_rate * 100, ".0f",
                                         f" %  ({s.accepted}/{s.drafted})"))
        v["tokens_per_pass"].setText(fmt(s.tokens_per_pass, ".2f"))
        v["k"].setText("–" if s.k is None else f"{s.k}  (mean {fmt(s.k_mean, '.1f')})")
        v["token_acceptance"].setText(fmt(None if s.token_acceptance is None else s.token_acceptance * 100, ".0f",
                                          " %"))
        v["plain_tps"].setText(fmt(s.plain_tps, ".1f", " tok/s"))
        v["ttft_s"].setText(fmt(None if s.ttft_s is None else s.ttft_s * 1000, ".0f", " ms"))
        v["prompt_tps"].setText(prompt_speed_text(s))
        if s.draft_share is None:
            v["time_share"].setText("–")
        else:
            v["time_share"].setText(f"{s.draft_share:.0%} / {s.verify_share or 0:.0%} / {s.other_share or 0:.0%}")
        v["generated"].setText(str(s.generated))
        v["by_drafter"].setText(by_drafter_text(s.by_drafter))
        self.speedup_label.setText(format_speedup(s.speedup, s.speedup_low, s.speedup_high, streaming=s.streaming)
                                   if s.has_reply else "–")
        figure = speedup_shown_as_figure(s.speedup, s.speedup_low, s.speedup_high)
        if self.speedup_label.property("settled") != figure:  # bold only for a figure that holds (±20 %)
            self.speedup_label.setProperty("settled", figure)
            self.speedup_label.style().unpolish(self.speedup_label)
            self.speedup_label.style().polish(self.speedup_label)
        # The warning reads the same snapshot as the numbers: it goes with the reply shown (a new reply or a new
        # chat clears it), never a verdict left over from an earlier reply.
        if self._acted_on != self.meter.started or not s.has_reply:
            self._acted = ""  # a new reply or chat: the next warning offers its fixes again
        slower = self.warning_applies
        if slower:
            self.warning_label.setText(
                f"Speculation is slower than plain decoding for this pair and prompt "
                f"({format_speedup(s.speedup, s.speedup_low, s.speedup_high, streaming=False)} measured in this "
                f"reply, acceptance "
                f"{fmt(None if s.acceptance_rate is None else s.acceptance_rate * 100, '.0f', ' %')})."
                + (f" {self._acted} from the next reply." if self._acted else ""))
        self.draft_off_button.setEnabled(not self._acted)
        self.draft_auto_button.setEnabled(not self._acted)
        # Automatic k is a fix only for a fixed k: under automatic k already, drafting off is what is left.
        self.draft_auto_button.setVisible(self.settings is None or self.settings.value.k_policy == "fixed")
        if self.warning.isVisibleTo(self) != slower:
            self.warning.setVisible(slower)
            self.numbers.updateGeometry()  # a scroll area does not pass its contents' new height on by itself
        # A new reply is drawn at once (its first second must not show the previous reply's curve and axes), and
        # so is its first point (not a second of the empty chart's sentence).
        first_point = self.reply_chart.currentWidget() is self.reply_empty and bool(self.meter.reply_series)
        if (not s.streaming or self._drawn_reply != self.meter.started or first_point
                or self._since_chart.elapsed() >= CHART_MS):
            self._draw()

    def _set_ranges(self, which: int, x0: float, x1: float, y1: float) -> None:
        ranges = (x0, x1, 0.0, y1)
        if self._ranges.get(which) != ranges:
            self._ranges[which] = ranges
            plot = (self.reply_plot, self.conv_plot)[which]
            plot.setRange(xRange=(x0, x1), yRange=(0.0, y1), padding=0)
            plot.getAxis("left").setTicks([axis_ticks(y1), []])

    def _draw(self) -> None:
        self._since_chart.restart()
        self._drawn_reply = self.meter.started
        if self._plots is None and not self.meter.reply_series and not self.meter.conversation_series:
            self.reply_chart.setCurrentWidget(self.reply_empty)  # nothing to draw: no need for the charts yet
            self.conv_chart.setCurrentWidget(self.conv_empty)
            self.why_chart.setCurrentWidget(self.why_empty)
            return
        self.build_charts()
        series = self.meter.reply_series
        self.reply_chart.setCurrentWidget(self.reply_plot if series else self.reply_empty)
        xs = [p[0] for p in series]
        ys = [p[1] for p in series]
        self._set_ranges(0, 0.0, nice_ceil(max(xs, default=1.0)), nice_ceil(max(ys, default=1.0) * 1.05))
        self._tps_curves[0].setData(xs, ys)
        acc = [(p[0], p[2]) for p in series if p[2] is not None]
        self._acc_curves[0][1].setData([a[0] for a in acc], [a[1] for a in acc])
        conv = self.meter.conversation_series
        self.conv_chart.setCurrentWidget(self.conv_plot if conv else self.conv_empty)
        cys = [p[1] for p in conv]
        last = max(self.meter.replies, len(conv), 5)
        self._set_ranges(1, 0.5, last + 0.5, nice_ceil(max(cys, default=1.0) * 1.05))
        step = nice_ceil(last / 6) if last > 6 else 1.0  # whole reply numbers, at most about six labels
        self.conv_plot.getAxis("bottom").setTickSpacing(major=step, minor=step)
        self._tps_curves[1].setData([p[0] for p in conv], cys, symbol="o", symbolSize=6)
        cacc = [(p[0], p[2]) for p in conv if p[2] is not None]
        self._acc_curves[1][1].setData([a[0] for a in cacc], [a[1] for a in cacc], symbol="t", symbolSize=6)
        self._draw_why()

    def _draw_why(self) -> None:
        """The "you are here" chart for the snapshot shown (its sentence while nothing drafted). A conversation
        just opened (no reply measured since the app started) shows its replies' points on the curve of its last
        reply's k, without a speed-up curve: the costs are measured only live."""
        import pyqtgraph as pg

        s, why = self.snapshot, self._why
        live = s.token_acceptance is not None and s.tokens_per_pass is not None and s.curve_k is not None
        earlier = [p for p in self.meter.conversation_points if not (live and p[0] == self.meter.replies
                                                                       and not s.streaming)]
        k = s.curve_k if live else (earlier[-1][4] if earlier and not s.has_reply else None)
        if k is None:
            self.why_chart.setCurrentWidget(self.why_empty)
            return
        self.why_chart.setCurrentWidget(why["plot"])
        xs, tokens, speed = you_are_here_curves(k, s.draft_cost if live else None, s.pass_growth if live else None)
        why["tokens"].setData(xs, tokens)
        why["speedup"].setData(xs, speed or [])
        why["plot"].setTitle(f"You are here (k = {k})", color=self.colours.text)
        colours = self.colours
        mine = [{"pos": (s.token_acceptance, s.tokens_per_pass), "symbol": "o",
                 "brush": pg.mkBrush(colours.chart_tps)}] if live else []
        if live and s.speedup is not None:
            mine.append({"pos": (s.token_acceptance, s.speedup), "symbol": "s",
                         "brush": pg.mkBrush(colours.chart_accept)})
        why["reply"].setData(mine)
        spots = [{"pos": (a, tpp), "symbol": "o"} for _, a, tpp, _, _ in earlier]
        spots += [{"pos": (a, sp), "symbol": "s"} for _, a, _, sp, _ in earlier if sp is not None]
        why["earlier"].setData(spots)
        top = max([k + 1.0, *(p["pos"][1] for p in mine), *(p["pos"][1] for p in spots)])
        y1 = nice_ceil(top * 1.05)
        if self._ranges.get(2) != (0.0, 1.0, 0.0, y1):
            self._ranges[2] = (0.0, 1.0, 0.0, y1)
            why["plot"].setRange(xRange=WHY_X, yRange=(0.0, y1), padding=0)
            why["plot"].getAxis("left").setTicks([axis_ticks(y1), []])
