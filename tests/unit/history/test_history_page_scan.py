"""Salvage of history files SQLite itself cannot open: the page scan (history/page_scan.py).

Before the scan, damage to the 16-byte header, to page 1 or to the messages table's root page recovered 0 of 400
messages although every text was still in the kept file (SQLite's read path needs all three). Each test below
failed that way with ``_scanned_rows`` returning nothing (recovered 0, or only the conversations).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from outrider.history import HistoryStore, Message, MessageStatus, ReplyStats
from outrider.history.page_scan import decode_record, guess_page_size, scan_rows

CONVERSATIONS = 200  # 400 messages


def _fill(data_dir: Path, conversations: int = CONVERSATIONS, long_every: int = 10) -> dict[int, list[str]]:
    """A question and a reply per conversation; every ``long_every``-th question spans overflow pages."""
    texts: dict[int, list[str]] = {}
    with HistoryStore.open(data_dir) as store:
        for i in range(conversations):
            cid = store.create_conversation(f"chat {i}", pair_id="pair-a")
            length = 9_000 if long_every and i % long_every == 0 else 300
            question = f"question {i} " + "".join(random.Random(i).choices("abcdefgh ", k=length))
            answer = f"answer {i} ✓ " + "a" * 300
            store.add_user_message(cid, question)
            rid = store.begin_reply(cid)
            store.finish_reply(rid, answer, MessageStatus.COMPLETE, ReplyStats(k_mean=2.5))
            texts[cid] = [question, answer]
    return texts


def _texts(data_dir: Path) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    with HistoryStore.open(data_dir) as store:
        for summary in store.list_conversations():
            messages = store.get_conversation(summary.id).messages
            out[summary.id] = [m.text for m in messages if isinstance(m, Message)]
    return out


def _roots(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return {str(name): int(root) for name, root in conn.execute("SELECT name, rootpage FROM sqlite_master")}
    finally:
        conn.close()


def _smash(db: Path, offset: int, length: int) -> None:
    with open(db, "r+b") as f:
        f.seek(offset)
        f.write(os.urandom(length))


def _integrity_ok(db: Path) -> bool:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


@pytest.mark.parametrize("damage", ["header", "page 1", "messages root page", "conversations root page"])
def test_damage_sqlite_cannot_read_past_loses_no_message(tmp_path: Path, damage: str) -> None:
    before = _fill(tmp_path)
    db = tmp_path / "history.sqlite3"
    roots = _roots(db)
    page = 4096
    assert roots["messages"] != roots["conversations"]
    if damage == "header":
        _smash(db, 0, 16)
    elif damage == "page 1":
        _smash(db, 0, page)
    else:
        table = damage.split()[0]
        _smash(db, (roots[table] - 1) * page, page)
    with HistoryStore.open(tmp_path) as store:
        notice = store.notice
        assert notice is not None and notice.problem == "damaged"
        assert notice.recovered_messages >= 0.99 * 2 * CONVERSATIONS
        assert f"{notice.recovered_messages} message(s)" in notice.message and str(notice.moved_to) in notice.message
        recovered_db = store.db_path
    after = _texts(tmp_path)
    assert sum(len(t) for t in after.values()) >= 0.99 * 2 * CONVERSATIONS
    for cid, texts in after.items():
        assert texts == before[cid]  # whole texts, overflow pages included, in order, under their conversation
    assert _integrity_ok(recovered_db)


def test_titles_come_back_with_the_conversations_after_page_one_damage(tmp_path: Path) -> None:
    _fill(tmp_path, conversations=30)
    _smash(tmp_path / "history.sqlite3", 0, 4096)
    with HistoryStore.open(tmp_path) as store:
        titles = {s.title for s in store.list_conversations()}
        assert titles == {f"chat {i}" for i in range(30)}
        assert [h.conversation_title for h in store.search("question 7")] == ["chat 7"]  # full-text index rebuilt


def test_a_deleted_conversation_does_not_come_back(tmp_path: Path) -> None:
    """Deleted rows are gone from the pages' cell lists (or on the freelist): the scan must not revive them."""
    before = _fill(tmp_path, conversations=60, long_every=0)
    gone = next(cid for cid, texts in before.items() if texts[0].startswith("question 5 "))
    with HistoryStore.open(tmp_path) as store:
        store.delete_conversation(gone)
        assert store.purge_deleted() == 1
    db = tmp_path / "history.sqlite3"
    _smash(db, (_roots(db)["messages"] - 1) * 4096, 4096)
    after = _texts(tmp_path)
    assert gone not in after and len(after) == 59
    assert not any(t.startswith("question 5 ") for texts in after.values() for t in texts)


def test_rows_still_in_the_write_ahead_log_are_recovered(tmp_path: Path) -> None:
    """A crash leaves the last writes in the -wal only; the scan lays its committed frames over the pages."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    _fill(live, conversations=20, long_every=0)
    with HistoryStore.open(live) as store:
        cid = store.create_conversation("after the checkpoint")
        store.add_user_message(cid, "written to the log only")
        crashed.mkdir()
        for name in ("history.sqlite3", "history.sqlite3-wal"):
            shutil.copyfile(live / name, crashed / name)  # the files as a crash at this moment leaves them
    assert (crashed / "history.sqlite3-wal").stat().st_size > 0
    _smash(crashed / "history.sqlite3", 0, 16)
    after = _texts(crashed)
    assert after[cid] == ["written to the log only"]
    assert len(after) == 21


def test_every_single_page_smashed_in_turn_never_invents_text(tmp_path: Path) -> None:
    """Damage anywhere: the open always succeeds, and every text recovered is one that was written."""
    template = tmp_path / "template"
    before = _fill(template, conversations=40, long_every=4)
    written = {t for texts in before.values() for t in texts}
    pages = (template / "history.sqlite3").stat().st_size // 4096
    for page in range(1, pages + 1):
        case = tmp_path / f"page-{page}"
        shutil.copytree(template, case)
        _smash(case / "history.sqlite3", (page - 1) * 4096, 4096)
        after = _texts(case)
        recovered = [t for texts in after.values() for t in texts]
        assert set(recovered) <= written, f"page {page}"
        # One page holds a few messages at most (long ones span several pages): the rest survive.
        assert len(recovered) >= len(written) - 12, f"page {page}: {len(recovered)} of {len(written)}"


def test_random_byte_damage_never_breaks_the_open(tmp_path: Path) -> None:
    template = tmp_path / "template"
    _fill(template, conversations=40)
    size = (template / "history.sqlite3").stat().st_size
    for seed in range(12):
        case = tmp_path / f"seed-{seed}"
        shutil.copytree(template, case)
        rng = random.Random(seed)
        with open(case / "history.sqlite3", "r+b") as f:
            for _ in range(40):
                f.seek(rng.randrange(size))
                f.write(bytes([rng.randrange(256)]))
        with HistoryStore.open(case) as store:
            # A flip inside a text or an index entry passes SQLite's quick check and is opened as it is; a
            # file found damaged is replaced by a sound one.
            assert store.notice is None or _integrity_ok(store.db_path)
            store.list_conversations()


def test_page_size_is_found_without_the_header(tmp_path: Path) -> None:
    for page_size in (1024, 8192):
        db = tmp_path / f"p{page_size}.db"
        conn = sqlite3.connect(db)
        conn.execute(f"PRAGMA page_size = {page_size}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT)")
        conn.executemany("INSERT INTO t (x) VALUES (?)", [(f"row {i} " + "x" * 200,) for i in range(300)])
        conn.commit()
        conn.close()
        _smash(db, 0, 100)
        assert guess_page_size(db.read_bytes()) == page_size
        rows = {row.rowid: row.values for row in scan_rows(db) if len(row.values) == 2}
        assert len(rows) == 300 and rows[7] == (("null", None), ("text", b"row 6 " + b"x" * 200))


def test_record_decoding_of_each_serial_type() -> None:
    # header: size 8; types: NULL, 1-byte int, 8-byte int, real, 0, 1, text "hi", blob b"\x01"
    payload = bytes([8, 0, 1, 6, 7, 8, 9, 17, 14]) + bytes([0xFF]) + (2**40).to_bytes(8, "big") \
        + bytes.fromhex("3ff8000000000000") + b"hi" + b"\x01"
    payload = bytes([9]) + payload[1:]
    assert decode_record(payload) == (
        ("null", None), ("integer", -1), ("integer", 2**40), ("real", 1.5), ("integer", 0), ("integer", 1),
        ("text", b"hi"), ("blob", b"\x01"),
    )
    assert decode_record(payload[:-1]) is None  # a cut record is no record
    assert decode_record(b"") is None


# ------------------------------------------------------------------------- files that are not a history


def test_an_empty_history_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "history.sqlite3").write_bytes(b"")
    with HistoryStore.open(tmp_path) as store:
        notice = store.notice
        assert notice is not None and notice.problem == "empty"
        assert "empty (0 bytes)" in notice.message and str(notice.moved_to) in notice.message
        assert notice.moved_to.exists()
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is None


def test_a_new_history_is_not_reported_as_empty(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is None


def test_another_applications_database_is_set_aside_unmodified(tmp_path: Path) -> None:
    """Before: the durable connection switched it to WAL mode (header bytes 18-19) before noticing."""
    db = tmp_path / "history.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT, taken REAL)")
    conn.executemany("INSERT INTO photos (name, taken) VALUES (?, ?)", [(f"p{i}", float(i)) for i in range(50)])
    conn.commit()
    conn.close()
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    with HistoryStore.open(tmp_path) as store:
        notice = store.notice
        assert notice is not None and notice.problem == "foreign"
        assert "another application's database" in notice.message
        assert hashlib.sha256(notice.moved_to.read_bytes()).hexdigest() == digest
        assert not notice.moved_to.with_name(notice.moved_to.name + "-wal").exists()
        assert store.list_conversations() == []

