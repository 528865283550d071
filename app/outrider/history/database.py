"""The open history database: one connection behind a lock, consistent reads, all-or-nothing writes.

``transaction`` is the one way anything in ``outrider.history`` writes (the store, migrations, salvage):
``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back wholly on any exception, so a write is committed (and, with
``synchronous=FULL``, fsynced) entirely or not at all. ``classify_error`` turns the SQLite failures a person
can act on (disk full, read-only) into typed errors; ``Database`` applies it to every write of the store.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from outrider.history.errors import DiskFullError, StoreError, StoreReadOnlyError
from outrider.history.lock import DirectoryLock

# SQLite primary result codes (the low byte of an extended code).
_SQLITE_READONLY: Final = 8
_SQLITE_IOERR: Final = 10
_SQLITE_FULL: Final = 13
# Below this much free space an I/O error while writing is reported as "disk full" (SQLite reports ENOSPC on
# its shared-memory and sync paths as a generic "disk I/O error").
_LOW_SPACE_BYTES: Final = 1 << 20


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction on an autocommit connection: all of the body is committed, or none of it.

    Any exception in the body (or in ``COMMIT``) rolls back and propagates; a failing ``ROLLBACK`` (the
    connection already rolled back by SQLite itself) does not hide the original error.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


def _low_space(directory: Path) -> bool:
    try:
        return shutil.disk_usage(directory).free < _LOW_SPACE_BYTES
    except OSError:
        return False


def classify_error(exc: sqlite3.Error, db_path: Path) -> StoreError | None:
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


class Database:
    """An open, locked history database, owned by one ``HistoryStore``.

    Thread-safe: every write holds one re-entrant lock for its whole duration, so writes never interleave; every
    read holds the reader's lock, and a multi-statement read sees one snapshot. Reads go through a second,
    read-only connection when one is given: in WAL mode a reader never waits for a writer, so the GUI thread's
    reads (the conversation list, a chat being opened) never wait behind the store thread's fsync of a checkpoint.
    They see what is committed (a write in progress is not). After ``close`` every use raises ``StoreError``.

    Attributes:
        db_path: the database file.
    """

    def __init__(self, conn: sqlite3.Connection, lock: DirectoryLock, db_path: Path,
                 reader: sqlite3.Connection | None = None) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._reader: sqlite3.Connection | None = reader
        self._dir_lock = lock
        self._mutex = threading.RLock()
        self._read_mutex = threading.RLock() if reader is not None else self._mutex
        self.db_path = db_path

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection itself (tests use it to provoke failures); ``StoreError`` once closed."""
        if self._conn is None:
            raise StoreError("the history store is closed")
        return self._conn

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for multi-statement reads (of what is committed)."""
        with self._read_mutex:
            conn = self.conn if self._reader is None else self._reader
            if self._conn is None:
                raise StoreError("the history store is closed")
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``transaction``); disk full and read-only come out typed."""
        with self._mutex:
            try:
                with transaction(self.conn) as conn:
                    yield conn
            except sqlite3.Error as exc:
                typed = classify_error(exc, self.db_path)
                if typed is not None:
                    raise typed from exc  # "disk full: …", never a bare "disk I/O error"
                raise

    def close(self) -> None:
        """Close the connection (checkpointing the WAL) and release the directory lock. Idempotent."""
        with self._mutex, self._read_mutex:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            if self._conn is not None:
                self._conn.close()  # the last connection: checkpoints the WAL into the file
                self._conn = None
            self._dir_lock.release()
