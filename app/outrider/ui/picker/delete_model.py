"""Deleting a model file of Outrider's store from the picker, with the self-drafts made from it.

A self-draft is cut from one target's layers and is useless without it; its record in the store names the target's
sha256 (``ModelStore.self_drafts_of``). So deleting a target asks once, naming those drafts, with three answers:
delete the target and its self-drafts, the target only, or nothing. The look-up (it may hash the target once) and
the deletions run off the GUI thread; files outside the store are never deleted (``ModelStore.delete_model``
refuses them, and the On-disk tab offers Delete only for the store's files).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from outrider.catalogue.errors import UnsafePathError
from outrider.catalogue.store import ModelStore, SelfDraftRecord
from outrider.ui.bridges.tasks import QtTaskRunner
from outrider.ui.picker.on_disk_tab import OnDiskTab


def delete_box(parent: QWidget, path: Path, drafts: Sequence[SelfDraftRecord]) -> QMessageBox:
    """The question before deleting ``path``: Yes deletes it (and its self-drafts, when it has some), No deletes
    the model only (offered only with self-drafts), Cancel deletes nothing."""
    buttons = QMessageBox.StandardButton
    if drafts:
        names = "\n".join(f"  • {d.path.name} ({d.describe()})" for d in drafts)
        text = (f"Delete {path.name} from Outrider's store?\n\n{len(drafts)} self-draft(s) were made from it and "
                f"are useless without it:\n{names}")
        box = QMessageBox(QMessageBox.Icon.Question, "Delete this model and its self-drafts?", text, parent=parent)
        box.setStandardButtons(buttons.Yes | buttons.No | buttons.Cancel)
        box.button(buttons.Yes).setText("Delete it and its self-drafts")
        box.button(buttons.No).setText("Delete the model only")
    else:
        box = QMessageBox(QMessageBox.Icon.Question, "Delete this model?",
                          f"Delete {path.name} from Outrider's store?", parent=parent)
        box.setStandardButtons(buttons.Yes | buttons.Cancel)
        box.button(buttons.Yes).setText("Delete")
    box.setDefaultButton(buttons.Cancel)
    return box


def delete_files(store: ModelStore, paths: Sequence[Path]) -> list[Path]:
    """Delete each of ``paths`` from the store, in order; returns those deleted. Raises ``DeleteFailed`` (with
    what was deleted before the failure) at the first that cannot be."""
    deleted: list[Path] = []
    for path in paths:
        try:
            store.delete_model(path)
        except (UnsafePathError, OSError) as exc:
            raise DeleteFailed(path, exc, deleted) from exc
        deleted.append(path)
    return deleted


class DeleteFailed(Exception):
    """``path`` could not be deleted (``cause``); ``deleted`` were, before it."""

    def __init__(self, path: Path, cause: Exception, deleted: list[Path]) -> None:
        super().__init__(str(cause))
        self.path, self.cause, self.deleted = path, cause, deleted


def failure_words(exc: Exception) -> str:
    """A delete's failure in words (the UI boundary)."""
    if isinstance(exc, DeleteFailed):
        done = f" ({len(exc.deleted)} file(s) deleted before it)" if exc.deleted else ""
        if isinstance(exc.cause, UnsafePathError):
            return f"Not deleted: {exc.cause}{done}."
        reason = exc.cause.strerror if isinstance(exc.cause, OSError) and exc.cause.strerror else str(exc.cause)
        return f"Could not delete {exc.path.name}: {reason}{done}."
    return f"Could not delete: {exc}."


class ModelDeletion(QObject):
    """The On-disk tab's delete flow (see the module docstring).

    Signals:
        deleted(list): the paths deleted (the dialog rescans).
    """

    deleted = Signal(list)

    def __init__(self, store: ModelStore, runner: QtTaskRunner, tab: OnDiskTab, parent: QWidget) -> None:
        super().__init__(parent)
        self.store = store
        self._runner = runner
        self._tab = tab
        self._parent = parent
        tab.delete_requested.connect(self._on_tab_delete_requested)

    def _on_tab_delete_requested(self, path: str) -> None:
        self._tab.delete_button.setEnabled(False)
        self._tab.set_status(f"Looking for self-drafts made from {Path(path).name}…")
        self._runner.submit(lambda: self.store.self_drafts_of(Path(path)),
                            lambda drafts: self._ask(Path(path), drafts), self._on_failed)

    def _ask(self, path: Path, drafts: list[SelfDraftRecord]) -> None:
        answer = delete_box(self._parent, path, drafts).exec()
        buttons = QMessageBox.StandardButton
        if answer not in (buttons.Yes, buttons.No) or (answer == buttons.No and not drafts):
            self._tab.set_status("Nothing deleted.")
            self._tab.delete_button.setEnabled(True)
            return
        paths = [path, *(d.path for d in drafts)] if answer == buttons.Yes else [path]
        self._runner.submit(lambda: delete_files(self.store, paths), self._on_deleted, self._on_failed)

    def _on_deleted(self, paths: list[Path]) -> None:
        drafts = len(paths) - 1
        self._tab.set_status(f"Deleted {paths[0].name}" + (f" and {drafts} self-draft(s) made from it." if drafts
                                                            else "."))
        self.deleted.emit(paths)

    def _on_failed(self, exc: Exception) -> None:
        self._tab.set_status(failure_words(exc))
        self._tab.delete_button.setEnabled(True)
        if isinstance(exc, DeleteFailed) and exc.deleted:
            self.deleted.emit(exc.deleted)
