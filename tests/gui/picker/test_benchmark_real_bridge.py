"""The benchmark dialog against the real QtEngineBridge and engine process (SmolLM2 demo with prompt lookup)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from outrider.engine.params import PairSpec
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.ui.dialogs.benchmark_dialog import BenchmarkDialog

pytestmark = [pytest.mark.smollm, pytest.mark.slow]


@pytest.fixture
def bridge(qtbot: QtBot, smollm_path: Path) -> Iterator[QtEngineBridge]:
    b = QtEngineBridge()
    with qtbot.waitSignal(b.loaded, timeout=60_000):
        b.load(PairSpec(target=str(smollm_path), lookup=True))
    yield b
    b.shutdown()


def test_benchmark_with_the_real_engine(qtbot: QtBot, bridge: QtEngineBridge, tmp_path: Path) -> None:
    text = "Repeat exactly: apples, oranges, pears, plums, cherries, grapes, lemons, limes."
    dlg = BenchmarkDialog(bridge, [text], pair_name="SmolLM2 + prompt lookup")
    qtbot.addWidget(dlg)
    for i in range(dlg.prompt_list.count()):  # only the conversation's prompt
        item = dlg.prompt_list.item(i)
        item.setCheckState(Qt.CheckState.Checked if i == 0 else Qt.CheckState.Unchecked)
    dlg.runs_spin.setValue(1)
    dlg.tokens_spin.setValue(32)
    with qtbot.waitSignal(dlg.benchmark_finished, timeout=120_000) as blocker:
        dlg.start()
    (row,) = blocker.args[0]
    assert row["plain_decode_tps"] > 0 and row["spec_decode_tps"] > 0 and row["ab_speedup"] > 0
    assert dlg.results.rowCount() == 1
    out = dlg.save_markdown(tmp_path / "real.md")
    assert "| you #1 |" in out.read_text(encoding="utf-8")
    dlg.close()
