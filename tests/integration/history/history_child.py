"""A child process for the kill -9 tests: it writes into the history store until it is killed.

Usage: ``python history_child.py MODE DATA_DIR [TAG]``. Every committed step is reported on stdout (flushed)
*after* its commit returned, so the parent knows a lower bound of what must have survived.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from outrider.history import HistoryStore, MessageStatus, ReplyCheckpointer, ReplyStats

TOKENS = 40
CHECKPOINT_INTERVAL_S = 0.004


def full_reply(tag: str, n: int) -> str:
    return "".join(f"{tag}w{n}x{i} " for i in range(TOKENS))


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def stream(store: HistoryStore, tag: str) -> None:
    conversation = store.create_conversation(f"chat {tag}", pair_id="test-pair")
    say(f"C {conversation}")
    n = 0
    while True:
        question = f"question {tag} {n}"
        user_id = store.add_user_message(conversation, question)
        say(f"U {user_id} {question}")
        reply_id = store.begin_reply(conversation)
        say(f"B {reply_id} {user_id} {n}")
        checkpointer = ReplyCheckpointer(store, reply_id, interval_s=CHECKPOINT_INTERVAL_S)
        text = full_reply(tag, n)
        pos = 0
        for i in range(TOKENS):
            pos = text.index(" ", pos) + 1
            if checkpointer.update(text[:pos]):
                say(f"K {reply_id} {pos}")
            if i % 4 == 0:
                time.sleep(0.001)
        stats = ReplyStats(pair_id="test-pair", k_mean=4.0, generated=TOKENS, stop_reason="eos")
        checkpointer.finish(text, MessageStatus.COMPLETE, stats)
        say(f"F {reply_id}")
        n += 1


def mutate(store: HistoryStore) -> None:
    """Edit and delete every conversation, each step one transaction (see test_history_kill9)."""
    for summary in sorted(store.list_conversations(), key=lambda s: s.id):
        conversation = store.get_conversation(summary.id)
        index = int(conversation.title.split()[-1])
        ids = [m.id for m in conversation.messages]
        if index % 3 == 0:
            store.edit_message(ids[0], "edited", drop_following=True)
        elif index % 3 == 1:
            store.delete_conversation(conversation.id)
            store.purge_deleted()
        else:
            store.edit_message(ids[3], "edited", drop_following=True)
        say(f"M {conversation.id}")
    say("DONE")


def main() -> None:
    mode, data_dir = sys.argv[1], Path(sys.argv[2])
    tag = sys.argv[3] if len(sys.argv) > 3 else "t"
    store = HistoryStore.open(data_dir)
    say("READY")
    if mode == "stream":
        stream(store, tag)
    elif mode == "mutate":
        mutate(store)
    # "hold" (and the others once done) keep the store open until killed.
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
