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
from PySide6.QtWidgets import QPushButton

from outrider.conversation.meter import LiveStats, ReplyMeter
from outrider.conversation.reply_text import ReplyText
from outrider.engine.events import StepEvent
from outrider.engine.stats import GenerationStats
from outrider.settings import AppSettings
from outrider.ui.settings import QtSettings
from outrider.ui.theme import DARK, LIGHT
from outrider.ui.widgets.chat_items import MessageItem
from outrider.ui.widgets.chat_view import ChatView
from outrider.ui.widgets.conversation_list import ConversationListModel, ConversationRow
from outrider.ui.widgets.live_stats import format_speedup
from outrider.ui.widgets.stats_panel import StatsPanel
from support.stats import measured_stats


def test_settings_persist_and_emit_only_on_change(qtbot: Any, tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    settings = QtSettings(path)
    with qtbot.waitSignal(settings.changed) as blocker:
        settings.set(k_policy="fixed", k=6, temperature=0.7, system_prompt="Be brief.", theme="dark")
    assert sorted(blocker.args[0]) == ["k", "k_policy", "system_prompt", "temperature", "theme"]
    with qtbot.assertNotEmitted(settings.changed):
        assert settings.set(k=6) == []
    settings.flush()  # as the app does before it exits (saves run off the GUI thread)
    again = QtSettings(path)  # "restart"
    assert again.value == settings.value and again.value.draft_params().k == 6
    assert again.value.sampling().temperature == pytest.approx(0.7)
    path.write_text(json.dumps({"draft_source": "bogus", "context_size": "x", "top_p": 0.5}))
    value = QtSettings(path).value
    assert value.draft_source == "model" and value.context_size == 4096 and value.top_p == 0.5


def test_settings_map_to_engine_requests() -> None:
    s = AppSettings(draft_source="none")
    assert s.draft_params().k == 0
    spec = AppSettings(draft_source="lookup", context_size=2048).pair_spec("t.gguf", "d.gguf", False)
    assert spec.lookup and spec.draft is None and spec.context.n_ctx == 2048


def _step(pieces: list[str], drafted: list[bool]) -> StepEvent:
    return StepEvent(list(range(len(pieces))), drafted, pieces, 3)


@pytest.mark.parametrize("colours", [LIGHT, DARK])
def test_provenance_colours_each_token_in_the_document(qtbot: Any, colours: Any) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.set_colours(colours)
    view.add_user_message("hi", 1)
    reply = view.begin_reply()
    reply.add_steps([_step(["Hello", ",", " world"], [True, True, False]), _step([" again"], [False])])
    view.reply_grew()
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


@pytest.mark.parametrize("colours", [LIGHT, DARK])
def test_each_drafter_of_a_chain_has_its_colour_and_legend(qtbot: Any, colours: Any) -> None:
    """Tokens of history lookup, prompt lookup and the draft model each get their drafter's background (and the
    "draft" tag all drafted tokens share); the legend names the loaded chain's drafters. (With the colour chosen
    from ``drafted`` alone, as before origins were sent, all three were the draft model's green.)"""
    view = ChatView()
    qtbot.addWidget(view)
    view.set_colours(colours)
    view.set_drafters("history+lookup+model")
    view.add_user_message("hi", 1)
    reply = view.begin_reply()
    reply.add_steps([StepEvent([1, 2, 3, 4], [True, True, True, False], ["Past", " text", " model", " own"], 3,
                               None, ["history", "lookup", "model", "target"])])
    view.reply_grew()
    qtbot.waitUntil(lambda: "Past text model own" in view.browser.toPlainText())
    seen: dict[str, tuple[str, str]] = {}
    block = view.browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            tag = fmt.property(QTextCharFormat.Property.UserProperty)
            if tag:
                seen[it.fragment().text()] = (str(tag), fmt.background().color().name())
            it += 1
        block = block.next()
    assert seen == {"Past": ("draft", colours.history_bg), " text": ("draft", colours.lookup_bg),
                    " model": ("draft", colours.draft_bg), " own": ("target", colours.target_bg)}
    assert view.controls.legend_drafters["history"].isVisibleTo(view)
    assert view.controls.legend_drafters["lookup"].isVisibleTo(view)
    assert not view.controls.legend_drafters["mtp"].isVisibleTo(view)
    assert view.legend_draft.isVisibleTo(view) and view.legend_draft.text() == "draft model"
    view.set_drafters("model")
    assert not view.controls.legend_drafters["history"].isVisibleTo(view)
    assert view.legend_draft.text() == "accepted draft token"


def test_reply_text_keeps_each_piece_with_its_provenance() -> None:
    reply = ReplyText("Earlier ")  # a continued reply: its start is plain (no token known)
    assert reply.add_steps([_step(["a", "", "b"], [True, True, False]),
                            StepEvent([], [], ["held"], 0)]) == 3  # the empty piece left out; held text: target
    # No origins sent (an engine of an earlier version): drafted tokens are of the unnamed drafter "draft".
    assert reply.pieces == [("Earlier ", None), ("a", "draft"), ("b", "target"), ("held", "target")]
    assert reply.text == "Earlier abheld" and reply.runs() == [("Earlier ", None), ("a", "draft"),
                                                               ("bheld", "target")]
    reply.add_steps([_step(["!"], [False])])
    assert reply.text == "Earlier abheld!"  # the join is kept and extended


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


def _reply_stats(**kw: Any) -> GenerationStats:
    """acceptance 0.6, token acceptance 0.75, 3.2 tokens per pass, 64 tok/s."""
    base: dict[str, Any] = {"generated": 64, "drafted": 40, "accepted": 24, "rejections": 8, "passes": 20,
                            "pass_tokens": 64, "decode_s": 1.0, "draft_mode": "model"}
    return measured_stats(**{**base, **kw})


def test_meter_takes_the_engines_figures_as_they_are() -> None:
    meter = ReplyMeter()
    meter.begin_reply()
    st = _reply_stats(speedup=1.234, speedup_low=1.178, speedup_high=1.29, plain_tps=17.5, pass_tokens=50,
                      accepted=30, rejections=7)
    meter.add(st, 4)
    snap = meter.tick()
    # the engine's own properties, read as they are (docs/metrics.md), nothing recomputed by the UI
    assert (snap.speedup, snap.speedup_low, snap.speedup_high, snap.plain_tps, snap.tokens_per_pass,
            snap.token_acceptance) == (st.speedup, st.speedup_low, st.speedup_high, st.plain_tps, 2.5, 30 / 37)
    assert (snap.speedup, snap.speedup_low, snap.speedup_high, snap.plain_tps) == pytest.approx(
        (1.234, 1.178, 1.29, 17.5))
    assert not snap.slower_than_plain and meter.reply_series
    assert not hasattr(meter, "set_baseline") and "baseline_tps" not in LiveStats.__dataclass_fields__


@pytest.mark.parametrize(("speedup", "high", "slower"), [
    (0.64, 0.68, True),  # clearly below plain
    (0.64, 1.02, False),  # its interval reaches 1: not flagged
    (0.90, 1.05, False),
    (0.97, 0.99, False),  # above the margin
    (None, None, False),  # not measured yet
])
def test_meter_flags_slower_than_plain_from_the_measured_speedup(speedup: float | None, high: float | None,
                                                                 slower: bool) -> None:
    meter = ReplyMeter()
    meter.begin_reply()
    low = None if speedup is None else speedup * 0.9
    meter.add(_reply_stats(speedup=speedup, speedup_low=low, speedup_high=high), 4)
    assert meter.tick().slower_than_plain is slower


def test_format_speedup() -> None:
    assert format_speedup(1.8512, 1.70, 2.01) == "1.85× (1.70–2.01)"
    assert format_speedup(1.0, 1.0, 1.0) == "1.00×"  # measured exactly: nothing drafted
    assert format_speedup(1.9, 1.2, 2.6) == "measuring… 1.20–2.60×"  # wider than ±20 %: a range, no figure
    assert format_speedup(1.9, 1.2, 2.6, streaming=False) == "1.20–2.60×, uncertain"
    assert format_speedup(0.65, 0.0, 1.45) == "measuring… up to 1.45×"
    assert format_speedup(0.65, 0.0, 1.45, streaming=False) == "up to 1.45×, uncertain"
    assert format_speedup(None, None, None) == "measuring…"
    assert format_speedup(None, None, None, streaming=False) == "not measured"


def test_stats_panel_shows_speedup_with_its_interval(qtbot: Any) -> None:
    meter = ReplyMeter()
    panel = StatsPanel(meter)
    qtbot.addWidget(panel)
    panel.refresh()
    assert panel.speedup_label.text() == "–"  # no reply yet
    meter.begin_reply()
    meter.add(_reply_stats(generated=8, speedup=None, plain_tps=None), 4)
    panel.refresh()
    assert panel.speedup_label.text() == "measuring…" and panel.values["plain_tps"].text() == "–"
    assert panel.speedup_label.property("settled") is False  # not bold (QSS: speedupValue[settled="false"])
    meter.add(_reply_stats(speedup=1.9, speedup_low=1.2, speedup_high=2.6, plain_tps=20.0), 4)
    panel.refresh()
    assert panel.speedup_label.text() == "measuring… 1.20–2.60×" and panel.speedup_label.property("settled") is False
    meter.add(_reply_stats(speedup=1.8512, speedup_low=1.7878, speedup_high=1.9146, plain_tps=20.04), 4)
    panel.refresh()
    assert panel.speedup_label.text() == "1.85× (1.79–1.91)" and panel.speedup_label.property("settled") is True
    assert panel.values["plain_tps"].text() == "20.0 tok/s"
    assert panel.values["token_acceptance"].text() == "75 %"
    assert "measured in this reply, at the same context length and load" in panel.speedup_label.toolTip()
    assert all("baseline" not in b.text().lower() for b in panel.findChildren(QPushButton))
    assert not panel.warning.isVisibleTo(panel)


def test_stats_panel_warning_follows_the_reply_shown(qtbot: Any) -> None:
    meter = ReplyMeter()
    panel = StatsPanel(meter)
    qtbot.addWidget(panel)
    meter.begin_reply()
    meter.add(_reply_stats(speedup=0.6, speedup_low=0.58, speedup_high=0.62), 4)
    meter.finish_reply(_reply_stats(speedup=0.6, speedup_low=0.58, speedup_high=0.62))
    panel.refresh()
    assert panel.warning.isVisibleTo(panel) and "0.60× (0.58–0.62)" in panel.warning_label.text()
    meter.begin_reply()  # a new reply: no verdict from the last one
    panel.refresh()
    assert not panel.warning.isVisibleTo(panel) and panel.speedup_label.text() == "measuring…"
    meter.finish_reply(_reply_stats(speedup=0.6, speedup_low=0.58, speedup_high=0.62))
    panel.refresh()
    assert panel.warning.isVisibleTo(panel)
    meter.reset_conversation()  # a new chat
    panel.refresh()
    assert not panel.warning.isVisibleTo(panel) and panel.speedup_label.text() == "–"


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
    # the reply's own speed-up, exactly as the engine reported it (None if the reply measured no plain step)
    assert "speedup_vs_calibrated" not in out and "baseline_tps" not in out["stats"]
    assert (out["speedup"], out["speedup_low"], out["speedup_high"], out["plain_tps"]) == (
        out["stats"]["speedup"], out["stats"]["speedup_low"], out["stats"]["speedup_high"], out["stats"]["plain_tps"])
