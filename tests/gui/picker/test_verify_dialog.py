"""The benchmark dialog's "Verify exactness" action against a fake engine bridge that streams token ids."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from pytestqt.qtbot import QtBot

from outrider.engine.events import DoneEvent, stats_from_wire
from outrider.engine.measure.verify_stats import VerifyReport
from outrider.engine.params import DraftParams, SamplingParams, TextRequest
from outrider.engine.stats import GenerationStats
from outrider.ui.dialogs.benchmark_dialog import BenchmarkDialog
from outrider.ui.dialogs.benchmark_runner import BenchmarkRunner, BridgeRun
from outrider.ui.dialogs.verify_panel import VerifyRunner, verify_summary
from support.tiny_gguf import Family

TARGET = [0.5, 0.3, 0.2]  # the "target" distribution of every token
SKEWED = [0.8, 0.1, 0.1]  # what a broken speculative sampler would produce


def Stats(**fields: Any) -> GenerationStats:
    """Statistics as the app decodes them from the wire: derived figures recomputed from the counters."""
    return stats_from_wire(fields)


@dataclasses.dataclass(frozen=True)
class Step:
    tokens: list[int]


@dataclasses.dataclass(frozen=True)
class Batch:
    steps: tuple[Step, ...]


class TokenBridge(QObject):
    """QtEngineBridge's signals; a reply streams seeded token ids in two step batches, then ends."""

    step_received = Signal(object)
    generation_finished = Signal(object)
    error = Signal(object)
    crashed = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[TextRequest] = []
        self.spec_probs = TARGET
        self.drafts = 2  # draft tokens per speculative reply
        self.hold_at: int | None = None  # this request keeps running until cancel()
        self.fail_at: int | None = None
        self.cancels = 0

    def generate(self, request: TextRequest) -> None:
        self.requests.append(request)
        n = len(self.requests)
        if self.fail_at == n:
            QTimer.singleShot(0, lambda: self.crashed.emit(RuntimeError("engine crashed (SIGSEGV) while generating")))
            return
        if self.hold_at == n:
            return
        if request.sampling.temperature == 0:
            tokens = [7, 8, 9, 10, 11, 12][: request.max_tokens]
        else:
            rng = np.random.default_rng(request.sampling.seed)
            probs = TARGET if request.plain else self.spec_probs
            tokens = [int(t) + 100 for t in rng.choice(len(probs), size=request.max_tokens, p=probs)]
        half = len(tokens) // 2
        drafted = 0 if request.plain else self.drafts
        stats = Stats(generated=len(tokens), drafted=drafted, accepted=drafted // 2)
        QTimer.singleShot(0, lambda: self.step_received.emit(Batch((Step(tokens[:half]),))))
        QTimer.singleShot(0, lambda: self.step_received.emit(Batch((Step(tokens[half:]), Step([])))))
        QTimer.singleShot(0, lambda: self.generation_finished.emit(DoneEvent("length", stats, "")))

    def cancel(self) -> None:
        self.cancels += 1
        QTimer.singleShot(0, lambda: self.generation_finished.emit(DoneEvent("cancelled", Stats(), "")))


@pytest.fixture
def bridge() -> TokenBridge:
    return TokenBridge()


@pytest.fixture
def dialog(qtbot: QtBot, bridge: TokenBridge) -> Iterator[BenchmarkDialog]:
    dlg = BenchmarkDialog(bridge, ["Count to ten."], pair_name="Tiny + draft", draft=DraftParams(k=4, p_min=0.5))
    qtbot.addWidget(dlg)
    yield dlg
    dlg.close()


def run_check(qtbot: QtBot, dialog: BenchmarkDialog, samples: int = 150, tokens: int = 4) -> VerifyReport:
    dialog.verify_samples_spin.setValue(samples)
    dialog.verify_tokens_spin.setValue(tokens)
    with qtbot.waitSignal(dialog.verify_finished, timeout=20_000) as blocker:
        dialog.verify_button.click()
        assert not dialog.verify_button.isEnabled() and not dialog.run_button.isEnabled()
        assert dialog.stop_button.isEnabled()
    report: VerifyReport = blocker.args[0]
    return report


def test_verify_exact(qtbot: QtBot, dialog: BenchmarkDialog, bridge: TokenBridge) -> None:
    dialog.verify_temperature_spin.setValue(0.8)
    report = run_check(qtbot, dialog)
    # the plan: greedy speculative and plain, then 150 interleaved pairs, on the first ticked prompt
    assert len(bridge.requests) == 2 + 2 * 150
    greedy, sampled = bridge.requests[:2], bridge.requests[2:]
    assert [r.plain for r in greedy] == [False, True] and all(r.sampling.temperature == 0 for r in greedy)
    assert [r.plain for r in sampled[:4]] == [False, True, False, True]
    assert all(r.sampling.temperature == pytest.approx(0.8) and r.max_tokens == 4 for r in sampled)
    # a seed per pair: the speculative and the plain sample of a pair share it (the coupled sampler must then
    # give the same tokens), and no two pairs share one
    assert len({r.sampling.seed for r in sampled}) == 150
    assert all(a.sampling.seed == b.sampling.seed for a, b in zip(sampled[::2], sampled[1::2], strict=True))
    assert all(r.draft == DraftParams(k=4, p_min=0.5) for r in bridge.requests)
    assert bridge.requests[0].messages is not None and bridge.requests[0].messages[-1].content == "Count to ten."
    # the report: computed by the same core as `outrider verify`
    assert report.verdict == "exact" and report.greedy_identical
    assert report.samples == 150 and report.drafted == 300 and report.accepted == 150
    assert [sum(p.speculative.values()) for p in report.positions] == [150] * 4
    text = dialog.verify_result.text()
    assert text.startswith("Exact: greedy output identical to plain decoding over 4 tokens")
    # one plain sentence first; the statistics under Details, folded (before: "largest total-variation distance
    # 0.535" stood next to "Exact")
    assert "p-value" not in text and "total-variation" not in text
    assert not dialog.verify_details_button.isHidden() and dialog.verify_details.isHidden()
    dialog.verify_details_button.click()
    details = dialog.verify_details.text()
    assert not dialog.verify_details.isHidden()
    assert "300 draft tokens were verified by the target while sampling, 150 accepted" in details
    assert "smallest p-value" in details and "largest total-variation distance" in details
    saved = dialog.markdown()  # the verdict goes into the saved report too
    assert "## Exactness check" in saved and text in saved and "smallest p-value" in saved
    assert dialog.status.text() == "Exactness check done: exact."
    assert dialog.progress.value() == dialog.progress.maximum() == 302
    assert dialog.verify_button.isEnabled() and dialog.run_button.isEnabled()
    assert not dialog.stop_button.isEnabled()


def test_verify_detects_a_skewed_sampler(qtbot: QtBot, dialog: BenchmarkDialog, bridge: TokenBridge) -> None:
    bridge.spec_probs = SKEWED
    report = run_check(qtbot, dialog)
    assert report.verdict == "not exact" and report.rejected
    assert dialog.verify_result.text().startswith("Not exact: greedy output identical")
    assert "differ from plain sampling at position(s)" in dialog.verify_result.text()


def test_nothing_drafted_is_inconclusive(qtbot: QtBot, dialog: BenchmarkDialog, bridge: TokenBridge) -> None:
    bridge.drafts = 0
    report = run_check(qtbot, dialog, samples=20, tokens=2)
    assert report.verdict == "inconclusive"
    assert dialog.verify_result.text().startswith("Inconclusive: nothing was drafted while sampling")


def test_verify_can_be_cancelled(qtbot: QtBot, dialog: BenchmarkDialog, bridge: TokenBridge) -> None:
    bridge.hold_at = 5
    dialog.verify_samples_spin.setValue(50)
    dialog.verify_button.click()
    qtbot.waitUntil(lambda: len(bridge.requests) == 5, timeout=5000)
    assert dialog.progress.value() == 4
    with qtbot.waitSignal(dialog.verify_runner.cancelled, timeout=5000):
        dialog.stop_button.click()
    assert bridge.cancels == 1 and len(bridge.requests) == 5
    assert dialog.status.text() == "Exactness check stopped."
    assert dialog.verify_button.isEnabled() and dialog.run_button.isEnabled() and not dialog.stop_button.isEnabled()
    assert dialog.verify_result.text() == ""


def test_engine_crash_stops_the_check(qtbot: QtBot, dialog: BenchmarkDialog, bridge: TokenBridge) -> None:
    bridge.fail_at = 3
    with qtbot.waitSignal(dialog.verify_runner.failed, timeout=5000):
        dialog.verify_button.click()
    assert "SIGSEGV" in dialog.status.text() and dialog.status.text().startswith("The exactness check stopped")
    assert dialog.verify_button.isEnabled()
    n = len(bridge.requests)
    bridge.generation_finished.emit(DoneEvent("length", Stats(), ""))  # the runner let go of the bridge
    assert len(bridge.requests) == n


def test_closing_the_dialog_cancels_the_check(qtbot: QtBot, dialog: BenchmarkDialog, bridge: TokenBridge) -> None:
    bridge.hold_at = 1
    dialog.show()
    dialog.verify_button.click()
    assert dialog.verify_runner.running
    with qtbot.waitSignal(dialog.verify_runner.cancelled, timeout=5000):
        dialog.reject()
    assert bridge.cancels == 1


def test_verify_uses_the_first_ticked_prompt_and_needs_one(dialog: BenchmarkDialog, bridge: TokenBridge) -> None:
    for i in range(dialog.prompt_list.count()):
        dialog.prompt_list.item(i).setCheckState(Qt.CheckState.Unchecked)
    dialog.verify_button.click()
    assert dialog.status.text() == "Tick a prompt to verify on." and not bridge.requests
    dialog.prompt_list.item(2).setCheckState(Qt.CheckState.Checked)
    dialog.verify_button.click()
    label, text = dialog.prompt_list.item(2).data(Qt.ItemDataRole.UserRole)
    assert bridge.requests[0].messages is not None and bridge.requests[0].messages[-1].content == text
    assert f"“{label}”" in dialog.status.text()
    dialog.verify_runner.cancel()


def _start(runner: BridgeRun) -> None:
    if isinstance(runner, VerifyRunner):
        runner.start("Say hi", samples=10, tokens=2, sampling=SamplingParams(temperature=1.0))
    else:
        assert isinstance(runner, BenchmarkRunner)
        runner.start([("#1", "Say hi"), ("#2", "Say bye")], runs=2, max_tokens=4)


@pytest.mark.parametrize("kind", [BenchmarkRunner, VerifyRunner])
def test_a_generation_cancelled_elsewhere_stops_the_run_and_lets_go_of_the_bridge(
    qtbot: QtBot, kind: type[BridgeRun]
) -> None:
    bridge = TokenBridge()
    bridge.hold_at = 3
    runner = kind(bridge)  # type: ignore[arg-type]
    finished: list[object] = []
    runner.finished.connect(finished.append)
    _start(runner)
    qtbot.waitUntil(lambda: len(bridge.requests) == 3, timeout=5000)
    assert runner.running and runner.done == 2 and runner.total > 3
    with qtbot.waitSignal(runner.cancelled, timeout=5000):
        bridge.generation_finished.emit(DoneEvent("cancelled", Stats(), ""))  # e.g. the chat's Stop
    assert not runner.running and bridge.cancels == 0 and runner.done == 2
    bridge.generation_finished.emit(DoneEvent("length", Stats(), ""))  # disconnected: nothing more happens
    bridge.error.emit(RuntimeError("late"))
    assert len(bridge.requests) == 3 and not finished


@pytest.mark.parametrize("kind", [BenchmarkRunner, VerifyRunner])
def test_a_run_reports_progress_for_every_generation_and_finishes_once(qtbot: QtBot, kind: type[BridgeRun]) -> None:
    bridge = TokenBridge()
    runner = kind(bridge)  # type: ignore[arg-type]
    progress: list[tuple[int, int]] = []
    runner.progressed.connect(lambda done, total: progress.append((done, total)))
    with qtbot.waitSignal(runner.finished, timeout=10_000) as blocker:
        _start(runner)
    total = runner.total
    assert progress == [(i, total) for i in range(total + 1)] and len(bridge.requests) == total
    assert not runner.running
    if isinstance(runner, BenchmarkRunner):
        assert [row["label"] for row in blocker.args[0]] == ["#1", "#2"]
    else:
        assert isinstance(blocker.args[0], VerifyReport) and blocker.args[0].samples == 10
    with pytest.raises(ValueError):
        _start_invalid(runner)


def _start_invalid(runner: BridgeRun) -> None:
    if isinstance(runner, VerifyRunner):
        runner.start("x", samples=10, tokens=2, sampling=SamplingParams(temperature=0.0))
    else:
        assert isinstance(runner, BenchmarkRunner)
        runner.start([], runs=2)


def test_summary_wording_for_a_greedy_divergence() -> None:
    report = VerifyReport(greedy_identical=False, first_divergence=3, greedy_tokens=8, greedy_drafted=5,
                          greedy_accepted=3, samples=10, tokens=8, drafted=12, accepted=6, positions=(), alpha=0.01)
    text = verify_summary(report)
    assert text.startswith("Not exact: greedy output differs from plain decoding at token 3")
    assert "12 draft tokens were verified" in text.split("\n\n")[1]  # the statistics after the sentence


@pytest.mark.slow
def test_verify_with_the_real_engine(qtbot: QtBot, tiny_family: Family) -> None:
    """The real QtEngineBridge and engine process: step batches carry the token ids, stats the draft counts."""
    from outrider.engine.params import ContextSettings, PairSpec
    from outrider.ui.bridges.engine_bridge import QtEngineBridge

    real = QtEngineBridge()
    try:
        with qtbot.waitSignal(real.loaded, timeout=60_000):
            real.load(PairSpec(target=str(tiny_family.target), draft=str(tiny_family.draft),
                               context=ContextSettings(n_ctx=256)))
        dlg = BenchmarkDialog(real, ["the model"], pair_name="tiny family", draft=DraftParams(k=3))
        qtbot.addWidget(dlg)
        dlg.verify_sampling = dataclasses.replace(dlg.verify_sampling, top_k=4)
        dlg.verify_samples_spin.setValue(20)
        dlg.verify_tokens_spin.setValue(3)
        with qtbot.waitSignal(dlg.verify_finished, timeout=120_000) as blocker:
            dlg.start_verify()
        report: VerifyReport = blocker.args[0]
        assert report.greedy_identical and report.greedy_tokens == 3
        assert report.samples == 20 and report.drafted > 0
        assert all(sum(p.plain.values()) == 20 for p in report.positions)
        assert dlg.verify_result.text()
        dlg.close()
    finally:
        real.shutdown()
