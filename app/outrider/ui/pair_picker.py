"""The pair picker: choose a target + draft from the catalogue, download it, bring your own, or use what is on disk.

Tabs: **Catalogue** (installed / downloadable / incompatible, sizes, memory needed vs free, licence and gated
flag, published speed-up with its source), **Downloads** (progress, speed, ETA, pause / resume / cancel),
**Add my own pair** (two local GGUFs, or one with prompt lookup: the header-only compatibility check explains a
mismatch before anything loads) and **On disk** (GGUFs found by discovery).

Everything that touches the disk runs on a ``TaskRunner`` thread; downloads run in child processes. The dialog
emits ``pair_chosen(PairChoice)`` and leaves loading to its caller.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from outrider.catalogue import DownloadError, DraftSettings
from outrider.engine.gguf_header import GGUFHeaderError
from outrider.ui.catalogue_model import (
    CatalogueColumn,
    CatalogueFilterProxy,
    CatalogueModel,
    CatalogueRole,
    CatalogueService,
    FoundFilesModel,
    FoundRole,
    MemoryInfo,
    OwnPairReport,
    PairRow,
    PairStatus,
    ScanResult,
    TaskRunner,
    describe_memory,
    format_bytes,
)
from outrider.ui.downloads_view import DownloadState, DownloadsView, QtDownloadManager
from outrider.worker import protocol

AUTO_DRAFT = DraftSettings("auto", 0, 0.0)
GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"

# Filter choices of the catalogue tab: label → statuses (None = every pair).
STATUS_FILTERS: tuple[tuple[str, frozenset[PairStatus] | None], ...] = (
    ("All pairs", None),
    ("Installed", frozenset({PairStatus.INSTALLED, PairStatus.ON_DISK})),
    ("Downloadable", frozenset({PairStatus.DOWNLOADABLE, PairStatus.PAUSED, PairStatus.DOWNLOADING})),
    ("Incompatible or unavailable", frozenset({PairStatus.INCOMPATIBLE, PairStatus.UNAVAILABLE})),
)


@dataclasses.dataclass(frozen=True)
class PairChoice:
    """What the user picked: a catalogue pair, or their own files. ``draft`` is None with prompt lookup.

    Attributes:
        target: the target GGUF.
        draft: the draft GGUF, or None (prompt lookup).
        lookup: draft by prompt lookup (n-grams) instead of a model.
        pair_id: the catalogue pair's id, None for an own pair.
        name: what to show.
        settings: the recommended draft settings (catalogue), or automatic k for an own pair.
        n_ctx: the context size to load with (the pair's default, or the one chosen in the picker).
    """

    target: Path
    draft: Path | None
    lookup: bool
    pair_id: str | None
    name: str
    settings: DraftSettings = AUTO_DRAFT
    n_ctx: int = 4096

    @classmethod
    def from_row(cls, row: PairRow) -> PairChoice:
        target = row.state.target_path
        if target is None:
            raise ValueError(f"{row.pair.id} is not on disk")
        draft = row.state.draft_path
        return cls(target, draft, draft is None, row.pair.id, row.pair.name, row.pair.settings,
                   row.pair.default_context)

    @classmethod
    def own(cls, target: Path, draft: Path | None, n_ctx: int = 4096) -> PairChoice:
        name = f"{target.stem} + {draft.stem}" if draft is not None else f"{target.stem} + prompt lookup"
        return cls(Path(target), None if draft is None else Path(draft), draft is None, None, name, AUTO_DRAFT,
                   n_ctx)

    def to_spec(self) -> protocol.PairSpec:
        """The engine's load request (default GPU layers and threads; the settings panel may replace them)."""
        return protocol.PairSpec(target=str(self.target), draft=None if self.draft is None else str(self.draft),
                                 lookup=self.lookup, context=protocol.ContextSettings(n_ctx=self.n_ctx))

    def draft_params(self) -> protocol.DraftParams:
        """The recommended draft settings as the engine's DraftParams (``"auto"`` → automatic k)."""
        dm = self.settings.draft_max
        if isinstance(dm, int):
            return protocol.DraftParams(k=dm, k_max=max(dm, 1), draft_min=self.settings.draft_min,
                                        p_min=self.settings.p_min)
        return protocol.DraftParams(k=None, draft_min=self.settings.draft_min, p_min=self.settings.p_min)


def _explain_header_error(path: str, exc: GGUFHeaderError | OSError) -> str:
    return f"{Path(path).name}: {exc}"


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
    """

    pair_chosen = Signal(object)
    scan_finished = Signal()
    own_pair_checked = Signal(object)

    def __init__(self, catalogue_service: CatalogueService, parent: QWidget | None = None, *,
                 downloads: QtDownloadManager | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Choose a pair — Outrider")
        self.resize(980, 560)
        self.service = catalogue_service
        self._runner = TaskRunner(self, max_workers=1, name="outrider-picker")
        self._owns_downloads = downloads is None
        self.downloads = downloads or QtDownloadManager(catalogue_service, self)
        self.catalogue_model = CatalogueModel(self)
        self.proxy = CatalogueFilterProxy(self)
        self.proxy.setSourceModel(self.catalogue_model)
        self.found_model = FoundFilesModel(self)
        self._own_report: OwnPairReport | None = None
        self._scanning = False
        self._rescan_again = False

        self.memory_label = QLabel("Measuring memory…", self)
        self.memory_label.setToolTip("Free memory now; each pair's estimate is compared with it")
        self.tabs = QTabWidget(self)
        self.tabs.addTab(self._build_catalogue_tab(), "&Catalogue")
        self.downloads_view = DownloadsView(self.downloads, self)
        self.tabs.addTab(self.downloads_view, "&Downloads")
        self.tabs.addTab(self._build_own_tab(), "Add my &own pair")
        self.tabs.addTab(self._build_found_tab(), "On dis&k")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.memory_label)
        layout.addWidget(self.tabs)
        layout.addWidget(buttons)

        self.downloads.download_changed.connect(self._on_downloads_download_changed)
        self.downloads.download_finished.connect(self._on_downloads_download_finished)
        self.downloads.download_failed.connect(self._on_downloads_download_failed)
        self.downloads.download_paused.connect(self._on_downloads_download_stopped)
        self.downloads.download_cancelled.connect(self._on_downloads_download_stopped)
        self.refresh()

    # ===================================================================================== building widgets ==
    def _build_catalogue_tab(self) -> QWidget:
        page = QWidget(self)
        self.filter_edit = QLineEdit(page)
        self.filter_edit.setPlaceholderText("Filter by name, tag (chat, code…), family or licence")
        self.filter_edit.setToolTip("Words that must all appear in the pair's name, id, tags, family or licence")
        self.filter_edit.setClearButtonEnabled(True)
        self.status_combo = QComboBox(page)
        self.status_combo.setToolTip("Show only pairs in this state")
        for label, _statuses in STATUS_FILTERS:
            self.status_combo.addItem(label)
        self.table = QTableView(page)
        self.table.setObjectName("catalogueTable")
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(CatalogueColumn.Status, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.setTabKeyNavigation(False)  # Tab leaves the table; arrows move inside
        self.table.horizontalHeader().setSectionResizeMode(CatalogueColumn.Pair, QHeaderView.ResizeMode.Stretch)
        self.details = QLabel("Select a pair to see its files, memory and where its speed-up was published.", page)
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setMinimumHeight(80)
        self.download_button = QPushButton("Do&wnload", page)
        self.download_button.setToolTip("Download both files (resumable, sha256-verified) in the background")
        self.use_button = QPushButton("&Use this pair", page)
        self.use_button.setToolTip("Load this target and draft with the recommended draft settings")
        self.use_button.setDefault(True)
        self.rescan_button = QPushButton("&Rescan", page)
        self.rescan_button.setToolTip("Look again for models on disk and measure free memory")

        top = QHBoxLayout()
        filter_label = QLabel("&Filter:", page)
        filter_label.setBuddy(self.filter_edit)
        top.addWidget(filter_label)
        top.addWidget(self.filter_edit, 1)
        top.addWidget(self.status_combo)
        row = QHBoxLayout()
        row.addWidget(self.rescan_button)
        row.addStretch(1)
        row.addWidget(self.download_button)
        row.addWidget(self.use_button)
        layout = QVBoxLayout(page)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.details)
        layout.addLayout(row)

        self.filter_edit.textChanged.connect(self.proxy.set_text)
        self.status_combo.currentIndexChanged.connect(self._on_status_combo_changed)
        self.table.selectionModel().selectionChanged.connect(self._on_table_selection_changed)
        self.table.doubleClicked.connect(self._on_table_double_clicked)
        self.download_button.clicked.connect(self._on_download_button_clicked)
        self.use_button.clicked.connect(self._on_use_button_clicked)
        self.rescan_button.clicked.connect(self.refresh)
        self._update_catalogue_buttons()
        return page

    def _build_own_tab(self) -> QWidget:
        page = QWidget(self)
        intro = QLabel("Pick a target and a smaller draft of the same family. Their headers are compared with "
                       "llama.cpp's rules before anything is loaded.", page)
        intro.setWordWrap(True)
        self.target_edit = QLineEdit(page)
        self.target_edit.setPlaceholderText("/path/to/target.gguf")
        self.target_edit.setToolTip("The large model whose output you get (it verifies every token)")
        self.target_browse = QPushButton("Browse…", page)
        self.target_browse.setToolTip("Choose the target GGUF")
        self.draft_edit = QLineEdit(page)
        self.draft_edit.setPlaceholderText("/path/to/draft.gguf")
        self.draft_edit.setToolTip("The small model that proposes tokens; it must share the target's vocabulary")
        self.draft_browse = QPushButton("Browse…", page)
        self.draft_browse.setToolTip("Choose the draft GGUF")
        self.lookup_check = QCheckBox("&Prompt lookup instead of a draft model", page)
        self.lookup_check.setToolTip("Draft by copying n-grams from the conversation: no second model, no memory")
        self.ctx_spin = QSpinBox(page)
        self.ctx_spin.setRange(256, 1_048_576)
        self.ctx_spin.setSingleStep(1024)
        self.ctx_spin.setValue(4096)
        self.ctx_spin.setSuffix(" tokens")
        self.ctx_spin.setToolTip("Context size used for the memory estimate and the load")
        self.check_button = QPushButton("C&heck", page)
        self.check_button.setToolTip("Compare the headers and estimate memory (nothing is loaded)")
        self.own_result = QLabel("", page)
        self.own_result.setObjectName("ownPairResult")
        self.own_result.setWordWrap(True)
        self.own_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.own_use_button = QPushButton("Use these &files", page)
        self.own_use_button.setToolTip("Load this pair (only once the check passed)")
        self.own_use_button.setEnabled(False)

        form = QFormLayout()
        t_row = QHBoxLayout()
        t_row.addWidget(self.target_edit, 1)
        t_row.addWidget(self.target_browse)
        d_row = QHBoxLayout()
        d_row.addWidget(self.draft_edit, 1)
        d_row.addWidget(self.draft_browse)
        t_label = QLabel("&Target:", page)
        t_label.setBuddy(self.target_edit)
        d_label = QLabel("D&raft:", page)
        d_label.setBuddy(self.draft_edit)
        c_label = QLabel("Conte&xt:", page)
        c_label.setBuddy(self.ctx_spin)
        form.addRow(t_label, t_row)
        form.addRow(d_label, d_row)
        form.addRow("", self.lookup_check)
        form.addRow(c_label, self.ctx_spin)
        buttons = QHBoxLayout()
        buttons.addWidget(self.check_button)
        buttons.addStretch(1)
        buttons.addWidget(self.own_use_button)
        layout = QVBoxLayout(page)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.own_result, 1)
        layout.addLayout(buttons)

        self.target_browse.clicked.connect(self._on_target_browse_clicked)
        self.draft_browse.clicked.connect(self._on_draft_browse_clicked)
        self.lookup_check.toggled.connect(self._on_lookup_check_toggled)
        self.check_button.clicked.connect(self.check_own_pair)
        self.own_use_button.clicked.connect(self._on_own_use_button_clicked)
        for w in (self.target_edit, self.draft_edit):
            w.textChanged.connect(self._on_own_input_changed)
        self.ctx_spin.valueChanged.connect(self._on_own_input_changed)
        return page

    def _build_found_tab(self) -> QWidget:
        page = QWidget(self)
        intro = QLabel("GGUF files already on this computer: the Hugging Face cache, LM Studio, Ollama, your "
                       "folders and Outrider's store.", page)
        intro.setWordWrap(True)
        self.found_table = QTableView(page)
        self.found_table.setObjectName("foundTable")
        self.found_table.setModel(self.found_model)
        self.found_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.found_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.found_table.verticalHeader().hide()
        self.found_table.setTabKeyNavigation(False)  # Tab leaves the table; arrows move inside
        self.found_table.horizontalHeader().setStretchLastSection(True)
        self.as_target_button = QPushButton("Use as &target", page)
        self.as_target_button.setToolTip("Put this file in 'Add my own pair' as the target")
        self.as_draft_button = QPushButton("Use as dr&aft", page)
        self.as_draft_button.setToolTip("Put this file in 'Add my own pair' as the draft")
        self.add_folder_button = QPushButton("Add &folder…", page)
        self.add_folder_button.setToolTip("Also look for GGUF files in a folder of yours (remembered)")
        row = QHBoxLayout()
        row.addWidget(self.add_folder_button)
        row.addStretch(1)
        row.addWidget(self.as_target_button)
        row.addWidget(self.as_draft_button)
        layout = QVBoxLayout(page)
        layout.addWidget(intro)
        layout.addWidget(self.found_table, 1)
        layout.addLayout(row)
        self.as_target_button.clicked.connect(self._on_as_target_button_clicked)
        self.as_draft_button.clicked.connect(self._on_as_draft_button_clicked)
        self.add_folder_button.clicked.connect(self._on_add_folder_button_clicked)
        return page

    # ============================================================================================ scanning ==
    def refresh(self) -> None:
        """Rescan (off the GUI thread): discovery, pair states, memory. ``scan_finished`` when applied."""
        if self._scanning:
            self._rescan_again = True
            return
        self._scanning = True
        self.rescan_button.setEnabled(False)
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
        self.rescan_button.setEnabled(True)
        self._update_catalogue_buttons()
        self.scan_finished.emit()
        if self._rescan_again:
            self._rescan_again = False
            self.refresh()

    # ============================================================================================ catalogue ==
    def select_pair(self, pair_id: str) -> bool:
        """Select ``pair_id`` in the catalogue table (if it passes the filters)."""
        row = self.catalogue_model.row_of(pair_id)
        if row is None:
            return False
        index = self.proxy.mapFromSource(self.catalogue_model.index(row, 0))
        if not index.isValid():
            return False
        self.table.selectRow(index.row())
        return True

    def selected_row(self) -> PairRow | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        r = rows[0].data(CatalogueRole.Row)
        return r if isinstance(r, PairRow) else None

    def _on_status_combo_changed(self, index: int) -> None:
        self.proxy.set_statuses(STATUS_FILTERS[index][1])

    def _on_table_selection_changed(self, *_args: object) -> None:
        self._update_catalogue_buttons()
        self._update_details()

    def _on_table_double_clicked(self, _index: QModelIndex) -> None:
        r = self.selected_row()
        if r is not None and r.usable:
            self._choose(PairChoice.from_row(r))

    def _update_catalogue_buttons(self) -> None:
        r = self.selected_row()
        self.use_button.setEnabled(r is not None and r.usable)
        can_download = r is not None and r.status in (PairStatus.DOWNLOADABLE, PairStatus.PAUSED)
        self.download_button.setEnabled(can_download)
        if r is not None and r.status is PairStatus.PAUSED:
            self.download_button.setText("Res&ume download")
        else:
            self.download_button.setText("Do&wnload")

    def _update_details(self) -> None:
        r = self.selected_row()
        if r is None:
            return
        p = r.pair
        draft = ("prompt lookup (no draft model)" if p.draft is None
                 else f"{p.draft.file} ({format_bytes(p.draft.size)})")
        lines = [f"<b>{_esc(p.name)}</b> — {_esc(r.status_text)}" + (f": {_esc(r.reason)}" if r.reason else ""),
                 f"Target: {_esc(p.target.file)} ({format_bytes(p.target.size)}) · Draft: {_esc(draft)}",
                 f"Memory: {_esc(describe_memory(r.memory, self.catalogue_model.memory))}",
                 f"Licence: {_esc(p.licence)}" + (" · <b>gated</b>: needs an approved Hugging Face token"
                                                  if p.gated else ""),
                 f"Recommended draft: max {p.settings.draft_max}, min {p.settings.draft_min}, "
                 f"p-min {p.settings.p_min:g}"]
        if p.speedup:
            lines.append(f"Published speed-up: {_esc(p.speedup)} — source: {_esc(p.speedup_source)}")
        else:
            lines.append("Published speed-up: none yet — use “Benchmark this pair” to measure yours")
        self.details.setText("<br>".join(lines))

    def _on_download_button_clicked(self) -> None:
        r = self.selected_row()
        if r is None:
            return
        self.download_pair(r.pair.id)

    def download_pair(self, pair_id: str) -> None:
        """Start or resume the download of a catalogue pair (progress in the Downloads tab)."""
        r = self.catalogue_model.pair_row(pair_id)
        if r is None:
            return
        self.downloads.start(r.pair)
        self.downloads_view.select(pair_id)

    def _on_downloads_download_changed(self, pair_id: str) -> None:
        it = self.downloads.model.item(pair_id)
        if it is None:
            return
        if it.state in (DownloadState.STARTING, DownloadState.RUNNING, DownloadState.VERIFYING,
                        DownloadState.PAUSING, DownloadState.CANCELLING):
            self.catalogue_model.update_row(pair_id, status=PairStatus.DOWNLOADING, progress=it.fraction)
            self._update_catalogue_buttons()

    def _on_downloads_download_finished(self, _pair_id: str) -> None:
        self.refresh()

    def _on_downloads_download_stopped(self, _pair_id: str) -> None:
        self.refresh()

    def _on_downloads_download_failed(self, pair_id: str, exc: object) -> None:
        msg = exc.message if isinstance(exc, DownloadError) else str(exc)
        self.catalogue_model.update_row(pair_id, reason=f"download failed: {msg}")
        self.refresh()

    def _on_use_button_clicked(self) -> None:
        r = self.selected_row()
        if r is not None and r.usable:
            self._choose(PairChoice.from_row(r))

    def _choose(self, choice: PairChoice) -> None:
        self.pair_chosen.emit(choice)
        self.accept()

    # ============================================================================================= own pair ==
    def set_own_pair(self, target: str | Path, draft: str | Path | None) -> None:
        """Fill the 'Add my own pair' fields (``draft=None``: prompt lookup) and run the check."""
        self.target_edit.setText(str(target))
        self.lookup_check.setChecked(draft is None)
        if draft is not None:
            self.draft_edit.setText(str(draft))
        self.tabs.setCurrentIndex(2)
        self.check_own_pair()

    def _on_target_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose the target model", self.target_edit.text(),
                                              GGUF_FILTER)
        if path:
            self.target_edit.setText(path)
            self._check_if_ready()

    def _on_draft_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose the draft model", self.draft_edit.text(), GGUF_FILTER)
        if path:
            self.draft_edit.setText(path)
            self._check_if_ready()

    def _on_lookup_check_toggled(self, on: bool) -> None:
        self.draft_edit.setEnabled(not on)
        self.draft_browse.setEnabled(not on)
        self._on_own_input_changed()

    def _on_own_input_changed(self, *_args: object) -> None:
        self._own_report = None
        self.own_use_button.setEnabled(False)

    def _check_if_ready(self) -> None:
        if self.target_edit.text().strip() and (self.lookup_check.isChecked() or self.draft_edit.text().strip()):
            self.check_own_pair()

    def check_own_pair(self) -> None:
        """Header-only compatibility and memory estimate of the own pair (off the GUI thread)."""
        target = self.target_edit.text().strip()
        draft = None if self.lookup_check.isChecked() else self.draft_edit.text().strip()
        if not target or draft == "":
            self._show_own_error("Choose a target" + ("" if draft is None else " and a draft") + " first.")
            return
        n_ctx = self.ctx_spin.value()
        memory = self.catalogue_model.memory if self.catalogue_model.memory.ram_total else None
        self.own_result.setText("Checking the headers…")
        self.check_button.setEnabled(False)
        key = (target, draft, n_ctx)

        def work() -> OwnPairReport:
            return self.service.check_own_pair(Path(target), None if draft is None else Path(draft), n_ctx, memory)

        def done(report: OwnPairReport) -> None:
            self.check_button.setEnabled(True)
            now = (self.target_edit.text().strip(),
                   None if self.lookup_check.isChecked() else self.draft_edit.text().strip(), self.ctx_spin.value())
            if now != key:
                return  # the inputs changed meanwhile: this answer is about other files
            self._show_own_report(report)

        def failed(exc: BaseException) -> None:
            self.check_button.setEnabled(True)
            if isinstance(exc, GGUFHeaderError | OSError):
                path = getattr(exc, "filename", None) or target
                self._show_own_error(f"Not a usable GGUF — {_explain_header_error(str(path), exc)}")
            else:
                self._show_own_error(f"Check failed: {exc}")

        self._runner.submit(work, done, failed)

    def _show_own_report(self, report: OwnPairReport) -> None:
        self._own_report = report
        mem = describe_memory(report.memory, self.catalogue_model.memory)
        if report.compatibility is None:
            head = "✔ Prompt lookup needs no draft model."
        elif report.compatibility.ok:
            head = "✔ Compatible: the draft can speculate for this target."
        else:
            head = (f"✘ Not compatible ({report.compatibility.rule}): {report.compatibility.reason}. "
                    "llama.cpp would refuse this pair; pick a draft from the target's family.")
        fit = {"too_big": " ⚠ It does not fit in the free memory.", "tight": " It barely fits."}.get(
            report.fit.value, "")
        self.own_result.setText(f"{head}\nMemory: {mem}.{fit}")
        self.own_result.setToolTip(mem)
        self.own_use_button.setEnabled(report.ok)
        self.own_pair_checked.emit(report)

    def _show_own_error(self, text: str) -> None:
        self._own_report = None
        self.own_result.setText(text)
        self.own_use_button.setEnabled(False)
        self.own_pair_checked.emit(text)

    def _on_own_use_button_clicked(self) -> None:
        report = self._own_report
        if report is not None and report.ok:
            self._choose(PairChoice.own(report.target, report.draft, report.memory.n_ctx))

    # ============================================================================================== on disk ==
    def _selected_found_path(self) -> str | None:
        rows = self.found_table.selectionModel().selectedRows()
        if not rows:
            return None
        value: Any = rows[0].data(FoundRole.Path)
        return value if isinstance(value, str) else None

    def _on_as_target_button_clicked(self) -> None:
        path = self._selected_found_path()
        if path:
            self.target_edit.setText(path)
            self.tabs.setCurrentIndex(2)
            self._check_if_ready()

    def _on_as_draft_button_clicked(self) -> None:
        path = self._selected_found_path()
        if path:
            self.lookup_check.setChecked(False)
            self.draft_edit.setText(path)
            self.tabs.setCurrentIndex(2)
            self._check_if_ready()

    def _on_add_folder_button_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder with GGUF models")
        if folder:
            self.add_folder(Path(folder))

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
        """Wait for running checks; downloads this dialog owns are paused (their partial files are kept)."""
        self._runner.shutdown()
        if self._owns_downloads:
            self.downloads.shutdown()


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
