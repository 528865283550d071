"""The main window on the real engine process (SmolLM2 demo pair): send, stream, stats, stop, crash, reload."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCharFormat

from outrider.history import MessageStatus, Role
from outrider.ui.widgets.live_stats import format_speedup

pytestmark = pytest.mark.smollm


def _formats(win: Any) -> list[str]:
    """The provenance tags of every text fragment of the chat document."""
    tags = []
    block = win.chat.browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            tag = frag.charFormat().property(QTextCharFormat.Property.UserProperty)
            if tag:
                tags.append(str(tag))
            it += 1
        block = block.next()
    return tags


def _send(qtbot: Any, win: Any, text: str) -> None:
    win.chat.composer.setPlainText(text)
    qtbot.keyClick(win.chat.composer, Qt.Key.Key_Return)


def test_send_streams_reply_with_statistics_and_provenance(qtbot: Any, window: Any) -> None:
    win = window
    win.controller.max_tokens_override = 24
    steps: list[Any] = []
    win.controller.steps_received.connect(steps.append)
    with qtbot.waitSignal(win.controller.reply_ended, timeout=60_000) as blocker:
        _send(qtbot, win, "Name three colours.")
    status, text, message_id = blocker.args
    assert status == "complete" and text.strip() and steps
    shown = win.chat.browser.toPlainText()  # rendered Markdown: its words, not its list markers or emphasis
    assert all(word in shown for word in re.findall(r"[A-Za-z]{3,}", text)[:5])
    assert "target" in _formats(win)  # provenance view is on by default: each token tagged
    win.stats.refresh()
    snap = win.stats.snapshot
    done = win.controller.last_done
    assert done is not None and done.stats.generated == snap.generated > 0 and snap.decode_tps
    assert done.stats.speedup is not None and done.stats.plain_tps  # the first step of a reply is a plain probe
    assert done.stats.pass_growth is not None and snap.pass_growth == done.stats.pass_growth  # "you are here" costs
    # the panel shows the engine's own in-reply figures, not a recomputation
    assert (snap.speedup, snap.speedup_low, snap.speedup_high, snap.plain_tps) == (
        done.stats.speedup, done.stats.speedup_low, done.stats.speedup_high, done.stats.plain_tps)
    assert win.stats.speedup_label.text() == format_speedup(done.stats.speedup, done.stats.speedup_low,
                                                            done.stats.speedup_high,
                                                            streaming=False)
    assert win.stats.values["decode_tps"].text().endswith("tok/s")
    assert win.meter.conversation_series
    qtbot.waitUntil(lambda: win.controller.store.store.get_conversation(win.controller.conversation_id).messages[-1]
                    .status is MessageStatus.COMPLETE, timeout=5000)
    messages = win.controller.store.store.get_conversation(win.controller.conversation_id).messages
    assert [m.role for m in messages] == [Role.USER, Role.ASSISTANT]
    assert messages[-1].id == message_id and messages[-1].stats is not None
    assert messages[-1].stats.decode_tps
    # stored exactly as the engine reported it (None when the reply measured no plain step)
    assert messages[-1].stats.speedup == done.stats.speedup
    assert (messages[-1].stats.speedup_low, messages[-1].stats.speedup_high) == (done.stats.speedup_low,
                                                                                 done.stats.speedup_high)
    assert win.list_model.rowCount() == 1
    assert win.invite_banner.isVisibleTo(win)  # demo pair: the catalogue invitation shows


def test_escape_stops_the_reply_and_keeps_it(qtbot: Any, window: Any) -> None:
    win = window
    win.controller.max_tokens_override = 2000
    with qtbot.waitSignal(win.controller.steps_received, timeout=60_000):
        _send(qtbot, win, "Write a long story about a lighthouse keeper.")
    with qtbot.waitSignal(win.controller.reply_ended, timeout=30_000) as blocker:
        qtbot.keyClick(win, Qt.Key.Key_Escape)
    assert blocker.args[0] == "interrupted"
    qtbot.waitUntil(lambda: win.controller.store.store.get_conversation(win.controller.conversation_id).messages[-1]
                    .status is MessageStatus.INTERRUPTED, timeout=5000)
    assert win.chat.send_button.isEnabled() and not win.chat.stop_button.isEnabled()


def test_engine_kill_9_shows_banner_keeps_conversation_and_reloads(qtbot: Any, window: Any) -> None:
    win = window
    win.controller.max_tokens_override = 2000
    with qtbot.waitSignal(win.controller.steps_received, timeout=60_000):
        _send(qtbot, win, "Count from one to five hundred in words.")
    pid = win.bridge.pid
    assert pid
    with qtbot.waitSignal(win.controller.crashed, timeout=30_000):
        os.kill(pid, signal.SIGKILL)
    assert win.crash_banner.isVisibleTo(win) and "SIGKILL" in win.crash_label.text()
    cid = win.controller.conversation_id
    qtbot.waitUntil(lambda: win.controller.store.store.get_conversation(cid).messages[-1].status
                    is MessageStatus.INTERRUPTED, timeout=5000)
    messages = win.controller.store.store.get_conversation(cid).messages
    assert messages[0].role is Role.USER and messages[-1].text  # the partial reply is kept
    assert "interrupted" in win.chat.browser.toPlainText()
    with qtbot.waitSignal(win.controller.engine_changed, timeout=120_000, check_params_cb=lambda i: i is not None):
        qtbot.mouseClick(win.reload_button, Qt.MouseButton.LeftButton)
    assert not win.crash_banner.isVisibleTo(win)
    win.controller.max_tokens_override = 8
    with qtbot.waitSignal(win.controller.reply_ended, timeout=60_000) as blocker:
        _send(qtbot, win, "Say hi.")
    assert blocker.args[0] == "complete"
    assert len(win.controller.store.store.get_conversation(cid).messages) == 4


def test_incompatible_pair_shows_the_reason(qtbot: Any, app_parts: dict[str, Any], tiny_family: Any) -> None:
    from outrider.ui.main_window import MainWindow
    from outrider.ui.picker.choice import PairChoice

    win = MainWindow(app_parts["bridge"], app_parts["store"], app_parts["settings"])
    qtbot.addWidget(win)
    win.show()
    with qtbot.waitSignal(win.controller.load_failed, timeout=120_000) as blocker:
        win.load_pair(PairChoice(Path(tiny_family.target), Path(tiny_family.incompatible), False, "", "bad"))
    assert "cannot be paired" in blocker.args[0]
    assert win.crash_banner.isVisibleTo(win) and "cannot be paired" in win.crash_label.text()
    assert not win.controller.ready
    win.close()


def test_the_pair_pickers_self_drafts_calibrate_on_the_users_own_prompts(qtbot: Any, app_parts: dict[str, Any]) -> None:
    """What the window hands the picker: the history's recent prompts, newest first (an empty history: none, and
    the picker uses its bundled prompts). Breaking it to return nothing made the second assertion fail."""
    from outrider.ui.main_window import MainWindow

    win = MainWindow(app_parts["bridge"], app_parts["store"], app_parts["settings"])
    qtbot.addWidget(win)
    assert win._calibration_prompts() == ([], "history")
    app_parts["store"].store.start_conversation("t", "summarise this letter")
    assert win._calibration_prompts() == (["summarise this letter"], "history")
    win.close()
