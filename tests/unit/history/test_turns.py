"""The chat-turn service shared by the app and ``outrider ask``: what a turn writes, in which order."""

from __future__ import annotations

import pytest

from outrider.engine.params import ChatMessage
from outrider.engine.stats import GenerationStats
from outrider.history import HistoryStore, Message, MessageStatus, Role
from outrider.history.turns import (
    ChatTurns,
    conversation_title,
    reply_crashed,
    reply_failed,
    reply_finished,
    reply_interrupted,
    reply_stats,
)


def test_titles_are_the_first_line_of_the_first_message() -> None:
    assert conversation_title("  Hello there\nsecond line") == "Hello there"
    assert conversation_title("x" * 100) == "x" * 60
    assert conversation_title("   ") == "New chat"


def test_a_new_conversation_starts_with_its_system_prompt_and_question(store: HistoryStore) -> None:
    turn = ChatTurns(store).start("What is a KV cache?", system="Be brief.", pair_id="p")
    conv = store.get_conversation(turn.conversation_id)
    assert conv.title == "What is a KV cache?"
    roles = [(m.role, m.status) for m in conv.messages if isinstance(m, Message)]
    assert roles == [(Role.SYSTEM, MessageStatus.COMPLETE), (Role.USER, MessageStatus.COMPLETE),
                     (Role.ASSISTANT, MessageStatus.STREAMING)]
    assert turn.history == (ChatMessage("system", "Be brief."), ChatMessage("user", "What is a KV cache?"))
    assert conv.messages[-1].id == turn.reply_id


def test_a_failed_reply_is_left_out_of_the_next_turn_and_an_edit_drops_what_follows(store: HistoryStore) -> None:
    turns = ChatTurns(store)
    first = turns.start("one")
    reply_failed("").write(turns.checkpointer(first.reply_id))
    second = turns.start("two", conversation_id=first.conversation_id)
    assert second.history == (ChatMessage("user", "one"), ChatMessage("user", "two"))
    reply_finished("answer", "length", reply_stats(GenerationStats(generated=3), "length")).write(
        turns.checkpointer(second.reply_id))
    edited = turns.start("one, edited", conversation_id=first.conversation_id, edit_id=first.user_message_id)
    assert edited.history == (ChatMessage("user", "one, edited"),)


def test_how_a_reply_ends() -> None:
    engine = GenerationStats(generated=4, drafted=6, accepted=3, passes=3, k_sum=6, draft_mode="model")
    stats = reply_stats(engine, "stop", pair_id="", temperature=0.0)
    assert (stats.pair_id, stats.generated, stats.accepted, stats.stop_reason) == (None, 4, 3, "stop")
    assert stats.k_mean == round(engine.k_mean or 0, 2)  # the mean draft length used, not the setting
    assert reply_finished("t", "stop", stats).status is MessageStatus.COMPLETE
    assert reply_finished("t", "cancelled", stats).status is MessageStatus.INTERRUPTED
    assert reply_interrupted("so far").status is MessageStatus.INTERRUPTED
    assert reply_crashed("abc", "abcdef").text == "abcdef"  # the engine client saw more
    assert reply_crashed("abcdef", "abc").text == "abcdef"
    assert reply_crashed("abc", None).text == "abc"
    assert reply_failed("").status is MessageStatus.ERROR
    assert reply_failed("some").status is MessageStatus.INTERRUPTED


def test_editing_needs_the_conversation(store: HistoryStore) -> None:
    with pytest.raises(ValueError):
        ChatTurns(store).ask("x", edit_id=1)
