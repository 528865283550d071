"""The picker's item models pass pytest-qt's model tester; updates touch only the changed row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, Qt
from pytestqt.modeltest import ModelTester

from outrider.catalogue import DownloadEvent
from outrider.catalogue.service import CatalogueService, PairStatus
from outrider.ui.bridges.download_manager import (
    DownloadItem,
    DownloadRole,
    DownloadsModel,
    DownloadState,
    QtDownloadManager,
)
from outrider.ui.dialogs.benchmark_results import BenchmarkResultsModel
from outrider.ui.models.catalogue_model import CatalogueFilterProxy, CatalogueModel, CatalogueRole, FoundFilesModel


def _changes(model: Any) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    model.dataChanged.connect(lambda tl, br, *_: seen.append((tl.row(), br.row())))
    return seen


def test_catalogue_model_and_proxy(qtmodeltester: ModelTester, make_service: Any,
                                   installed: dict[str, Path]) -> None:
    service: CatalogueService = make_service()
    scan = service.scan()
    model = CatalogueModel()
    qtmodeltester.check(model)  # empty
    model.set_rows(scan.rows, scan.memory)
    qtmodeltester.check(model, force_py=True)
    proxy = CatalogueFilterProxy()
    proxy.setSourceModel(model)
    proxy.sort(1)
    qtmodeltester.check(proxy)
    proxy.set_statuses(frozenset({PairStatus.INSTALLED}))
    qtmodeltester.check(proxy)
    assert proxy.rowCount() == 2
    assert model.roleNames()[CatalogueRole.PairId] == b"PairId"

    seen = _changes(model)
    row = model.row_of("remote-pair")
    assert row is not None
    model.update_row("remote-pair", status=PairStatus.DOWNLOADING, progress=0.25)
    assert seen == [(row, row)]
    assert model.index(row, 1).data() == "downloading 25%"
    model.update_row("remote-pair", status=PairStatus.DOWNLOADING, progress=0.25)  # no change, no signal
    assert seen == [(row, row)]
    assert model.index(row, 0).data(CatalogueRole.Progress) == 0.25
    assert model.index(row, 0, QModelIndex()).parent() == QModelIndex()


def test_found_files_model(qtmodeltester: ModelTester, make_service: Any, installed: dict[str, Path]) -> None:
    service: CatalogueService = make_service()
    model = FoundFilesModel()
    model.set_files(service.scan().found)
    assert model.rowCount() == 3  # the three files of the store
    assert {model.index(i, 1).data() for i in range(3)} == {"Outrider's downloads"}
    qtmodeltester.check(model, force_py=True)


def test_downloads_model(qtmodeltester: ModelTester, make_service: Any) -> None:
    service: CatalogueService = make_service()
    pairs = {p.id: p for p in service.catalogue}
    model = DownloadsModel()
    qtmodeltester.check(model)
    model.upsert(DownloadItem(pairs["remote-pair"], DownloadState.RUNNING, bytes_done=100, speed=2e6, eta=61))
    model.upsert(DownloadItem(pairs["tiny-installed"], DownloadState.PAUSED, bytes_done=5))
    qtmodeltester.check(model, force_py=True)
    assert model.index(0, 2).data() == "2.0 MB/s" and model.index(0, 3).data() == "1 min 01 s"
    assert model.index(1, 2).data() == "—" and model.index(1, 4).data() == "paused"
    seen = _changes(model)
    model.upsert(DownloadItem(pairs["tiny-installed"], DownloadState.PAUSED, bytes_done=6))
    assert seen == [(1, 1)]
    assert model.index(1, 0).data(DownloadRole.State) is DownloadState.PAUSED
    model.remove("remote-pair")
    qtmodeltester.check(model)


def test_download_events_are_coalesced_on_the_gui_thread(qtbot: Any, make_service: Any) -> None:
    """Events from reader threads only go to a queue; one drain applies all of them, one dataChanged per pair."""
    service: CatalogueService = make_service()
    pair = next(p for p in service.catalogue if p.id == "remote-pair")
    manager = QtDownloadManager(service)
    manager.model.upsert(DownloadItem(pair, DownloadState.STARTING))
    seen = _changes(manager.model)
    put = manager._queue_for(pair.id)
    for n in (10, 20, 30):
        put(DownloadEvent("progress", pair.target.filename, n, pair.target.size, speed=10.0))
    put(DownloadEvent("done", pair.target.filename, pair.target.size, pair.target.size))
    put(DownloadEvent("progress", pair.draft.filename if pair.draft else "", 7, 100, speed=10.0))
    manager._drain()
    assert seen == [(0, 0)]
    item = manager.model.item(pair.id)
    assert item is not None and item.state is DownloadState.RUNNING
    assert item.bytes_done == pair.target.size + 7  # the first file whole, the second in flight
    assert item.eta == (pair.size - item.bytes_done) / 10.0  # over both files
    manager.shutdown()


def test_benchmark_results_model(qtmodeltester: ModelTester) -> None:
    model = BenchmarkResultsModel()
    qtmodeltester.check(model)
    model.append({"label": "code", "prompt": "p", "plain_decode_tps": 10.0, "spec_decode_tps": 8.0,
                  "acceptance_rate": None, "tokens_per_pass": 1.0, "k_mean": 0.0, "ab_speedup": 0.8,
                  "predicted_speedup": 1.0, "measured_over_predicted": 0.8})
    qtmodeltester.check(model, force_py=True)
    assert model.index(0, 1).data() == "—"
    assert "Slower than plain" in model.index(0, 5).data(Qt.ItemDataRole.ToolTipRole)
