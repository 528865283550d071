"""The user's own recent prompts, newest first: what a self-draft is calibrated on (the text the user will send)."""

from __future__ import annotations

from outrider.history.models import ConversationSummary, Message
from outrider.history.store import HistoryStore

RECENT_CONVERSATIONS = 20  # conversations read at most (the most recently updated)


def recent_user_prompts(store: HistoryStore, limit: int = 8) -> list[str]:
    """Up to ``limit`` distinct user messages, newest first, from the most recently updated conversations
    (deleted ones and unreadable records skipped). Empty for an empty history."""
    summaries = [s for s in store.list_conversations() if isinstance(s, ConversationSummary)]
    summaries.sort(key=lambda s: -s.updated_at)
    prompts: list[tuple[float, int, str]] = []
    for summary in summaries[:RECENT_CONVERSATIONS]:
        conversation = store.get_conversation(summary.id)
        prompts += [(m.created_at, m.id, m.text) for m in conversation.messages
                    if isinstance(m, Message) and m.role == "user" and m.text.strip()]
    out: list[str] = []
    for *_, text in sorted(prompts, key=lambda p: (-p[0], -p[1])):  # ids break ties of equal times
        if text not in out:
            out.append(text)
        if len(out) >= limit:
            break
    return out
