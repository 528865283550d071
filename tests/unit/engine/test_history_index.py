"""The draft index of the chat history (engine/history_index.py) over a real history store.

A word tokenizer stands in for the model's (ids from a shared vocabulary dict): the index only needs ids. Each
test says in its docstring what breaking the code looked like when it was tried.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from outrider.engine.history_draft import HistoryLookupDraft
from outrider.engine.history_index import (
    ANCHOR,
    HistoryIndex,
    forget_conversations,
    index_dir_for,
    remove_index_files,
)
from outrider.engine.params import SamplingParams
from outrider.history import HistoryStore


class Words:
    """Text to ids, one id per whitespace-separated word, the same id for the same word in every call."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.calls = 0

    def __call__(self, text: str) -> list[int]:
        self.calls += 1
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]


CODE = "def parse ( line ) : fields = line . split ( ',' ) return [ f . strip ( ) for f in fields ]"


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    s = HistoryStore.open(tmp_path)
    yield s
    s.close()


def _chat(store: HistoryStore, user: str, reply: str) -> int:
    conversation = store.create_conversation("t")
    cid = conversation if isinstance(conversation, int) else conversation.id
    store.add_user_message(cid, user)
    store.add_message(cid, "assistant", reply)
    return cid


def _index(store: HistoryStore) -> HistoryIndex:
    return HistoryIndex.open(index_dir_for(store.db_path) / "words.npz")


def test_a_stored_reply_is_proposed_where_its_start_is_matched(store: HistoryStore) -> None:
    """The continuation of the longest match is the stored text. (Breaking the backward extension — every match
    kept at ANCHOR tokens — made this pick the other reply's continuation: the assert on 'return' failed.)"""
    words = Words()
    _chat(store, "write it", CODE)
    _chat(store, "write another", "def parse ( line ) : fields = other ( ) return fields")
    index = _index(store)
    report = index.sync(store.db_path, words)
    assert report.added == 4 and report.removed == 0
    committed = words("please again : " + " ".join(CODE.split()[:12]))  # ... fields = line . split (
    match = index.longest_match(committed)
    assert match is not None and match.length >= 12
    tokens, confidence = index.continuation(match, 5, 0.3)
    assert tokens == words("',' ) return [ f") and confidence == 1.0


def test_the_most_frequent_continuation_wins_and_confidence_stops_the_draft(store: HistoryStore) -> None:
    """Two of three occurrences continue with 'b': 'b' is proposed at 2/3 and the draft stops where the shares
    multiply below the threshold. (With the share not multiplied in, the draft ran on to 'c d'.)"""
    words = Words()
    for reply in ("x y z w b c d", "x y z w b c e", "x y z w q r s"):
        _chat(store, "u", reply)
    index = _index(store)
    index.sync(store.db_path, words)
    match = index.longest_match(words("x y z w"))
    assert match is not None and match.length == ANCHOR
    tokens, confidence = index.continuation(match, 10, 0.5)
    assert tokens == words("b c")
    assert confidence == pytest.approx(2 / 3)
    tokens, _ = index.continuation(match, 10, 0.3)
    assert tokens == words("b c d") or tokens == words("b c e")


def test_no_match_shorter_than_the_anchor_and_nothing_across_messages(store: HistoryStore) -> None:
    """A match needs ANCHOR tokens, no match spans two messages, and a match at the end of a message proposes
    nothing (the next message is another turn). (Without the separator filter in ``continuation`` the draft was
    the separator id -1 followed by the next message.)"""
    words = Words()
    _chat(store, "c d e f", "g h i j")
    index = _index(store)
    index.sync(store.db_path, words)
    assert index.longest_match(words("d e f")) is None
    assert index.longest_match(words("e f g h")) is None  # 'e f' ends the user message, 'g h' starts the reply
    match = index.longest_match(words("c d e f"))
    assert match is not None
    assert index.continuation(match, 4, 0.0) == ([], 1.0)


def test_the_index_survives_a_restart_and_forgets_a_deleted_chat(store: HistoryStore) -> None:
    """Saved at sync, read back by a new index without tokenising anything; a deleted conversation leaves the file
    at once (the store's hook) and stays out at the next sync. (Without the hook in delete_conversation the file
    still held the deleted reply's tokens; without the deleted_at filter the sync brought it back.)"""
    words = Words()
    keep = _chat(store, "keep me", "alpha beta gamma delta epsilon")
    gone = _chat(store, "forget me", "one two three four five six")
    _index(store).sync(store.db_path, words)

    reopened = _index(store)
    assert reopened.rebuilt_reason is None and reopened.n_messages == 4
    assert reopened.longest_match(words("one two three four")) is not None

    store.delete_conversation(gone)
    after = _index(store)
    assert set(after.conversation_ids.tolist()) == {keep}
    assert after.longest_match(words("one two three four")) is None
    calls = words.calls
    report = after.sync(store.db_path, words)
    assert (report.added, report.removed) == (0, 0) and words.calls == calls
    assert after.longest_match(words("one two three four")) is None
    assert after.longest_match(words("alpha beta gamma delta")) is not None

    store.restore_conversation(gone)
    assert after.sync(store.db_path, words).added == 2


def test_an_edited_message_is_indexed_again(store: HistoryStore) -> None:
    """A message whose text changed is re-tokenised. (Keyed on id only, the old text stayed proposed.)"""
    words = Words()
    cid = _chat(store, "u", "old words in the reply here")
    index = _index(store)
    index.sync(store.db_path, words)
    reply_id = store.get_conversation(cid).messages[-1].id
    store.edit_message(reply_id, "new text of the reply now")
    report = index.sync(store.db_path, words)
    assert (report.added, report.removed) == (1, 1)
    assert index.tokens_of(reply_id) == words("new text of the reply now")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing", "inconsistent"])
def test_a_corrupt_or_missing_index_is_rebuilt_never_fatal(store: HistoryStore, damage: str) -> None:
    """A bad file opens as an empty index that the next sync rebuilds from the history and saves. (Letting
    np.load's error through failed every case but 'missing'.)"""
    words = Words()
    _chat(store, "u", "the reply that should be found again")
    index = _index(store)
    index.sync(store.db_path, words)
    path = index.path
    if damage == "garbage":
        path.write_bytes(b"not an index at all")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "missing":
        path.unlink()
    else:
        index.lengths = index.lengths + 1  # entries that do not add up to the corpus
        index.save()
    broken = _index(store)
    assert broken.rebuilt_reason is not None and broken.n_messages == 0
    assert broken.sync(store.db_path, words).added == 2
    again = _index(store)
    assert again.rebuilt_reason is None and again.n_messages == 2


def test_an_unreadable_history_is_reported_and_drafting_goes_on(tmp_path: Path) -> None:
    """The drafter keeps its index and says why it is stale. (Raising from prefill stopped the reply.)"""
    index = HistoryIndex(tmp_path / "draft-index" / "x.npz")
    index.add([(1, 1, 0.0, [5, 6, 7, 8, 9, 10])])
    drafter = HistoryLookupDraft(index, tmp_path / "nope.sqlite3", lambda text: [])
    drafter.prefill([1, 2])
    assert drafter.last_error is not None and "nope.sqlite3" in drafter.last_error
    draft = drafter.propose([5, 6, 7, 8], 4, SamplingParams(temperature=1.0), np.random.default_rng(0), 0.0)
    assert draft.tokens == [9, 10]
    assert draft.dists is not None and [d.probs.tolist() for d in draft.dists] == [[1.0], [1.0]]


def test_rebuild_on_demand_removes_the_files(store: HistoryStore) -> None:
    """``remove_index_files`` deletes them (the engine rebuilds); forgetting on a store with none is a no-op."""
    words = Words()
    _chat(store, "u", "a b c d e")
    assert forget_conversations(store.db_path, [1]) == 0
    _index(store).sync(store.db_path, words)
    assert remove_index_files(store.db_path) == 1
    assert _index(store).rebuilt_reason == "missing"
