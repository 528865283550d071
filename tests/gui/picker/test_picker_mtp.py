"""The pair picker and MTP drafting: "MTP heads in this model" for the user's own target (read from its GGUF
header), a separate MTP head file recognised as one, and the 2026 catalogue pairs with their drafter, memory facts
and reasons.

Breaking it on purpose: leaving ``mtp`` out of the report's ``PairChoice.own`` made the chosen pair load with
prompt lookup (``to_spec().mtp`` False), which ``test_own_target_with_mtp_heads_is_chosen_with_them`` caught.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from outrider.catalogue import DiscoveryScanner, DownloadManager, ModelStore, load_catalogue
from outrider.catalogue.service import CatalogueService, OwnPairReport, PairStatus
from outrider.ui.picker.dialog import PairPickerDialog
from support.mtp_gguf import MtpModels, MtpShape, make_mtp_models

ServiceFactory = Callable[..., CatalogueService]
PickerFactory = Callable[[CatalogueService], PairPickerDialog]
SHIPPED = Path(__file__).resolve().parents[3] / "models" / "catalogue.toml"


@pytest.fixture(scope="module")
def mtp(tmp_path_factory: pytest.TempPathFactory) -> MtpModels:
    return make_mtp_models(tmp_path_factory.mktemp("mtp-gui"), shape=MtpShape(n_layer=2, n_embd=128, n_head=2))


def _check(qtbot: QtBot, dlg: PairPickerDialog, target: Path, draft: Path | None, *, mtp: bool) -> object:
    dlg.own_tab.mtp_check.setChecked(mtp)
    with qtbot.waitSignal(dlg.own_pair_checked, timeout=10_000) as blocker:
        dlg.set_own_pair(target, draft)
        if mtp:  # set_pair ticks prompt lookup for draft=None: tick MTP again (it unticks lookup) and re-check
            dlg.own_tab.mtp_check.setChecked(True)
            dlg.own_tab.check()
    return blocker.args[0]


def test_own_target_with_mtp_heads_is_chosen_with_them(qtbot: QtBot, open_picker: PickerFactory,
                                                       make_service: ServiceFactory, mtp: MtpModels) -> None:
    dlg = open_picker(make_service())
    report = _check(qtbot, dlg, mtp.target, None, mtp=True)
    assert isinstance(report, OwnPairReport) and report.ok and report.mtp and report.target_has_mtp
    assert report.memory.draft_kv > 0  # the MTP context's KV
    assert "MTP heads in this model: it drafts for itself" in dlg.own_result.text()
    assert not dlg.draft_edit.isEnabled() and not dlg.lookup_check.isChecked()
    with qtbot.waitSignal(dlg.pair_chosen, timeout=2000) as chosen:
        dlg.own_use_button.click()
    choice = chosen.args[0]
    assert choice.mtp and choice.draft is None and not choice.lookup and choice.drafter == "mtp"
    spec = choice.to_spec()
    assert spec.mtp and spec.mtp_head is None and spec.draft_mode == "mtp"


def test_own_target_without_heads_is_refused_for_mtp(qtbot: QtBot, open_picker: PickerFactory,
                                                     make_service: ServiceFactory, mtp: MtpModels) -> None:
    dlg = open_picker(make_service())
    report = _check(qtbot, dlg, mtp.trunk, None, mtp=True)
    assert isinstance(report, OwnPairReport) and not report.ok and not report.target_has_mtp
    text = dlg.own_result.text()
    assert "MTP drafting is not possible" in text and "mtp-trunk.gguf has no MTP layers" in text
    assert not dlg.own_use_button.isEnabled()


def test_a_head_file_as_the_draft_is_checked_as_a_head(qtbot: QtBot, open_picker: PickerFactory,
                                                       make_service: ServiceFactory, mtp: MtpModels,
                                                       tmp_path: Path) -> None:
    dlg = open_picker(make_service())
    report = _check(qtbot, dlg, mtp.trunk, mtp.head, mtp=False)
    assert isinstance(report, OwnPairReport) and report.ok and report.mtp and report.draft == mtp.head
    assert "MTP head file for this target" in dlg.own_result.text()
    with qtbot.waitSignal(dlg.pair_chosen, timeout=2000) as chosen:
        dlg.own_use_button.click()
    spec = chosen.args[0].to_spec()
    assert spec.mtp_head == str(mtp.head) and not spec.mtp and spec.draft is None
    other = make_mtp_models(tmp_path / "other", shape=MtpShape(n_layer=3, n_embd=128, n_head=2)).head
    report = _check(qtbot, dlg, mtp.trunk, other, mtp=False)
    assert isinstance(report, OwnPairReport) and not report.ok
    assert "belongs to another model" in dlg.own_result.text()


def test_a_target_with_heads_is_pointed_out_under_prompt_lookup(qtbot: QtBot, open_picker: PickerFactory,
                                                                make_service: ServiceFactory, mtp: MtpModels) -> None:
    dlg = open_picker(make_service())
    report = _check(qtbot, dlg, mtp.target, None, mtp=False)
    assert isinstance(report, OwnPairReport) and report.ok and not report.mtp and report.target_has_mtp
    assert "This model carries MTP heads" in dlg.own_result.text()


def test_the_2026_pairs_show_drafter_memory_facts_and_reasons(qtbot: QtBot, open_picker: PickerFactory,
                                                              tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "store")
    service = CatalogueService(load_catalogue(SHIPPED), store, DownloadManager(store),
                               DiscoveryScanner(store, home=tmp_path / "user", hf_cache=tmp_path / "hf"),
                               vram_probe=lambda: (None, None))
    dlg = open_picker(service)
    assert dlg.select_pair("qwen3.6-27b-mtp")
    details = dlg.details.text()
    assert "Drafter: MTP heads in this model (1 NextN layer)" in details
    assert "Hybrid model: 16 of 64 layers keep a KV cache" in details
    assert dlg.catalogue_model.pair_row("qwen3.6-27b-mtp").status is PairStatus.DOWNLOADABLE  # type: ignore[union-attr]
    assert dlg.select_pair("gemma-4-31b-mtp-head")
    row = dlg.catalogue_model.pair_row("gemma-4-31b-mtp-head")
    assert row is not None and row.status is PairStatus.UNAVAILABLE
    assert "cannot run such heads yet" in row.reason and "cannot run such heads yet" in dlg.details.text()
    assert "Sliding window: 50 of 60 layers" in dlg.details.text()
