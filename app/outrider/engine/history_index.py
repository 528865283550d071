"""The draft index of the user's chat history: every stored message as token ids of one tokenizer, searchable.

Why the engine process owns it: the index is over token ids of the target's tokenizer, and only the engine
process loads llama.cpp (the app never imports it). So the engine derives the index from the history database
itself, through a read-only SQLite connection (``mode=ro``; the app stays the only writer of the history), and
keeps it as one file per tokenizer next to the history (``<data dir>/draft-index/<fingerprint>.npz``). A
tokenizer-keyed file survives a pair switch: switching back finds its own file, another tokenizer builds (or
finds) its own. The app process only ever removes entries (a deleted conversation, ``forget_conversations``),
which needs no tokenizer.

Synchronisation (``HistoryIndex.sync``): the messages the history holds (a conversation not deleted, a message
complete or interrupted) are compared with the indexed ones by (id, updated_at); new and edited messages are
tokenised and added, messages that left the history (deleted chats, edits that dropped later turns) leave the
index. The engine syncs at load and at the start of every reply that drafts from history, so a reply stored by the
app is in the index for the next request; the cost when nothing changed is one query over (id, updated_at).

Search: every ``ANCHOR``-token window of the corpus is hashed; a query hashes the last ``ANCHOR`` committed tokens,
finds the windows with that hash (a sorted array, ``searchsorted``), extends each match backwards (at most
``MAX_MATCH`` tokens, every occurrence at once) and keeps the occurrences of the longest match. Continuing them
(``continuation``): the most frequent next token among the occurrences, the occurrences that agree, and so on —
SuffixDecoding's greedy path through a suffix tree, with the path's probability (the product of each step's share)
as its confidence.

The file never leaves the machine: it is written owner-only in the private data folder and is no part of any
export. Invariant: ``corpus`` holds each indexed message's tokens followed by one ``SEPARATOR``, in entry order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import sqlite3
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from outrider.fileio import atomic_write_bytes

INDEX_DIRNAME = "draft-index"
FORMAT_VERSION = 1
ANCHOR = 4  # tokens a match must share at least (shorter ones are prompt lookup's: ≤ 3-grams of the prompt)
MAX_MATCH = 64  # tokens a match is extended backwards at most (longer says nothing more about the next token)
MAX_OCCURRENCES = 256  # occurrences of the longest match considered (the most recent ones)
SEPARATOR = -1  # between messages: no window and no continuation crosses it
_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)
_NO_HASH = np.uint64(0xFFFFFFFFFFFFFFFF)  # windows that cross a separator

IntArray = npt.NDArray[np.int64]
Tokenize = Callable[[str], list[int]]

# The history's own rows (outrider.history.schema): conversations(id, deleted_at), messages(id, conversation_id,
# text, status, updated_at). A test opens a real history store and syncs from it, so a schema change that breaks
# this query breaks that test.
_ROWS_SQL = ("SELECT m.id, m.conversation_id, COALESCE(m.updated_at, m.created_at) FROM messages m "
             "JOIN conversations c ON c.id = m.conversation_id "
             "WHERE c.deleted_at IS NULL AND m.status IN ('complete', 'interrupted') AND length(m.text) > 0")
_TEXT_SQL = "SELECT text FROM messages WHERE id = ?"


class HistoryIndexError(Exception):
    """The history database cannot be read (missing, locked past the timeout, not a history)."""


def index_dir_for(history_db: Path) -> Path:
    """The folder of the draft index files kept with the history database ``history_db``."""
    return Path(history_db).parent / INDEX_DIRNAME


def tokenizer_fingerprint(vocab_type: int, token_texts: Sequence[str]) -> str:
    """A name for a tokenizer (its type and every token's text, in id order): 16 hex digits."""
    digest = hashlib.sha256(str(vocab_type).encode())
    for text in token_texts:
        digest.update(text.encode("utf-8", errors="replace") + b"\0")
    return digest.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Match:
    """The occurrences of the longest history match of the committed tokens' end: ``length`` tokens long;
    ``ends[i]`` is the corpus position right after occurrence i (where its continuation starts)."""

    length: int
    ends: IntArray


@dataclasses.dataclass(frozen=True)
class SyncReport:
    """What one ``sync`` changed: messages added (new or edited) and removed, and tokens now indexed."""

    added: int
    removed: int
    tokens: int


class HistoryIndex:
    """The token index of one history database for one tokenizer, in memory, saved to ``path``.

    Entries (parallel arrays): message id, conversation id, the message's ``updated_at`` stamp, its token count;
    ``corpus`` is their tokens, each followed by ``SEPARATOR``. Not thread-safe (the engine drafts from one thread).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.message_ids: IntArray = np.zeros(0, np.int64)
        self.conversation_ids: IntArray = np.zeros(0, np.int64)
        self.stamps = np.zeros(0, np.float64)
        self.lengths: IntArray = np.zeros(0, np.int64)
        self.corpus: IntArray = np.zeros(0, np.int64)
        self._hashed: tuple[npt.NDArray[np.uint64], IntArray] | None = None  # sorted hashes, their positions
        self.rebuilt_reason: str | None = None  # why the saved file was not used at load (corrupt, other format)

    # -- the file -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path) -> HistoryIndex:
        """The index saved at ``path``; an empty one (to be synced) if it is missing, unreadable or corrupt —
        the history is the source, the file only a cache of its tokens, so a bad file is never fatal."""
        index = cls(path)
        try:
            index._read()
        except FileNotFoundError:
            index.rebuilt_reason = "missing"
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
            index.rebuilt_reason = f"unreadable ({type(exc).__name__})"
            index._set(*_empty_entries())
        return index

    def _read(self) -> None:
        with np.load(self.path, allow_pickle=False) as data:
            if int(data["version"]) != FORMAT_VERSION:
                raise ValueError("another format version")
            arrays = (np.asarray(data["message_ids"], np.int64), np.asarray(data["conversation_ids"], np.int64),
                      np.asarray(data["stamps"], np.float64), np.asarray(data["lengths"], np.int64),
                      np.asarray(data["corpus"], np.int64))
        ids, convs, stamps, lengths, corpus = arrays
        if not (len(ids) == len(convs) == len(stamps) == len(lengths)) or np.any(lengths < 0) or (
                int(lengths.sum()) + len(lengths) != len(corpus)):
            raise ValueError("entries and corpus disagree")
        ends = np.cumsum(lengths + 1) - 1
        if len(corpus) and not np.all(corpus[ends] == SEPARATOR):
            raise ValueError("separators out of place")
        self._set(ids, convs, stamps, lengths, corpus)

    def save(self) -> None:
        """Write the index atomically, owner-only (``fileio``); the folder is created private."""
        buffer = io.BytesIO()
        np.savez(buffer, version=np.int64(FORMAT_VERSION), message_ids=self.message_ids,
                 conversation_ids=self.conversation_ids, stamps=self.stamps, lengths=self.lengths,
                 corpus=self.corpus.astype(np.int32))
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_bytes(self.path, buffer.getvalue())

    # -- contents -------------------------------------------------------------------------------------------
    @property
    def n_messages(self) -> int:
        return len(self.message_ids)

    @property
    def n_tokens(self) -> int:
        return int(self.lengths.sum())

    def tokens_of(self, message_id: int) -> list[int]:
        """The indexed tokens of one message (empty if it is not indexed)."""
        where = np.flatnonzero(self.message_ids == message_id)
        if not len(where):
            return []
        starts = np.cumsum(self.lengths + 1) - (self.lengths + 1)
        start = int(starts[where[0]])
        return [int(t) for t in self.corpus[start : start + int(self.lengths[where[0]])]]

    def _set(self, ids: IntArray, convs: IntArray, stamps: npt.NDArray[np.float64], lengths: IntArray,
             corpus: IntArray) -> None:
        self.message_ids, self.conversation_ids, self.stamps, self.lengths = ids, convs, stamps, lengths
        self.corpus = corpus
        self._hashed = None

    def _hashes(self) -> tuple[npt.NDArray[np.uint64], IntArray]:
        """Every ANCHOR-token window's hash (by its last position), sorted for ``searchsorted``, and the positions
        in that order; computed at the first search after a change (removing entries needs none)."""
        if self._hashed is None:
            h = _window_hashes(self.corpus)
            order = np.argsort(h, kind="stable").astype(np.int64)
            self._hashed = h[order], order
        return self._hashed

    def remove(self, keep: npt.NDArray[np.bool_]) -> None:
        """Keep only the entries where ``keep`` is True (their tokens with them)."""
        per_token = np.repeat(keep, self.lengths + 1)
        self._set(self.message_ids[keep], self.conversation_ids[keep], self.stamps[keep], self.lengths[keep],
                  self.corpus[per_token])

    def add(self, rows: Iterable[tuple[int, int, float, Sequence[int]]]) -> None:
        """Append (message id, conversation id, stamp, tokens) entries."""
        rows = list(rows)
        if not rows:
            return
        parts = [self.corpus] + [np.array([*tokens, SEPARATOR], np.int64) for *_, tokens in rows]
        self._set(np.concatenate([self.message_ids, np.array([r[0] for r in rows], np.int64)]),
                  np.concatenate([self.conversation_ids, np.array([r[1] for r in rows], np.int64)]),
                  np.concatenate([self.stamps, np.array([r[2] for r in rows], np.float64)]),
                  np.concatenate([self.lengths, np.array([len(r[3]) for r in rows], np.int64)]),
                  np.concatenate(parts))

    def forget_conversations(self, conversation_ids: Iterable[int]) -> int:
        """Drop every message of these conversations; returns how many entries left."""
        gone = np.isin(self.conversation_ids, np.array(list(conversation_ids), np.int64))
        if gone.any():
            self.remove(~gone)
        return int(gone.sum())

    # -- keeping up with the history ------------------------------------------------------------------------
    def sync(self, history_db: Path, tokenize: Tokenize) -> SyncReport:
        """Bring the index up to the history in ``history_db`` (read-only) and save it if anything changed.

        Raises:
            HistoryIndexError: the database cannot be read.
        """
        try:
            conn = sqlite3.connect(f"{Path(history_db).resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
        except sqlite3.Error as exc:
            raise HistoryIndexError(f"cannot open the history {history_db}: {exc}") from None
        try:
            conn.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
            rows = conn.execute(_ROWS_SQL).fetchall()
            current = {int(mid): (int(cid), float(stamp)) for mid, cid, stamp in rows}
            keep = np.array([current.get(m, (0, -1.0))[1] == s for m, s in
                             zip(self.message_ids.tolist(), self.stamps.tolist(), strict=True)], np.bool_)
            removed = int((~keep).sum())
            if removed:
                self.remove(keep)
            kept = set(self.message_ids.tolist())
            new_rows = []
            for mid in sorted(m for m in current if m not in kept):
                found = conn.execute(_TEXT_SQL, (mid,)).fetchone()
                if found is None:  # deleted between the two queries
                    continue
                cid, stamp = current[mid]
                new_rows.append((mid, cid, stamp, tokenize(str(found[0]))))
        except sqlite3.Error as exc:
            raise HistoryIndexError(f"cannot read the history {history_db}: {exc}") from None
        finally:
            conn.close()
        self.add(new_rows)
        if removed or new_rows or self.rebuilt_reason is not None:
            self.save()
            self.rebuilt_reason = None
        return SyncReport(len(new_rows), removed, self.n_tokens)

    # -- search ---------------------------------------------------------------------------------------------
    def longest_match(self, committed: Sequence[int]) -> Match | None:
        """The occurrences of the longest suffix of ``committed`` (at least ANCHOR tokens) found in the corpus,
        None if there is none; at most MAX_OCCURRENCES of them, the latest in the corpus.

        Cost: the query's hash is computed in Python and looked up with two binary searches, so a step without a
        match (free prose) costs a few microseconds; a match is extended backwards for all its occurrences at once
        (one comparison of an occurrences x MAX_MATCH block), not token by token."""
        if len(committed) < ANCHOR or len(self.corpus) < ANCHOR:
            return None
        hashes, order = self._hashes()
        key = np.uint64(_tail_hash(committed))
        lo = int(hashes.searchsorted(key, side="left"))
        hi = int(hashes.searchsorted(key, side="right"))
        if hi <= lo:
            return None
        last = np.sort(order[max(lo, hi - 4 * MAX_OCCURRENCES) : hi])  # the windows' last positions
        c = self.corpus
        limit = min(MAX_MATCH, len(committed))
        # back[d] = committed[-1 - d]; block[i, d] = the corpus token d before occurrence i's last one (the
        # separator where that is before the corpus: it equals no token, so a match never reaches past it).
        back = np.array(committed[len(committed) - limit :][::-1], np.int64)
        where = last[:, None] - np.arange(limit, dtype=np.int64)[None, :]
        block = np.where(where >= 0, c[np.maximum(where, 0)], SEPARATOR)
        agree = block == back[None, :]
        same = agree[:, :ANCHOR].all(axis=1)  # hash collisions out
        agree, last = agree[same][-MAX_OCCURRENCES:], last[same][-MAX_OCCURRENCES:]
        if not len(last):
            return None
        # Each occurrence's match length: its first disagreement (or ``limit`` if it agrees all the way).
        length = np.where(agree.all(axis=1), limit, np.argmin(agree, axis=1)).astype(np.int64)
        best = int(length.max())
        return Match(best, (last[length == best] + 1).astype(np.int64))

    def continuation(self, match: Match, limit: int, min_confidence: float) -> tuple[list[int], float]:
        """The most frequent continuation of ``match``, token by token, while its probability (the product of each
        token's share among the occurrences still agreeing) stays >= ``min_confidence``; at most ``limit`` tokens.
        Returns the tokens and their probability."""
        c = self.corpus
        ends = match.ends
        tokens: list[int] = []
        confidence = 1.0
        # Every position in ``ends`` is in range: it follows a token, and the corpus ends with a separator.
        while len(tokens) < limit and len(ends):
            nxt = c[ends]
            nxt = nxt[nxt != SEPARATOR]
            if not len(nxt):
                break
            values, counts = np.unique(nxt, return_counts=True)
            best = int(np.argmax(counts))
            share = float(counts[best]) / len(ends)
            if confidence * share < min_confidence:
                break
            confidence *= share
            token = int(values[best])
            tokens.append(token)
            ends = ends[c[ends] == token] + 1
        return tokens, confidence

    def occurrence(self, match: Match, tokens: Sequence[int]) -> int:
        """The corpus position where the latest occurrence of ``match`` whose continuation is ``tokens`` continues
        (the text a draft of ``tokens`` was read from; ``tokens`` must be ``continuation``'s for this match)."""
        c = self.corpus
        ends = match.ends
        for i, token in enumerate(tokens):
            ends = ends[c[ends + i] == token]
        return int(ends[-1])

    def run(self, at: int, limit: int) -> list[int]:
        """The corpus's tokens from position ``at``: at most ``limit``, up to the end of their message."""
        if not 0 <= at < len(self.corpus):
            return []
        part = self.corpus[at : at + limit]
        stop = np.flatnonzero(part == SEPARATOR)
        return [int(t) for t in (part[: stop[0]] if len(stop) else part)]


_MASK = (1 << 64) - 1


def _tail_hash(committed: Sequence[int]) -> int:
    """``_window_hashes``'s hash of the window of the last ANCHOR tokens of ``committed`` (none a separator),
    computed on Python integers: numpy's set-up for four tokens costs ten times the arithmetic."""
    h = 0
    mul = int(_HASH_MUL)
    for j in range(ANCHOR):
        h = (h * mul + int(committed[-1 - j]) + j + 1) & _MASK
    return h


def _window_hashes(tokens: IntArray) -> npt.NDArray[np.uint64]:
    """For each position i >= ANCHOR - 1, a hash of tokens[i - ANCHOR + 1 .. i] (_NO_HASH where that window holds
    a separator or does not exist)."""
    n = len(tokens)
    t = tokens.astype(np.uint64)  # SEPARATOR wraps to 2**64 - 1: hashed, then masked out below
    h = np.zeros(n, np.uint64)
    bad = np.zeros(n, np.bool_)
    with np.errstate(over="ignore"):
        for j in range(ANCHOR):
            shifted = np.zeros(n, np.uint64)
            shifted[j:] = t[: n - j] if j else t
            h = h * _HASH_MUL + shifted + np.uint64(j + 1)
            sep = np.zeros(n, np.bool_)
            sep[j:] = tokens[: n - j] == SEPARATOR if j else tokens == SEPARATOR
            bad |= sep
    bad[: ANCHOR - 1] = True
    h[bad] = _NO_HASH
    return h


def _empty_entries() -> tuple[IntArray, IntArray, npt.NDArray[np.float64], IntArray, IntArray]:
    return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64),
            np.zeros(0, np.int64))


def forget_conversations(history_db: Path, conversation_ids: Iterable[int]) -> int:
    """Remove these conversations from every draft index file kept with ``history_db`` (the app process calls this
    when a conversation is deleted: the engine may not be running, and no tokenizer is needed to remove tokens).
    A file that cannot be read is deleted (the engine rebuilds it from the history). Returns entries removed."""
    ids = list(conversation_ids)
    removed = 0
    folder = index_dir_for(history_db)
    if not folder.is_dir():
        return 0
    for path in sorted(folder.glob("*.npz")):
        index = HistoryIndex.open(path)
        if index.rebuilt_reason is not None:
            path.unlink(missing_ok=True)
            continue
        gone = index.forget_conversations(ids)
        if gone:
            index.save()
            removed += gone
    return removed


def remove_index_files(history_db: Path) -> int:
    """Delete every draft index file of ``history_db`` ("rebuild on demand": the engine rebuilds at its next sync).
    Returns how many files were deleted."""
    folder = index_dir_for(history_db)
    count = 0
    if folder.is_dir():
        for path in folder.glob("*.npz"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
                count += 1
    return count
