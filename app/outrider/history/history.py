"""The chat history store: crash-safe SQLite with per-reply statistics, search, export and import.

Order of writes (why nothing a user typed or saw is lost):

1. ``add_user_message`` commits (``synchronous=FULL``: fsynced) before generation starts.
2. ``begin_reply`` commits an empty assistant message with status ``streaming``.
3. ``checkpoint_reply`` commits the text so far at least once a second (see ``ReplyCheckpointer``).
4. ``finish_reply`` commits the final text, status and statistics in one transaction.

After a crash, ``open`` turns every ``streaming`` reply into ``interrupted``; its text is the last checkpoint.
Every multi-row change (edit, delete, import, migration) is one transaction: wholly old or wholly new.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import re
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from outrider import paths
from outrider.history import formats
from outrider.history.atomic import atomic_write_text, fsync_directory
from outrider.history.errors import (
    ConversationNotFoundError,
    CorruptionNotice,
    DataDirectoryError,
    DiskFullError,
    ImportFormatError,
    MessageNotFoundError,
    MigrationError,
    RecordUnreadableError,
    ReplyNotStreamingError,
    SchemaTooNewError,
    StoreError,
    StoreReadOnlyError,
)
from outrider.history.lock import DirectoryLock
from outrider.history.models import (
    Conversation,
    ConversationSummary,
    ImportResult,
    Message,
    MessageStatus,
    ReplyStats,
    ReplyStatsRow,
    Role,
    SearchHit,
    UnreadableRecord,
)
from outrider.history.salvage import salvage_into
from outrider.history.schema import MIGRATIONS, Migration, apply_migrations, read_version

DB_FILENAME: Final = "history.sqlite3"
DEFAULT_TITLE: Final = "New chat"
BUSY_TIMEOUT_S: Final = 5.0

# SQLite primary result codes that mean "this file is damaged", as opposed to busy/locked/IO trouble.
_SQLITE_CORRUPT: Final = 11
_SQLITE_NOTADB: Final = 26
_SQLITE_READONLY: Final = 8
_SQLITE_IOERR: Final = 10
_SQLITE_FULL: Final = 13
# Below this much free space an I/O error while writing is reported as "disk full" (SQLite reports ENOSPC on
# its shared-memory and sync paths as a generic "disk I/O error").
_LOW_SPACE_BYTES: Final = 1 << 20
_SIDE_FILES: Final = ("-wal", "-shm", "-journal")


class ExportFormat(StrEnum):
    MARKDOWN = "md"
    JSON = "json"


def _decode_text(raw: bytes) -> str:
    # Invalid UTF-8 must not make a whole query fail (one bad row would hide all others). Bytes that do not
    # decode become lone surrogates, which the row parsers detect and report as "could not be read".
    return raw.decode("utf-8", "surrogateescape")


def connect(db_path: Path) -> sqlite3.Connection:
    """Open a connection with the durability settings every Outrider connection must have.

    WAL journal, ``synchronous=FULL`` (a committed message survives power loss), foreign keys on. The
    connection is in autocommit mode; callers open transactions explicitly.
    """
    conn = sqlite3.connect(str(db_path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    try:
        conn.text_factory = _decode_text
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        settings = connection_settings(conn)
        if str(mode).lower() != "wal" or settings["synchronous"] != 2 or settings["foreign_keys"] != 1:
            raise StoreError(f"could not enable durable settings on {db_path}: {settings}")
    except BaseException:
        conn.close()
        raise
    return conn


def connection_settings(conn: sqlite3.Connection) -> dict[str, Any]:
    """The settings audited by the reliability tests (synchronous 2 is FULL)."""
    return {
        "journal_mode": str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower(),
        "synchronous": int(conn.execute("PRAGMA synchronous").fetchone()[0]),
        "foreign_keys": int(conn.execute("PRAGMA foreign_keys").fetchone()[0]),
    }


def _low_space(directory: Path) -> bool:
    try:
        return shutil.disk_usage(directory).free < _LOW_SPACE_BYTES
    except OSError:
        return False


def _classify(exc: sqlite3.Error, db_path: Path) -> StoreError | None:
    """A typed error for the failures people can act on (disk full, read-only); ``None`` for the others."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc).lower()
    if primary == _SQLITE_FULL or "database or disk is full" in text:
        return DiskFullError(db_path, "database or disk is full")
    if (primary == _SQLITE_IOERR or "disk i/o error" in text) and _low_space(db_path.parent):
        return DiskFullError(db_path, "no space left on the device")
    if primary == _SQLITE_READONLY or "readonly database" in text:
        return StoreReadOnlyError(db_path)
    return None


def _private_files(db_path: Path) -> None:
    """The database, its WAL/shared memory and the lock file: owner-only (``0600``), whatever made them."""
    paths.private_file(db_path)
    for suffix in (*_SIDE_FILES, ".lock"):
        paths.private_file(db_path.with_name(db_path.name + suffix))


def _is_corruption(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text


class _NotOurDatabase(Exception):
    pass


def _timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def _free_name(base: Path) -> Path:
    candidate, n = base, 1
    while candidate.exists():
        candidate = base.with_name(f"{base.name}.{n}")
        n += 1
    return candidate


def _move_aside(db_path: Path) -> Path:
    target = _free_name(db_path.with_name(f"{db_path.name}.corrupt-{_timestamp()}"))
    os.replace(db_path, target)
    paths.private_file(target)
    for suffix in _SIDE_FILES:
        side = db_path.with_name(db_path.name + suffix)
        if side.exists():
            os.replace(side, target.with_name(target.name + suffix))
            paths.private_file(target.with_name(target.name + suffix))
    fsync_directory(db_path.parent)
    return target


def _remove_with_side_files(path: Path) -> None:
    for candidate in (path, *(path.with_name(path.name + suffix) for suffix in _SIDE_FILES)):
        candidate.unlink(missing_ok=True)


def _replace_damaged(
    db_path: Path, directory: Path, migrations: Sequence[Migration], reason: str
) -> CorruptionNotice:
    """Build a new database from what can be read of the damaged one, then swap them; returns the notice.

    The new database is made next to the old one (schema, then the salvaged rows, one transaction each) and
    only then is the damaged file moved aside (``.corrupt-<time>``, kept) and the new one renamed into place.
    A failure before the swap (disk full) leaves the damaged file where it was: the next open tries again and
    says so again; the user is never left with a silently empty history.
    """
    tmp = db_path.with_name(f".{db_path.name}.salvage-tmp")
    _remove_with_side_files(tmp)  # left by a crash during an earlier attempt
    try:
        paths.create_private_file(tmp)
        new = connect(tmp)
        try:
            apply_migrations(new, migrations, 0)
            # Copy what can still be read (table by table, rowid by rowid); indexes and FTS are rebuilt.
            result = salvage_into(db_path, new, directory)
        finally:
            new.close()  # checkpoints and removes its WAL: one self-contained file
        moved_to = _move_aside(db_path)
        os.replace(tmp, db_path)
        fsync_directory(directory)
    except BaseException:
        with contextlib.suppress(OSError):
            _remove_with_side_files(tmp)
        raise
    return CorruptionNotice(
        moved_to=moved_to,
        reason=reason,
        recovered_conversations=result.conversations,
        recovered_messages=result.messages,
    )


def _backup(conn: sqlite3.Connection, db_path: Path, version: int) -> Path:
    """A consistent, fsynced copy of the database, in place before any migration statement runs."""
    target = _free_name(db_path.with_name(f"{db_path.name}.backup-v{version}-{_timestamp()}"))
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    paths.create_private_file(tmp)  # 0600 before SQLite writes a byte (it would create it 0644)
    dest = sqlite3.connect(str(tmp), isolation_level=None)
    try:
        conn.backup(dest)
        dest.execute("PRAGMA journal_mode=DELETE")  # a self-contained single file
    finally:
        dest.close()
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    fsync_directory(db_path.parent)
    return target


def _check_text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} is not text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not valid UTF-8") from None
    return value


def _check_number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} is not a number")
    return float(value)


def _fts_query(text: str) -> str | None:
    words = re.findall(r"\w+", text)
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"  # search as you type: the last word may be a prefix
    return " ".join(quoted)


_CONVERSATION_COLUMNS = (
    "c.id, c.uuid, c.title, c.created_at, c.updated_at, c.pair_id, c.settings_json, c.deleted_at, "
    "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id)"
)
_MESSAGE_COLUMNS = "id, conversation_id, role, text, status, created_at, updated_at, stats_json"


def _parse_conversation(row: Sequence[Any]) -> ConversationSummary:
    settings_raw = _check_text(row[6], "settings")
    try:
        settings = json.loads(settings_raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"settings are not valid JSON ({exc.msg})") from None
    if not isinstance(settings, dict):
        raise TypeError("settings are not a JSON object")
    pair_id = row[5]
    if pair_id is not None:
        pair_id = _check_text(pair_id, "pair id")
    deleted_at = row[7]
    return ConversationSummary(
        id=int(row[0]),
        uuid=_check_text(row[1], "uuid"),
        title=_check_text(row[2], "title"),
        created_at=_check_number(row[3], "created time"),
        updated_at=_check_number(row[4], "updated time"),
        pair_id=pair_id,
        settings=settings,
        message_count=int(row[8]),
        deleted_at=None if deleted_at is None else _check_number(deleted_at, "deleted time"),
    )


def _parse_stats(raw: object) -> ReplyStats | None:
    if raw is None:
        return None
    text = _check_text(raw, "statistics")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"statistics are not valid JSON ({exc.msg})") from None
    return ReplyStats.from_dict(data)


def _parse_message(row: Sequence[Any]) -> Message:
    created = _check_number(row[5], "created time")
    return Message(
        id=int(row[0]),
        conversation_id=int(row[1]),
        role=Role(_check_text(row[2], "role")),
        text=_check_text(row[3], "text"),
        status=MessageStatus(_check_text(row[4], "status")),
        created_at=created,
        updated_at=created if row[6] is None else _check_number(row[6], "updated time"),
        stats=_parse_stats(row[7]),
    )


def _stats_json(stats: ReplyStats | None) -> str | None:
    if stats is None:
        return None
    return json.dumps(stats.to_dict(), ensure_ascii=False, allow_nan=False)


def _raw_value(kind: str, value: Any) -> Any:
    """A column as exactly stored: numbers as numbers, text as text when it is UTF-8, else base64."""
    if kind == "null" or value is None:
        return None
    if kind in ("integer", "real"):
        return value
    data = bytes(value)
    if kind == "text":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"base64": base64.b64encode(data).decode("ascii"), "sqlite_type": kind}


def _data_directory(data_dir: Path | None) -> Path:
    """The data folder, created ``0700`` (or narrowed to it); a typed store error when it cannot be used."""
    try:
        return paths.data_dir() if data_dir is None else paths.private_dir(Path(data_dir))
    except paths.DataDirError as exc:
        raise DataDirectoryError(str(exc)) from None


def _acquire_lock(db_path: Path, directory: Path) -> DirectoryLock:
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreReadOnlyError(directory, "the folder cannot be written")
    if os.path.lexists(db_path) and not os.access(db_path, os.W_OK):
        raise StoreReadOnlyError(db_path)
    try:
        return DirectoryLock.acquire(db_path.with_name(db_path.name + ".lock"), directory)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise StoreReadOnlyError(directory, exc.strerror or "") from None
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(db_path, "no space left on the device") from None
        raise StoreError(f"could not lock the data directory {directory}: {exc.strerror or exc}") from None


class HistoryStore:
    """The one writer of a data directory's chat history.

    Open it with ``HistoryStore.open()``; it holds an exclusive lock on the directory until ``close()``.
    All methods are thread-safe (one connection behind a lock) and commit before they return.

    Attributes:
        db_path: the database file.
        notice: set when the database was found damaged and replaced by what could be salvaged from it (a
            ``CorruptionNotice``: where the damaged file was kept, how many messages were recovered). Every
            front end must show ``notice.message`` (CLI: one stderr line; GUI: the main window's banner).
        recovered_reply_ids: replies that were ``streaming`` at open and are now ``interrupted``.
        backup_path: the pre-migration backup made by this open, if a migration ran.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        lock: DirectoryLock,
        db_path: Path,
        notice: CorruptionNotice | None,
        backup_path: Path | None,
    ) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._dir_lock = lock
        self._mutex = threading.RLock()
        self.db_path = db_path
        self.notice = notice
        self.backup_path = backup_path
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
        directory = _data_directory(data_dir)
        db_path = directory / filename
        lock = _acquire_lock(db_path, directory)
        conn: sqlite3.Connection | None = None
        try:
            try:
                paths.create_private_file(db_path)  # SQLite would create it 0644 (and the WAL like it)
                _private_files(db_path)
                notice: CorruptionNotice | None = None
                try:
                    conn = connect(db_path)
                    version = cls._check_database(conn)
                except (sqlite3.DatabaseError, _NotOurDatabase) as exc:
                    if isinstance(exc, sqlite3.DatabaseError) and not _is_corruption(exc):
                        raise
                    if conn is not None:
                        conn.close()
                        conn = None
                    reason = " ".join(str(exc).split())  # one line
                    notice = _replace_damaged(db_path, directory, migrations, reason)
                    conn = connect(db_path)
                    version = cls._check_database(conn)
                _private_files(db_path)
                target = migrations[-1].version
                if version > target:
                    raise SchemaTooNewError(version, target)
                backup: Path | None = None
                if version < target:
                    if version > 0:
                        backup = _backup(conn, db_path, version)
                    try:
                        apply_migrations(conn, migrations, version)
                    except (sqlite3.Error, StoreError, ValueError, TypeError, KeyError) as exc:
                        typed = _classify(exc, db_path) if isinstance(exc, sqlite3.Error) else None
                        if typed is not None:
                            raise typed from exc
                        raise MigrationError(version, target, backup, str(exc)) from exc
                store = cls(conn, lock, db_path, notice, backup)
                store.recovered_reply_ids = store.recover_interrupted()
                return store
            except sqlite3.Error as exc:
                typed = _classify(exc, db_path)
                if typed is not None:
                    raise typed from exc
                raise StoreError(f"could not open the history database {db_path}: {exc}") from exc
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFullError(db_path, "no space left on the device") from exc
                if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise StoreReadOnlyError(Path(exc.filename or db_path), exc.strerror or "") from exc
                raise StoreError(f"could not open the history database {db_path}: {exc.strerror or exc}") from exc
        except BaseException:
            if conn is not None:
                conn.close()
            lock.release()
            raise

    @staticmethod
    def _check_database(conn: sqlite3.Connection) -> int:
        rows = conn.execute("PRAGMA quick_check(100)").fetchall()
        problems = [
            line.strip()
            for row in rows
            for line in str(row[0]).splitlines()
            if line.strip() and not line.startswith("*** ")
        ]
        if problems != ["ok"]:
            first = problems[0] if problems else "no details"
            plus = "+" if len(rows) >= 100 else ""
            more = f" (and {len(problems) - 1}{plus} more)" if len(problems) > 1 else ""
            raise _NotOurDatabase(f"integrity check failed: {first}{more}")
        version = read_version(conn)
        if version is None:
            raise _NotOurDatabase("not an Outrider history database")
        return version

    def close(self) -> None:
        """Close the connection (checkpointing the WAL) and release the directory lock."""
        with self._mutex:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._dir_lock.release()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        with self._read() as conn:
            version = read_version(conn)
        return version or 0

    def connection_settings(self) -> dict[str, Any]:
        with self._read() as conn:
            return connection_settings(conn)

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for multi-statement reads."""
        with self._mutex:
            if self._conn is None:
                raise StoreError("the history store is closed")
            conn = self._conn
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it is committed (and fsynced), or none of it."""
        with self._mutex:
            if self._conn is None:
                raise StoreError("the history store is closed")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                typed = _classify(exc, self.db_path)
                if typed is not None:
                    raise typed from exc  # "disk full: …", never a bare "disk I/O error"
                raise

    # ------------------------------------------------------------------------------- conversations

    def create_conversation(
        self,
        title: str = DEFAULT_TITLE,
        *,
        pair_id: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> int:
        now = time.time()
        settings_json = json.dumps(dict(settings or {}), ensure_ascii=False, allow_nan=False)
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (uuid, title, created_at, updated_at, pair_id, settings_json) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (uuid.uuid4().hex, title, now, now, pair_id, settings_json),
            )
            return int(cur.lastrowid or 0)

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
        settings_json = json.dumps(dict(settings or {}), ensure_ascii=False, allow_nan=False)
        insert_message = (
            "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at) "
            "VALUES (?, ?, ?, 'complete', ?, ?)"
        )
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (uuid, title, created_at, updated_at, pair_id, settings_json) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (uuid.uuid4().hex, title, now, now, pair_id, settings_json),
            )
            conversation_id = int(cur.lastrowid or 0)
            if system:
                conn.execute(insert_message, (conversation_id, str(Role.SYSTEM), system, now, now))
            cur = conn.execute(insert_message, (conversation_id, str(Role.USER), user_text, now, now))
            return conversation_id, int(cur.lastrowid or 0)

    def update_conversation_settings(
        self, conversation_id: int, *, pair_id: str | None, settings: Mapping[str, Any]
    ) -> None:
        settings_json = json.dumps(dict(settings), ensure_ascii=False, allow_nan=False)
        with self._write() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute(
                "UPDATE conversations SET pair_id = ?, settings_json = ?, updated_at = ? WHERE id = ?",
                (pair_id, settings_json, time.time(), conversation_id),
            )

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        with self._write() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute(
                "UPDATE conversations SET title = ?, updated_at = ? WHERE id = ?",
                (title, time.time(), conversation_id),
            )

    def delete_conversation(self, conversation_id: int) -> None:
        """Soft delete: hidden from lists and search until ``restore_conversation`` or ``purge_deleted``."""
        with self._write() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute("UPDATE conversations SET deleted_at = ? WHERE id = ?", (time.time(), conversation_id))

    def restore_conversation(self, conversation_id: int) -> None:
        """Undo ``delete_conversation``."""
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE conversations SET deleted_at = NULL WHERE id = ? AND deleted_at IS NOT NULL",
                (conversation_id,),
            )
            if cur.rowcount == 0:
                raise ConversationNotFoundError(conversation_id)

    def purge_deleted(self, older_than_s: float = 0.0) -> int:
        """Permanently remove conversations deleted at least ``older_than_s`` ago (messages cascade)."""
        with self._write() as conn:
            cur = conn.execute(
                "DELETE FROM conversations WHERE deleted_at IS NOT NULL AND deleted_at <= ?",
                (time.time() - older_than_s,),
            )
            return max(cur.rowcount, 0)

    def list_conversations(self, *, include_deleted: bool = False) -> list[ConversationSummary | UnreadableRecord]:
        """Newest first. A row that cannot be decoded is an ``UnreadableRecord``; it never hides the others."""
        where = "" if include_deleted else "WHERE c.deleted_at IS NULL"
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations c {where} ORDER BY c.updated_at DESC, c.id DESC"
            ).fetchall()
        result: list[ConversationSummary | UnreadableRecord] = []
        for row in rows:
            try:
                result.append(_parse_conversation(row))
            except (ValueError, TypeError) as exc:
                result.append(UnreadableRecord("conversation", int(row[0]), int(row[0]), str(exc)))
        return result

    def get_conversation(self, conversation_id: int, *, include_deleted: bool = False) -> Conversation:
        """The conversation with its messages; undecodable messages come back as ``UnreadableRecord``.

        Raises:
            ConversationNotFoundError: no such (undeleted) conversation.
            RecordUnreadableError: the conversation row itself cannot be decoded (see ``export_raw``).
        """
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations c WHERE c.id = ?", (conversation_id,)
            ).fetchone()
            if row is None or (row[7] is not None and not include_deleted):
                raise ConversationNotFoundError(conversation_id)
            rows = conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY id",
                (conversation_id,),
            ).fetchall()
        try:
            summary = _parse_conversation(row)
        except (ValueError, TypeError) as exc:
            raise RecordUnreadableError("conversation", conversation_id, str(exc)) from None
        messages: list[Message | UnreadableRecord] = []
        for mrow in rows:
            try:
                messages.append(_parse_message(mrow))
            except (ValueError, TypeError) as exc:
                messages.append(UnreadableRecord("message", int(mrow[0]), conversation_id, str(exc)))
        return Conversation(summary=summary, messages=messages)

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
        with self._write() as conn:
            self._require_conversation(conn, conversation_id)
            cur = conn.execute(
                "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at, stats_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, str(Role(role)), text, str(MessageStatus(status)), now, now, _stats_json(stats)),
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
        with self._write() as conn:
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
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE messages SET text = ?, status = ?, stats_json = ?, updated_at = ? "
                "WHERE id = ? AND status = 'streaming'",
                (text, str(status), _stats_json(stats), now, message_id),
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
        with self._write() as conn:
            rows = conn.execute(
                "UPDATE messages SET status = 'interrupted', updated_at = ? WHERE status = 'streaming' RETURNING id",
                (time.time(),),
            ).fetchall()
        return sorted(int(r[0]) for r in rows)

    def edit_message(self, message_id: int, text: str, *, drop_following: bool = False) -> None:
        """Replace a message's text; with ``drop_following`` also remove every later message (one transaction)."""
        now = time.time()
        with self._write() as conn:
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
        query = _fts_query(text)
        if query is None:
            return []
        with self._read() as conn:
            rows = conn.execute(
                "SELECT m.conversation_id, c.title, m.id, m.role, "
                "snippet(messages_fts, 0, '[', ']', '…', 12), m.created_at "
                "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
                "JOIN conversations c ON c.id = m.conversation_id "
                "WHERE messages_fts MATCH ? AND c.deleted_at IS NULL "
                "ORDER BY rank LIMIT ?",
                (query, limit),
            ).fetchall()
        hits: list[SearchHit] = []
        for row in rows:
            try:
                hits.append(
                    SearchHit(
                        conversation_id=int(row[0]),
                        conversation_title=_check_text(row[1], "title"),
                        message_id=int(row[2]),
                        role=Role(_check_text(row[3], "role")),
                        snippet=_check_text(row[4], "snippet"),
                        created_at=_check_number(row[5], "created time"),
                    )
                )
            except (ValueError, TypeError):
                continue  # an undecodable message is reported by get_conversation, not here
        return hits

    def reply_stats(self, *, pair_id: str | None = None) -> list[ReplyStatsRow]:
        """Statistics of every stored reply (oldest first), to compare pairs and settings over time."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, conversation_id, created_at, status, stats_json FROM messages "
                "WHERE role = 'assistant' AND stats_json IS NOT NULL ORDER BY id"
            ).fetchall()
        result: list[ReplyStatsRow] = []
        for row in rows:
            try:
                stats = _parse_stats(row[4])
                if stats is None or (pair_id is not None and stats.pair_id != pair_id):
                    continue
                result.append(
                    ReplyStatsRow(
                        int(row[0]),
                        int(row[1]),
                        _check_number(row[2], "created time"),
                        MessageStatus(_check_text(row[3], "status")),
                        stats,
                    )
                )
            except (ValueError, TypeError):
                continue
        return result

    # ------------------------------------------------------------------------------ export/import

    def render_conversation(self, conversation_id: int, fmt: ExportFormat) -> str:
        conversation = self.get_conversation(conversation_id)
        if ExportFormat(fmt) is ExportFormat.JSON:
            return formats.to_json_document([conversation])
        return formats.conversation_to_markdown(conversation)

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
        if ExportFormat(fmt) is ExportFormat.JSON:
            return formats.to_json_document(conversations), unreadable
        return formats.to_markdown_document(conversations), unreadable

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
        conv_cols = ("id", "uuid", "title", "created_at", "updated_at", "pair_id", "settings_json", "deleted_at")
        msg_cols = ("id", "conversation_id", "role", "text", "status", "created_at", "updated_at", "stats_json")

        def select(cols: Sequence[str]) -> str:
            return ", ".join(
                f"typeof({c}), CASE WHEN typeof({c}) IN ('text', 'blob') THEN CAST({c} AS BLOB) ELSE {c} END"
                for c in cols
            )

        with self._read() as conn:
            row = conn.execute(
                f"SELECT {select(conv_cols)} FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            if row is None:
                raise ConversationNotFoundError(conversation_id)
            mrows = conn.execute(
                f"SELECT {select(msg_cols)} FROM messages WHERE conversation_id = ? ORDER BY id",
                (conversation_id,),
            ).fetchall()

        def decode(cols: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for i, col in enumerate(cols):
                kind, raw = values[2 * i], values[2 * i + 1]
                out[col] = _raw_value(kind, raw)
            return out

        doc = {
            "format": "outrider-history-raw",
            "conversation": decode(conv_cols, row),
            "messages": [decode(msg_cols, m) for m in mrows],
        }
        return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"

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
        conversations = formats.parse_json_document(text)
        imported: list[int] = []
        skipped = 0
        with self._write() as conn:
            for conv in conversations:
                if conn.execute("SELECT 1 FROM conversations WHERE uuid = ?", (conv.uuid,)).fetchone():
                    skipped += 1
                    continue
                cur = conn.execute(
                    "INSERT INTO conversations (uuid, title, created_at, updated_at, pair_id, settings_json) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        conv.uuid,
                        conv.title,
                        conv.created_at,
                        conv.updated_at,
                        conv.pair_id,
                        json.dumps(conv.settings, ensure_ascii=False),
                    ),
                )
                new_id = int(cur.lastrowid or 0)
                conn.executemany(
                    "INSERT INTO messages (conversation_id, role, text, status, created_at, updated_at, "
                    "stats_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (new_id, str(m.role), m.text, str(m.status), m.created_at, m.created_at, _stats_json(m.stats))
                        for m in conv.messages
                    ],
                )
                imported.append(new_id)
        return ImportResult(imported=imported, skipped=skipped)
