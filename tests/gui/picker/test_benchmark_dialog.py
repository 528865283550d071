"""The benchmark dialog against a fake engine bridge: interleaved runs, table, chart, Markdown, cancel, errors."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from pytestqt.qtbot import QtBot

from outrider.engine.events import DoneEvent, stats_from_wire
from outrider.engine.measure.bench import DEFAULT_BENCH_PROMPTS, predicted_speedup
from outrider.engine.params import DraftParams, TextRequest
from outrider.engine.stats import GenerationStats
from outrider.ui.dialogs.benchmark_dialog import BenchmarkDialog, default_prompt_list
from outrider.ui.dialogs.benchmark_results import ResultColumn, results_markdown


def Stats(**fields: Any) -> GenerationStats:
    """Statistics as the app decodes them from the wire: derived figures recomputed from the counters."""
    return stats_from_wire(fields)


def fake_stats(plain: bool, tokens: int) -> GenerationStats:
    """Plain: 50 tok/s. Speculative: 80 tok/s, 3 of 4 drafted tokens accepted."""
    if plain:
        return Stats(generated=tokens, passes=tokens, pass_tokens=tokens, decode_s=tokens / 50,
                     verify_s=tokens / 50, decode_tps=50.0, draft_mode="none")
    passes = tokens // 4
    return Stats(generated=tokens, drafted=passes * 4, accepted=passes * 3, passes=passes, pass_tokens=passes * 4,
                 k_sum=passes * 4, decode_s=tokens / 80,
                 draft_s=tokens / 400, verify_s=tokens / 100, decode_tps=80.0, acceptance_rate=0.75,
                 tokens_per_pass=4.0, k_mean=4.0, draft_mode="model")


class FakeBridge(QObject):
    """The signals and methods of QtEngineBridge; each reply ends one event-loop turn after it was asked for."""

    step_received = Signal(object)
    generation_finished = Signal(object)
    error = Signal(object)
    crashed = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[TextRequest] = []
        self.fail_at: int | None = None
        self.hold = False  # keep the reply running until cancel()
        self.cancels = 0

    def generate(self, request: TextRequest) -> None:
        self.requests.append(request)
        n = len(self.requests)
        if self.fail_at == n:
            QTimer.singleShot(0, lambda: self.error.emit(RuntimeError("context overflow: too long")))
        elif not self.hold:
            stats = fake_stats(request.plain, request.max_tokens)
            QTimer.singleShot(0, lambda: self.generation_finished.emit(DoneEvent("length", stats, "text")))

    def cancel(self) -> None:
        self.cancels += 1
        QTimer.singleShot(0, lambda: self.generation_finished.emit(DoneEvent("cancelled", Stats(), "")))


@pytest.fixture
def bridge() -> FakeBridge:
    return FakeBridge()


@pytest.fixture
def dialog(qtbot: QtBot, bridge: FakeBridge) -> Iterator[BenchmarkDialog]:
    dlg = BenchmarkDialog(bridge, ["Summarise this: the cat sat on the mat.", "  ", DEFAULT_BENCH_PROMPTS[0][1]],
                          pair_name="Tiny + draft", draft=DraftParams(k=4))
    qtbot.addWidget(dlg)
    yield dlg
    dlg.close()


def tick_only(dlg: BenchmarkDialog, labels: set[str]) -> None:
    for i in range(dlg.prompt_list.count()):
        item = dlg.prompt_list.item(i)
        label = item.data(Qt.ItemDataRole.UserRole)[0]
        item.setCheckState(Qt.CheckState.Checked if label in labels else Qt.CheckState.Unchecked)


def test_dialog_lists_conversation_then_defaults(dialog: BenchmarkDialog) -> None:
    labels = [dialog.prompt_list.item(i).data(Qt.ItemDataRole.UserRole)[0] for i in range(dialog.prompt_list.count())]
    assert labels == ["you #1", "you #3", "structured", "quoting", "prose"]  # blank and duplicate dropped


def test_prompt_list_conversation_first_then_defaults() -> None:
    prompts = default_prompt_list(["hello there", "", "hello there", DEFAULT_BENCH_PROMPTS[1][1]])
    assert prompts[0] == ("you #1", "hello there")
    assert prompts[1] == ("you #4", DEFAULT_BENCH_PROMPTS[1][1])
    assert [label for label, _ in prompts[2:]] == ["code", "quoting", "prose"]


def test_runs_interleaved_and_shows_table_chart_markdown(qtbot: QtBot, dialog: BenchmarkDialog,
                                                         bridge: FakeBridge, tmp_path: Path) -> None:
    tick_only(dialog, {"you #1", "structured"})
    dialog.runs_spin.setValue(2)
    dialog.tokens_spin.setValue(64)
    assert dialog.chart_stack.currentWidget() is dialog.chart_empty  # no empty axes before a measurement
    with qtbot.waitSignal(dialog.benchmark_finished, timeout=5000) as blocker:
        dialog.run_button.click()
        assert not dialog.run_button.isEnabled() and dialog.stop_button.isEnabled()
    rows: list[dict[str, Any]] = blocker.args[0]
    # plain, spec, plain, spec per prompt; greedy; the dialog's draft settings
    assert [r.plain for r in bridge.requests] == [True, False] * 4
    assert all(r.sampling.temperature == 0.0 and r.max_tokens == 64 and r.draft.k == 4 for r in bridge.requests)
    assert bridge.requests[0].messages is not None
    assert bridge.requests[0].messages[-1].content == "Summarise this: the cat sat on the mat."
    assert [r["label"] for r in rows] == ["you #1", "structured"]
    assert rows[0]["ab_speedup"] == pytest.approx(80 / 50)
    assert rows[0]["acceptance_rate"] == pytest.approx(0.75)
    spec, plain = fake_stats(False, 64).to_dict(), fake_stats(True, 64).to_dict()
    assert rows[0]["predicted_speedup"] == pytest.approx(predicted_speedup(spec, plain))
    # table
    model = dialog.results
    assert model.rowCount() == 2
    assert model.index(0, ResultColumn.Speedup).data() == "1.60×"
    assert model.index(0, ResultColumn.Acceptance).data() == "75.0%"
    assert model.index(0, ResultColumn.PlainTps).data() == "50.0"
    assert "accepted / drafted" in model.headerData(ResultColumn.Acceptance, Qt.Orientation.Horizontal,
                                                    Qt.ItemDataRole.ToolTipRole)
    # chart: one bar per prompt
    assert dialog.chart_stack.currentWidget() is dialog.chart
    speedups, acceptance = dialog.bar_heights()
    assert speedups == pytest.approx([1.6, 1.6]) and acceptance == pytest.approx([0.75, 0.75])
    assert "Median speed-up 1.60×" in dialog.status.text()
    assert dialog.save_button.isEnabled() and dialog.run_button.isEnabled()
    # Markdown, written atomically
    out = tmp_path / "reports" / "bench.md"
    dialog.save_markdown(out)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Outrider benchmark: Tiny + draft\n")
    assert "| Prompt | Acceptance | Tokens/pass |" in text
    assert "| you #1 | 75.0% | 4.00 | 50.0 | 80.0 | 1.60× |" in text
    assert "**Median speed-up 1.60×**" in text
    assert "- **you #1**: Summarise this: the cat sat on the mat." in text
    assert "2 run(s) per mode" in text and "up to 64 tokens" in text
    assert sorted(p.name for p in out.parent.iterdir()) == ["bench.md"]  # no temporary file left


def test_save_button_uses_file_dialog(qtbot: QtBot, dialog: BenchmarkDialog, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QFileDialog

    tick_only(dialog, {"prose"})
    dialog.runs_spin.setValue(1)
    with qtbot.waitSignal(dialog.benchmark_finished, timeout=5000):
        dialog.start()
    target = tmp_path / "saved.md"
    offered: list[str] = []

    def ask(_parent: object, _caption: str, where: str, *_a: object, **_k: object) -> tuple[str, str]:
        offered.append(where)
        return str(target), ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(ask))
    dialog.save_button.click()
    # in the home folder (it opened in whatever folder the app was started from)
    assert offered == [str(Path.home() / "outrider-benchmark.md")]
    assert "| prose |" in target.read_text(encoding="utf-8")
    assert dialog.status.text() == f"Saved {target}"


def test_cancel_keeps_finished_rows(qtbot: QtBot, dialog: BenchmarkDialog, bridge: FakeBridge) -> None:
    tick_only(dialog, {"you #1", "structured"})
    dialog.runs_spin.setValue(1)
    with qtbot.waitSignal(dialog.runner.row_finished, timeout=5000):
        dialog.start()
    bridge.hold = True  # the next reply keeps running
    qtbot.waitUntil(lambda: len(bridge.requests) == 3, timeout=5000)
    with qtbot.waitSignal(dialog.runner.cancelled, timeout=5000):
        dialog.stop_button.click()
    assert bridge.cancels == 1
    assert dialog.results.rowCount() == 1
    assert dialog.status.text() == "Stopped; 1 prompt(s) measured."
    assert dialog.run_button.isEnabled() and not dialog.stop_button.isEnabled() and dialog.save_button.isEnabled()
    assert "| you #1 |" in dialog.markdown()


def test_engine_error_stops_with_message(qtbot: QtBot, dialog: BenchmarkDialog, bridge: FakeBridge) -> None:
    bridge.fail_at = 2
    tick_only(dialog, {"structured"})
    with qtbot.waitSignal(dialog.runner.failed, timeout=5000):
        dialog.start()
    assert "context overflow" in dialog.status.text()
    assert dialog.run_button.isEnabled() and dialog.results.rowCount() == 0
    # the runner let go of the bridge: a late event changes nothing
    bridge.generation_finished.emit(DoneEvent("length", fake_stats(True, 8), ""))
    assert dialog.results.rowCount() == 0


def test_no_prompt_ticked(dialog: BenchmarkDialog, bridge: FakeBridge) -> None:
    tick_only(dialog, set())
    dialog.run_button.click()
    assert dialog.status.text() == "Tick at least one prompt." and not bridge.requests


def test_markdown_flags_slower_prompts() -> None:
    rows = [{"label": "prose", "prompt": "x", "plain_decode_tps": 50.0, "spec_decode_tps": 40.0, "acceptance_rate": 0.2,
             "tokens_per_pass": 1.2, "k_mean": 2.0, "ab_speedup": 0.8, "predicted_speedup": 0.9,
             "measured_over_predicted": 0.8 / 0.9}]
    text = results_markdown(rows, [("prose", "x | y")], runs=1, max_tokens=8)
    assert "Slower than plain decoding on: prose." in text
    assert "| prose | 20.0% | 1.20 | 50.0 | 40.0 | 0.80× | 0.90× | 0.89 |" in text


def _five_rows(dialog: BenchmarkDialog) -> None:
    for i, label in enumerate(["you #1", "code", "structured", "quoting", "prose"]):
        dialog.results.append({"label": label, "prompt": "p", "plain_decode_tps": 50.0 + i, "spec_decode_tps": 180.25,
                               "acceptance_rate": 0.755, "token_acceptance": 0.8, "tokens_per_pass": 4.0,
                               "k_mean": 4.0, "ab_speedup": 3.6 - 0.7 * i, "predicted_speedup": 3.71,
                               "measured_over_predicted": 0.94})
        dialog._update_chart()


def test_columns_fit_without_a_horizontal_scroll(qtbot: QtBot, dialog: BenchmarkDialog) -> None:
    dialog.show()
    qtbot.waitExposed(dialog)
    _five_rows(dialog)
    qtbot.waitUntil(lambda: dialog.table.horizontalHeader().length() > 0)
    assert dialog.table.horizontalScrollBar().maximum() == 0
    header = dialog.table.horizontalHeader()
    assert header.length() <= dialog.table.viewport().width()
    for column in ResultColumn:  # every header readable in full
        title = dialog.results.headerData(column, Qt.Orientation.Horizontal)
        assert header.sectionSize(column) >= dialog.table.fontMetrics().horizontalAdvance(title), title


def test_chart_y_labels_do_not_overlap(qtbot: QtBot, dialog: BenchmarkDialog) -> None:
    from PySide6.QtGui import QFontMetrics

    dialog.show()
    qtbot.waitExposed(dialog)
    _five_rows(dialog)
    line = QFontMetrics(dialog.font()).height()
    for plot in (dialog.speedup_plot, dialog.accept_plot):
        axis = plot.getAxis("left")
        major = axis._tickLevels[0]  # the ticks the dialog set
        values = sorted(v for v, _ in major)
        low, high = plot.getViewBox().viewRange()[1]
        pixels = plot.getViewBox().height()
        assert 2 <= len(values) <= 3 and values[0] == 0.0
        gaps = [(b - a) / (high - low) * pixels for a, b in itertools.pairwise(values)]
        assert min(gaps) >= line, (plot.titleLabel.text, gaps, line)
    speedup_ticks = [label for _, label in dialog.speedup_plot.getAxis("left")._tickLevels[0]]
    assert speedup_ticks == ["0", "2.5", "5"]  # the top above 3.6×; the plain line at 1× is labelled itself


def test_predicted_column_is_the_cost_model_on_per_token_acceptance(qtbot: QtBot, dialog: BenchmarkDialog) -> None:
    tick_only(dialog, {"prose"})
    dialog.runs_spin.setValue(1)
    dialog.tokens_spin.setValue(64)
    with qtbot.waitSignal(dialog.benchmark_finished, timeout=5000) as blocker:
        dialog.start()
    row = blocker.args[0][0]
    spec, plain = fake_stats(False, 64).to_dict(), fake_stats(True, 64).to_dict()
    assert spec["token_acceptance"] != spec["acceptance_rate"]  # 1.0 (no rejection) vs 0.75
    honest = predicted_speedup(spec, plain)
    on_acceptance_rate = predicted_speedup({**spec, "token_acceptance": spec["acceptance_rate"]}, plain)
    assert honest is not None and on_acceptance_rate is not None and honest > on_acceptance_rate
    assert row["predicted_speedup"] == pytest.approx(honest)
    assert dialog.results.index(0, ResultColumn.Predicted).data() == f"{honest:.2f}×"
    tip = dialog.results.headerData(ResultColumn.Predicted, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
    assert "per-token acceptance" in tip


def test_the_dialog_says_when_drafting_is_off(qtbot: QtBot, bridge: FakeBridge) -> None:
    from outrider.ui.dialogs.benchmark_dialog import DRAFT_OFF_NOTE, READY_NOTE

    off = BenchmarkDialog(bridge, [], draft=DraftParams(k=0))
    qtbot.addWidget(off)
    assert off.status.text() == DRAFT_OFF_NOTE and "draft source" in DRAFT_OFF_NOTE
    on = BenchmarkDialog(bridge, [], draft=DraftParams(k=None))
    qtbot.addWidget(on)
    assert on.status.text() == READY_NOTE


def test_a_prompt_of_several_lines_is_listed_on_one_line_and_run_whole(qtbot: QtBot, bridge: FakeBridge) -> None:
    text = "Copy this list:\n- rice\n- eggs"
    dlg = BenchmarkDialog(bridge, [text], pair_name="Tiny + draft", draft=DraftParams(k=4))
    qtbot.addWidget(dlg)
    item = dlg.prompt_list.item(0)
    assert item.text() == "you #1: Copy this list: - rice - eggs"  # a line of its own would read as another prompt
    assert item.toolTip() == text and ("you #1", text) in dlg.checked_prompts()
    dlg.close()
