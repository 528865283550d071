"""The Catalogue tab of the pair picker: the verified pairs with their state, memory, licence and published speed-up.

The rows come from ``CatalogueModel`` (the dialog fills it from ``CatalogueService.scan()``); this tab filters,
sorts and shows them, and asks the dialog (signals) to download, use or rescan.
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from outrider.catalogue.memory import describe_memory, format_bytes
from outrider.catalogue.schema import Pair
from outrider.catalogue.service import PairRow, PairStatus
from outrider.ui.models.catalogue_model import CatalogueColumn, CatalogueFilterProxy, CatalogueModel, CatalogueRole
from outrider.ui.picker.choice import PairChoice
from outrider.ui.picker.tables import row_table

# Filter choices of the catalogue tab: label → statuses (None = every pair).
STATUS_FILTERS: tuple[tuple[str, frozenset[PairStatus] | None], ...] = (
    ("All pairs", None),
    ("Installed", frozenset({PairStatus.INSTALLED, PairStatus.ON_DISK})),
    ("Downloadable", frozenset({PairStatus.DOWNLOADABLE, PairStatus.PAUSED, PairStatus.DOWNLOADING,
                                PairStatus.FAILED})),
    ("Incompatible or unavailable", frozenset({PairStatus.INCOMPATIBLE, PairStatus.UNAVAILABLE})),
)


SPEEDUP_COLUMN_WIDTH = 190  # pixels: the header and a short figure ("+115% (RTX 3090)") fit


class CatalogueTab(QWidget):
    """Filter, table, details of the selected pair, and Rescan / Download / Use.

    Signals:
        chosen(object): the ``PairChoice`` of a usable pair (Use, or a double click).
        download_requested(str): the id of the pair to download or resume.
        rescan_requested(): look again for models on disk and measure free memory.
    """

    chosen = Signal(object)
    download_requested = Signal(str)
    rescan_requested = Signal()

    def __init__(self, model: CatalogueModel, proxy: CatalogueFilterProxy, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.proxy = proxy
        self.filter_edit = QLineEdit(self)
        self.filter_edit.setPlaceholderText("Filter by name, tag (chat, code…), family or licence")
        self.filter_edit.setToolTip("Words that must all appear in the pair's name, id, tags, family or licence")
        self.filter_edit.setClearButtonEnabled(True)
        self.status_combo = QComboBox(self)
        self.status_combo.setToolTip("Show only pairs in this state")
        for label, _statuses in STATUS_FILTERS:
            self.status_combo.addItem(label)
        self.table = row_table(proxy, "catalogueTable", self)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(CatalogueColumn.Status, Qt.SortOrder.AscendingOrder)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(CatalogueColumn.Pair, QHeaderView.ResizeMode.Stretch)
        for col in (CatalogueColumn.Status, CatalogueColumn.Size, CatalogueColumn.Memory, CatalogueColumn.Licence):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.resizeSection(CatalogueColumn.Speedup, SPEEDUP_COLUMN_WIDTH)  # long figures elide; full in the tooltip
        self.table.setWordWrap(False)
        self.details = QLabel("Select a pair to see its files, memory and where its speed-up was published.", self)
        self.details.setWordWrap(True)
        self.details.setObjectName("pairDetails")
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.details.setOpenExternalLinks(True)  # the pair's source and the speed-up's source open in the browser
        self.details.setMinimumHeight(80)
        self.notice = QLabel("", self)
        self.notice.setObjectName("downloadNotice")
        self.notice.setWordWrap(True)
        self.notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notice.hide()
        self.download_button = QPushButton("Do&wnload", self)
        self.download_button.setToolTip("Download both files (resumable, sha256-verified) in the background")
        self.use_button = QPushButton("&Use this pair", self)
        self.use_button.setToolTip("Load this target and draft with the recommended draft settings")
        self.use_button.setDefault(True)
        self.rescan_button = QPushButton("&Rescan", self)
        self.rescan_button.setToolTip("Look again for models on disk and measure free memory")

        top = QHBoxLayout()
        filter_label = QLabel("&Filter:", self)
        filter_label.setBuddy(self.filter_edit)
        top.addWidget(filter_label)
        top.addWidget(self.filter_edit, 1)
        top.addWidget(self.status_combo)
        row = QHBoxLayout()
        row.addWidget(self.rescan_button)
        row.addStretch(1)
        row.addWidget(self.download_button)
        row.addWidget(self.use_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.details)
        layout.addWidget(self.notice)
        layout.addLayout(row)

        self.filter_edit.textChanged.connect(self.proxy.set_text)
        self.status_combo.currentIndexChanged.connect(self._on_status_combo_changed)
        self.table.selectionModel().selectionChanged.connect(self._on_table_selection_changed)
        self.table.doubleClicked.connect(self._on_table_double_clicked)
        self.download_button.clicked.connect(self._on_download_button_clicked)
        self.use_button.clicked.connect(self._on_use_button_clicked)
        self.rescan_button.clicked.connect(self.rescan_requested)
        self.update_buttons()

    # -- selection ------------------------------------------------------------------------------------------
    def select_pair(self, pair_id: str) -> bool:
        """Select ``pair_id`` in the table (if it passes the filters)."""
        row = self.model.row_of(pair_id)
        if row is None:
            return False
        index = self.proxy.mapFromSource(self.model.index(row, 0))
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

    def show_notice(self, text: str, *, error: bool = False) -> None:
        """A line above the buttons about the last Download click (a failure in words); "" hides it."""
        self.notice.setProperty("error", error)
        self.notice.setText(f"<b>{_esc(text)}</b>" if error else _esc(text))
        self.notice.setVisible(bool(text))

    def set_scanning(self, scanning: bool) -> None:
        self.rescan_button.setEnabled(not scanning)

    # -- slots ----------------------------------------------------------------------------------------------
    def _on_status_combo_changed(self, index: int) -> None:
        self.proxy.set_statuses(STATUS_FILTERS[index][1])

    def _on_table_selection_changed(self, *_args: object) -> None:
        self.update_buttons()
        self._update_details()

    def _on_table_double_clicked(self, _index: QModelIndex) -> None:
        self._on_use_button_clicked()

    def _on_download_button_clicked(self) -> None:
        r = self.selected_row()
        if r is not None:
            self.download_requested.emit(r.pair.id)

    def _on_use_button_clicked(self) -> None:
        r = self.selected_row()
        if r is not None and r.usable:
            self.chosen.emit(PairChoice.from_row(r))

    def update_buttons(self) -> None:
        r = self.selected_row()
        self.use_button.setEnabled(r is not None and r.usable)
        can_download = r is not None and r.status in (PairStatus.DOWNLOADABLE, PairStatus.PAUSED, PairStatus.FAILED)
        self.download_button.setEnabled(can_download)
        if r is not None and r.status is PairStatus.PAUSED:
            self.download_button.setText("Res&ume download")
        elif r is not None and r.status is PairStatus.FAILED:
            self.download_button.setText("Re&try download")
        else:
            self.download_button.setText("Do&wnload")

    def _update_details(self) -> None:
        r = self.selected_row()
        if r is None:
            return
        p = r.pair
        draft = p.drafter_text + (f" ({format_bytes(p.draft.size)})" if p.draft is not None else "")
        lines = [f"<b>{_esc(p.name)}</b> — {_esc(r.status_text)}" + (f": {_esc(r.reason)}" if r.reason else ""),
                 (f"{_esc(p.status_text)} · " if p.status_text else "") + _link(p.source_url, "About this pair"),
                 f"Target: {_esc(p.target.file)} ({format_bytes(p.target.size)}) · Drafter: {_esc(draft)}",
                 *(_esc(note) for note in p.architecture_notes),
                 _esc(provenance_text(p)),
                 f"Memory: {_esc(describe_memory(r.memory, self.model.memory))}",
                 f"Licence: {_esc(p.licence)}" + (" · <b>gated</b>: needs an approved Hugging Face token"
                                                  if p.gated else ""),
                 f"Recommended draft: k {p.settings.k}, min {p.settings.draft_min}, "
                 f"p-min {p.settings.p_min:g}"]
        if p.speedup:
            lines.append(f"Published speed-up: {_esc(p.speedup)} — "
                         + _link(p.speedup_source, "where it was published"))
        else:
            lines.append("Published speed-up: none yet — use “Benchmark this pair” to measure yours")
        self.details.setText("<br>".join(lines))


def provenance_text(pair: Pair) -> str:
    """Where the pair's files come from and how they are checked, in one line for the details pane."""
    packaged = [f for f in pair.files if f.source == "pypi"]
    if packaged and len(packaged) == len(pair.files):
        m = packaged[0]
        return (f"Files: installed with Outrider (Python package {m.package} {m.package_version}), "
                "checked by sha256")
    when = (f"last matched against the Hub on {pair.checked}" if pair.checked
            else "not re-checked against the Hub since they were added")
    return f"Files: pinned to a Hub revision and checked by sha256 after download; sizes and checksums {when}"


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link(url: str, label: str) -> str:
    """An HTML link to ``url`` (opened in the browser), or the escaped text when ``url`` is not a web link."""
    if not url.startswith(("https://", "http://")):
        return _esc(url)
    return f'<a href="{_esc(url).replace(chr(34), "&quot;")}">{_esc(label)}</a>'
