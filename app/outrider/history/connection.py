"""Opening the history database: the data folder and its lock, durable connections, damage and migrations.

``open_database`` is the only way in. In order, it

1. creates (or narrows) the data folder ``0700`` and takes the single-writer lock (``lock.py``);
2. creates the database file ``0600`` before SQLite can create it ``0644`` (and its WAL like it);
3. opens it with ``connect`` (WAL, ``synchronous=FULL``, foreign keys) and runs ``PRAGMA quick_check``;
4. when the file is damaged or not ours, builds a new one from what can still be read (``salvage.py``), keeps
   the damaged file aside (``.corrupt-<time>``) and reports a ``CorruptionNotice``;
5. migrates an older schema after a fsynced backup (``.backup-v<N>-<time>``), all or nothing (``schema.py``);
6. turns SQLite and OS failures people can act on into typed errors (disk full, read-only, locked).

No rows are read or written here beyond the schema version; that is ``store.py``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from outrider import paths
from outrider.fileio import fsync_directory, fsync_file
from outrider.history.database import classify_error
from outrider.history.errors import (
    CorruptionNotice,
    DataDirectoryError,
    DiskFullError,
    MigrationError,
    SchemaTooNewError,
    StoreError,
    StoreReadOnlyError,
)
from outrider.history.lock import DirectoryLock
from outrider.history.salvage import salvage_into
from outrider.history.schema import Migration, apply_migrations, read_version

DB_FILENAME: Final = "history.sqlite3"
BUSY_TIMEOUT_S: Final = 5.0

# SQLite primary result codes that mean "this file is damaged", as opposed to busy/locked/IO trouble.
_SQLITE_CORRUPT: Final = 11
_SQLITE_NOTADB: Final = 26
_SIDE_FILES: Final = ("-wal", "-shm", "-journal")

T = TypeVar("T")


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
    db_path: Path, directory: Path, migrations: Sequence[Migration], reason: str,
    problem: Literal["damaged", "empty", "foreign"] = "damaged",
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
        problem=problem,
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
    fsync_file(tmp)
    os.replace(tmp, target)
    fsync_directory(db_path.parent)
    return target


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


def _is_empty_file(db_path: Path, existed: bool) -> bool:
    """A history file that was there before this open, with no byte in it (nor in a write-ahead log)."""
    if not existed or db_path.stat().st_size:
        return False
    wal = db_path.with_name(db_path.name + "-wal")
    return not (wal.exists() and wal.stat().st_size)


def _is_foreign(db_path: Path) -> bool:
    """An intact SQLite database of another application (tables, none of them Outrider's ``schema_version``).

    Looked at without changing a byte: SQLite's ``immutable`` mode takes no lock, creates no ``-wal``/``-shm``
    and never writes, where the durable connection would first switch the file to WAL mode. A file SQLite
    cannot read is not foreign but damaged: the normal open finds and salvages it.
    """
    try:
        with db_path.open("rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                return False
        probe = sqlite3.connect(f"{db_path.resolve().as_uri()}?immutable=1", uri=True)
    except (OSError, sqlite3.Error):
        return False
    try:
        tables = {str(row[0]) for row in probe.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        return False
    finally:
        probe.close()
    return bool(tables) and "schema_version" not in tables


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


@dataclass(frozen=True)
class OpenedDatabase:
    """A locked, checked, migrated database, handed to the store that will own it.

    Attributes:
        conn: the connection (``connect``'s settings).
        lock: the data directory's single-writer lock, held.
        db_path: the database file.
        notice: set when the file was damaged and replaced by what could be salvaged from it.
        backup_path: the pre-migration backup made by this open, if a migration ran.
    """

    conn: sqlite3.Connection
    lock: DirectoryLock
    db_path: Path
    notice: CorruptionNotice | None
    backup_path: Path | None


def open_database(
    data_dir: Path | None,
    *,
    filename: str,
    migrations: Sequence[Migration],
    build: Callable[[OpenedDatabase], T],
) -> T:
    """Lock the directory, open (or create, or replace a damaged) database, migrate, then ``build(opened)``.

    ``build`` runs under the same error handling (a failure there closes the connection and releases the lock)
    and its result is returned: the store that owns the connection from then on. Raises the typed errors
    ``HistoryStore.open`` lists.
    """
    directory = _data_directory(data_dir)
    db_path = directory / filename
    lock = _acquire_lock(db_path, directory)
    conn: sqlite3.Connection | None = None
    try:
        try:
            # SQLite would create it 0644 (and the WAL like it)
            existed = not paths.create_private_file(db_path)
            _private_files(db_path)
            notice: CorruptionNotice | None = None
            if _is_empty_file(db_path, existed):
                notice = _replace_damaged(db_path, directory, migrations, "the file is empty", "empty")
            elif _is_foreign(db_path):
                notice = _replace_damaged(
                    db_path, directory, migrations, "not an Outrider history database", "foreign")
            try:
                conn = connect(db_path)
                version = _check_database(conn)
            except (sqlite3.DatabaseError, _NotOurDatabase) as exc:
                if isinstance(exc, sqlite3.DatabaseError) and not _is_corruption(exc):
                    raise
                if conn is not None:
                    conn.close()
                    conn = None
                reason = " ".join(str(exc).split())  # one line
                notice = _replace_damaged(db_path, directory, migrations, reason)
                conn = connect(db_path)
                version = _check_database(conn)
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
                    typed = classify_error(exc, db_path) if isinstance(exc, sqlite3.Error) else None
                    if typed is not None:
                        raise typed from exc
                    raise MigrationError(version, target, backup, str(exc)) from exc
            return build(OpenedDatabase(conn, lock, db_path, notice, backup))
        except sqlite3.Error as exc:
            typed = classify_error(exc, db_path)
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
