"""The chat view alone: it follows a streaming reply unless the user scrolled up, a finished reply in the
provenance view is rendered Markdown with each token's colour laid over it, and a reply's header says how it ended.
Also how a stored reply's end is read back (rows from before end reasons included) and continued."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor

from outrider.engine.events import StepEvent
from outrider.engine.params import ChatMessage
from outrider.history import HistoryStore, MessageStatus, ReplyStats
from outrider.history.turns import (
    ChatTurns,
    EndReason,
    end_reason,
    reply_crashed,
    reply_failed,
    reply_finished,
    reply_interrupted,
    reply_stats,
    whole_text,
)
from outrider.ui.theme import LIGHT
from outrider.ui.widgets.chat_items import MessageItem
from outrider.ui.widgets.chat_view import ChatView


def _step(pieces: list[str], drafted: list[bool]) -> StepEvent:
    return StepEvent(list(range(len(pieces))), drafted, pieces, 3)


def _view(qtbot: Any, *, provenance: bool = True) -> ChatView:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(500, 300)
    view.show()
    view.set_provenance(provenance)
    return view


def _long_conversation() -> list[MessageItem]:
    items = []
    for i in range(15):
        items += [MessageItem("user", f"Question {i}", message_id=2 * i + 1),
                  MessageItem("assistant", f"Answer {i}\n\n" + "A line of text. " * 20, message_id=2 * i + 2)]
    return items


@pytest.mark.parametrize("provenance", [True, False])
def test_a_streaming_reply_is_followed_unless_the_user_scrolled_up(qtbot: Any, provenance: bool) -> None:
    view = _view(qtbot, provenance=provenance)
    view.set_messages(_long_conversation())  # e.g. Regenerate reopened a long conversation
    view.add_user_message("Once more", 31)
    reply = view.begin_reply()
    bar = view.browser.verticalScrollBar()
    for n in range(30):
        reply.add_steps([_step([f"Word {n} ", "of the reply.\n\n"], [True, False])])
        view.reply_grew()
        qtbot.wait(5)
    qtbot.waitUntil(lambda: "Word 29" in view.browser.toPlainText())
    qtbot.waitUntil(lambda: bar.value() == bar.maximum() and bar.maximum() > 0)
    bar.setValue(0)  # the user scrolls up to read
    for n in range(30, 40):
        reply.add_steps([_step([f"Word {n} ", "more.\n\n"], [False, False])])
        view.reply_grew()
    qtbot.waitUntil(lambda: "Word 39" in view.browser.toPlainText())
    qtbot.wait(MARKDOWN_WAIT_MS)
    assert bar.value() == 0  # not pulled down while reading
    bar.setValue(bar.maximum())  # back at the end: following again
    reply.add_steps([_step(["The end."], [False])])
    view.reply_grew()
    view.end_reply("complete", reply.text, 33, "stop")
    qtbot.waitUntil(lambda: bar.value() == bar.maximum())


MARKDOWN_WAIT_MS = 400


def _formats_by_text(view: ChatView) -> dict[str, str]:
    """Each character run of the document with its provenance tag ('' for none)."""
    out: dict[str, str] = {}
    block = view.browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            tag = frag.charFormat().property(QTextCharFormat.Property.UserProperty)
            out[frag.text()] = str(tag or "")
            if tag:
                expected = LIGHT.draft_bg if tag == "draft" else LIGHT.target_bg
                assert frag.charFormat().background().color() == QColor(expected)
            it += 1
        block = block.next()
    return out


def _tags(view: ChatView, text: str) -> set[str]:
    """The provenance tags of the characters of the last occurrence of ``text`` ('' for none)."""
    doc = view.browser.document()
    start = doc.toPlainText().rfind(text)
    assert start >= 0, text
    cursor = QTextCursor(doc)
    tags = set()
    for pos in range(start, start + len(text)):
        if text[pos - start].isspace():
            continue
        cursor.setPosition(pos + 1)  # the format of the character before the cursor
        tags.add(str(cursor.charFormat().property(QTextCharFormat.Property.UserProperty) or ""))
    return tags


def test_a_finished_reply_in_the_provenance_view_is_markdown_with_provenance_colours(qtbot: Any) -> None:
    view = _view(qtbot)
    view.add_user_message("Show me", 1)
    reply = view.begin_reply()
    reply.add_steps([_step(["Use ", "**", "bold", "**", " here", ":\n\n"], [False, True, True, True, False, False]),
                     _step(["```python\n", "x = 1\n", "```\n"], [True, False, False])])
    view.reply_grew()
    qtbot.waitUntil(lambda: "bold" in view.browser.toPlainText())
    assert "**" in view.browser.toPlainText()  # while streaming: the tokens as they came
    view.end_reply("complete", reply.text, 2, "stop")
    shown = view.browser.toPlainText()
    assert "**" not in shown and "```" not in shown  # rendered Markdown, not raw fences
    assert "python · Copy" in shown and "x = 1" in shown
    _formats_by_text(view)  # every painted background is the theme's
    assert _tags(view, "bold") == {"draft"}  # the drafted word keeps its colour inside the bold run
    assert _tags(view, "Use") == {"target"} and _tags(view, "here") == {"target"}
    assert _tags(view, "x = 1") == {"target"}  # highlighted code too
    assert _tags(view, "· Copy") == {""} and _tags(view, "python") == {"draft"}  # the label: its language only
    view.set_provenance(False)  # the Markdown view: the same text, no colours
    assert not any(_formats_by_text(view).values())
    assert view.messages[-1].runs is not None  # kept: switching back paints them again
    view.set_provenance(True)
    assert _tags(view, "bold") == {"draft"}


def test_a_header_says_how_a_reply_ended(qtbot: Any) -> None:
    view = _view(qtbot)
    view.set_messages([
        MessageItem("user", "q", message_id=1),
        MessageItem("assistant", "a", "interrupted", 2, end="cancelled"),
        MessageItem("assistant", "b", "interrupted", 3, end="crashed"),
        MessageItem("assistant", "c", "interrupted", 4, end="interrupted"),
        MessageItem("assistant", "", "error", 5, end="error"),
        MessageItem("assistant", "d", "complete", 6, end="length"),
    ])
    shown = view.browser.toPlainText()
    assert "— stopped" in shown and "— interrupted — the engine stopped" in shown
    assert "— interrupted ·" in shown and "— failed" in shown
    assert "(no reply — why is shown above the conversation)" in shown
    assert "— cut at the token limit" in shown
    assert "continue:5" in view.browser.toHtml()  # the last reply only
    view.add_user_message("next", 7)
    assert "continue:5" not in view.browser.toHtml()  # no longer the last message


def test_end_reasons_are_stored_and_read_back_old_rows_included(tmp_path: Path) -> None:
    from outrider.engine.stats import GenerationStats

    stats = reply_stats(GenerationStats(generated=3), "length")
    assert reply_finished("t", "length", stats).reason is EndReason.LENGTH
    assert reply_finished("t", "stop", reply_stats(GenerationStats(), "stop")).reason is EndReason.COMPLETE
    assert reply_finished("t", "cancelled", reply_stats(GenerationStats(), "cancelled")).reason is EndReason.STOPPED
    assert reply_interrupted("so far").reason is EndReason.STOPPED
    assert reply_crashed("abc").reason is EndReason.CRASHED
    assert reply_failed("").reason is EndReason.FAILED and reply_failed("x").reason is EndReason.FAILED
    # rows written before end reasons: no stop_reason, or one that does not fit the status
    assert end_reason(MessageStatus.INTERRUPTED, None) is EndReason.INTERRUPTED
    assert end_reason(MessageStatus.INTERRUPTED, ReplyStats(stop_reason="length")) is EndReason.INTERRUPTED
    assert end_reason(MessageStatus.COMPLETE, None) is EndReason.COMPLETE
    assert end_reason(MessageStatus.COMPLETE, ReplyStats(stop_reason="bogus")) is EndReason.COMPLETE
    assert end_reason(MessageStatus.ERROR, None) is EndReason.FAILED
    assert end_reason("streaming", None) is EndReason.STREAMING
    assert whole_text("cut \U0001f600"[:-1] + "\ufffd") == "cut " and whole_text("a\ufffdb") == "a\ufffdb"


def test_continue_reopens_the_last_reply_only(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path / "data") as store:
        turns = ChatTurns(store)
        first = turns.start("Tell me a story")
        turns.checkpointer(first.reply_id).finish("Once upon", MessageStatus.COMPLETE, ReplyStats(stop_reason="length"))
        turn = turns.continue_reply(first.conversation_id, first.reply_id)
        assert turn.continued == "Once upon" and turn.reply_id == first.reply_id
        assert turn.history[-1] == ChatMessage("assistant", "Once upon")
        assert turn.history[-2] == ChatMessage("user", "Tell me a story")
        with pytest.raises(ValueError, match="once finished"):  # streaming again: not twice
            turns.continue_reply(first.conversation_id, first.reply_id)
        turns.checkpointer(first.reply_id).finish("Once upon a time.", MessageStatus.COMPLETE)
        second = turns.start("Another", conversation_id=first.conversation_id)
        turns.checkpointer(second.reply_id).finish("Sure", MessageStatus.COMPLETE)
        with pytest.raises(ValueError, match="last reply"):  # not the last message any more
            turns.continue_reply(first.conversation_id, first.reply_id)
        with pytest.raises(ValueError):  # a user message cannot be continued
            turns.continue_reply(first.conversation_id, second.user_message_id)
        assert store.get_conversation(first.conversation_id).messages[1].text == "Once upon a time."


@pytest.mark.smollm
def test_the_engine_continues_a_reply_instead_of_starting_a_new_turn(smollm_path: Path) -> None:
    from outrider.engine.engine import Engine, PairSpec, TextRequest
    from outrider.engine.llama.runtime import Backend
    from outrider.engine.params import ContextSettings

    engine = Engine(Backend())
    engine.load(PairSpec(target=str(smollm_path), lookup=True, context=ContextSettings(n_ctx=512, threads=2)))
    try:
        chat = (ChatMessage("user", "Count: one, two, three"), ChatMessage("assistant", "Sure: one, two"))
        tokens = engine.tokenize_chat(chat, continue_reply=True)
        rendered = b"".join(engine.target.piece(t) for t in tokens).decode()
        assert rendered.endswith("assistant\nSure: one, two"), rendered[-80:]  # no end of turn after the reply
        assert engine.tokenize_chat(chat) != tokens
        with pytest.raises(ValueError, match="last chat message"):
            TextRequest(messages=chat[:1], continue_reply=True)
        text = ""
        for event in engine.run(TextRequest(messages=chat, max_tokens=6, continue_reply=True)):
            text += getattr(event, "text", "") if not hasattr(event, "stop_reason") else ""
        assert text.strip() and not text.lstrip().startswith("Sure")
    finally:
        engine.unload()


def test_a_very_long_reply_keeps_its_streamed_tokens_in_the_provenance_view(qtbot: Any) -> None:
    from outrider.ui.widgets.chat_format import PROVENANCE_MARKDOWN_MAX_CHARS

    view = _view(qtbot)
    view.add_user_message("Long", 1)
    reply = view.begin_reply()
    words = PROVENANCE_MARKDOWN_MAX_CHARS // 10 + 1
    reply.add_steps([_step(["**word**", "  "], [True, False]) for _ in range(words)])
    view.reply_grew()
    view.end_reply("complete", reply.text, 2, "stop")  # no long re-render at the end of a long reply
    assert view.browser.toPlainText().count("**word**") == words and _tags(view, "**word**") == {"draft"}
    view.render_all()  # drawn again (theme change): still its tokens, not a slow Markdown paint
    assert view.browser.toPlainText().count("**word**") == words
    view.set_provenance(False)  # the Markdown view renders it
    assert "**" not in view.browser.toPlainText()
