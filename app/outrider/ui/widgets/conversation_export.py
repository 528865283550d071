"""Export a conversation from the GUI: the same Markdown or JSON document as ``outrider chats export``; and import
a JSON export back (``outrider chats import``).

The document is rendered by the history store (``HistoryStore.export_conversation``: ``exchange.render``, the
formatter the command line uses) and written atomically on the store's thread, so a long conversation never
freezes the window and a failed write leaves no half file. The format follows the file name (``.json`` → JSON,
``.md``/``.markdown`` → Markdown) or, without a known suffix, the filter chosen in the save dialog (the suffix is
then added). Failures come back in words (``export_error_text``), never as a traceback.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

from outrider.history import (
    ConversationNotFoundError,
    ExportFormat,
    ImportFormatError,
    ImportResult,
    RecordUnreadableError,
    StoreError,
)
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.chat_controller import NoticeScope

ACTION_EXPORT = "export_conversation"
ACTION_EXPORT_ALL = "export_all_conversations"
ACTION_IMPORT = "import_conversations"
MARKDOWN_FILTER = "Markdown (*.md)"
JSON_FILTER = "JSON (*.json)"
FILTER_FORMATS = {MARKDOWN_FILTER: ExportFormat.MARKDOWN, JSON_FILTER: ExportFormat.JSON}
SUFFIX_FORMATS = {".md": ExportFormat.MARKDOWN, ".markdown": ExportFormat.MARKDOWN, ".json": ExportFormat.JSON}


def export_target(path: str | Path, selected_filter: str = "") -> tuple[Path, ExportFormat]:
    """Where to write and in which format: the file's suffix decides; without a known one the dialog's filter
    does (Markdown by default) and its suffix is appended."""
    p = Path(path)
    fmt = SUFFIX_FORMATS.get(p.suffix.lower())
    if fmt is not None:
        return p, fmt
    fmt = FILTER_FORMATS.get(selected_filter, ExportFormat.MARKDOWN)
    return p.with_name(f"{p.name}.{fmt.value}"), fmt


def suggested_file_name(title: str, fmt: ExportFormat = ExportFormat.MARKDOWN) -> str:
    """A file name from a conversation title: letters, digits, '-' and '_' only (``Regex help`` → ``Regex-help.md``)."""
    stem = re.sub(r"[^\w-]+", "-", title, flags=re.UNICODE).strip("-_")[:80] or "conversation"
    return f"{stem}.{fmt.value}"


def export_error_text(exc: BaseException, path: Path, conversation_id: int | None = None) -> str:
    """A failed export in words (the UI boundary: typed errors become sentences here); ``conversation_id`` (None:
    all conversations) lets an unreadable record point to the command that saves it as stored."""
    if isinstance(exc, ConversationNotFoundError):
        return "Not exported: the conversation no longer exists (deleted?)."
    if isinstance(exc, RecordUnreadableError):
        raw = f"outrider chats export {conversation_id} --raw" if conversation_id is not None else \
            "outrider chats export ID --raw"
        return (f"Not exported: {exc.kind} {exc.record_id} of the history could not be read ({exc.reason}); "
                f"`{raw}` saves it exactly as stored.")
    if isinstance(exc, OSError):
        blocking = next((d for d in path.parents if d.exists() and not d.is_dir()), None)
        if blocking is not None:
            return f"Not exported: {blocking} is a file, not a folder."
        if exc.errno == errno.ENOSPC:
            return f"Not exported: the disk is full ({path.parent})."
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return f"Not exported: no permission to write in {path.parent}."
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"Not exported: the folder {path.parent} does not exist."
        if exc.errno == errno.EISDIR:
            return f"Not exported: {path} is a folder; choose a file name."
        return f"Not exported: cannot write {path} ({exc.strerror or type(exc).__name__})."
    if isinstance(exc, StoreError):
        return f"Not exported: the history could not be read ({exc})."
    return f"Not exported: {exc}"


class ConversationExporter(QObject):
    """Writes conversations to files on the store's thread.

    Signals:
        exported(str): the path written.
        exported_all(str, int): the path written by ``export_all`` and how many unreadable conversations were left
            out of it.
        failed(str): why nothing was written, in words.
    """

    exported = Signal(str)
    exported_all = Signal(str, int)
    failed = Signal(str)

    def __init__(self, store: QtStoreBridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store

    def export(self, conversation_id: int, path: str | Path, fmt: ExportFormat) -> None:
        """Render and write (atomically) on the store thread; ``exported`` or ``failed`` on the GUI thread."""
        target = Path(path)
        self.store.submit(lambda s: s.export_conversation(conversation_id, target, fmt),
                          lambda _result: self.exported.emit(str(target)),
                          on_error=lambda exc: self.failed.emit(export_error_text(exc, target, conversation_id)))

    def export_all(self, path: str | Path, fmt: ExportFormat) -> None:
        """Every readable conversation in one document (as ``outrider chats export all``), on the store thread;
        ``exported_all`` (with the number of unreadable ones left out) or ``failed``."""
        target = Path(path)
        self.store.submit(lambda s: len(s.export_all(target, fmt)),
                          lambda skipped: self.exported_all.emit(str(target), int(skipped)),
                          on_error=lambda exc: self.failed.emit(export_error_text(exc, target)))

    def ask_and_export(self, parent: QWidget | None, conversation_id: int | None, title: str) -> bool:
        """Ask where to save (a save dialog, Markdown or JSON) and export ``conversation_id`` (None: every
        conversation); False when the user cancelled."""
        caption = "Export conversation" if conversation_id is not None else "Export all conversations"
        chosen, selected = QFileDialog.getSaveFileName(
            parent, caption, str(Path.home() / suggested_file_name(title)),
            f"{MARKDOWN_FILTER};;{JSON_FILTER}", MARKDOWN_FILTER)
        if not chosen:
            return False
        path, fmt = export_target(chosen, selected)
        if conversation_id is None:
            self.export_all(path, fmt)
        else:
            self.export(conversation_id, path, fmt)
        return True


def import_result_text(path: str, result: ImportResult) -> str:
    """The notice after an import: how many conversations came in and how many were there already."""
    n = len(result.imported)
    text = f"Imported {n} conversation{'' if n == 1 else 's'} from {path}"
    if result.skipped:
        text += f"; {result.skipped} {'was' if result.skipped == 1 else 'were'} already here (skipped)"
    return text


# Why an import failed, by the first matching type: {path} and {name} are the file, {exc} the error, {reason} the
# system's words for an OSError.
_IMPORT_ERRORS: tuple[tuple[type[BaseException], str], ...] = (
    (ImportFormatError, "{name} is not an Outrider export ({exc}); nothing was changed"),
    (FileNotFoundError, "{path} does not exist"),
    (IsADirectoryError, "{path} is a folder"),
    (PermissionError, "no permission to read {path}"),
    (OSError, "cannot read {path} ({reason})"),
    (StoreError, "the history could not be written ({exc}); nothing was changed"),
)


def import_error_text(exc: BaseException, path: Path) -> str:
    """A failed import in words; nothing was imported (the document is checked before anything is written)."""
    template = next((t for cls, t in _IMPORT_ERRORS if isinstance(exc, cls)), "{exc}")
    reason = (getattr(exc, "strerror", None) or "input/output error").lower()
    return "Not imported: " + template.format(path=path, name=path.name, exc=exc, reason=reason) + "."


def all_exported_text(path: str, skipped: int) -> str:
    """The notice after "Export all conversations…"."""
    if not skipped:
        return f"All conversations exported to {path}"
    return (f"Conversations exported to {path}; {skipped} could not be read and {'was' if skipped == 1 else 'were'} "
            "left out (`outrider chats export ID --raw` saves one as stored)")


def add_export_action(window: Any, menu: QMenu) -> QAction:
    """Add "Export conversation…" (Ctrl+Shift+E), "Export all conversations…" and "Import conversations…" to
    ``menu`` of the main ``window`` and answer the conversation list's Export (its context menu). Export
    conversation saves the one selected in the list, else the open one; results are shown with
    ``window.show_notice``. Uses the window's ``store``, ``controller``, ``conversations``, ``list_model`` and
    ``actions_by_id``; returns the first action."""
    exporter = ConversationExporter(window.store, window)
    window.exporter = exporter
    exporter.exported.connect(lambda path: window.show_notice(f"Conversation exported to {path}", NoticeScope.CHAT))
    exporter.exported_all.connect(lambda path, skipped: window.show_notice(all_exported_text(path, skipped)))
    exporter.failed.connect(window.show_notice)

    def title_of(conversation_id: int) -> str:
        for row in window.list_model.rows():
            if row.id == conversation_id:
                return str(row.title)
        return "conversation"

    def export_one(conversation_id: int) -> None:
        exporter.ask_and_export(window, conversation_id, title_of(conversation_id))

    def export_current() -> None:
        cid = window.conversations.selected_id() or window.controller.conversation_id
        if cid is None:
            window.show_notice("Nothing to export yet: open or start a conversation first.", NoticeScope.CHAT)
            return
        export_one(cid)

    action = QAction("&Export conversation…", window)
    action.setObjectName(ACTION_EXPORT)
    action.setShortcut(QKeySequence("Ctrl+Shift+E"))
    action.setToolTip("Save the conversation as Markdown or JSON (the same as `outrider chats export`)")
    action.triggered.connect(export_current)
    window.conversations.export_requested.connect(export_one)
    window.actions_by_id[ACTION_EXPORT] = action
    menu.addAction(action)

    def export_all() -> None:
        if not window.store.conversations():
            window.show_notice("Nothing to export yet: there is no conversation.")
            return
        exporter.ask_and_export(window, None, "conversations")

    def import_file() -> None:
        chosen, _selected = QFileDialog.getOpenFileName(window, "Import conversations", str(Path.home()),
                                                        f"{JSON_FILTER};;All files (*)", JSON_FILTER)
        if not chosen:
            return
        path = Path(chosen)
        window.store.submit(lambda s: s.import_json(path),
                            lambda result: window.show_notice(import_result_text(str(path), result)),
                            notify=True, on_error=lambda exc: window.show_notice(import_error_text(exc, path)))

    bring = QAction("&Import conversations…", window)
    bring.setObjectName(ACTION_IMPORT)
    bring.setToolTip("Add the conversations of a JSON export (as `outrider chats import`); ones already here are "
                     "skipped")
    bring.triggered.connect(import_file)
    window.actions_by_id[ACTION_IMPORT] = bring

    every = QAction("Export &all conversations…", window)
    every.setObjectName(ACTION_EXPORT_ALL)
    every.setToolTip("Save every conversation in one Markdown or JSON file (as `outrider chats export all`)")
    every.triggered.connect(export_all)
    window.actions_by_id[ACTION_EXPORT_ALL] = every
    menu.addAction(every)
    menu.addAction(bring)
    return action
