"""The pair picker dialog: choose a target + draft from the catalogue, download it, bring your own, or use what is
on disk.

Tabs (one widget each): **Catalogue** (``CatalogueTab``: installed / downloadable / incompatible, sizes, memory
needed vs free, licence and gated flag, published speed-up with its source), **Downloads** (``DownloadsView``:
progress, speed, ETA, pause / resume / cancel), **Add my own pair** (``OwnPairTab``: two local GGUFs, or one with
prompt lookup: the header-only compatibility check explains a mismatch before anything loads) and **On disk**
(``OnDiskTab``: GGUFs found by discovery). The dialog owns the models, the scan and the wiring between the tabs.

Everything that touches the disk runs on the dialog's ``QtTaskRunner`` thread; downloads run in child processes.
The dialog emits ``pair_chosen(PairChoice)`` and leaves loading to its caller.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QMessageBox, QTabWidget, QVBoxLayout, QWidget

from outrider.catalogue import DownloadError
from outrider.catalogue.memory import Fit, MemoryInfo, describe_memory, format_bytes
from outrider.catalogue.service import CatalogueService, PairRow, PairStatus, ScanResult
from outrider.ui.bridges.download_manager import DownloadState, QtDownloadManager
from outrider.ui.bridges.tasks import QtTaskRunner
from outrider.ui.models.catalogue_model import CatalogueFilterProxy, CatalogueModel, FoundFilesModel
from outrider.ui.picker.catalogue_tab import CatalogueTab
from outrider.ui.picker.choice import PairChoice
from outrider.ui.picker.delete_model import ModelDeletion
from outrider.ui.picker.downloads_tab import DownloadsView
from outrider.ui.picker.on_disk_tab import OnDiskTab
from outrider.ui.picker.own_pair_tab import OwnPairTab
from outrider.ui.picker.self_draft_panel import PromptSource


def _failed_row(r: PairRow, message: str) -> PairRow:
    """``r`` as the catalogue shows it after its download failed: State "download failed", why in its tooltip."""
    return dataclasses.replace(r, status=PairStatus.FAILED, progress=None,
                               reason=f"download failed: {message.rstrip('.')}")


# Download states during which a catalogue row reads "downloading N%".
_IN_FLIGHT = frozenset({DownloadState.STARTING, DownloadState.RUNNING, DownloadState.VERIFYING,
                        DownloadState.PAUSING, DownloadState.CANCELLING})


class PairPickerDialog(QDialog):
    """Choose, download or bring a target + draft pair.

    Signals:
        pair_chosen(object): the ``PairChoice`` the user confirmed (the dialog then closes with Accepted).
        scan_finished(): a rescan (discovery, pair states, memory) has been applied to the models.
        own_pair_checked(object): the ``OwnPairReport`` of an own pair, or an error message (str).

    Attributes:
        service: the ``CatalogueService``.
        catalogue_model / proxy: the catalogue rows and the filtered, sorted view of them.
        found_model: GGUFs found on disk.
        downloads: the ``QtDownloadManager`` (passed in to let downloads outlive the dialog).
        catalogue_tab / downloads_view / own_tab / on_disk_tab: the four tabs; their main widgets are also
            attributes of the dialog (``table``, ``use_button``, ``target_edit``, ``found_table``…).
    """

    pair_chosen = Signal(object)
    scan_finished = Signal()
    own_pair_checked = Signal(object)

    def __init__(self, catalogue_service: CatalogueService, parent: QWidget | None = None, *,
                 downloads: QtDownloadManager | None = None,
                 calibration_prompts: PromptSource | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Choose a pair — Outrider")
        self.resize(980, 560)
        self.service = catalogue_service
        self._runner = QtTaskRunner("outrider-picker", self)
        self._owns_downloads = downloads is None
        self.downloads = downloads or QtDownloadManager(catalogue_service, self)
        self.catalogue_model = CatalogueModel(self)
        self.proxy = CatalogueFilterProxy(self)
        self.proxy.setSourceModel(self.catalogue_model)
        self.found_model = FoundFilesModel(self)
        self._scanning = False
        self._rescan_again = False

        self.memory_label = QLabel("Measuring memory…", self)
        self.memory_label.setToolTip("Free memory now; each pair's estimate is compared with it")
        self.tabs = QTabWidget(self)
        self.catalogue_tab = CatalogueTab(self.catalogue_model, self.proxy, self)
        self.tabs.addTab(self.catalogue_tab, "&Catalogue")
        self.downloads_view = DownloadsView(self.downloads, self)
        self.tabs.addTab(self.downloads_view, "&Downloads")
        self.own_tab = OwnPairTab(catalogue_service, self._runner, lambda: self.catalogue_model.memory, self,
                                  calibration_prompts=calibration_prompts)
        self.tabs.addTab(self.own_tab, "Add my &own pair")
        self.on_disk_tab = OnDiskTab(self.found_model, self)
        self.tabs.addTab(self.on_disk_tab, "On dis&k")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.memory_label)
        layout.addWidget(self.tabs)
        layout.addWidget(buttons)
        self._expose_tab_widgets()

        self.catalogue_tab.chosen.connect(self._choose)
        self.catalogue_tab.download_requested.connect(self._on_catalogue_tab_download_requested)
        self.catalogue_tab.rescan_requested.connect(self.refresh)
        self.own_tab.chosen.connect(self._choose)
        self.own_tab.checked.connect(self.own_pair_checked)
        self.on_disk_tab.use_as_target.connect(self._on_on_disk_tab_use_as_target)
        self.on_disk_tab.use_as_draft.connect(self._on_on_disk_tab_use_as_draft)
        self.on_disk_tab.folder_added.connect(self.add_folder)
        self.deletion = ModelDeletion(catalogue_service.store, self._runner, self.on_disk_tab, self)
        self.deletion.deleted.connect(lambda _paths: self.refresh())
        self.downloads.download_changed.connect(self._on_downloads_download_changed)
        self.downloads.download_finished.connect(self._on_downloads_download_finished)
        self.downloads.download_failed.connect(self._on_downloads_download_failed)
        self.downloads.download_paused.connect(self._on_downloads_download_stopped)
        self.downloads.download_cancelled.connect(self._on_downloads_download_stopped)
        self.refresh()

    def _expose_tab_widgets(self) -> None:
        """The tabs' main widgets as attributes of the dialog (callers and tests drive the dialog as one)."""
        c, o, d = self.catalogue_tab, self.own_tab, self.on_disk_tab
        self.filter_edit, self.status_combo = c.filter_edit, c.status_combo
        self.table, self.details = c.table, c.details
        self.download_button, self.use_button, self.rescan_button = c.download_button, c.use_button, c.rescan_button
        self.target_edit, self.target_browse, self.draft_edit, self.draft_browse = (o.target_edit, o.target_browse,
                                                                                    o.draft_edit, o.draft_browse)
        self.lookup_check, self.ctx_spin, self.check_button = o.lookup_check, o.ctx_spin, o.check_button
        self.own_result, self.own_use_button = o.own_result, o.own_use_button
        self.found_table, self.as_target_button, self.as_draft_button, self.add_folder_button = (
            d.found_table, d.as_target_button, d.as_draft_button, d.add_folder_button)

    # ============================================================================================ scanning ==
    def refresh(self) -> None:
        """Rescan (off the GUI thread): discovery, pair states, memory. ``scan_finished`` when applied."""
        if self._scanning:
            self._rescan_again = True
            return
        self._scanning = True
        self.catalogue_tab.set_scanning(True)
        self._runner.submit(self.service.scan, self._on_scan_result, self._on_scan_error)

    def _on_scan_result(self, result: ScanResult) -> None:
        selected = self.selected_row()
        active = {it.pair.id: it for it in self.downloads.model.items}
        rows = []
        for r in result.rows:
            it = active.get(r.pair.id)
            if it is not None and it.state not in (DownloadState.DONE, DownloadState.CANCELLED,
                                                   DownloadState.FAILED, DownloadState.PAUSED):
                r = dataclasses.replace(r, status=PairStatus.DOWNLOADING, progress=it.fraction)
            elif it is not None and it.state is DownloadState.FAILED and not r.usable:
                r = _failed_row(r, it.message)
            rows.append(r)
        self.catalogue_model.set_rows(rows, result.memory)
        self.found_model.set_files(result.found)
        self.memory_label.setText(result.memory.describe())
        if selected is not None:
            self.select_pair(selected.pair.id)
        self._scan_done()

    def _on_scan_error(self, exc: BaseException) -> None:
        self.memory_label.setText(f"Could not look for models on disk: {exc}")
        self._scan_done()

    def _scan_done(self) -> None:
        self._scanning = False
        self.catalogue_tab.set_scanning(False)
        self.catalogue_tab.update_buttons()
        self.scan_finished.emit()
        if self._rescan_again:
            self._rescan_again = False
            self.refresh()

    # ============================================================================================ catalogue ==
    def select_pair(self, pair_id: str) -> bool:
        """Select ``pair_id`` in the catalogue table (if it passes the filters)."""
        return self.catalogue_tab.select_pair(pair_id)

    def selected_row(self) -> PairRow | None:
        return self.catalogue_tab.selected_row()

    def _on_catalogue_tab_download_requested(self, pair_id: str) -> None:
        """The Download button: a pair too big for this machine is downloaded only after the user confirms."""
        r = self.catalogue_model.pair_row(pair_id)
        if r is None:
            return
        if r.fit is Fit.TOO_BIG and not self.confirm_too_big(r):
            self.catalogue_tab.show_notice(f"Not downloaded: {r.pair.name} needs more memory than is free here.")
            return
        self.download_pair(pair_id)

    def too_big_box(self, r: PairRow) -> QMessageBox:
        """The question asked before downloading a pair marked too big (No is the default)."""
        box = QMessageBox(QMessageBox.Icon.Warning, "Download a pair too big for this machine?",
                          f"{r.pair.name} is {format_bytes(r.pair.size)} to download, and it is too big for this "
                          "machine: it will not load, or it will run very slowly, swapping.", parent=self)
        box.setInformativeText(f"{describe_memory(r.memory, self.catalogue_model.memory)}\n\n"
                               "Download it anyway (for another machine, or after freeing memory)?")
        box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        box.setDefaultButton(QMessageBox.StandardButton.No)
        box.button(QMessageBox.StandardButton.Yes).setText(f"Download {format_bytes(r.pair.size)}")
        box.button(QMessageBox.StandardButton.No).setText("Don't download")
        box.setObjectName("tooBigBox")
        return box

    def confirm_too_big(self, r: PairRow) -> bool:
        return self.too_big_box(r).exec() == QMessageBox.StandardButton.Yes

    def download_pair(self, pair_id: str) -> None:
        """Start or resume the download of a catalogue pair (progress in the Downloads tab); no confirmation."""
        r = self.catalogue_model.pair_row(pair_id)
        if r is None:
            return
        self.catalogue_tab.show_notice("")
        self.downloads.start(r.pair)
        self.downloads_view.select(pair_id)

    def _on_downloads_download_changed(self, pair_id: str) -> None:
        it = self.downloads.model.item(pair_id)
        if it is not None and it.state in _IN_FLIGHT:
            self.catalogue_model.update_row(pair_id, status=PairStatus.DOWNLOADING, progress=it.fraction)
            self.catalogue_tab.update_buttons()

    def _on_downloads_download_finished(self, _pair_id: str) -> None:
        self.refresh()

    def _on_downloads_download_stopped(self, _pair_id: str) -> None:
        self.refresh()

    def _on_downloads_download_failed(self, pair_id: str, exc: object) -> None:
        msg = exc.message if isinstance(exc, DownloadError) else "an internal error (details in the log)"
        r = self.catalogue_model.pair_row(pair_id)
        if r is not None and not r.usable:
            self.catalogue_model.update_row(pair_id, status=PairStatus.FAILED, progress=None,
                                            reason=f"download failed: {msg}")
        self.catalogue_tab.update_buttons()
        r = self.catalogue_model.pair_row(pair_id)
        self.catalogue_tab.show_notice(f"Could not download {r.pair.name if r else pair_id}: {msg}", error=True)
        self.refresh()

    def _choose(self, choice: PairChoice) -> None:
        self.pair_chosen.emit(choice)
        self.accept()

    # ============================================================================================= own pair ==
    def set_own_pair(self, target: str | Path, draft: str | Path | None) -> None:
        """Fill the 'Add my own pair' fields (``draft=None``: prompt lookup) and run the check."""
        self.tabs.setCurrentWidget(self.own_tab)
        self.own_tab.set_pair(target, draft)

    def check_own_pair(self) -> None:
        """Header-only compatibility and memory estimate of the own pair (off the GUI thread)."""
        self.own_tab.check()

    def _on_on_disk_tab_use_as_target(self, path: str) -> None:
        self.tabs.setCurrentWidget(self.own_tab)
        self.own_tab.set_target(path)

    def _on_on_disk_tab_use_as_draft(self, path: str) -> None:
        self.tabs.setCurrentWidget(self.own_tab)
        self.own_tab.set_draft(path)

    # ============================================================================================== on disk ==
    def add_folder(self, folder: Path) -> None:
        """Remember ``folder`` for discovery and rescan."""
        self._runner.submit(lambda: self.service.store.add_folder(folder), lambda _r: self.refresh(),
                            lambda exc: self.memory_label.setText(f"Could not add {folder}: {exc}"))

    # ============================================================================================ lifecycle ==
    @property
    def memory(self) -> MemoryInfo:
        return self.catalogue_model.memory

    def done(self, result: int) -> None:
        self._shutdown()
        super().done(result)

    def closeEvent(self, event: QCloseEvent) -> None:
        self._shutdown()
        super().closeEvent(event)

    def _shutdown(self) -> None:
        """Wait for running checks; downloads this dialog owns are paused (their partial files are kept); a
        self-draft being built is cancelled (nothing is kept)."""
        self.own_tab.self_draft.shutdown()
        self._runner.close(cancel_pending=True)
        if self._owns_downloads:
            self.downloads.shutdown()
