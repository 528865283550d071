"""Typed history-store errors and notices. They carry facts; the UI/CLI chooses the words shown to people."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


class StoreError(Exception):
    """Base class of everything the history store raises on purpose."""


class StoreLockedError(StoreError):
    """Another process already owns this data directory (never two writers).

    Attributes:
        data_dir: the directory that is locked.
        lock_path: the lock file held by the other process.
        holder_pid: the pid written by the holder, when it could be read.
    """

    def __init__(self, data_dir: Path, lock_path: Path, holder_pid: int | None = None) -> None:
        who = f" (process {holder_pid})" if holder_pid else ""
        super().__init__(f"Outrider is already running with data directory {data_dir}{who}")
        self.data_dir = data_dir
        self.lock_path = lock_path
        self.holder_pid = holder_pid


class ConversationNotFoundError(StoreError):
    """No (undeleted) conversation has this id."""

    def __init__(self, conversation_id: int) -> None:
        super().__init__(f"no conversation with id {conversation_id}")
        self.conversation_id = conversation_id


class MessageNotFoundError(StoreError):
    """No message has this id."""

    def __init__(self, message_id: int) -> None:
        super().__init__(f"no message with id {message_id}")
        self.message_id = message_id


class ReplyNotStreamingError(StoreError):
    """A checkpoint or finish was sent for a reply that is no longer streaming."""

    def __init__(self, message_id: int, status: str) -> None:
        super().__init__(f"reply {message_id} is {status}, not streaming")
        self.message_id = message_id
        self.status = status


class RecordUnreadableError(StoreError):
    """A stored record exists but cannot be decoded (bad UTF-8, bad JSON, wrong types).

    ``HistoryStore.export_raw`` still writes it out byte for byte.
    """

    def __init__(self, kind: str, record_id: int, reason: str) -> None:
        super().__init__(f"{kind} {record_id} could not be read: {reason}")
        self.kind = kind
        self.record_id = record_id
        self.reason = reason


class ImportFormatError(StoreError):
    """A file given to import is not an Outrider history export."""


class MigrationError(StoreError):
    """A schema migration failed and was rolled back; the database is still at ``from_version``.

    Attributes:
        from_version: the version the database is (still) at.
        to_version: the version that could not be reached.
        backup_path: the copy taken before migrating, if one was made.
    """

    def __init__(self, from_version: int, to_version: int, backup_path: Path | None, cause: str) -> None:
        super().__init__(
            f"could not upgrade the history database from version {from_version} to {to_version}: {cause}"
            + (f" (backup kept at {backup_path})" if backup_path else "")
        )
        self.from_version = from_version
        self.to_version = to_version
        self.backup_path = backup_path


class SchemaTooNewError(StoreError):
    """The database was written by a newer Outrider; it is left untouched."""

    def __init__(self, found: int, supported: int) -> None:
        super().__init__(f"the history database is schema version {found}; this Outrider understands up to {supported}")
        self.found = found
        self.supported = supported


class StoreReadOnlyError(StoreError):
    """The history database (or its folder) cannot be written: a read-only file, folder or file system.

    Attributes:
        path: the file or folder that is read-only.
    """

    def __init__(self, path: Path, detail: str = "") -> None:
        super().__init__(
            f"the chat history {path} is read-only" + (f" ({detail})" if detail else "")
            + "; make it writable (chmod u+w) or set OUTRIDER_HOME to another folder"
        )
        self.path = path


class DiskFullError(StoreError):
    """A write failed because the disk (or the database's size limit) is full; nothing of it was committed.

    Attributes:
        path: the database file.
    """

    def __init__(self, path: Path, detail: str = "") -> None:
        super().__init__(
            f"disk full: could not write the chat history {path}"
            + (f" ({detail})" if detail else "")
            + "; nothing of this change was saved; free some space and try again"
        )
        self.path = path


class DataDirectoryError(StoreError):
    """The data folder cannot be created or is not a folder (``OUTRIDER_HOME`` names a file, no permission)."""


@dataclass(frozen=True)
class CorruptionNotice:
    """The database file could not be used; it was moved aside and a new one created with what could be read.

    Shown to the user every time it happens (CLI: one stderr line; GUI: a banner). Never silent.

    Attributes:
        moved_to: where the file now lives (kept for recovery, never deleted by Outrider).
        reason: what was wrong with it (SQLite's words for a damaged file).
        recovered_conversations: conversations copied from the damaged file into the new database.
        recovered_messages: messages copied from the damaged file into the new database.
        problem: ``damaged`` (SQLite refused it), ``empty`` (0 bytes where a history was) or ``foreign``
            (an intact SQLite database of another application, moved aside unmodified).
    """

    moved_to: Path
    reason: str
    recovered_conversations: int = 0
    recovered_messages: int = 0
    problem: Literal["damaged", "empty", "foreign"] = "damaged"

    @property
    def message(self) -> str:
        if self.recovered_messages or self.recovered_conversations:
            outcome = (
                f"{self.recovered_messages} message(s) in {self.recovered_conversations} conversation(s) "
                "were recovered into a new history"
            )
        else:
            outcome = "no messages could be recovered; a new, empty history was started"
        if self.problem == "empty":
            return (
                "The chat history file was empty (0 bytes), so nothing in it could be recovered. "
                f"It was kept at {self.moved_to}; a new, empty history was started."
            )
        if self.problem == "foreign":
            return (
                "The chat history file was another application's database, not an Outrider history. "
                f"It was moved, unchanged, to {self.moved_to}; a new, empty history was started."
            )
        return (
            f"The chat history database was damaged ({self.reason}). "
            f"The damaged file was kept at {self.moved_to}; {outcome}."
        )
