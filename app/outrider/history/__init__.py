"""Crash-safe chat history (SQLite, no Qt). See ``docs/history.md`` for the schema and the guarantees."""

from __future__ import annotations

from outrider.history.checkpoint import ReplyCheckpointer, ReplyWriter
from outrider.history.connection import DB_FILENAME, connect, connection_settings
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
    StoreLockedError,
    StoreReadOnlyError,
)
from outrider.history.exchange import ExportFormat
from outrider.history.models import (
    UNREADABLE_LABEL,
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
from outrider.history.provenance import decode_runs, with_runs
from outrider.history.salvage import SalvageResult
from outrider.history.schema import CURRENT_VERSION
from outrider.history.store import HistoryStore

__all__ = [
    "CURRENT_VERSION",
    "DB_FILENAME",
    "UNREADABLE_LABEL",
    "Conversation",
    "ConversationNotFoundError",
    "ConversationSummary",
    "CorruptionNotice",
    "DataDirectoryError",
    "DiskFullError",
    "ExportFormat",
    "HistoryStore",
    "ImportFormatError",
    "ImportResult",
    "Message",
    "MessageNotFoundError",
    "MessageStatus",
    "MigrationError",
    "RecordUnreadableError",
    "ReplyCheckpointer",
    "ReplyNotStreamingError",
    "ReplyStats",
    "ReplyStatsRow",
    "ReplyWriter",
    "Role",
    "SalvageResult",
    "SchemaTooNewError",
    "SearchHit",
    "StoreError",
    "StoreLockedError",
    "StoreReadOnlyError",
    "UnreadableRecord",
    "connect",
    "connection_settings",
    "decode_runs",
    "with_runs",
]
