"""History lookup after an edit (engine/history_draft.py's re-synchronisation) and the index's search against a
brute-force reference (engine/history_index.py). Each docstring says what breaking the code looked like."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from outrider.engine.history_draft import RESYNC_WINDOW, HistoryLookupDraft
from outrider.engine.history_index import ANCHOR, MAX_MATCH, MAX_OCCURRENCES, HistoryIndex

SOURCE = list(range(100, 140))  # an earlier reply: 40 distinct tokens (a file, say)
USER = [1, 2, 3]


def _drafter(tmp_path: Path, *messages: Sequence[int]) -> HistoryLookupDraft:
    index = HistoryIndex(tmp_path / "i.npz")
    index.add((i, i, 0.0, list(m)) for i, m in enumerate(messages))
    drafter = HistoryLookupDraft(index, None, lambda text: [])
    drafter.prefill([])
    return drafter


def test_a_replaced_token_is_skipped_and_the_source_followed_at_once(tmp_path: Path) -> None:
    """The reply copies SOURCE, replaces one token (a renamed word), and the next guess is the source's text after
    it — no suffix match exists there (fewer than ANCHOR tokens agree since the edit). (With ``_follow`` returning
    None, the guess after the edit was empty: the assert on ``after`` failed; drafting went on ANCHOR tokens
    later.)"""
    drafter = _drafter(tmp_path, SOURCE)
    committed = USER + SOURCE[:20]
    assert drafter.guess(committed, 8) == SOURCE[20:28]
    committed += [999]  # the target wrote 999 where the source has SOURCE[20]
    assert drafter.index.longest_match(committed) is None
    after = drafter.guess(committed, 8)
    assert after == SOURCE[21:29]
    assert drafter.match_length == 10  # the 20 tokens of evidence, halved by the edit


def test_an_insertion_is_followed_again_where_the_reply_rejoins_the_source(tmp_path: Path) -> None:
    """The reply inserts two tokens, then repeats the source's next token: the guess goes on after it. In between,
    the guesses (a replacement of the same length) are wrong, and the edit is still measured from where the reply
    left the source. (Measuring it from the latest wrong guess instead — ``source.before`` ignored — lost the
    source: the guess after the rejoining token was SOURCE[23:31], not SOURCE[21:29].)"""
    drafter = _drafter(tmp_path, SOURCE)
    committed = USER + SOURCE[:20]
    drafter.guess(committed, 8)
    for token in (901, 902):  # inserted
        committed.append(token)
        drafter.guess(committed, 8)
    committed.append(SOURCE[20])  # the reply is back on the source
    assert drafter.guess(committed, 8) == SOURCE[21:29]


def test_a_reply_that_leaves_its_source_for_good_stops_being_drafted_from_it(tmp_path: Path) -> None:
    """After more than RESYNC_WINDOW tokens that are not in the source, the drafter proposes nothing (it would
    otherwise keep proposing the source's text to a reply that went elsewhere, and win over prompt lookup).
    (With the window bounds removed — the edit's length and the search window — the guess after 9 unrelated
    tokens was SOURCE[29:37].)"""
    drafter = _drafter(tmp_path, SOURCE)
    committed = USER + SOURCE[:20]
    drafter.guess(committed, 8)
    for token in range(700, 700 + RESYNC_WINDOW + 1):
        committed.append(token)
        guess = drafter.guess(committed, 8)
    assert guess == []
    assert drafter.match_length == 0


def test_a_new_reply_forgets_the_source(tmp_path: Path) -> None:
    """``prefill`` (a new reply; the index may have been synced and its positions moved) drops the source.
    (Without the reset the guess on the next reply, after an unrelated 999, was SOURCE[21:29].)"""
    drafter = _drafter(tmp_path, SOURCE)
    committed = USER + SOURCE[:20]
    drafter.guess(committed, 8)
    drafter.prefill(committed)
    assert drafter.guess([*committed, 999], 8) == []


def _brute_force(corpus: list[int], committed: list[int]) -> tuple[int, list[int]] | None:
    """The longest suffix of ``committed`` (ANCHOR to MAX_MATCH tokens) in ``corpus`` (no separator inside), and
    the positions after each of its occurrences: every position tried, every length."""
    best, ends = 0, []
    for end in range(len(corpus)):
        n = 0
        while (n < min(MAX_MATCH, len(committed), end + 1) and corpus[end - n] != -1
               and corpus[end - n] == committed[-1 - n]):
            n += 1
        if n >= ANCHOR and n > best:
            best, ends = n, [end + 1]
        elif n >= ANCHOR and n == best:
            ends.append(end + 1)
    return (best, ends) if best else None


def test_the_longest_match_agrees_with_a_brute_force_search() -> None:
    """Random corpora over small vocabularies (many repeats, matches up to MAX_MATCH, messages cut by separators)
    against a search that tries every position. (With the block comparison's first disagreement taken one column
    late, lengths came out one too long; with the separator test left out of the block, a match ran back into
    the previous message.)"""
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(200):
        vocab = int(rng.integers(2, 6))
        messages = [rng.integers(0, vocab, int(rng.integers(0, 120))).tolist() for _ in range(int(rng.integers(1, 4)))]
        index = HistoryIndex(Path("unused.npz"))
        index.add((i, i, 0.0, m) for i, m in enumerate(messages))
        corpus = index.corpus.tolist()
        for _ in range(10):
            committed = rng.integers(0, vocab, int(rng.integers(ANCHOR, 100))).tolist()
            expected = _brute_force(corpus, committed)
            if expected is not None and len(expected[1]) > MAX_OCCURRENCES // 4:
                continue  # the index keeps the latest occurrences of a very frequent window only
            match = index.longest_match(committed)
            if expected is None:
                assert match is None
                continue
            assert match is not None
            assert (match.length, match.ends.tolist()) == expected
            checked += 1
    assert checked > 500
