"""“Benchmark this pair”: plain vs speculative decoding on the user's own prompts, as a table, a chart and Markdown.

The same measurement as ``outrider bench``: for each prompt, ``runs`` rounds of plain then speculative generation,
interleaved so that machine drift hits both alike, greedy sampling, and the per-prompt row (medians, measured
speed-up = speculative tokens/s ÷ plain tokens/s, the cost model's predicted speed-up) is computed by
``outrider.engine.measure.bench``, so the GUI and the CLI can never disagree.

The runner is ``outrider.ui.dialogs.benchmark_runner``, the table model and Markdown report
``outrider.ui.dialogs.benchmark_results``. "Verify exactness" (``outrider.ui.dialogs.verify_panel``) runs
``outrider verify``'s check (``outrider.engine.measure.verify_stats``: greedy identity, then the per-position token
distributions of speculative vs plain samples) on the loaded pair, cancellable, with progress.

Generations go through the engine bridge (``QtEngineBridge``: ``generate``/``cancel`` return at once, results
arrive as signals), one at a time; nothing here blocks the GUI thread.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QCloseEvent, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from outrider.engine.measure.bench import DEFAULT_BENCH_PROMPTS, bench_summary
from outrider.engine.measure.verify_stats import VerifyReport
from outrider.engine.params import DraftParams, SamplingParams
from outrider.fileio import atomic_write_text
from outrider.ui.dialogs.benchmark_results import BenchmarkResultsModel, ResultColumn, results_markdown
from outrider.ui.dialogs.benchmark_runner import BenchmarkRunner, EngineBridgeLike
from outrider.ui.dialogs.verify_panel import (
    VerifyBridgeLike,
    VerifyRunner,
    verify_details,
    verify_sentence,
    verify_summary,
)

READY_NOTE = "Choose prompts and press Run."
CHART_EMPTY = "Each prompt's measured speed-up and acceptance appear here as bars once it has been measured."
DRAFT_OFF_NOTE = ("Drafting is off (Settings: draft source none), so the speculative runs decode plainly too and "
                  "the speed-up reads about 1×. Choose a draft source to measure what drafting gains.")
SPEEDUP_BRUSH = (31, 119, 180)  # blue and orange read on light and dark backgrounds alike
ACCEPT_BRUSH = (255, 127, 14)



def speedup_axis_top(speedups: Sequence[float]) -> float:
    """The top of the speed-up axis: 1, 2 or 5 × 10^n above the largest bar with a tenth to spare, at least 2
    (so the plain-decoding line at 1× always shows; with labels at 0, half and the top, 2 labels it too)."""
    top = max([*speedups, 1.0]) * 1.1
    scale = 10.0 ** math.floor(math.log10(top))
    for m in (1.0, 2.0, 5.0, 10.0):
        if top <= m * scale:
            return max(2.0, m * scale)
    return max(2.0, 10.0 * scale)


def default_prompt_list(conversation: Sequence[str]) -> list[tuple[str, str]]:
    """The conversation's prompts (``you #1``…) first, then the default set; duplicates and blanks dropped."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for i, text in enumerate(conversation):
        t = text.strip()
        if t and t not in seen:
            seen.add(t)
            out.append((f"you #{i + 1}", t))
    for label, text in DEFAULT_BENCH_PROMPTS:
        if text not in seen:
            seen.add(text)
            out.append((label, text))
    return out


class BenchmarkDialog(QDialog):
    """Runs plain vs speculative on chosen prompts; shows a table and a chart; saves Markdown.

    Signals:
        benchmark_finished(object): the rows of a completed run.

    Attributes:
        runner: the ``BenchmarkRunner`` (signals ``row_finished``, ``finished``, ``failed``, ``cancelled``).
        results: the ``BenchmarkResultsModel`` behind the table.
        verify_runner: the ``VerifyRunner`` of the "Verify exactness" action (``outrider verify`` on the first
            ticked prompt; its report comes on ``verify_finished``, in words in ``verify_result``).
    """

    benchmark_finished = Signal(object)
    verify_finished = Signal(object)  # the VerifyReport of a completed exactness check

    def __init__(self, engine_bridge: EngineBridgeLike, prompts: list[str], parent: QWidget | None = None, *,
                 pair_name: str = "", draft: DraftParams | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Benchmark this pair — Outrider")
        self.resize(960, 640)
        self.pair_name = pair_name
        self._draft = draft
        self.runner = BenchmarkRunner(engine_bridge, self)
        self.results = BenchmarkResultsModel(self)
        self._run_prompts: list[tuple[str, str]] = []
        self._run_settings = (0, 0)

        self.prompt_list = QListWidget(self)
        self.prompt_list.setToolTip("Tick the prompts to benchmark: your conversation's first, then a default set "
                                    "(code, structured output, quoting, prose) — speed-ups depend on the prompt")
        for label, text in default_prompt_list(prompts):
            item = QListWidgetItem(f"{label}: {' '.join(text.split())}")  # one line per prompt; all of it in the tip
            item.setData(Qt.ItemDataRole.UserRole, (label, text))
            item.setToolTip(text)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked)
            self.prompt_list.addItem(item)
        self.runs_spin = QSpinBox(self)
        self.runs_spin.setRange(1, 10)
        self.runs_spin.setValue(2)
        self.runs_spin.setToolTip("Rounds per prompt; each round runs plain then speculative (medians are shown)")
        self.tokens_spin = QSpinBox(self)
        self.tokens_spin.setRange(16, 4096)
        self.tokens_spin.setValue(128)
        self.tokens_spin.setSingleStep(32)
        self.tokens_spin.setToolTip("Tokens generated per run")
        self.run_button = QPushButton("&Run benchmark", self)
        self.run_button.setToolTip("Plain vs speculative on the ticked prompts (greedy, same output both ways)")
        self.run_button.setDefault(True)
        self.stop_button = QPushButton("&Stop", self)
        self.stop_button.setToolTip("Stop after the current step; rows already measured are kept")
        self.stop_button.setEnabled(False)
        self.save_button = QPushButton("Save as &Markdown…", self)
        self.save_button.setToolTip("Write the table, medians and prompts to a Markdown file")
        self.save_button.setEnabled(False)
        self.close_button = QPushButton("&Close", self)
        self.progress = QProgressBar(self)
        self.progress.setToolTip("Generations done")
        self.status = QLabel(DRAFT_OFF_NOTE if draft is not None and draft.k == 0 else READY_NOTE, self)
        self.status.setObjectName("benchmarkStatus")
        self.status.setWordWrap(True)
        self.table = QTableView(self)
        self.table.setObjectName("benchmarkTable")
        self.table.setModel(self.results)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.setTabKeyNavigation(False)  # Tab leaves the table; arrows move inside
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)  # numbers: as wide as they need
        header.setSectionResizeMode(ResultColumn.Prompt, QHeaderView.ResizeMode.Stretch)  # the prompt: the rest
        header.setMinimumSectionSize(40)
        self.table.setWordWrap(False)
        self.chart = self._build_chart()
        self.chart_empty = QLabel(CHART_EMPTY, self)
        self.chart_empty.setObjectName("chartEmpty")
        self.chart_empty.setWordWrap(True)
        self.chart_empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.chart_stack = QStackedWidget(self)  # a sentence in place of empty axes until a prompt is measured
        self.chart_stack.addWidget(self.chart_empty)
        self.chart_stack.addWidget(self.chart)

        form = QFormLayout()
        runs_label = QLabel("R&uns:", self)
        runs_label.setBuddy(self.runs_spin)
        tokens_label = QLabel("&Tokens per run:", self)
        tokens_label.setBuddy(self.tokens_spin)
        form.addRow(runs_label, self.runs_spin)
        form.addRow(tokens_label, self.tokens_spin)
        left = QWidget(self)
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        prompts_label = QLabel("&Prompts:", left)
        prompts_label.setBuddy(self.prompt_list)
        left_layout.addWidget(prompts_label)
        left_layout.addWidget(self.prompt_list, 1)
        left_layout.addLayout(form)
        right = QSplitter(Qt.Orientation.Vertical, self)
        right.addWidget(self.table)
        right.addWidget(self.chart_stack)
        split = QSplitter(Qt.Orientation.Horizontal, self)
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(1, 3)
        split.setSizes([220, 740])
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.progress, 1)
        buttons.addWidget(self.save_button)
        buttons.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        layout.addWidget(split, 1)
        layout.addWidget(self.status)
        layout.addLayout(buttons)

        self.run_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.runner.cancel)
        self.save_button.clicked.connect(self._on_save_button_clicked)
        self.close_button.clicked.connect(self.reject)
        self.runner.progressed.connect(self._on_runner_progressed)
        self.runner.row_finished.connect(self._on_runner_row_finished)
        self.runner.finished.connect(self._on_runner_finished)
        self.runner.failed.connect(self._on_runner_failed)
        self.runner.cancelled.connect(self._on_runner_cancelled)
        self._build_verify()

    def _build_chart(self) -> pg.GraphicsLayoutWidget:
        pal = self.palette()
        fg = pal.color(QPalette.ColorRole.WindowText)
        chart = pg.GraphicsLayoutWidget(self)
        chart.setBackground(pal.color(QPalette.ColorRole.Base))
        chart.setToolTip("Per prompt: measured speed-up (dashed line: plain decoding) and acceptance rate")
        chart.setMinimumHeight(240)
        self.speedup_plot = chart.addPlot(row=0, col=0, title="Measured speed-up")
        self.accept_plot = chart.addPlot(row=1, col=0, title="Acceptance")
        self.speedup_plot.setLabel("left", "×")
        self.accept_plot.setLabel("left", "%")
        self.accept_plot.setYRange(0, 1, padding=0)
        # Three evenly spaced y labels (a short plot stacked more on top of each other): 0, half and the top.
        self.accept_plot.getAxis("left").setTicks([[(0.0, "0"), (0.5, "50"), (1.0, "100")], []])
        for plot in (self.speedup_plot, self.accept_plot):
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.titleLabel.setAttr("color", fg)
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setTextPen(fg)
                plot.getAxis(axis).setPen(fg)
        self.speedup_plot.addLine(y=1.0, pen=pg.mkPen(fg, style=Qt.PenStyle.DashLine), label="plain 1×",
                                  labelOpts={"position": 0.97, "color": fg, "anchors": [(1, 1), (1, 1)]})
        self.speedup_bars = pg.BarGraphItem(x=[], height=[], width=0.6, brush=pg.mkBrush(*SPEEDUP_BRUSH))
        self.accept_bars = pg.BarGraphItem(x=[], height=[], width=0.6, brush=pg.mkBrush(*ACCEPT_BRUSH))
        self.speedup_plot.addItem(self.speedup_bars)
        self.accept_plot.addItem(self.accept_bars)
        return chart

    # -- running ------------------------------------------------------------------------------------------------
    def checked_prompts(self) -> list[tuple[str, str]]:
        out = []
        for i in range(self.prompt_list.count()):
            item = self.prompt_list.item(i)
            if item.checkState() == Qt.CheckState.Checked:
                label, text = item.data(Qt.ItemDataRole.UserRole)
                out.append((str(label), str(text)))
        return out

    def start(self) -> None:
        """Run the benchmark on the ticked prompts (returns at once; results arrive as rows)."""
        prompts = self.checked_prompts()
        if not prompts:
            self.status.setText("Tick at least one prompt.")
            return
        if self.runner.running:
            return
        self._run_prompts = prompts
        self._run_settings = (self.runs_spin.value(), self.tokens_spin.value())
        self.results.clear()
        self._update_chart()
        self._set_running(True)
        self.status.setText(f"Running {len(prompts)} prompt(s), plain and speculative, interleaved…")
        self.runner.start(prompts, runs=self._run_settings[0], max_tokens=self._run_settings[1], draft=self._draft)

    def _set_running(self, on: bool) -> None:
        self.run_button.setEnabled(not on)
        self.stop_button.setEnabled(on)
        self.prompt_list.setEnabled(not on)
        self.runs_spin.setEnabled(not on)
        self.tokens_spin.setEnabled(not on)
        self.save_button.setEnabled(not on and bool(self.results.rows))

    def _on_runner_progressed(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)

    def _on_runner_row_finished(self, row: dict[str, Any]) -> None:
        self.results.append(row)
        self._update_chart()

    def _on_runner_finished(self, rows: list[dict[str, Any]]) -> None:
        self._set_running(False)
        s = bench_summary(rows)
        slower = sum(1 for r in rows if r["ab_speedup"] < 1.0)
        warn = f" ⚠ Slower than plain on {slower} prompt(s)." if slower else ""
        self.status.setText(f"Median speed-up {s['median_ab_speedup']:.2f}× · median acceptance "
                            f"{s['median_acceptance']:.1%} over {s['prompts']} prompt(s).{warn}")
        self.benchmark_finished.emit(rows)

    def _on_runner_failed(self, message: str) -> None:
        self._set_running(False)
        self.status.setText(f"The benchmark stopped: {message}")

    def _on_runner_cancelled(self) -> None:
        self._set_running(False)
        self.status.setText(f"Stopped; {len(self.results.rows)} prompt(s) measured.")

    def _update_chart(self) -> None:
        rows = self.results.rows
        self.chart_stack.setCurrentWidget(self.chart if rows else self.chart_empty)
        xs = list(range(len(rows)))
        self.speedup_bars.setOpts(x=xs, height=[float(r["ab_speedup"] or 0.0) for r in rows], width=0.6)
        self.accept_bars.setOpts(x=xs, height=[float(r["acceptance_rate"] or 0.0) for r in rows], width=0.6)
        ticks = [[(i, str(r["label"])) for i, r in enumerate(rows)]]
        for plot in (self.speedup_plot, self.accept_plot):
            plot.getAxis("bottom").setTicks(ticks)
            plot.setXRange(-0.5, max(len(rows), 1) - 0.5, padding=0.05)
        top = speedup_axis_top([float(r["ab_speedup"] or 0.0) for r in rows])
        self.speedup_plot.setYRange(0, top, padding=0)
        self.speedup_plot.getAxis("left").setTicks([[(v, f"{v:g}") for v in (0.0, top / 2, top)], []])

    def bar_heights(self) -> tuple[list[float], list[float]]:
        """(speed-ups, acceptance rates) as drawn (for tests and screenshots)."""
        s = self.speedup_bars.opts.get("height")
        a = self.accept_bars.opts.get("height")
        return [float(v) for v in (s if s is not None else [])], [float(v) for v in (a if a is not None else [])]

    # -- saving -------------------------------------------------------------------------------------------------
    def markdown(self) -> str:
        runs, tokens = self._run_settings
        text = results_markdown(self.results.rows, self._run_prompts, pair_name=self.pair_name, runs=runs,
                                max_tokens=tokens)
        if self.verify_report is not None:  # the verdict goes with the saved report, in the same words
            text = text.rstrip("\n") + f"\n\n## Exactness check\n\n{verify_summary(self.verify_report)}\n"
        return text

    def save_markdown(self, path: str | Path) -> Path:
        """Write the report atomically (a crash leaves the old file or the whole new one)."""
        p = Path(path)
        atomic_write_text(p, self.markdown())
        return p

    def _on_save_button_clicked(self) -> None:
        # In the home folder, as the conversation export does: a relative name opened wherever the app was started.
        path, _ = QFileDialog.getSaveFileName(self, "Save the benchmark", str(Path.home() / "outrider-benchmark.md"),
                                              "Markdown (*.md);;All files (*)")
        if not path:
            return
        try:
            self.save_markdown(path)
        except OSError as exc:
            self.status.setText(f"Could not save {path}: {exc.strerror or exc}")
        else:
            self.status.setText(f"Saved {path}")

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def done(self, result: int) -> None:
        self.runner.cancel()  # the engine stops at its next step; later events are ignored
        super().done(result)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.runner.cancel()
        super().closeEvent(event)

    # -- exactness check ----------------------------------------------------------------------------------------
    def _build_verify(self) -> None:
        """The "Verify exactness" row: ``outrider verify`` on the first ticked prompt with the loaded pair."""
        self.verify_runner = VerifyRunner(cast(VerifyBridgeLike, self.runner.bridge), self)
        self.verify_sampling = SamplingParams(temperature=1.0, seed=0)  # top-k/top-p/min-p and seed of the check
        self.verify_samples_spin = QSpinBox(self)
        self.verify_samples_spin.setRange(10, 10_000)
        self.verify_samples_spin.setValue(200)
        self.verify_samples_spin.setSingleStep(50)
        self.verify_samples_spin.setToolTip("Speculative and plain samples each (more samples, a sharper test)")
        self.verify_tokens_spin = QSpinBox(self)
        self.verify_tokens_spin.setRange(1, 64)
        self.verify_tokens_spin.setValue(8)
        self.verify_tokens_spin.setToolTip("Tokens per sample: the positions whose token distributions are compared")
        self.verify_temperature_spin = QDoubleSpinBox(self)
        self.verify_temperature_spin.setRange(0.05, 2.0)
        self.verify_temperature_spin.setSingleStep(0.1)
        self.verify_temperature_spin.setValue(1.0)
        self.verify_temperature_spin.setToolTip("Sampling temperature of the distribution check (temperature 0 is "
                                                "always checked too)")
        self.verify_button = QPushButton("&Verify exactness", self)
        self.verify_button.setToolTip("Check that speculative decoding gives exactly what plain decoding gives: the "
                                      "same greedy tokens, and the same token distribution per position when "
                                      "sampling (chi-square test), on the first ticked prompt")
        self.verify_result = QLabel("", self)
        self.verify_result.setObjectName("verifyResult")
        self.verify_result.setWordWrap(True)
        self.verify_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # The statistics behind the verdict, on request: the verdict is one plain sentence.
        self.verify_details_button = QToolButton(self)
        self.verify_details_button.setText("Details")
        self.verify_details_button.setCheckable(True)
        self.verify_details_button.setArrowType(Qt.ArrowType.RightArrow)
        self.verify_details_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.verify_details_button.hide()
        self.verify_details = QLabel("", self)
        self.verify_details.setObjectName("verifyDetails")
        self.verify_details.setWordWrap(True)
        self.verify_details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.verify_details.hide()
        self.verify_details_button.toggled.connect(self._on_verify_details_toggled)
        self.verify_report: VerifyReport | None = None
        box = QGroupBox("Exactness", self)
        row = QHBoxLayout()
        for text, widget in (("Sa&mples:", self.verify_samples_spin), ("Po&sitions:", self.verify_tokens_spin),
                             ("T&emperature:", self.verify_temperature_spin)):
            label = QLabel(text, box)
            label.setBuddy(widget)
            row.addWidget(label)
            row.addWidget(widget)
        row.addStretch(1)
        row.addWidget(self.verify_button)
        box_layout = QVBoxLayout(box)
        box_layout.addLayout(row)
        box_layout.addWidget(self.verify_result)
        box_layout.addWidget(self.verify_details_button)
        box_layout.addWidget(self.verify_details)
        layout = self.layout()
        if isinstance(layout, QVBoxLayout):
            layout.insertWidget(max(0, layout.indexOf(self.status)), box)

        self.verify_button.clicked.connect(self.start_verify)
        self.stop_button.clicked.connect(self.verify_runner.cancel)
        self.finished.connect(self._on_finished_cancel_verify)
        self.verify_runner.progressed.connect(self._on_runner_progressed)
        self.verify_runner.finished.connect(self._on_verify_runner_finished)
        self.verify_runner.failed.connect(self._on_verify_runner_failed)
        self.verify_runner.cancelled.connect(self._on_verify_runner_cancelled)
        for signal in (self.runner.progressed, self.runner.finished, self.runner.failed, self.runner.cancelled):
            signal.connect(self._sync_verify_button)

    def start_verify(self) -> None:
        """Check exactness on the first ticked prompt (returns at once; ``verify_finished`` carries the report)."""
        prompts = self.checked_prompts()
        if not prompts:
            self.status.setText("Tick a prompt to verify on.")
            return
        if self.runner.running or self.verify_runner.running:
            self.status.setText("Wait for the running benchmark to finish (or stop it) first.")
            return
        label, text = prompts[0]
        sampling = dataclasses.replace(self.verify_sampling, temperature=self.verify_temperature_spin.value())
        samples, tokens = self.verify_samples_spin.value(), self.verify_tokens_spin.value()
        self._set_verifying(True)
        self._show_verify_report(None)
        self.status.setText(f"Verifying exactness on “{label}”: greedy, then {samples} speculative and {samples} "
                            f"plain samples of {tokens} tokens…")
        self.verify_runner.start(text, samples=samples, tokens=tokens, sampling=sampling, draft=self._draft)

    def _set_verifying(self, on: bool) -> None:
        for widget in (self.run_button, self.verify_button, self.prompt_list, self.verify_samples_spin,
                       self.verify_tokens_spin, self.verify_temperature_spin):
            widget.setEnabled(not on)
        self.stop_button.setEnabled(on)

    def _show_verify_report(self, report: VerifyReport | None) -> None:
        """The verdict in a sentence, its statistics under Details (folded), or nothing while none is known."""
        self.verify_report = report
        self.verify_result.setText(verify_sentence(report) if report is not None else "")
        self.verify_details.setText(verify_details(report) if report is not None else "")
        self.verify_details_button.setVisible(report is not None)
        self.verify_details_button.setChecked(False)
        self.verify_details.hide()

    def _on_verify_details_toggled(self, on: bool) -> None:
        self.verify_details.setVisible(on)
        self.verify_details_button.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)

    def _sync_verify_button(self) -> None:
        self.verify_button.setEnabled(not self.runner.running and not self.verify_runner.running)

    def _on_verify_runner_finished(self, report: VerifyReport) -> None:
        self._set_verifying(False)
        self._show_verify_report(report)
        self.status.setText(f"Exactness check done: {report.verdict}.")
        self.verify_finished.emit(report)

    def _on_verify_runner_failed(self, message: str) -> None:
        self._set_verifying(False)
        self.status.setText(f"The exactness check stopped: {message}")

    def _on_verify_runner_cancelled(self) -> None:
        self._set_verifying(False)
        self.status.setText("Exactness check stopped.")

    def _on_finished_cancel_verify(self, _result: int) -> None:
        self.verify_runner.cancel()  # the dialog closed: the engine stops at its next step
