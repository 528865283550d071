"""The user's recent prompts (``history/recent.py``), which a self-draft is calibrated on by default."""

from __future__ import annotations

from outrider.history import HistoryStore
from outrider.history.recent import recent_user_prompts


def test_recent_prompts_are_the_newest_distinct_user_messages(store: HistoryStore) -> None:
    """Breaking the order (oldest first) made the first assertion fail."""
    first, _ = store.start_conversation("a", "write a poem")
    store.add_user_message(first, "and another one")
    second, _ = store.start_conversation("b", "explain hash tables")
    store.add_user_message(second, "write a poem")  # a repeat counts once, at its newest place
    gone, _ = store.start_conversation("c", "a deleted chat's prompt")
    store.delete_conversation(gone)
    assert recent_user_prompts(store) == ["write a poem", "explain hash tables", "and another one"]
    assert recent_user_prompts(store, limit=1) == ["write a poem"]


def test_an_empty_history_has_no_prompts(store: HistoryStore) -> None:
    assert recent_user_prompts(store) == []
