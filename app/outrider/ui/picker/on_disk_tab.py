"""The "On disk" tab of the pair picker: GGUF files discovery found, to use as the target or draft of an own pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from outrider.catalogue.discovery import FoundFile
from outrider.ui.models.catalogue_model import FoundFilesModel, FoundRole
from outrider.ui.picker.tables import row_table

NOTHING_FOUND_TEXT = ("No GGUF model found on this computer. Outrider looked in the Hugging Face cache, LM Studio's "
                      "and Ollama's model folders, the folders you added and its own downloads; the offline demo model "
                      "is not installed either (the set-up installs it: make run). Download a pair in the Catalogue "
                      "tab, or add a folder that holds GGUF files.")


class OnDiskTab(QWidget):
    """The table of found files; Use as target / Use as draft / Add folder / Delete (a file of the store).

    Signals:
        use_as_target(str): the path of the selected file, for the own pair's target.
        use_as_draft(str): the path of the selected file, for the own pair's draft.
        folder_added(object): a folder (``Path``) the user chose to search for GGUF files as well.
        delete_requested(str): the path of the selected file of Outrider's store, to delete (the dialog asks
            first, and offers to delete the self-drafts made from it).
    """

    use_as_target = Signal(str)
    use_as_draft = Signal(str)
    folder_added = Signal(object)
    delete_requested = Signal(str)

    def __init__(self, model: FoundFilesModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        intro = QLabel("GGUF files already on this computer: the Hugging Face cache, LM Studio, Ollama, your "
                       "folders and Outrider's store.", self)
        intro.setWordWrap(True)
        self.found_table = row_table(model, "foundTable", self)
        self.found_table.horizontalHeader().setStretchLastSection(True)
        self.empty_label = QLabel(NOTHING_FOUND_TEXT, self)
        self.empty_label.setObjectName("onDiskEmpty")
        self.empty_label.setWordWrap(True)
        self.model = model
        self.as_target_button = QPushButton("Use as &target", self)
        self.as_target_button.setToolTip("Put this file in 'Add my own pair' as the target")
        self.as_draft_button = QPushButton("Use as dr&aft", self)
        self.as_draft_button.setToolTip("Put this file in 'Add my own pair' as the draft")
        self.add_folder_button = QPushButton("Add &folder…", self)
        self.add_folder_button.setToolTip("Also look for GGUF files in a folder of yours (remembered)")
        self.delete_button = QPushButton("De&lete…", self)
        self.delete_button.setToolTip("Delete this file from Outrider's store (and, if you say so, the self-drafts "
                                      "made from it); files elsewhere are never deleted")
        self.status_label = QLabel("", self)
        self.status_label.setObjectName("onDiskStatus")
        self.status_label.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.add_folder_button)
        row.addWidget(self.delete_button)
        row.addStretch(1)
        row.addWidget(self.as_target_button)
        row.addWidget(self.as_draft_button)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.empty_label)
        layout.addWidget(self.found_table, 1)
        layout.addWidget(self.status_label)
        layout.addLayout(row)
        for signal in (model.modelReset, model.rowsInserted, model.rowsRemoved):
            signal.connect(self._update_empty_label)
        self._update_empty_label()
        self.as_target_button.clicked.connect(self._on_as_target_button_clicked)
        self.as_draft_button.clicked.connect(self._on_as_draft_button_clicked)
        self.add_folder_button.clicked.connect(self._on_add_folder_button_clicked)
        self.delete_button.clicked.connect(self._on_delete_button_clicked)
        self.found_table.selectionModel().selectionChanged.connect(self._update_delete_button)
        for signal in (model.modelReset, model.rowsInserted, model.rowsRemoved):
            signal.connect(self._update_delete_button)
        self._update_delete_button()

    def _update_empty_label(self) -> None:
        """Say why the table is empty, in place of an empty grid; hidden when something was found."""
        empty = self.model.rowCount() == 0
        self.empty_label.setVisible(empty)
        self.found_table.setVisible(not empty)
        if not empty:
            self.found_table.resizeColumnsToContents()  # whole names; the path column stretches to the edge
        self.as_target_button.setEnabled(not empty)
        self.as_draft_button.setEnabled(not empty)

    def _update_delete_button(self) -> None:
        """Deleting is offered for a file of Outrider's own store only (it never deletes the user's files)."""
        found = self.selected_file()
        self.delete_button.setEnabled(found is not None and found.source == "store")

    def selected_file(self) -> FoundFile | None:
        rows = self.found_table.selectionModel().selectedRows()
        value: Any = rows[0].data(FoundRole.File) if rows else None
        return value if isinstance(value, FoundFile) else None

    def select_path(self, path: str) -> bool:
        """Select the row of ``path``; False when it is not listed."""
        for row in range(self.model.rowCount()):
            index = self.model.index(row, 0)
            if index.data(FoundRole.Path) == path:
                self.found_table.selectRow(row)
                return True
        return False

    def set_status(self, text: str) -> None:
        """What the last delete did (or why it did not)."""
        self.status_label.setText(text)

    def selected_path(self) -> str | None:
        rows = self.found_table.selectionModel().selectedRows()
        if not rows:
            return None
        value: Any = rows[0].data(FoundRole.Path)
        return value if isinstance(value, str) else None

    def _on_as_target_button_clicked(self) -> None:
        path = self.selected_path()
        if path:
            self.use_as_target.emit(path)

    def _on_as_draft_button_clicked(self) -> None:
        path = self.selected_path()
        if path:
            self.use_as_draft.emit(path)

    def _on_delete_button_clicked(self) -> None:
        found = self.selected_file()
        if found is not None and found.source == "store":
            self.delete_requested.emit(str(found.path))

    def _on_add_folder_button_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder with GGUF models")
        if folder:
            self.folder_added.emit(Path(folder))
