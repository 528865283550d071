"""“Benchmark this pair”: plain vs speculative decoding on the user's own prompts, as a table, a chart and Markdown.

The same measurement as ``outrider bench`` (``outrider.commands.generate``): for each prompt, ``runs`` rounds of
plain then speculative generation, interleaved so that machine drift hits both alike, greedy sampling, and the
per-prompt row (medians, measured speed-up = speculative tokens/s ÷ plain tokens/s, the cost model's predicted
speed-up) is computed by that module's code, so the GUI and the CLI can never disagree.

"Verify exactness" runs ``outrider verify``'s check (``outrider.engine.verify_stats``: greedy identity, then the
per-position token distributions of speculative vs plain samples) on the loaded pair, cancellable, with progress.

Generations go through the engine bridge (``QtEngineBridge``: ``generate``/``cancel`` return at once, results
arrive as signals), one at a time; nothing here blocks the GUI thread.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import pyqtgraph as pg
from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, Qt, Signal
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
    QTableView,
    QVBoxLayout,
    QWidget,
)

from outrider.engine.bench import DEFAULT_BENCH_PROMPTS, bench_row, bench_summary, slower_labels, stats_dict
from outrider.engine.verify_stats import VerifyCollector, VerifyJob, VerifyReport
from outrider.fileio import atomic_write_text
from outrider.ui.engine_bridge import describe_error
from outrider.ui.table_model import HeaderedTableModel
from outrider.worker.protocol import ChatMessage, DraftParams, SamplingParams, TextRequest

Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()
SPEEDUP_BRUSH = (31, 119, 180)  # blue and orange read on light and dark backgrounds alike
ACCEPT_BRUSH = (255, 127, 14)


class EngineBridgeLike(Protocol):
    """What the benchmark needs from ``outrider.ui.engine_bridge.QtEngineBridge`` (signals are SignalInstances).

    ``generation_finished`` carries a ``DoneEvent`` (``stop_reason``, ``stats``); ``error`` and ``crashed`` an
    exception.
    """

    generation_finished: Any
    error: Any
    crashed: Any

    def generate(self, request: Any) -> None: ...

    def cancel(self) -> None: ...


# ============================================================================================== runner ==
class RunState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    CANCELLING = "cancelling"


@dataclasses.dataclass(frozen=True)
class _Job:
    prompt_index: int
    mode: str  # "plain" or "spec"


class BenchmarkRunner(QObject):
    """Drives the interleaved plain/speculative generations through the bridge, one at a time.

    Signals:
        progressed(int, int): generations done, generations in all.
        row_finished(object): one prompt's row (the dict ``outrider bench --json`` prints).
        finished(object): every row, in prompt order.
        failed(str): the engine failed or crashed; the run stopped.
        cancelled(): the user stopped the run (rows finished so far were already reported).
    """

    progressed = Signal(int, int)
    row_finished = Signal(object)
    finished = Signal(object)
    failed = Signal(str)
    cancelled = Signal()

    def __init__(self, bridge: EngineBridgeLike, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.state = RunState.IDLE
        self.rows: list[dict[str, Any]] = []
        self._prompts: list[tuple[str, str]] = []
        self._jobs: list[_Job] = []
        self._done = 0
        self._total = 0
        self._runs: dict[int, dict[str, list[dict[str, Any]]]] = {}
        self._runs_per_prompt = 0
        self._max_tokens = 128
        self._draft = DraftParams()
        self._connected = False

    @property
    def running(self) -> bool:
        return self.state is not RunState.IDLE

    def start(self, prompts: Sequence[tuple[str, str]], *, runs: int = 2, max_tokens: int = 128,
              draft: DraftParams | None = None) -> None:
        """Benchmark ``(label, prompt)`` pairs; ``runs`` rounds of plain then speculative per prompt."""
        if self.running:
            raise RuntimeError("a benchmark is already running")
        if not prompts or runs < 1:
            raise ValueError("nothing to benchmark: choose at least one prompt and one run")
        self._prompts = list(prompts)
        self._runs_per_prompt = runs
        self._max_tokens = max_tokens
        self._draft = draft or DraftParams()
        self._jobs = [_Job(i, mode) for i in range(len(self._prompts)) for _ in range(runs)
                      for mode in ("plain", "spec")]
        self._jobs.reverse()  # pop() from the end
        self._runs = {i: {"plain": [], "spec": []} for i in range(len(self._prompts))}
        self.rows = []
        self._done, self._total = 0, len(self._jobs)
        self.state = RunState.RUNNING
        self._connect(True)
        self.progressed.emit(0, self._total)
        self._next()

    def cancel(self) -> None:
        """Stop at the next step of the running generation; ``cancelled`` follows when the engine confirms."""
        if self.state is RunState.RUNNING:
            self.state = RunState.CANCELLING
            self.bridge.cancel()

    def request_for(self, prompt: str, mode: str) -> TextRequest:
        """Greedy, so plain and speculative produce the same text and the timing compares like with like."""
        return TextRequest(messages=(ChatMessage("user", prompt),), max_tokens=self._max_tokens,
                           sampling=SamplingParams(temperature=0.0, seed=0), draft=self._draft,
                           plain=mode == "plain")

    # -- internals ----------------------------------------------------------------------------------------------
    def _connect(self, on: bool) -> None:
        pairs = ((self.bridge.generation_finished, self._on_bridge_generation_finished),
                 (self.bridge.error, self._on_bridge_error), (self.bridge.crashed, self._on_bridge_error))
        if on and not self._connected:
            for signal, slot in pairs:
                signal.connect(slot)
        elif not on and self._connected:
            for signal, slot in pairs:
                signal.disconnect(slot)
        self._connected = on

    def _next(self) -> None:
        if not self._jobs:
            self._end()
            self.finished.emit(list(self.rows))
            return
        job = self._jobs[-1]
        self.bridge.generate(self.request_for(self._prompts[job.prompt_index][1], job.mode))

    def _on_bridge_generation_finished(self, done: Any) -> None:
        if self.state is RunState.CANCELLING:
            self._end()
            self.cancelled.emit()
            return
        if self.state is not RunState.RUNNING or not self._jobs:
            return
        job = self._jobs.pop()
        if getattr(done, "stop_reason", "") == "cancelled":  # someone else stopped it: stop the run
            self._end()
            self.cancelled.emit()
            return
        runs = self._runs[job.prompt_index]
        runs[job.mode].append(stats_dict(done.stats))
        self._done += 1
        self.progressed.emit(self._done, self._total)
        if len(runs["spec"]) == self._runs_per_prompt and len(runs["plain"]) == self._runs_per_prompt:
            label, prompt = self._prompts[job.prompt_index]
            row = bench_row(label, prompt, runs)
            self.rows.append(row)
            self.row_finished.emit(row)
        self._next()

    def _on_bridge_error(self, exc: object) -> None:
        if self.state is RunState.IDLE:
            return
        was_cancelling = self.state is RunState.CANCELLING
        self._end()
        if was_cancelling:
            self.cancelled.emit()
        else:
            self.failed.emit(_describe(exc))

    def _end(self) -> None:
        self.state = RunState.IDLE
        self._jobs = []
        self._connect(False)


def _describe(exc: object) -> str:
    return describe_error(exc) if isinstance(exc, BaseException) else str(exc)


# ====================================================================================== exactness check ==
class VerifyBridgeLike(Protocol):
    """What the exactness check needs from ``QtEngineBridge``: the benchmark's signals plus ``step_received``
    (a ``StepBatch``: ``steps``, each with the emitted token ids ``tokens``)."""

    step_received: Any
    generation_finished: Any
    error: Any
    crashed: Any

    def generate(self, request: Any) -> None: ...

    def cancel(self) -> None: ...


class VerifyRunner(QObject):
    """Runs ``outrider verify``'s plan (``outrider.engine.verify_stats``) through the bridge, one generation at a
    time: greedy speculative and plain, then ``samples`` speculative/plain pairs at the sampling settings.

    Signals:
        progressed(int, int): generations done, generations in all.
        finished(object): the ``VerifyReport``.
        failed(str): the engine failed or crashed; the check stopped.
        cancelled(): the user stopped the check.
    """

    progressed = Signal(int, int)
    finished = Signal(object)
    failed = Signal(str)
    cancelled = Signal()

    def __init__(self, bridge: VerifyBridgeLike, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.state = RunState.IDLE
        self.collector: VerifyCollector | None = None
        self._prompt = ""
        self._sampling = SamplingParams(temperature=1.0)
        self._draft = DraftParams()
        self._next_job = 0
        self._tokens: list[int] = []
        self._connected = False

    @property
    def running(self) -> bool:
        return self.state is not RunState.IDLE

    def start(self, prompt: str, *, samples: int, tokens: int, sampling: SamplingParams,
              draft: DraftParams | None = None, alpha: float = 0.01) -> None:
        """Check ``prompt`` with ``samples`` samples of ``tokens`` tokens per mode at ``sampling`` (temperature
        > 0; its seed, or 0, seeds the samples)."""
        if self.running:
            raise RuntimeError("a check is already running")
        if sampling.temperature <= 0:
            raise ValueError("the sampling check needs a temperature above 0")
        self.collector = VerifyCollector(samples, tokens, sampling.seed or 0, alpha)
        self._prompt = prompt
        self._sampling = sampling
        self._draft = draft or DraftParams()
        self._next_job = 0
        self._tokens = []
        self.state = RunState.RUNNING
        self._connect(True)
        self.progressed.emit(0, self.collector.total)
        self._next()

    def cancel(self) -> None:
        """Stop at the next step of the running generation; ``cancelled`` follows when the engine confirms."""
        if self.state is RunState.RUNNING:
            self.state = RunState.CANCELLING
            self.bridge.cancel()

    def request_for(self, job: VerifyJob) -> TextRequest:
        s = self._sampling
        sampling = SamplingParams(0.0 if job.greedy else s.temperature, s.top_k, s.top_p, s.min_p, job.seed)
        assert self.collector is not None
        return TextRequest(messages=(ChatMessage("user", self._prompt),), max_tokens=self.collector.tokens,
                           sampling=sampling, draft=self._draft, plain=job.plain)

    # -- internals ----------------------------------------------------------------------------------------------
    def _connect(self, on: bool) -> None:
        pairs = ((self.bridge.step_received, self._on_bridge_step_received),
                 (self.bridge.generation_finished, self._on_bridge_generation_finished),
                 (self.bridge.error, self._on_bridge_error), (self.bridge.crashed, self._on_bridge_error))
        if on and not self._connected:
            for signal, slot in pairs:
                signal.connect(slot)
        elif not on and self._connected:
            for signal, slot in pairs:
                signal.disconnect(slot)
        self._connected = on

    def _next(self) -> None:
        assert self.collector is not None
        if self._next_job >= self.collector.total:
            self._end()
            self.finished.emit(self.collector.report())
            return
        self._tokens = []
        self.bridge.generate(self.request_for(self.collector.jobs[self._next_job]))

    def _on_bridge_step_received(self, batch: Any) -> None:
        if self.state is not RunState.RUNNING:
            return
        for step in getattr(batch, "steps", (batch,)):
            self._tokens.extend(int(t) for t in step.tokens)

    def _on_bridge_generation_finished(self, done: Any) -> None:
        if self.state is RunState.CANCELLING or getattr(done, "stop_reason", "") == "cancelled":
            if self.state is not RunState.IDLE:
                self._end()
                self.cancelled.emit()
            return
        if self.state is not RunState.RUNNING or self.collector is None:
            return
        job = self.collector.jobs[self._next_job]
        stats = stats_dict(done.stats)
        self.collector.record(job, self._tokens, drafted=int(stats.get("drafted") or 0),
                              accepted=int(stats.get("accepted") or 0))
        self._next_job += 1
        self.progressed.emit(self._next_job, self.collector.total)
        self._next()

    def _on_bridge_error(self, exc: object) -> None:
        if self.state is RunState.IDLE:
            return
        was_cancelling = self.state is RunState.CANCELLING
        self._end()
        if was_cancelling:
            self.cancelled.emit()
        else:
            self.failed.emit(_describe(exc))

    def _end(self) -> None:
        self.state = RunState.IDLE
        self._connect(False)


def verify_summary(report: VerifyReport) -> str:
    """The verdict of an exactness check in words, for the dialog."""
    checked = (f"{report.samples} speculative and {report.samples} plain samples of {report.tokens} tokens")
    drafted = (f"{report.drafted:,} draft tokens were verified by the target while sampling, "
               f"{report.accepted:,} accepted.")
    numbers = (f"smallest p-value {report.min_p_value:.3g} (each must exceed {report.threshold:.3g}), largest "
               f"total-variation distance {report.max_tv:.3f}")
    greedy = (f"greedy output identical to plain decoding over {report.greedy_tokens} tokens"
              if report.greedy_identical else
              f"greedy output differs from plain decoding at token {report.first_divergence}")
    if report.verdict == "exact":
        return (f"Exact: {greedy}; {checked} agree at every position ({numbers}). {drafted}")
    if report.verdict == "inconclusive":
        if report.drafted == 0:
            why = ("nothing was drafted while sampling, so the speculative runs were plain decoding and prove "
                   "nothing — try another prompt or a longer draft")
        else:
            why = "no position had tokens frequent enough to compare — use more samples"
        return f"Inconclusive: {why}. ({greedy}; {checked}.)"
    where = ", ".join(str(j) for j in report.rejected)
    sampled = (f"the sampled tokens differ from plain sampling at position(s) {where}" if report.rejected else
               f"{checked} agree at every position")
    return f"Not exact: {greedy}; {sampled} ({numbers}). {drafted}"


# =============================================================================================== model ==
class ResultColumn(enum.IntEnum):
    Prompt = 0
    Acceptance = 1
    TokensPerPass = 2
    PlainTps = 3
    SpecTps = 4
    Speedup = 5
    Predicted = 6
    Ratio = 7


# (header, row key, format, tooltip) — definitions as in docs/metrics.md
_RESULT_COLUMNS: dict[ResultColumn, tuple[str, str, str, str]] = {
    ResultColumn.Prompt: ("Prompt", "label", "", "The prompt (its start); full text in the Markdown report"),
    ResultColumn.Acceptance: ("Acceptance", "acceptance_rate", ".1%",
                              "accepted / drafted: the share of drafted tokens the target accepted (median)"),
    ResultColumn.TokensPerPass: ("Tokens/pass", "tokens_per_pass", ".2f",
                                 "generated / target passes: tokens each read of the target's weights bought"),
    ResultColumn.PlainTps: ("Plain tok/s", "plain_tps", ".1f", "Decode tokens/s without a draft (median)"),
    ResultColumn.SpecTps: ("Speculative tok/s", "spec_tps", ".1f", "Decode tokens/s with the draft (median)"),
    ResultColumn.Speedup: ("Speed-up", "speedup", ".2f",
                           "speculative tok/s ÷ plain tok/s, measured; below 1 the draft makes this prompt slower"),
    ResultColumn.Predicted: ("Predicted", "predicted_speedup", ".2f",
                             "What the cost model predicts from the measured acceptance and step costs"),
    ResultColumn.Ratio: ("Measured/predicted", "measured_over_predicted", ".2f",
                         "Far from 1: the cost model misjudges this machine or prompt"),
}


class BenchmarkResultsModel(HeaderedTableModel):
    """One row per benchmarked prompt: a thin adapter over the row dicts of ``outrider bench``."""

    headers = tuple((title, tip) for title, _key, _fmt, tip in _RESULT_COLUMNS.values())
    RowRole = Qt.ItemDataRole.UserRole + 1
    ValueRole = Qt.ItemDataRole.UserRole + 2

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[dict[str, Any]] = []

    def clear(self) -> None:
        self.beginResetModel()
        self._rows = []
        self.endResetModel()

    def append(self, row: dict[str, Any]) -> None:
        self.beginInsertRows(_ROOT, len(self._rows), len(self._rows))
        self._rows.append(row)
        self.endInsertRows()

    @property
    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows)

    def _row_count(self) -> int:
        return len(self._rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not self.is_valid(index):
            return None
        row = self._rows[index.row()]
        col = ResultColumn(index.column())
        _title, key, fmt, tip = _RESULT_COLUMNS[col]
        value = row.get(key)
        if role == Qt.ItemDataRole.DisplayRole:
            return format_value(value, fmt) + ("×" if col in (ResultColumn.Speedup, ResultColumn.Predicted)
                                               and value is not None else "")
        if role == Qt.ItemDataRole.ToolTipRole:
            if col is ResultColumn.Prompt:
                return str(row.get("prompt", ""))
            if col is ResultColumn.Speedup and isinstance(value, float) and value < 1.0:
                return f"{tip}\n⚠ Slower than plain decoding for this prompt: consider draft 'auto' or off."
            return tip
        if role == Qt.ItemDataRole.TextAlignmentRole and col is not ResultColumn.Prompt:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == self.RowRole:
            return row
        if role == self.ValueRole:
            return value
        return None


def format_value(value: Any, fmt: str) -> str:
    if value is None:
        return "—"
    return format(value, fmt) if fmt else str(value)


# ============================================================================================ markdown ==
def results_markdown(rows: Sequence[dict[str, Any]], prompts: Sequence[tuple[str, str]], *, pair_name: str = "",
                     runs: int = 0, max_tokens: int = 0, when: _dt.datetime | None = None) -> str:
    """The report: a table per prompt, the medians, the settings and every prompt in full."""
    stamp = (when or _dt.datetime.now().astimezone()).strftime("%Y-%m-%d %H:%M %Z").strip()
    title = f"# Outrider benchmark{': ' + pair_name if pair_name else ''}"
    out = [title, "", f"{stamp} · {runs} run(s) per mode, interleaved · up to {max_tokens} tokens · greedy", ""]
    heads = [_RESULT_COLUMNS[c][0] for c in ResultColumn]
    out.append("| " + " | ".join(heads) + " |")
    out.append("|" + "|".join([":--"] + ["--:"] * (len(heads) - 1)) + "|")
    for r in rows:
        cells = []
        for c in ResultColumn:
            _t, key, fmt, _tip = _RESULT_COLUMNS[c]
            text = format_value(r.get(key), fmt)
            if c in (ResultColumn.Speedup, ResultColumn.Predicted) and r.get(key) is not None:
                text += "×"
            cells.append(text.replace("|", "\\|"))
        out.append("| " + " | ".join(cells) + " |")
    if rows:
        s = bench_summary(list(rows))
        out += ["", f"**Median speed-up {s['median_speedup']:.2f}×** · median acceptance "
                    f"{s['median_acceptance']:.1%} over {s['prompts']} prompt(s)."]
        slower = slower_labels(rows)
        if slower:
            out.append(f"Slower than plain decoding on: {', '.join(slower)}.")
    out += ["", "Speed-up = speculative decode tokens/s ÷ plain decode tokens/s (measured); acceptance = "
                "accepted ÷ drafted; predicted = the cost model of docs/metrics.md.", "", "## Prompts", ""]
    out += [f"- **{label}**: {prompt}" for label, prompt in prompts]
    return "\n".join(out) + "\n"


# ============================================================================================== dialog ==
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
            item = QListWidgetItem(f"{label}: {text}")
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
        self.status = QLabel("Choose prompts and press Run.", self)
        self.status.setObjectName("benchmarkStatus")
        self.status.setWordWrap(True)
        self.table = QTableView(self)
        self.table.setObjectName("benchmarkTable")
        self.table.setModel(self.results)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.setTabKeyNavigation(False)  # Tab leaves the table; arrows move inside
        self.table.horizontalHeader().setSectionResizeMode(ResultColumn.Prompt, QHeaderView.ResizeMode.Stretch)
        self.chart = self._build_chart()

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
        right.addWidget(self.chart)
        split = QSplitter(Qt.Orientation.Horizontal, self)
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(1, 3)
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
        chart.setMinimumHeight(220)
        self.speedup_plot = chart.addPlot(row=0, col=0, title="Speed-up (×)")
        self.accept_plot = chart.addPlot(row=1, col=0, title="Acceptance")
        self.accept_plot.setYRange(0, 1)
        for plot in (self.speedup_plot, self.accept_plot):
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.titleLabel.setAttr("color", fg)
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setTextPen(fg)
                plot.getAxis(axis).setPen(fg)
        self.speedup_plot.addLine(y=1.0, pen=pg.mkPen(fg, style=Qt.PenStyle.DashLine))
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
        slower = sum(1 for r in rows if r["speedup"] < 1.0)
        warn = f" ⚠ Slower than plain on {slower} prompt(s)." if slower else ""
        self.status.setText(f"Median speed-up {s['median_speedup']:.2f}× · median acceptance "
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
        xs = list(range(len(rows)))
        self.speedup_bars.setOpts(x=xs, height=[float(r["speedup"] or 0.0) for r in rows], width=0.6)
        self.accept_bars.setOpts(x=xs, height=[float(r["acceptance_rate"] or 0.0) for r in rows], width=0.6)
        ticks = [[(i, str(r["label"])) for i, r in enumerate(rows)]]
        for plot in (self.speedup_plot, self.accept_plot):
            plot.getAxis("bottom").setTicks(ticks)
            plot.setXRange(-0.5, max(len(rows), 1) - 0.5, padding=0.05)
        top = max([float(r["speedup"] or 0.0) for r in rows] + [1.2])
        self.speedup_plot.setYRange(0, top * 1.1, padding=0)

    def bar_heights(self) -> tuple[list[float], list[float]]:
        """(speed-ups, acceptance rates) as drawn (for tests and screenshots)."""
        s = self.speedup_bars.opts.get("height")
        a = self.accept_bars.opts.get("height")
        return [float(v) for v in (s if s is not None else [])], [float(v) for v in (a if a is not None else [])]

    # -- saving -------------------------------------------------------------------------------------------------
    def markdown(self) -> str:
        runs, tokens = self._run_settings
        return results_markdown(self.results.rows, self._run_prompts, pair_name=self.pair_name, runs=runs,
                                max_tokens=tokens)

    def save_markdown(self, path: str | Path) -> Path:
        """Write the report atomically (a crash leaves the old file or the whole new one)."""
        p = Path(path)
        atomic_write_text(p, self.markdown())
        return p

    def _on_save_button_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the benchmark", "outrider-benchmark.md",
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
        self.verify_result.setText("")
        self.status.setText(f"Verifying exactness on “{label}”: greedy, then {samples} speculative and {samples} "
                            f"plain samples of {tokens} tokens…")
        self.verify_runner.start(text, samples=samples, tokens=tokens, sampling=sampling, draft=self._draft)

    def _set_verifying(self, on: bool) -> None:
        for widget in (self.run_button, self.verify_button, self.prompt_list, self.verify_samples_spin,
                       self.verify_tokens_spin, self.verify_temperature_spin):
            widget.setEnabled(not on)
        self.stop_button.setEnabled(on)

    def _sync_verify_button(self) -> None:
        self.verify_button.setEnabled(not self.runner.running and not self.verify_runner.running)

    def _on_verify_runner_finished(self, report: VerifyReport) -> None:
        self._set_verifying(False)
        self.verify_result.setText(verify_summary(report))
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
