"""Widgets and models without the engine: settings persistence, provenance formats, keys, models, smoke test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextCharFormat

from outrider.ui.chat_view import ChatView, MessageItem, step_runs
from outrider.ui.conversation_list import ConversationListModel, ConversationRow
from outrider.ui.live_stats import ReplyMeter
from outrider.ui.settings import AppSettings, QtSettings
from outrider.ui.theme import DARK, LIGHT
from outrider.worker.protocol import Stats, StepEvent


def test_settings_persist_and_emit_only_on_change(qtbot: Any, tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    settings = QtSettings(path)
    with qtbot.waitSignal(settings.changed) as blocker:
        settings.set(draft_mode="fixed", draft_k=6, temperature=0.7, system_prompt="Be brief.", theme="dark")
    assert sorted(blocker.args[0]) == ["draft_k", "draft_mode", "system_prompt", "temperature", "theme"]
    with qtbot.assertNotEmitted(settings.changed):
        assert settings.set(draft_k=6) == []
    again = QtSettings(path)  # "restart"
    assert again.value == settings.value and again.value.draft_params().k == 6
    assert again.value.sampling().temperature == pytest.approx(0.7)
    path.write_text(json.dumps({"draft_mode": "bogus", "context_size": "x", "top_p": 0.5}))
    value = QtSettings(path).value
    assert value.draft_mode == "auto" and value.context_size == 4096 and value.top_p == 0.5


def test_settings_map_to_engine_requests() -> None:
    s = AppSettings(draft_mode="off")
    assert s.draft_params().k == 0
    spec = AppSettings(draft_mode="lookup", context_size=2048).pair_spec("t.gguf", "d.gguf", False)
    assert spec.lookup and spec.draft is None and spec.context.n_ctx == 2048


def _step(pieces: list[str], drafted: list[bool]) -> StepEvent:
    return StepEvent(list(range(len(pieces))), drafted, "".join(pieces), 3, Stats(generated=len(pieces)), pieces)


@pytest.mark.parametrize("colours", [LIGHT, DARK])
def test_provenance_colours_each_token_in_the_document(qtbot: Any, colours: Any) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.set_colours(colours)
    view.add_user_message("hi", 1)
    view.begin_reply()
    view.append_steps([_step(["Hello", ",", " world"], [True, True, False]), _step([" again"], [False])])
    qtbot.waitUntil(lambda: "world again" in view.browser.toPlainText())  # drains are paced to frames
    found: dict[str, set[str]] = {}
    block = view.browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            tag = frag.charFormat().property(QTextCharFormat.Property.UserProperty)
            if tag:
                found.setdefault(str(tag), set()).add(frag.text())
                expected = colours.draft_bg if tag == "draft" else colours.target_bg
                assert frag.charFormat().background().color() == QColor(expected)
            it += 1
        block = block.next()
    assert found["draft"] == {"Hello,"} and "".join(sorted(found["target"])) in (" again world", " world again")
    view.end_reply("complete", "Hello, world again", 2)
    view.set_provenance(False)  # Markdown view: no provenance formats
    assert "Hello, world again" in view.browser.toPlainText()
    assert not view.legend_draft.isVisibleTo(view)


def test_step_runs_without_pieces_split_by_token_share() -> None:
    step = StepEvent([1, 2, 3, 4], [True, True, True, False], "abcdefgh", 3, Stats())
    assert step_runs(step) == [("abcdef", True), ("gh", False)]


def test_markdown_code_block_is_highlighted_with_copy_link(qtbot: Any) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.set_provenance(False)
    view.set_messages([MessageItem("assistant", "Here:\n```python\ndef f():\n    return 1\n```\n")])
    html = view.browser.toHtml()
    assert "copy-code:0:0" in html and "def" in view.browser.toPlainText()
    view._on_browser_anchor_clicked(__import__("PySide6.QtCore", fromlist=["QUrl"]).QUrl("copy-code:0:0"))
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text() == "def f():\n    return 1"


def test_enter_sends_shift_enter_newline(qtbot: Any) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.composer.setPlainText("line one")
    view.composer.moveCursor(view.composer.textCursor().MoveOperation.End)
    qtbot.keyClick(view.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert view.composer.toPlainText() == "line one\n"
    with qtbot.waitSignal(view.send_requested) as blocker:
        qtbot.keyClick(view.composer, Qt.Key.Key_Return)
    assert blocker.args == ["line one"] and view.composer.toPlainText() == ""


def test_conversation_model(qtmodeltester: Any) -> None:
    model = ConversationListModel()
    model.set_rows([ConversationRow(1, "a"), ConversationRow(2, "b", snippet="[x]")])
    qtmodeltester.check(model)
    assert model.row_of(2) == 1


def test_meter_flags_slower_than_plain() -> None:
    meter = ReplyMeter()
    meter.set_baseline(100.0)
    meter.begin_reply()
    meter.add(Stats(generated=64, drafted=40, accepted=4, decode_s=1.0, decode_tps=64.0, acceptance_rate=0.1,
                    draft_mode="model"), 4)
    snap = meter.tick()
    assert snap.speedup == pytest.approx(0.64) and snap.slower_than_plain and meter.reply_series


@pytest.mark.smollm
def test_smoke_test_prints_one_json_line(tmp_path: Path) -> None:
    env = {**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen"}
    env.pop("OUTRIDER_HOME", None)
    proc = subprocess.run([sys.executable, "-m", "outrider.cli", "--smoke-test"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert out["ok"] and out["stats"]["generated"] > 0 and out["stats"]["decode_tps"] > 0
