"""The chat history store: conversations, messages, replies, search and statistics, one transaction per call.

Order of writes (why nothing a user typed or saw is lost):

1. ``add_user_message`` commits (``synchronous=FULL``: fsynced) before generation starts.
2. ``begin_reply`` commits an empty assistant message with status ``streaming``.
3. ``checkpoint_reply`` commits the text so far at least once a second (see ``ReplyCheckpointer``).
4. ``finish_reply`` commits the final text, status and statistics in one transaction.

After a crash, ``open`` turns every ``streaming`` reply into ``interrupted``; its text is the last checkpoint.
Every multi-row change (edit, delete, import, migration) is one transaction: wholly old or wholly new.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from outrider.fileio import atomic_write_text
from outrider.history import exchange
from outrider.history.connection import DB_FILENAME, OpenedDatabase, connect, connection_settings, open_database
from outrider.history.database import Database
from outrider.history.errors import (
    ConversationNotFoundError,
    ImportFormatError,
    MessageNotFoundError,
    RecordUnreadableError,
    ReplyNotStreamingError,
)
from outrider.history.exchange import ExportFormat
from outrider.history.models import (
    Conversation,
    ConversationSummary,
    ImportResult,
    MessageStatus,
    ReplyStats,
    ReplyStatsRow,
    Role,
    SearchHit,
    UnreadableRecord,
)
from outrider.history.rows import (
    CONVERSATION_COLUMNS,
    MESSAGE_COLUMNS,
    REPLY_STATS_COLUMNS,
    SEARCH_HIT_COLUMNS,
    fts_query,
    parse_conversation,
    parse_conversations,
    parse_messages,
    parse_reply_stats,
    parse_search_hit,
    settings_json,
    stats_json,
)
from outrider.history.schema import MIGRATIONS, Migration, read_version

DEFAULT_TITLE: Final = "New chat"


def _reader(db_path: Path) -> sqlite3.Connection:
    """The store's read-only second connection (``Database``: reads never wait behind a write's fsync)."""
    conn = connect(db_path)
    conn.execute("PRAGMA query_only = ON")
    return conn


class HistoryStore:
    """The one writer of a data directory's chat history.

    Open it with ``HistoryStore.open()``; it holds an exclusive lock on the directory until ``close()``.
    All methods are thread-safe (one connection behind a lock, ``database.Database``) and commit before they
    return; after ``close()`` they raise ``StoreError``.

    Attributes:
        db_path: the database file.
        notice: set when the database was found damaged and replaced by what could be salvaged from it (a
            ``CorruptionNotice``: where the damaged file was kept, how many messages were recovered). Every
            front end must show ``notice.message`` (CLI: one stderr line; GUI: the main window's banner).
        recovered_reply_ids: replies that were ``streaming`` at open and are now ``interrupted``.
        backup_path: the pre-migration backup made by this open, if a migration ran.
    """

    def __init__(self, opened: OpenedDatabase) -> None:
        self._db = Database(opened.conn, opened.lock, opened.db_path, _reader(opened.db_path))
        self.db_path = opened.db_path
        self.notice = opened.notice
        self.backup_path = opened.backup_path
        self.recovered_reply_ids: list[int] = []

    # ----------------------------------------------------------------------------------- lifecycle

    @classmethod
    def open(
        cls,
        data_dir: Path | None = None,
        *,
        filename: str = DB_FILENAME,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> HistoryStore:
        """Lock the directory, open (or create, or replace a damaged) database, migrate, recover.

        Raises:
            StoreLockedError: another process has this data directory open.
            MigrationError: an upgrade failed and was rolled back (the backup is kept).
            SchemaTooNewError: the database comes from a newer Outrider.
            StoreReadOnlyError: the database file or its folder cannot be written.
            DiskFullError: the disk is full (nothing was changed).
            DataDirectoryError: the data folder cannot be created or is a file.
            StoreError: any other failure to open the database (one line, no traceback needed).
        """

        def build(db: OpenedDatabase) -> HistoryStore:
            store = cls(db)
            store.recovered_reply_ids = store.recover_interrupted()
            return store

        return open_database(data_dir, filename=filename, migrations=migrations, build=build)

    def close(self) -> None:
        """Close the connection (checkpointing the WAL) and release the directory lock."""
        self._db.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        with self._db.read() as conn:
            version = read_version(conn)
        return version or 0

    def connection_settings(self) -> dict[str, Any]:
        with self._db.read() as conn:
            return connection_settings(conn)

    # ------------------------------------------------------------------------------- conversations

    def create_conversation(
        self,
        title: str = DEFAULT_TITLE,
        *,
        pair_id: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> int:
        now = time.time()
        settings_text = settings_json(settings or {})
        with self._db.write() as conn:
            return self._insert_conversation(conn, title, now, pair_id, settings_text)

    def start_conversation(
        self,
        title: str,
        user_text: str,
        *,
        system: str | None = None,
        pair_id: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> tuple[int, int]:
        """Create a conversation with its (optional) system prompt and first user message in ONE transaction.

        Either all of it is committed (before generation starts) or, on any failure (disk full), nothing: no
        empty conversation is left behind. Returns ``(conversation_id, user_message_id)``.
        """
        now = time.time()
        settings_text = settings_json(settings or {})
        insert_message = (
            "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at) "
            "VALUES (?, ?, ?, 'complete', ?, ?)"
        )
        with self._db.write() as conn:
            conversation_id = self._insert_conversation(conn, title, now, pair_id, settings_text)
            if system:
                conn.execute(insert_message, (conversation_id, str(Role.SYSTEM), system, now, now))
            cur = conn.execute(insert_message, (conversation_id, str(Role.USER), user_text, now, now))
            return conversation_id, int(cur.lastrowid or 0)

    @staticmethod
    def _insert_conversation(
        conn: sqlite3.Connection, title: str, now: float, pair_id: str | None, settings_text: str
    ) -> int:
        cur = conn.execute(
            "INSERT INTO conversations (uuid, title, created_at, updated_at, pair_id, settings_json) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (uuid.uuid4().hex, title, now, now, pair_id, settings_text),
        )
        return int(cur.lastrowid or 0)

    def update_conversation_settings(
        self, conversation_id: int, *, pair_id: str | None, settings: Mapping[str, Any]
    ) -> None:
        settings_text = settings_json(settings)
        with self._db.write() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute(
                "UPDATE conversations SET pair_id = ?, settings_json = ?, updated_at = ? WHERE id = ?",
                (pair_id, settings_text, time.time(), conversation_id),
            )

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        with self._db.write() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute(
                "UPDATE conversations SET title = ?, updated_at = ? WHERE id = ?",
                (title, time.time(), conversation_id),
            )

    def delete_conversation(self, conversation_id: int) -> None:
        """Soft delete: hidden from lists and search until ``restore_conversation`` or ``purge_deleted``.

        It also leaves the draft index of history lookup at once (``_forget_in_draft_index``); a restored
        conversation comes back into it at the engine's next sync."""
        with self._db.write() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute("UPDATE conversations SET deleted_at = ? WHERE id = ?", (time.time(), conversation_id))
        self._forget_in_draft_index([conversation_id])

    def _forget_in_draft_index(self, conversation_ids: list[int]) -> None:
        """Remove these conversations' tokens from the draft index files kept with the database
        (``engine.history_index``): the engine would drop them at its next sync, but it may not run for days, and
        a deleted chat must not stay on disk in another form. If a file cannot be rewritten it is deleted (the
        engine rebuilds it from the history); the delete itself never fails because of the index."""
        from outrider.engine.history_index import forget_conversations, remove_index_files

        try:
            forget_conversations(self.db_path, conversation_ids)
        except OSError:
            with contextlib.suppress(OSError):
                remove_index_files(self.db_path)

    def restore_conversation(self, conversation_id: int) -> None:
        """Undo ``delete_conversation``."""
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE conversations SET deleted_at = NULL WHERE id = ? AND deleted_at IS NOT NULL",
                (conversation_id,),
            )
            if cur.rowcount == 0:
                raise ConversationNotFoundError(conversation_id)

    def purge_deleted(self, older_than_s: float = 0.0) -> int:
        """Permanently remove conversations deleted at least ``older_than_s`` ago (messages cascade)."""
        with self._db.write() as conn:
            cur = conn.execute(
                "DELETE FROM conversations WHERE deleted_at IS NOT NULL AND deleted_at <= ?",
                (time.time() - older_than_s,),
            )
            return max(cur.rowcount, 0)

    def list_conversations(self, *, include_deleted: bool = False) -> list[ConversationSummary | UnreadableRecord]:
        """Newest first. A row that cannot be decoded is an ``UnreadableRecord``; it never hides the others."""
        where = "" if include_deleted else "WHERE c.deleted_at IS NULL"
        with self._db.read() as conn:
            rows = conn.execute(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversations c {where} ORDER BY c.updated_at DESC, c.id DESC"
            ).fetchall()
        return parse_conversations(rows)

    def get_conversation(self, conversation_id: int, *, include_deleted: bool = False) -> Conversation:
        """The conversation with its messages; undecodable messages come back as ``UnreadableRecord``.

        Raises:
            ConversationNotFoundError: no such (undeleted) conversation.
            RecordUnreadableError: the conversation row itself cannot be decoded (see ``export_raw``).
        """
        with self._db.read() as conn:
            row = conn.execute(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.id = ?", (conversation_id,)
            ).fetchone()
            if row is None or (row[7] is not None and not include_deleted):
                raise ConversationNotFoundError(conversation_id)
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY id",
                (conversation_id,),
            ).fetchall()
        try:
            summary = parse_conversation(row)
        except (ValueError, TypeError) as exc:
            raise RecordUnreadableError("conversation", conversation_id, str(exc)) from None
        return Conversation(summary=summary, messages=parse_messages(rows, conversation_id))

    def _require_conversation(self, conn: sqlite3.Connection, conversation_id: int) -> None:
        row = conn.execute(
            "SELECT 1 FROM conversations WHERE id = ? AND deleted_at IS NULL", (conversation_id,)
        ).fetchone()
        if row is None:
            raise ConversationNotFoundError(conversation_id)

    # ------------------------------------------------------------------------------------ messages

    def add_message(
        self,
        conversation_id: int,
        role: Role,
        text: str,
        *,
        status: MessageStatus = MessageStatus.COMPLETE,
        stats: ReplyStats | None = None,
    ) -> int:
        """Append a message and commit it (durably) before returning its id."""
        now = time.time()
        with self._db.write() as conn:
            self._require_conversation(conn, conversation_id)
            cur = conn.execute(
                "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at, stats_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, str(Role(role)), text, str(MessageStatus(status)), now, now, stats_json(stats)),
            )
            conn.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id))
            return int(cur.lastrowid or 0)

    def add_user_message(self, conversation_id: int, text: str) -> int:
        """Commit the user's message; call this BEFORE generation starts."""
        return self.add_message(conversation_id, Role.USER, text)

    def begin_reply(self, conversation_id: int) -> int:
        """Commit an empty assistant message with status ``streaming``; returns its id."""
        return self.add_message(conversation_id, Role.ASSISTANT, "", status=MessageStatus.STREAMING)

    def checkpoint_reply(self, message_id: int, text: str) -> None:
        """Commit the reply's text so far. Call at least once a second while streaming."""
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE messages SET text = ?, updated_at = ? WHERE id = ? AND status = 'streaming'",
                (text, time.time(), message_id),
            )
            if cur.rowcount == 0:
                self._raise_not_streaming(conn, message_id)

    def finish_reply(
        self,
        message_id: int,
        text: str,
        status: MessageStatus = MessageStatus.COMPLETE,
        stats: ReplyStats | None = None,
    ) -> None:
        """Commit the final text, status (complete, interrupted or error) and statistics together."""
        status = MessageStatus(status)
        if status is MessageStatus.STREAMING:
            raise ValueError("finish_reply needs a final status, not 'streaming'")
        now = time.time()
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE messages SET text = ?, status = ?, stats_json = ?, updated_at = ? "
                "WHERE id = ? AND status = 'streaming'",
                (text, str(status), stats_json(stats), now, message_id),
            )
            if cur.rowcount == 0:
                self._raise_not_streaming(conn, message_id)
            conn.execute(
                "UPDATE conversations SET updated_at = ? "
                "WHERE id = (SELECT conversation_id FROM messages WHERE id = ?)",
                (now, message_id),
            )

    def _raise_not_streaming(self, conn: sqlite3.Connection, message_id: int) -> None:
        row = conn.execute("SELECT status FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            raise MessageNotFoundError(message_id)
        raise ReplyNotStreamingError(message_id, str(row[0]))

    def recover_interrupted(self) -> list[int]:
        """Mark replies left ``streaming`` by a crash as ``interrupted`` (text = last checkpoint).

        ``open`` already does this; calling it while this process is streaming a reply would interrupt that too.
        """
        with self._db.write() as conn:
            rows = conn.execute(
                "UPDATE messages SET status = 'interrupted', updated_at = ? WHERE status = 'streaming' RETURNING id",
                (time.time(),),
            ).fetchall()
        return sorted(int(r[0]) for r in rows)

    def reopen_reply(self, message_id: int) -> str:
        """Set a finished assistant reply that is its conversation's last message back to ``streaming``, to
        continue it (``ChatTurns.continue_reply``); returns its text. ``finish_reply`` ends it again.

        Raises:
            MessageNotFoundError: no such message.
            ValueError: not an assistant reply, still streaming, or not the last message of its conversation.
        """
        with self._db.write() as conn:
            row = conn.execute("SELECT conversation_id, role, status, text FROM messages WHERE id = ?",
                               (message_id,)).fetchone()
            if row is None:
                raise MessageNotFoundError(message_id)
            conversation_id, role, status, text = int(row[0]), str(row[1]), str(row[2]), str(row[3])
            self._require_conversation(conn, conversation_id)
            later = conn.execute("SELECT 1 FROM messages WHERE conversation_id = ? AND id > ? LIMIT 1",
                                 (conversation_id, message_id)).fetchone()
            if role != str(Role.ASSISTANT) or status == str(MessageStatus.STREAMING) or later is not None:
                raise ValueError("only the last reply of a conversation, once finished, can be continued")
            conn.execute("UPDATE messages SET status = 'streaming', updated_at = ? WHERE id = ?",
                         (time.time(), message_id))
            return text

    def edit_message(self, message_id: int, text: str, *, drop_following: bool = False) -> None:
        """Replace a message's text; with ``drop_following`` also remove every later message (one transaction)."""
        now = time.time()
        with self._db.write() as conn:
            row = conn.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                raise MessageNotFoundError(message_id)
            conversation_id = int(row[0])
            self._require_conversation(conn, conversation_id)
            conn.execute("UPDATE messages SET text = ?, updated_at = ? WHERE id = ?", (text, now, message_id))
            if drop_following:
                conn.execute("DELETE FROM messages WHERE conversation_id = ? AND id > ?", (conversation_id, message_id))
            conn.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id))

    # -------------------------------------------------------------------------------------- search

    def search(self, text: str, *, limit: int = 50) -> list[SearchHit]:
        """Full-text search over every message of every undeleted conversation, best match first."""
        query = fts_query(text)
        if query is None:
            return []
        with self._db.read() as conn:
            rows = conn.execute(
                f"SELECT {SEARCH_HIT_COLUMNS} FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
                "JOIN conversations c ON c.id = m.conversation_id "
                "WHERE messages_fts MATCH ? AND c.deleted_at IS NULL "
                "ORDER BY rank LIMIT ?",
                (query, limit),
            ).fetchall()
        hits: list[SearchHit] = []
        for row in rows:
            try:
                hits.append(parse_search_hit(row))
            except (ValueError, TypeError):
                continue  # an undecodable message is reported by get_conversation, not here
        return hits

    def reply_stats(self, *, pair_id: str | None = None) -> list[ReplyStatsRow]:
        """Statistics of every stored reply (oldest first), to compare pairs and settings over time."""
        with self._db.read() as conn:
            rows = conn.execute(
                f"SELECT {REPLY_STATS_COLUMNS} FROM messages "
                "WHERE role = 'assistant' AND stats_json IS NOT NULL ORDER BY id"
            ).fetchall()
        result: list[ReplyStatsRow] = []
        for row in rows:
            try:
                parsed = parse_reply_stats(row)
            except (ValueError, TypeError):
                continue
            if parsed is not None and (pair_id is None or parsed.stats.pair_id == pair_id):
                result.append(parsed)
        return result

    # ------------------------------------------------------------------------------ export/import

    def render_conversation(self, conversation_id: int, fmt: ExportFormat) -> str:
        return exchange.render([self.get_conversation(conversation_id)], fmt)

    def render_all(self, fmt: ExportFormat) -> tuple[str, list[UnreadableRecord]]:
        """Every readable undeleted conversation; the unreadable ones are returned for the caller to report."""
        conversations: list[Conversation] = []
        unreadable: list[UnreadableRecord] = []
        for entry in self.list_conversations():
            if isinstance(entry, UnreadableRecord):
                unreadable.append(entry)
                continue
            try:
                conversations.append(self.get_conversation(entry.id))
            except RecordUnreadableError as exc:
                unreadable.append(UnreadableRecord("conversation", entry.id, entry.id, exc.reason))
            except ConversationNotFoundError:
                continue
        conversations.reverse()  # oldest first reads naturally in a document
        return exchange.render(conversations, fmt), unreadable

    def export_conversation(self, conversation_id: int, path: Path, fmt: ExportFormat) -> None:
        """Write one conversation atomically (temp file, fsync, replace, directory fsync)."""
        atomic_write_text(Path(path), self.render_conversation(conversation_id, fmt))

    def export_all(self, path: Path, fmt: ExportFormat) -> list[UnreadableRecord]:
        """Write every readable conversation atomically; returns the ones that could not be read."""
        text, unreadable = self.render_all(fmt)
        atomic_write_text(Path(path), text)
        return unreadable

    def export_raw(self, conversation_id: int) -> str:
        """A JSON dump of a conversation exactly as stored (undecodable bytes as base64), even if unreadable."""
        with self._db.read() as conn:
            return exchange.raw_document(conn, conversation_id)

    def import_json(self, path: Path) -> ImportResult:
        """Import a JSON export file (see ``import_json_text``)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ImportFormatError("the file is not UTF-8 text") from None
        return self.import_json_text(text)

    def import_json_text(self, text: str) -> ImportResult:
        """Import an export made by ``export_*`` (JSON). New ids; conversations already present are skipped.

        A conversation keeps its ``uuid`` across export and import, so importing the same export twice adds
        nothing the second time. The whole document is validated first and imported in one transaction.

        Raises:
            ImportFormatError: the document is not a valid Outrider history export (nothing was imported).
        """
        conversations = exchange.parse_json_document(text)
        with self._db.write() as conn:
            return exchange.insert_conversations(conn, conversations)
