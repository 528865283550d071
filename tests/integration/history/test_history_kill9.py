"""Kill -9 the process writing the history at random moments.

Each test runs a real child Python process (``history_child.py``) that reports every committed step on stdout
after the commit returned; the parent SIGKILLs it at a random moment, reopens the store (as the app would on
its next start) and checks that everything reported is there, intact, exactly once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from outrider.history import CURRENT_VERSION, HistoryStore, MessageStatus, Role, connect
from outrider.history.schema import create_database

CHILD = Path(__file__).with_name("history_child.py")
STREAM_KILLS = 60
MUTATE_KILLS = 12
MIGRATE_KILLS = 12


def _spawn(mode: str, data_dir: Path, tag: str = "t") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(data_dir), tag],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill_after(proc: subprocess.Popen[str], rng: random.Random, wait_ready: bool, max_delay: float) -> list[str]:
    """SIGKILL the child after a random delay (counted from READY, or from spawn); return its stdout lines."""
    lines: list[str] = []
    assert proc.stdout is not None
    if wait_ready:
        first = proc.stdout.readline()
        if first:
            lines.append(first.strip())
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=rng.uniform(0.0, max_delay))
    os.kill(proc.pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL, f"child ended on its own: {proc.returncode}\n{err}"
    lines += [line for line in out.splitlines() if line]
    return lines


def _integrity(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        conn.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        conn.close()


@dataclass
class _Reported:
    users: dict[int, str] = field(default_factory=dict)
    replies: dict[int, tuple[str, int]] = field(default_factory=dict)  # id -> (tag, n)
    checkpoints: dict[int, int] = field(default_factory=dict)  # id -> last reported text length
    finished: set[int] = field(default_factory=set)


def _parse(lines: list[str], tag: str, reported: _Reported) -> None:
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "U":
            uid, _, text = rest.partition(" ")
            reported.users[int(uid)] = text
        elif kind == "B":
            rid, _uid, n = rest.split()
            reported.replies[int(rid)] = (tag, int(n))
        elif kind == "K":
            rid, length = rest.split()
            reported.checkpoints[int(rid)] = int(length)
        elif kind == "F":
            reported.finished.add(int(rest))


def _full_reply(tag: str, n: int) -> str:
    sys.path.insert(0, str(CHILD.parent))
    try:
        from history_child import full_reply  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    text: str = full_reply(tag, n)
    return text


def test_kill9_while_streaming_keeps_every_committed_message(tmp_path: Path) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    reported = _Reported()
    db = tmp_path / "history.sqlite3"
    interrupted_seen = 0
    for i in range(STREAM_KILLS):
        tag = f"r{i}"
        proc = _spawn("stream", tmp_path, tag)
        # Mostly kill while streaming; sometimes while the child is still starting up / recovering.
        lines = _kill_after(proc, rng, wait_ready=i % 5 != 0, max_delay=0.12)
        _parse(lines, tag, reported)

        with HistoryStore.open(tmp_path) as store:  # the "next start": recovers interrupted replies
            conversations = [store.get_conversation(c.id) for c in store.list_conversations()]
        _integrity(db)

        messages = {m.id: m for c in conversations for m in c.messages if not isinstance(m, str)}
        assert all(not hasattr(m, "reason") for m in messages.values()), "an unreadable record appeared"
        for uid, text in reported.users.items():
            message = messages[uid]
            assert getattr(message, "text", None) == text, f"user message {uid} lost or changed"
        for rid, (rtag, n) in reported.replies.items():
            message = messages[rid]
            full = _full_reply(rtag, n)
            status = getattr(message, "status", None)
            text: str = getattr(message, "text", "")
            assert status in (MessageStatus.COMPLETE, MessageStatus.INTERRUPTED), (rid, status)
            assert full.startswith(text), f"reply {rid} is not a prefix of what was streamed"
            if status is MessageStatus.COMPLETE:
                assert text == full
            else:
                interrupted_seen += rid == max(reported.replies)
                assert rid not in reported.finished, f"finished reply {rid} came back interrupted"
                assert len(text) >= reported.checkpoints.get(rid, 0), f"reply {rid} lost its last checkpoint"
                assert text == "" or text.endswith(" "), "a checkpoint is always a whole token"
        # No duplicates: every question stored once; at most one reply per question.
        users = [m for m in messages.values() if getattr(m, "role", None) is Role.USER]
        texts = [getattr(m, "text", "") for m in users]
        assert len(texts) == len(set(texts)), "duplicate user messages"
        for conversation in conversations:
            roles = [getattr(m, "role", None) for m in conversation.messages]
            assert all(not (a is Role.ASSISTANT and b is Role.ASSISTANT) for a, b in itertools.pairwise(roles))
        assert not any(getattr(m, "status", None) is MessageStatus.STREAMING for m in messages.values())
    assert len(reported.users) >= STREAM_KILLS // 2, "the child hardly ever got to write; the test proves little"
    assert interrupted_seen > 0, "no kill landed mid-reply; the test proves little"


def _seed_for_mutation(data_dir: Path, count: int) -> None:
    doc = {
        "format": "outrider-history",
        "format_version": 1,
        "exported_at": 0,
        "conversations": [
            {
                "uuid": f"seed-{c}",
                "title": f"chat {c}",
                "created_at": 1.0,
                "updated_at": 1.0,
                "pair_id": None,
                "settings": {},
                "messages": [
                    {
                        "role": "user" if j % 2 == 0 else "assistant",
                        "text": f"orig {c} {j}",
                        "status": "complete",
                        "created_at": 1.0,
                        "stats": None,
                    }
                    for j in range(6)
                ],
            }
            for c in range(count)
        ],
    }
    with HistoryStore.open(data_dir) as store:
        store.import_json_text(json.dumps(doc))


def _check_mutation_states(db: Path) -> tuple[int, int]:
    """Every conversation is wholly old or wholly new. Returns (old, new) counts."""
    conn = sqlite3.connect(db)
    try:
        old = new = 0
        rows = conn.execute("SELECT uuid, id, title FROM conversations").fetchall()
        present = {int(uuid.split("-")[1]): cid for uuid, cid, _ in rows}
        for index in range(len(present) + 1000):
            if index not in present:
                continue
            cid = present[index]
            texts = [
                r[0] for r in conn.execute("SELECT text FROM messages WHERE conversation_id = ? ORDER BY id", (cid,))
            ]
            original = [f"orig {index} {j}" for j in range(6)]
            if index % 3 == 0:
                edited = ["edited"]
            elif index % 3 == 1:
                edited = None  # deleted: the row would be gone
            else:
                edited = [*original[:3], "edited"]
            assert texts in (original, edited), f"conversation {index} is half old, half new: {texts}"
            old += texts == original
            new += texts == edited
        # Deleted conversations are gone with all their messages (no orphans).
        assert conn.execute(
            "SELECT count(*) FROM messages WHERE conversation_id NOT IN (SELECT id FROM conversations)"
        ).fetchone() == (0,)
        return old, new
    finally:
        conn.close()


def test_kill9_during_edit_and_delete_leaves_each_conversation_wholly_old_or_new(tmp_path: Path) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    mixed = 0
    for i in range(MUTATE_KILLS):
        data_dir = tmp_path / f"run{i}"
        _seed_for_mutation(data_dir, 150)
        lines = _kill_after(_spawn("mutate", data_dir), rng, wait_ready=True, max_delay=0.15)
        done = {int(line.split()[1]) for line in lines if line.startswith("M ")}
        with HistoryStore.open(data_dir):
            pass
        db = data_dir / "history.sqlite3"
        _integrity(db)
        old, new = _check_mutation_states(db)
        mixed += old > 0 and new > 0
        conn = sqlite3.connect(db)
        try:
            for cid in done:  # reported as done: must be the new state
                row = conn.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (cid,)).fetchone()
                assert row[0] in (0, 1, 4), f"conversation {cid} was reported done but is not: {row[0]} messages"
        finally:
            conn.close()
    assert mixed > 0, "no kill landed mid-way through the edits; the test proves little"


def _make_v1_database(data_dir: Path, conversations: int, messages_each: int) -> None:
    data_dir.mkdir(parents=True)
    conn = connect(data_dir / "history.sqlite3")
    try:
        create_database(conn, version=1)
        conn.execute("BEGIN")
        for c in range(conversations):
            cur = conn.execute(
                "INSERT INTO conversations (title, created_at, updated_at, settings_json) VALUES (?, 1, 1, '{}')",
                (f"old chat {c}",),
            )
            conn.executemany(
                "INSERT INTO messages (conversation_id, role, text, status, created_at) VALUES (?, ?, ?, ?, 1)",
                [
                    (cur.lastrowid, "user", f"message {c} {j} lorem ipsum dolor sit amet", "complete")
                    for j in range(messages_each)
                ],
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def _v1_content(db: Path) -> list[tuple[int, str, int, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT c.id, c.title, m.id, m.text FROM conversations c JOIN messages m ON m.conversation_id = c.id "
            "ORDER BY m.id"
        ).fetchall()
    finally:
        conn.close()


def _version(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT version FROM schema_version").fetchone()[0])
    finally:
        conn.close()


def test_kill9_during_migration_finishes_or_rolls_back_with_backup(tmp_path: Path) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    template = tmp_path / "template"
    _make_v1_database(template, 200, 100)
    expected = _v1_content(template / "history.sqlite3")
    # Calibrate: how long a child takes to start and migrate here, so kills spread over the whole window.
    calibrate = tmp_path / "calibrate"
    calibrate.mkdir()
    (calibrate / "history.sqlite3").write_bytes((template / "history.sqlite3").read_bytes())
    started = time.monotonic()
    proc = _spawn("hold", calibrate)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    window = time.monotonic() - started
    proc.kill()
    proc.communicate(timeout=10)
    outcomes: set[int] = set()

    def killed_run(name: str, *, wait_ready: bool, max_delay: float) -> None:
        data_dir = tmp_path / name
        data_dir.mkdir()
        (data_dir / "history.sqlite3").write_bytes((template / "history.sqlite3").read_bytes())
        _kill_after(_spawn("hold", data_dir), rng, wait_ready=wait_ready, max_delay=max_delay)
        db = data_dir / "history.sqlite3"
        _integrity_any(db)
        version = _version(db)
        outcomes.add(version)
        assert version in (1, CURRENT_VERSION)  # every pending migration is one transaction
        assert _v1_content(db) == expected, "the migration lost or changed data"
        backups = sorted(data_dir.glob("history.sqlite3.backup-v1-*"))
        if version == CURRENT_VERSION:
            assert backups, "migrated without a backup"
        for backup in backups:
            assert _version(backup) == 1 and _v1_content(backup) == expected
        with HistoryStore.open(data_dir) as store:  # a later start completes the migration
            assert store.schema_version == CURRENT_VERSION
            assert len(store.search("lorem")) > 0
        assert sorted(data_dir.glob("history.sqlite3.backup-v1-*")), "backup missing after migration"

    for i in range(MIGRATE_KILLS):
        killed_run(f"run{i}", wait_ready=False, max_delay=window * 1.3)
    # On a busy machine the random kills may all land on one side of the migration's commit: one kill at each
    # end makes sure both outcomes were checked (at once after the start; after the migrated store said READY).
    if 1 not in outcomes:
        killed_run("at-once", wait_ready=False, max_delay=0.0)
    if CURRENT_VERSION not in outcomes:
        killed_run("after-ready", wait_ready=True, max_delay=0.0)
    assert outcomes == {1, CURRENT_VERSION}, f"every kill landed on the same side of the migration: {outcomes}"


def _integrity_any(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


@pytest.fixture
def held_store(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = _spawn("hold", tmp_path)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    yield proc
    proc.kill()
    proc.communicate(timeout=10)


def test_second_instance_is_refused_while_the_first_runs(tmp_path: Path, held_store: subprocess.Popen[str]) -> None:
    from outrider.history import StoreLockedError

    with pytest.raises(StoreLockedError) as info:
        HistoryStore.open(tmp_path)
    assert "already running with data directory" in str(info.value)
    assert str(tmp_path) in str(info.value)
    assert info.value.holder_pid == held_store.pid
    held_store.kill()
    held_store.communicate(timeout=10)
    with HistoryStore.open(tmp_path) as store:  # the lock died with its process
        _integrity(store.db_path)
