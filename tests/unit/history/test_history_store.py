"""Unit tests of the history store: write order, recovery, settings audit, corruption, migration, search,
export/import and unreadable records."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from outrider import fileio
from outrider.history import (
    CURRENT_VERSION,
    Conversation,
    ConversationNotFoundError,
    ConversationSummary,
    ExportFormat,
    HistoryStore,
    ImportFormatError,
    Message,
    MessageStatus,
    MigrationError,
    RecordUnreadableError,
    ReplyCheckpointer,
    ReplyNotStreamingError,
    ReplyStats,
    Role,
    SchemaTooNewError,
    StoreLockedError,
    UnreadableRecord,
    connect,
)
from outrider.history.schema import MIGRATIONS, Migration, create_database

STATS = ReplyStats(
    pair_id="qwen-0.5b+7b",
    draft_mode="model",
    k_mean=4.75,
    temperature=0.7,
    generated=120,
    drafted=150,
    accepted=100,
    acceptance_rate=0.667,
    decode_tps=41.5,
    speedup=1.8,
    speedup_low=1.62,
    speedup_high=1.98,
    stop_reason="eos",
)


def _messages(conversation: Conversation) -> list[Message]:
    result = [m for m in conversation.messages if isinstance(m, Message)]
    assert len(result) == len(conversation.messages)
    return result


def _chat(store: HistoryStore, title: str = "chat", question: str = "hello", answer: str = "hi") -> int:
    cid = store.create_conversation(title, pair_id="pair-a", settings={"k": 5, "temperature": 0.7})
    store.add_user_message(cid, question)
    rid = store.begin_reply(cid)
    store.finish_reply(rid, answer, MessageStatus.COMPLETE, STATS)
    return cid


# ------------------------------------------------------------------------------------- write order


def test_user_message_is_committed_before_generation_starts(store: HistoryStore) -> None:
    cid = store.create_conversation("t")
    uid = store.add_user_message(cid, "question")
    # Another connection (as after a crash) already sees it: it was committed, not just buffered.
    other = connect(store.db_path)
    try:
        assert other.execute("SELECT text, status FROM messages WHERE id = ?", (uid,)).fetchone() == (
            "question",
            "complete",
        )
    finally:
        other.close()


def test_reply_lifecycle_streaming_checkpoint_finish(store: HistoryStore) -> None:
    cid = store.create_conversation("t")
    store.add_user_message(cid, "q")
    rid = store.begin_reply(cid)
    assert _messages(store.get_conversation(cid))[-1].status is MessageStatus.STREAMING
    store.checkpoint_reply(rid, "partial")
    assert _messages(store.get_conversation(cid))[-1].text == "partial"
    store.finish_reply(rid, "partial and done", MessageStatus.COMPLETE, STATS)
    last = _messages(store.get_conversation(cid))[-1]
    assert (last.role, last.text, last.status, last.stats) == (
        Role.ASSISTANT,
        "partial and done",
        MessageStatus.COMPLETE,
        STATS,
    )
    with pytest.raises(ReplyNotStreamingError):
        store.checkpoint_reply(rid, "late")
    with pytest.raises(ValueError, match="streaming"):
        store.finish_reply(rid, "x", MessageStatus.STREAMING)


def test_crash_leaves_streaming_reply_interrupted_with_last_checkpoint(tmp_path: Path) -> None:
    store = HistoryStore.open(tmp_path)
    cid = store.create_conversation("t")
    store.add_user_message(cid, "q")
    rid = store.begin_reply(cid)
    store.checkpoint_reply(rid, "the last checkpoint")
    # Simulate a crash: drop the connection and the lock without finishing the reply.
    store.close()
    with HistoryStore.open(tmp_path) as reopened:
        assert reopened.recovered_reply_ids == [rid]
        last = _messages(reopened.get_conversation(cid))[-1]
        assert (last.status, last.text) == (MessageStatus.INTERRUPTED, "the last checkpoint")


def test_checkpointer_rate_limits_and_always_writes_on_finish() -> None:
    now = [0.0]
    calls: list[tuple[str, str]] = []

    class FakeStore:
        def checkpoint_reply(self, message_id: int, text: str) -> None:
            calls.append(("checkpoint", text))

        def finish_reply(
            self,
            message_id: int,
            text: str,
            status: MessageStatus = MessageStatus.COMPLETE,
            stats: ReplyStats | None = None,
        ) -> None:
            calls.append(("finish", text))

    cp = ReplyCheckpointer(FakeStore(), 7, interval_s=1.0, clock=lambda: now[0])
    for i in range(50):  # 50 tokens within 0.5 s: no write yet
        now[0] = i * 0.01
        assert not cp.update("x" * (i + 1))
    now[0] = 1.0
    assert cp.update("x" * 51)
    now[0] = 1.5
    assert not cp.update("x" * 52)
    assert not cp.flush_if_due()
    now[0] = 2.0
    assert cp.update("x" * 53)
    now[0] = 2.01
    cp.finish("final")
    writes = [c for c in calls if c[0] == "checkpoint"]
    assert writes == [("checkpoint", "x" * 51), ("checkpoint", "x" * 53)]  # one per second, latest text
    assert calls[-1] == ("finish", "final")
    with pytest.raises(RuntimeError):
        cp.update("more")


def test_checkpointer_writes_at_least_once_a_second_while_tokens_flow(store: HistoryStore) -> None:
    now = [0.0]
    cid = store.create_conversation("t")
    rid = store.begin_reply(cid)
    cp = ReplyCheckpointer(store, rid, interval_s=1.0, clock=lambda: now[0])
    text = ""
    for i in range(100):  # 10 tokens/s for 10 s
        now[0] = i * 0.1
        text += f"t{i} "
        cp.update(text)
        stored = _messages(store.get_conversation(cid))[-1].text
        assert len(text) - len(stored) <= 11 * len("t99 ")  # never more than ~1 s behind
    assert 9 <= cp.writes <= 10


# --------------------------------------------------------------------------------- settings audit


def test_every_connection_is_wal_synchronous_full_with_foreign_keys(store: HistoryStore) -> None:
    expected = {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1}
    assert store.connection_settings() == expected
    for _ in range(3):
        conn = connect(store.db_path)
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
            assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        finally:
            conn.close()


def test_foreign_keys_are_enforced(store: HistoryStore) -> None:
    conn = connect(store.db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO messages (conversation_id, role, text, status, created_at) "
                "VALUES (999, 'user', 'x', 'complete', 1)"
            )
    finally:
        conn.close()


def test_failed_export_leaves_the_old_file_whole(
    store: HistoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = _chat(store)
    target = tmp_path / "out" / "chat.json"
    store.export_conversation(cid, target, ExportFormat.JSON)
    before = target.read_bytes()
    store.rename_conversation(cid, "renamed")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "replace", broken_replace)
    with pytest.raises(OSError):
        store.export_conversation(cid, target, ExportFormat.JSON)
    assert target.read_bytes() == before
    assert [p.name for p in target.parent.iterdir()] == ["chat.json"]  # no temp file left behind


# ------------------------------------------------------------------------ lock, corruption, schema


def test_second_instance_on_same_directory_is_refused(store: HistoryStore, tmp_path: Path) -> None:
    with pytest.raises(StoreLockedError, match="Outrider is already running with data directory") as info:
        HistoryStore.open(tmp_path)
    assert info.value.data_dir == tmp_path
    store.create_conversation("still works")  # the first instance is unaffected
    store.close()
    with HistoryStore.open(tmp_path) as again:
        assert len(again.list_conversations()) == 1


def test_garbage_database_file_is_moved_aside_and_a_fresh_one_works(tmp_path: Path) -> None:
    garbage = os.urandom(8192)
    (tmp_path / "history.sqlite3").write_bytes(garbage)
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is not None
        assert store.notice.moved_to.read_bytes() == garbage
        assert ".corrupt-" in store.notice.moved_to.name
        assert str(store.notice.moved_to) in store.notice.message
        cid = store.create_conversation("fresh")
        assert store.get_conversation(cid).title == "fresh"
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is None


def test_database_with_damaged_pages_is_moved_aside(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        for i in range(60):
            _chat(store, f"chat {i}", "x" * 2000, "y" * 2000)
    db = tmp_path / "history.sqlite3"
    data = bytearray(db.read_bytes())
    for offset in range(4096 * 3, len(data) - 4096, 4096 * 2):  # smash the middle of many pages
        data[offset + 100 : offset + 600] = os.urandom(500)
    db.write_bytes(bytes(data))
    with HistoryStore.open(tmp_path) as store:
        assert store.notice is not None
        assert store.notice.moved_to.exists()
        # What could still be read was salvaged (RELIABILITY session 2, item 4); the notice says how much.
        listed = store.list_conversations()
        assert all(isinstance(c, ConversationSummary) for c in listed)
        assert store.notice.recovered_conversations == len(listed)
        assert store.notice.recovered_messages == sum(c.message_count for c in listed)  # type: ignore[union-attr]
        store.create_conversation("fresh")


def test_upgrade_from_schema_version_1_keeps_data_and_backs_up(tmp_path: Path) -> None:
    conn = connect(tmp_path / "history.sqlite3")
    create_database(conn, version=1)
    conn.execute("INSERT INTO conversations (title, created_at, updated_at, settings_json) VALUES ('old', 1, 2, '{}')")
    conn.execute(
        "INSERT INTO messages (conversation_id, role, text, status, created_at, stats_json) "
        "VALUES (1, 'assistant', 'searchable words', 'complete', 1, '{\"k\": 3}')"
    )
    conn.close()
    with HistoryStore.open(tmp_path) as store:
        assert store.schema_version == CURRENT_VERSION == 5
        assert store.backup_path is not None and store.backup_path.exists()
        conversation = store.get_conversation(1)
        assert conversation.title == "old" and len(conversation.summary.uuid) == 32
        assert _messages(conversation)[0].stats == ReplyStats(extra={"k": 3})  # the fixed-k setting, kept
        assert [h.message_id for h in store.search("searchable")] == [1]
    backup = sqlite3.connect(store.backup_path)
    try:
        assert backup.execute("SELECT version FROM schema_version").fetchone() == (1,)
        assert backup.execute("SELECT text FROM messages").fetchall() == [("searchable words",)]
    finally:
        backup.close()


def test_failed_migration_rolls_back_and_keeps_backup(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path) as store:
        _chat(store)

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE conversations ADD COLUMN half_done TEXT")
        conn.execute("DELETE FROM messages")
        raise sqlite3.OperationalError("simulated failure in the middle of a migration")

    migrations = (*MIGRATIONS, Migration(CURRENT_VERSION + 1, broken))
    with pytest.raises(MigrationError) as info:
        HistoryStore.open(tmp_path, migrations=migrations)
    assert info.value.from_version == CURRENT_VERSION and info.value.backup_path is not None
    assert info.value.backup_path.exists()
    with HistoryStore.open(tmp_path) as store:  # the lock was released; the data is untouched
        assert store.schema_version == CURRENT_VERSION
        conversation = store.get_conversation(1)
        assert len(conversation.messages) == 2
        columns = [r[1] for r in sqlite3.connect(store.db_path).execute("PRAGMA table_info(conversations)")]
        assert "half_done" not in columns


def test_database_from_a_newer_version_is_left_alone(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path):
        pass
    conn = sqlite3.connect(tmp_path / "history.sqlite3")
    conn.execute("UPDATE schema_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNewError):
        HistoryStore.open(tmp_path)
    HistoryStore.open(
        tmp_path, migrations=(*MIGRATIONS, *(Migration(v, lambda c: None) for v in range(3, 100)))
    ).close()


# ---------------------------------------------------------------------------- conversations


def test_rename_delete_undo_and_purge(store: HistoryStore) -> None:
    a = _chat(store, "a")
    b = _chat(store, "b")
    store.rename_conversation(a, "renamed")
    assert store.get_conversation(a).title == "renamed"
    store.delete_conversation(a)
    assert [c.id for c in store.list_conversations()] == [b]
    assert store.search("hello") and all(h.conversation_id == b for h in store.search("hello"))
    with pytest.raises(ConversationNotFoundError):
        store.get_conversation(a)
    store.restore_conversation(a)  # undo
    assert {c.id for c in store.list_conversations()} == {a, b}
    store.delete_conversation(a)
    assert store.purge_deleted(older_than_s=3600) == 0  # too recent
    assert store.purge_deleted() == 1
    with pytest.raises(ConversationNotFoundError):
        store.restore_conversation(a)
    conn = sqlite3.connect(store.db_path)
    assert conn.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (a,)).fetchone() == (0,)
    conn.close()
    with pytest.raises(ConversationNotFoundError):
        store.rename_conversation(999, "x")
    with pytest.raises(ConversationNotFoundError):
        store.add_user_message(a, "to a purged chat")


def test_edit_message_with_drop_following(store: HistoryStore) -> None:
    cid = _chat(store)
    store.add_user_message(cid, "second question")
    first = _messages(store.get_conversation(cid))[0]
    store.edit_message(first.id, "edited question", drop_following=True)
    assert [m.text for m in _messages(store.get_conversation(cid))] == ["edited question"]
    assert store.search("edited")[0].message_id == first.id
    assert store.search("second") == []


def test_search_finds_words_and_prefixes_and_ignores_syntax(store: HistoryStore) -> None:
    a = _chat(store, "geo", "What is the capital of France?", "Paris is the capital.")
    _chat(store, "other", "tell me a joke", "no")
    hits = store.search("capital")
    assert {h.conversation_id for h in hits} == {a} and len(hits) == 2
    assert "[capital]" in hits[0].snippet
    assert store.search("capi")  # prefix of the last word
    assert isinstance(store.search('Paris" OR "x'), list)  # FTS syntax in user text never raises
    assert store.search("  ") == []
    assert store.search("NEAR(") == []


def test_reply_stats_are_kept_for_comparison(store: HistoryStore) -> None:
    _chat(store)
    rows = store.reply_stats(pair_id="qwen-0.5b+7b")
    assert len(rows) == 1 and rows[0].stats == STATS
    assert store.reply_stats(pair_id="other") == []


# ------------------------------------------------------------------------------ export / import


def test_export_json_import_round_trip_without_duplicates(tmp_path: Path) -> None:
    source_dir, target_dir = tmp_path / "a", tmp_path / "b"
    with HistoryStore.open(source_dir) as source:
        first = _chat(source, "first", "question one", "answer one")
        _chat(source, "second", "question two", "answer two")
        rid = source.begin_reply(first)
        source.checkpoint_reply(rid, "half an ans")
        export = tmp_path / "all.json"
        assert source.export_all(export, ExportFormat.JSON) == []
        originals = [source.get_conversation(c.id) for c in source.list_conversations()]
    with HistoryStore.open(target_dir) as target:
        target.create_conversation("unrelated")
        result = target.import_json(export)
        assert len(result.imported) == 2 and result.skipped == 0
        again = target.import_json(export)
        assert again.imported == [] and again.skipped == 2
        imported = {target.get_conversation(i).summary.uuid: target.get_conversation(i) for i in result.imported}
        for original in originals:
            copy = imported[original.summary.uuid]
            assert copy.title == original.title
            assert copy.summary.settings == original.summary.settings
            pairs = [(m.role, m.text, m.stats) for m in _messages(copy)]
            assert pairs == [(m.role, m.text, m.stats) for m in _messages(original)]
            statuses = [m.status for m in _messages(copy)]
            assert MessageStatus.STREAMING not in statuses  # a mid-reply export imports as interrupted
        assert target.search("answer")


def test_markdown_export_includes_stats(store: HistoryStore, tmp_path: Path) -> None:
    cid = _chat(store, "My chat")
    path = tmp_path / "chat.md"
    store.export_conversation(cid, path, ExportFormat.MARKDOWN)
    text = path.read_text()
    assert text.startswith("# My chat\n")
    assert "## User\n\nhello" in text and "## Assistant\n\nhi" in text
    assert "pair qwen-0.5b+7b" in text and "mean k 4.75" in text and "41.5 tok/s" in text
    assert "speed-up 1.80× (1.62–1.98)" in text


def test_json_export_includes_stats(store: HistoryStore) -> None:
    cid = _chat(store)
    doc = json.loads(store.render_conversation(cid, ExportFormat.JSON))
    stats = doc["conversations"][0]["messages"][1]["stats"]
    assert stats["acceptance_rate"] == pytest.approx(0.667) and stats["stop_reason"] == "eos"


@pytest.mark.parametrize(
    "text",
    ["not json", "{}", '{"format": "outrider-history", "format_version": 1, "conversations": [{"uuid": 3}]}'],
)
def test_import_rejects_bad_files_and_writes_nothing(store: HistoryStore, text: str) -> None:
    with pytest.raises(ImportFormatError):
        store.import_json_text(text)
    assert store.list_conversations() == []


# --------------------------------------------------------------------------- unreadable records


def test_one_unreadable_record_never_hides_the_others(store: HistoryStore) -> None:
    good = _chat(store, "good")
    bad_settings = _chat(store, "bad settings")
    bad_title = _chat(store, "bad title")
    bad_message = _chat(store, "bad message")
    conn = sqlite3.connect(store.db_path)
    conn.execute("UPDATE conversations SET settings_json = '{broken' WHERE id = ?", (bad_settings,))
    conn.execute("UPDATE conversations SET title = CAST(x'41ff42' AS TEXT) WHERE id = ?", (bad_title,))
    conn.execute(
        "UPDATE messages SET text = CAST(x'c328' AS TEXT) WHERE conversation_id = ? AND role = 'user'",
        (bad_message,),
    )
    conn.execute(
        "UPDATE messages SET stats_json = '[1, 2' WHERE conversation_id = ? AND role = 'assistant'", (bad_message,)
    )
    conn.commit()
    conn.close()

    listing = {entry.id: entry for entry in store.list_conversations()}
    assert set(listing) == {good, bad_settings, bad_title, bad_message}
    assert isinstance(listing[bad_settings], UnreadableRecord)
    assert isinstance(listing[bad_title], UnreadableRecord)
    assert listing[bad_title].label == "could not be read"
    assert not isinstance(listing[good], UnreadableRecord)

    with pytest.raises(RecordUnreadableError):
        store.get_conversation(bad_title)
    conversation = store.get_conversation(bad_message)  # the conversation opens; its bad messages are marked
    assert [type(m) for m in conversation.messages] == [UnreadableRecord, UnreadableRecord]
    assert _messages(store.get_conversation(good))[0].text == "hello"

    raw = json.loads(store.export_raw(bad_title))
    assert raw["conversation"]["title"] == {"base64": "Qf9C", "sqlite_type": "text"}
    raw = json.loads(store.export_raw(bad_settings))
    assert raw["conversation"]["settings_json"] == "{broken"

    text, unreadable = store.render_all(ExportFormat.JSON)
    assert {u.id for u in unreadable} == {bad_settings, bad_title}
    assert len(json.loads(text)["conversations"]) == 2
    assert store.search("hello")  # search still works around them


def test_markdown_export_says_how_a_reply_ended_in_the_chat_s_words(store: HistoryStore, tmp_path: Path) -> None:
    """Before: the export said "stopped: length" where the window said "cut at the token limit"."""
    cid = store.create_conversation("Cut")
    store.add_user_message(cid, "tell me")
    rid = store.begin_reply(cid)
    store.finish_reply(rid, "so far", MessageStatus.COMPLETE, ReplyStats(stop_reason="length"))
    text = store.render_conversation(cid, ExportFormat.MARKDOWN)
    assert "cut at the token limit" in text and "stopped: length" not in text
