"""No column text of the picker's Catalogue and Downloads tables is cut off unreadably, in a dialog 1600 px wide
and in one 960 px wide (half a 1920-px screen): every cell's text fits its column, or it is elided with the whole
text in the cell's tooltip; every header fits its section.

Over the shipped catalogue (the names a user sees), nothing installed, a download running and one failed with a
long reason. Before (what this test found): the Downloads table's Pair column kept Qt's default 100 px ("Qwen3 8B
(Q4_K_M) + Qwen3 0.6B draft" needs 251) with only the download's message as its tooltip, and at 960 px the
catalogue's pair names were elided with no tooltip naming them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableView
from pytestqt.qtbot import QtBot

from outrider.catalogue import DiscoveryScanner, DownloadManager, ModelStore, load_catalogue
from outrider.catalogue.loading import default_catalogue_path
from outrider.catalogue.service import CatalogueService
from outrider.ui.bridges.download_manager import DownloadItem, DownloadState
from outrider.ui.picker.dialog import PairPickerDialog


@pytest.fixture
def picker(qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PairPickerDialog]:
    monkeypatch.delenv("OUTRIDER_CATALOGUE", raising=False)
    store = ModelStore(tmp_path / "models")
    scanner = DiscoveryScanner(store, home=tmp_path / "user", hf_cache=tmp_path / "hf-home" / "hub")
    service = CatalogueService(load_catalogue(default_catalogue_path()), store, DownloadManager(store), scanner,
                               vram_probe=lambda: (None, None))
    dlg = PairPickerDialog(service)
    qtbot.addWidget(dlg)
    with qtbot.waitSignal(dlg.scan_finished, timeout=30_000):
        pass
    pairs = [r.pair for r in dlg.catalogue_model.rows]
    model = dlg.downloads.model
    model.upsert(DownloadItem(pairs[0], DownloadState.RUNNING, file=pairs[0].target.file,
                              bytes_done=pairs[0].size // 3, speed=12_345_678.0, eta=3725.0))
    model.upsert(DownloadItem(pairs[1], DownloadState.FAILED, message="cannot reach huggingface.co (check the "
                              "connection or the proxy settings); the partial file is kept", resumable=True))
    dlg.show()
    yield dlg
    dlg.close()


def cut_cells(table: QTableView) -> list[str]:
    """Cells whose text does not fit their column and whose tooltip lacks it, and headers that do not fit."""
    model, header = table.model(), table.horizontalHeader()
    cut = []
    for col in range(model.columnCount()):
        if header.isSectionHidden(col):
            continue
        width = table.columnWidth(col)
        title = str(model.headerData(col, Qt.Orientation.Horizontal))
        if header.sectionSizeHint(col) > header.sectionSize(col):
            cut.append(f"header {title!r}: needs {header.sectionSizeHint(col)} px, has {header.sectionSize(col)}")
        for row in range(model.rowCount()):
            index = model.index(row, col)
            text = str(index.data(Qt.ItemDataRole.DisplayRole) or "")
            if table.sizeHintForIndex(index).width() <= width:
                continue
            tip = str(index.data(Qt.ItemDataRole.ToolTipRole) or "")
            if text not in tip:
                cut.append(f"{title} row {row} {text!r}: needs {table.sizeHintForIndex(index).width()} px, "
                           f"has {width}, tooltip {tip[:60]!r}")
    return cut


@pytest.mark.parametrize("width", [1600, 960])
def test_no_column_text_is_cut_in_the_catalogue_or_the_downloads(qtbot: QtBot, picker: PairPickerDialog,
                                                                 width: int) -> None:
    picker.resize(width, 700)
    qtbot.waitUntil(lambda: picker.width() == width)
    assert picker.catalogue_model.rowCount() > 5
    cut: list[str] = []
    for tab, table in ((picker.catalogue_tab, picker.catalogue_tab.table),
                       (picker.downloads_view, picker.downloads_view.table)):
        picker.tabs.setCurrentWidget(tab)
        qtbot.waitUntil(table.isVisible)
        cut.extend(f"{width} px {tab.objectName() or type(tab).__name__}: {c}" for c in cut_cells(table))
    assert cut == []
