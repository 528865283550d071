"""The chat with the real engine process and the SmolLM2 demo pair: a reply cut at the token limit says so, and
Continue sends the reply back through the worker (``TextRequest.continue_reply`` over the wire) and grows the same
message."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt, QUrl

from outrider.history import MessageStatus, Role

pytestmark = pytest.mark.smollm


def test_continue_grows_the_same_reply_through_the_real_engine(qtbot: Any, window: Any) -> None:
    win = window
    win.controller.max_tokens_override = 8
    with qtbot.waitSignal(win.controller.reply_ended, timeout=60_000) as blocker:
        win.chat.composer.setPlainText("Count from one to twenty in words, separated by commas.")
        qtbot.keyClick(win.chat.composer, Qt.Key.Key_Return)
    status, first, reply_id = blocker.args
    assert status == "complete" and first and win.controller.last_done.stop_reason == "length"
    assert "cut at the token limit" in win.chat.browser.toPlainText()
    with qtbot.waitSignal(win.controller.reply_ended, timeout=60_000) as blocker:
        win.chat._on_browser_anchor_clicked(QUrl("continue:1"))  # the header's link
    status, text, again_id = blocker.args
    assert again_id == reply_id and text.startswith(first) and len(text) > len(first)
    assert win.controller.last_done.stats.generated > 0
    cid = win.controller.conversation_id
    qtbot.waitUntil(lambda: win.store.store.get_conversation(cid).messages[-1].status is not MessageStatus.STREAMING,
                    timeout=5000)
    messages = win.store.store.get_conversation(cid).messages
    assert [m.role for m in messages] == [Role.USER, Role.ASSISTANT] and messages[-1].text == text
