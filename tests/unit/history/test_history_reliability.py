"""Reliability of the history store: private file modes, a
damaged history is always reported and salvaged, a full disk stores all of a change or none of it, and import
refuses text SQLite cannot store."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from outrider import paths
from outrider.history import (
    CorruptionNotice,
    DataDirectoryError,
    DiskFullError,
    HistoryStore,
    ImportFormatError,
    Message,
    MessageStatus,
    ReplyStats,
    StoreReadOnlyError,
)

POSIX = os.name == "posix"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask: whatever Outrider creates must still be private."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _fill(store: HistoryStore, conversations: int = 40, text: int = 300) -> dict[int, list[str]]:
    """Conversations with a question and a reply each; returns their message texts by conversation id."""
    texts: dict[int, list[str]] = {}
    for i in range(conversations):
        cid = store.create_conversation(f"chat {i}", pair_id="pair-a", settings={"k": 4})
        question, answer = f"question {i} " + "q" * text, f"answer {i} " + "a" * text
        store.add_user_message(cid, question)
        rid = store.begin_reply(cid)
        store.finish_reply(rid, answer, MessageStatus.COMPLETE, ReplyStats(k_mean=4.0))
        texts[cid] = [question, answer]
    return texts


def _all_texts(store: HistoryStore) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for summary in store.list_conversations():
        conversation = store.get_conversation(summary.id)
        out[summary.id] = [m.text for m in conversation.messages if isinstance(m, Message)]
    return out


def _page_size_and_roots(db: Path) -> tuple[int, dict[str, int]]:
    conn = sqlite3.connect(db)
    try:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        roots = {str(name): int(root) for name, root in conn.execute("SELECT name, rootpage FROM sqlite_master")}
    finally:
        conn.close()
    return page_size, roots


def _smash_page(db: Path, page: int, page_size: int) -> None:
    """Garbage over a whole page (pages count from 1)."""
    with open(db, "r+b") as f:
        f.seek((page - 1) * page_size)
        f.write(os.urandom(page_size))


# ------------------------------------------------------------------------ item 2: private files and folders


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_history_files_and_folder_are_private_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    home = tmp_path / "home"
    with HistoryStore.open(home) as store:
        store.create_conversation("secret")  # the WAL and shared-memory files exist while the store is open
        db = store.db_path
        assert mode(home) == 0o700
        for name in ("history.sqlite3", "history.sqlite3-wal", "history.sqlite3-shm", "history.sqlite3.lock"):
            assert mode(home / name) == 0o600, name
    assert mode(db) == 0o600


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_existing_world_readable_history_is_made_private_on_open(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        store.create_conversation("secret")
    os.chmod(tmp_path, 0o755)
    for name in ("history.sqlite3", "history.sqlite3.lock"):
        os.chmod(tmp_path / name, 0o644)
    with HistoryStore.open(tmp_path):
        assert mode(tmp_path) == 0o700
        assert mode(tmp_path / "history.sqlite3") == 0o600
        assert mode(tmp_path / "history.sqlite3.lock") == 0o600
        assert mode(tmp_path / "history.sqlite3-wal") == 0o600


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_data_models_and_logs_folders_are_private(tmp_path: Path, open_umask: None) -> None:
    env = {"OUTRIDER_HOME": str(tmp_path / "new" / "home")}
    for folder in (paths.data_dir(env), paths.models_dir(env), paths.log_dir(env)):
        assert mode(folder) == 0o700, folder
    old = tmp_path / "old"
    (old / "models").mkdir(parents=True)
    (old / "logs").mkdir()
    for folder in (old, old / "models", old / "logs"):
        os.chmod(folder, 0o755)
    env = {"OUTRIDER_HOME": str(old)}
    for folder in (paths.data_dir(env), paths.models_dir(env), paths.log_dir(env)):
        assert mode(folder) == 0o700, folder


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_kept_damaged_file_and_migration_backup_are_private(tmp_path: Path, open_umask: None) -> None:
    (tmp_path / "history.sqlite3").write_bytes(os.urandom(8192))
    os.chmod(tmp_path / "history.sqlite3", 0o644)
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is not None
        assert mode(store.notice.moved_to) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no salvage leftovers


def test_data_directory_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    a_file = tmp_path / "home"
    a_file.write_text("not a folder")
    with pytest.raises(DataDirectoryError, match="it is a file"):
        HistoryStore.open(a_file)
    with pytest.raises(paths.DataDirError, match="it is a file") as info:
        paths.data_dir({"OUTRIDER_HOME": str(a_file)})
    assert info.value.exit_code == 2


@pytest.mark.skipif(not POSIX or os.geteuid() == 0, reason="root writes read-only files")
def test_read_only_database_is_a_clear_error(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        store.create_conversation("kept")
    os.chmod(tmp_path / "history.sqlite3", 0o444)
    with pytest.raises(StoreReadOnlyError, match="read-only"):
        HistoryStore.open(tmp_path)


# -------------------------------------------------------------- item 3: a damaged history is always reported


def test_truncated_history_is_reported_with_the_kept_file_and_what_was_recovered(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        _fill(store, conversations=60, text=400)
    db = tmp_path / "history.sqlite3"
    size = db.stat().st_size
    assert size > 40_000
    os.truncate(db, 20_000)  # `truncate -s 20000 history.sqlite3`
    with HistoryStore.open(tmp_path) as store:
        notice = store.notice
        assert isinstance(notice, CorruptionNotice)
        assert notice.moved_to.name.startswith("history.sqlite3.corrupt-")
        assert notice.moved_to.stat().st_size == 20_000  # kept as found
        assert str(notice.moved_to) in notice.message and "\n" not in notice.message
        texts = _all_texts(store)
        assert notice.recovered_messages == sum(len(t) for t in texts.values())
        if notice.recovered_messages:
            assert f"{notice.recovered_messages} message(s)" in notice.message
        else:
            assert "no messages could be recovered" in notice.message
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is None  # reported once per damage found, not forever


def test_truncated_history_keeps_the_rows_before_the_cut(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        before = _fill(store, conversations=60, text=400)
    db = tmp_path / "history.sqlite3"
    os.truncate(db, db.stat().st_size * 7 // 10 // 4096 * 4096)
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is not None
        after = _all_texts(store)
        assert store.notice.recovered_messages == sum(len(t) for t in after.values()) > 0
        for cid, texts in after.items():
            assert texts == before[cid][: len(texts)]


# ------------------------------------------------------------------------------------- item 4: salvage


def test_garbage_over_two_index_pages_loses_no_message(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        before = _fill(store)
    db = tmp_path / "history.sqlite3"
    page_size, roots = _page_size_and_roots(db)
    _smash_page(db, roots["messages_by_conversation"], page_size)
    _smash_page(db, roots["conversations_by_uuid"], page_size)
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is not None
        assert store.notice.recovered_messages == 80 and store.notice.recovered_conversations == 40
        assert "80 message(s) in 40 conversation(s) were recovered" in store.notice.message
        assert _all_texts(store) == before
        assert [h.conversation_title for h in store.search("question 7")] == ["chat 7"]  # FTS rebuilt
        check = sqlite3.connect(store.db_path)
        try:
            assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            check.close()
        cid = store.create_conversation("after")  # ids go on after the recovered ones
        assert cid == 41


def test_damaged_table_page_keeps_every_row_on_the_other_pages(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        before = _fill(store, conversations=60, text=1500)  # about two messages a page
    db = tmp_path / "history.sqlite3"
    page_size, roots = _page_size_and_roots(db)
    conn = sqlite3.connect(db)
    try:  # a leaf page of the messages table in the middle: the page holding message 61
        conn.execute("SELECT 1").fetchone()
        total_pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    finally:
        conn.close()
    data = db.read_bytes()
    needle = ("question 30 " + "q" * 50).encode()
    page = data.index(needle) // page_size + 1
    assert page != roots["messages"] and page <= total_pages
    _smash_page(db, page, page_size)
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is not None
        after = _all_texts(store)
        recovered = sum(len(t) for t in after.values())
        assert store.notice.recovered_messages == recovered
        assert 110 <= recovered < 120  # one page of messages lost, the rest kept
        for cid, texts in after.items():
            for text in texts:
                assert text in before[cid]


def test_messages_whose_conversation_row_is_lost_are_kept_under_a_placeholder(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        before = _fill(store, conversations=3)
    db = tmp_path / "history.sqlite3"
    page_size, roots = _page_size_and_roots(db)
    _smash_page(db, roots["conversations"], page_size)  # every conversation row (one page)
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is not None and store.notice.recovered_messages == 6
        after = _all_texts(store)
        assert after == before
        titles = {s.title for s in store.list_conversations()}
        assert titles == {f"Recovered conversation {i}" for i in (1, 2, 3)}


def test_garbage_file_recovers_nothing_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "history.sqlite3").write_bytes(os.urandom(20_000))
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is not None and store.notice.recovered_messages == 0
        assert "no messages could be recovered" in store.notice.message
        assert store.list_conversations() == []


# ----------------------------------------------------------------------------------- item 5: disk full


def _cap_database_size(store: HistoryStore) -> None:
    """Simulate a full disk: SQLite may not grow the file any more ("database or disk is full")."""
    conn = sqlite3.connect(store.db_path)  # only to read the page count
    try:
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    finally:
        conn.close()
    store._db.conn.execute(f"PRAGMA max_page_count = {pages}")


def test_disk_full_when_starting_a_conversation_stores_nothing(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        _cap_database_size(store)
        with pytest.raises(DiskFullError) as info:
            store.start_conversation("big", "x" * 200_000, system="Be brief.")
        line = str(info.value)
        assert line.startswith("disk full:") and "\n" not in line and "disk I/O error" not in line
        assert store.list_conversations() == []  # no empty conversation left behind
        store._db.conn.execute("PRAGMA max_page_count = 1073741823")
        cid, _ = store.start_conversation("small", "hello", system="Be brief.")
        roles = [(m.role.value, m.text) for m in store.get_conversation(cid).messages]
        assert roles == [("system", "Be brief."), ("user", "hello")]


def test_disk_full_on_a_reply_checkpoint_keeps_the_question(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        cid, _ = store.start_conversation("t", "the question")
        rid = store.begin_reply(cid)
        _cap_database_size(store)
        with pytest.raises(DiskFullError):
            store.checkpoint_reply(rid, "y" * 200_000)
        messages = store.get_conversation(cid).messages
        assert [m.text for m in messages] == ["the question", ""]


# -------------------------------------------------------------------------- import: text SQLite can't store


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"format": "outrider-history", "format_version": 1, "conversations": [
            {"uuid": "u1", "title": "\ud800", "created_at": 1, "updated_at": 1, "messages": []}]}),
        json.dumps({"format": "outrider-history", "format_version": 1, "conversations": [
            {"uuid": "u1", "title": "t", "created_at": 1, "updated_at": 1, "settings": {"k\udfff": 1},
             "messages": []}]}),
        '{"format": "outrider-history", "format_version": 1, "conversations": []' + ', "x": ' + "[" * 100_000,
        json.dumps({"format": "outrider-history", "format_version": 1, "conversations": [
            {"uuid": "u1", "title": "t", "created_at": 1, "updated_at": 1, "messages": [],
             "settings": {"deep": json.loads("[" * 200 + "]" * 200)}}]}),
    ],
    ids=["lone-surrogate-title", "lone-surrogate-key", "nested-100000", "nested-200"],
)
def test_import_refuses_lone_surrogates_and_deep_nesting(tmp_path: Path, text: str) -> None:
    with HistoryStore.open(tmp_path) as store:
        with pytest.raises(ImportFormatError):
            store.import_json_text(text)
        assert store.list_conversations() == []
