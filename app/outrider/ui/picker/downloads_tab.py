"""The Downloads tab of the pair picker: the table of downloads with progress bars, Pause / Resume / Cancel.

It only shows ``QtDownloadManager``'s model and sends it commands (``outrider.ui.bridges.download_manager``).
"""

from __future__ import annotations

from collections.abc import Sequence

import shiboken6
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionProgressBar,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from outrider.ui.bridges.download_manager import (
    DownloadColumn,
    DownloadItem,
    DownloadRole,
    DownloadState,
    QtDownloadManager,
)
from outrider.ui.picker.tables import row_table

Index = QModelIndex | QPersistentModelIndex
STATE_COLUMN_WIDTH = 160  # px: "downloading", "cancelling…", "failed: …" (elided; the reason is under the table)


class ProgressBarDelegate(QStyledItemDelegate):
    """Paints ``DownloadRole.Progress`` as a native progress bar (theme-aware, no custom colours)."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        fraction = index.data(DownloadRole.Progress)
        if not isinstance(fraction, float):
            super().paint(painter, option, index)
            return
        bar = QStyleOptionProgressBar()
        bar.rect = option.rect.adjusted(2, 2, -2, -2)
        bar.minimum = 0
        bar.maximum = 1000
        bar.progress = int(fraction * 1000)
        bar.text = str(index.data(Qt.ItemDataRole.DisplayRole))
        bar.textVisible = True
        bar.state = option.state
        style = option.widget.style() if option.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter)


class DownloadsView(QWidget):
    """The table of downloads with Pause / Resume / Cancel for the selected row (keyboard reachable), and under
    it, for a failed download, why in words (the whole message the narrow State column cuts)."""

    def __init__(self, manager: QtDownloadManager, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.manager = manager
        self.table = row_table(manager.model, "downloadsTable", self)
        self.table.setItemDelegateForColumn(DownloadColumn.Progress, ProgressBarDelegate(self.table))
        header = self.table.horizontalHeader()
        # Sized to their contents (the pair's name was cut at the default 100 px); the progress bar takes the
        # rest; the State of a failure (its whole reason) is elided, whole in the tooltip and under the table.
        for col in (DownloadColumn.Pair, DownloadColumn.Speed, DownloadColumn.Eta):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(DownloadColumn.Progress, QHeaderView.ResizeMode.Stretch)
        header.resizeSection(DownloadColumn.State, STATE_COLUMN_WIDTH)
        self.table.setWordWrap(False)
        self.table.setToolTip("Downloads run in their own processes; a paused download resumes where it stopped")
        self.pause_button = QPushButton("&Pause", self)
        self.pause_button.setToolTip("Stop the download and keep the partial file, to resume later")
        self.resume_button = QPushButton("Res&ume", self)
        self.resume_button.setToolTip("Continue from the partial file (HTTP Range)")
        self.cancel_button = QPushButton("Cance&l download", self)
        self.cancel_button.setToolTip("Stop the download and delete the partial file")
        buttons = QHBoxLayout()
        for b in (self.pause_button, self.resume_button, self.cancel_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        self.notice = QLabel("", self)
        self.notice.setObjectName("downloadsNotice")
        self.notice.setWordWrap(True)
        self.notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notice.hide()
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(self.notice)
        layout.addLayout(buttons)
        self.pause_button.clicked.connect(self._on_pause_button_clicked)
        self.resume_button.clicked.connect(self._on_resume_button_clicked)
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)
        self.table.selectionModel().selectionChanged.connect(self._update_buttons)
        manager.download_changed.connect(self._on_manager_download_changed)
        self._update_buttons()

    def select(self, pair_id: str) -> None:
        row = self.manager.model.row_of(pair_id)
        if row is not None:
            self.table.selectRow(row)

    def selected_item(self) -> DownloadItem | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        item = rows[0].data(DownloadRole.Item)
        return item if isinstance(item, DownloadItem) else None

    def _selected_ids(self) -> Sequence[str]:
        item = self.selected_item()
        return [] if item is None else [item.pair.id]

    def _on_pause_button_clicked(self) -> None:
        for pid in self._selected_ids():
            self.manager.pause(pid)

    def _on_resume_button_clicked(self) -> None:
        for pid in self._selected_ids():
            self.manager.resume(pid)

    def _on_cancel_button_clicked(self) -> None:
        for pid in self._selected_ids():
            self.manager.cancel(pid)

    def _on_manager_download_changed(self, pair_id: str) -> None:
        if not shiboken6.isValid(self):
            return
        if self.selected_item() is None:
            self.select(pair_id)
        self._update_buttons()

    def _update_buttons(self, *_args: object) -> None:
        item = self.selected_item()
        failed = item is not None and item.can_retry
        # A failed download offers Retry, never Pause (there is nothing running to pause).
        self.pause_button.setVisible(not failed)
        self.pause_button.setEnabled(item is not None and item.can_pause)
        self.resume_button.setText("Re&try" if failed else "Res&ume")
        self.resume_button.setToolTip("Download again, from the partial file when it is intact" if failed
                                      else "Continue from the partial file (HTTP Range)")
        self.resume_button.setEnabled(item is not None and (item.can_resume or item.can_retry))
        self.cancel_button.setEnabled(item is not None and item.can_cancel)
        self._update_notice(item)

    def _update_notice(self, item: DownloadItem | None) -> None:
        """Why the selected download failed (and whether Resume continues it); hidden otherwise."""
        if item is None or item.state is not DownloadState.FAILED:
            self.notice.hide()
            return
        after = (" Retry continues from the partial file." if item.can_resume
                 else " Retry downloads it again.")
        self.notice.setText(f"Could not download {item.pair.name}: {item.message.rstrip('.')}.{after}")
        self.notice.show()
