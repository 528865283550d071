"""The pair picker's "Make a draft from this model's own layers" (``ui/picker/self_draft_panel.py``): the memory
is shown in a question first, the build shows progress and can be cancelled, and the built draft makes the own
pair usable; a self-draft already in the store is offered again for its target."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from outrider.catalogue import ModelStore
from outrider.catalogue.selfdraft import SelfDraftBuild, preview
from outrider.catalogue.service import CatalogueService
from outrider.ui.models.catalogue_model import FoundRole
from outrider.ui.picker.dialog import PairPickerDialog
from support.tiny_gguf import Family

ServiceFactory = Callable[..., CatalogueService]
BUILD_MS = 600_000  # a build takes seconds; the limit is for a loaded 2-core machine


def _build_children() -> list[int]:
    me = str(os.getpid())
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[1] == me and b"outrider.catalogue.selfdraft_build" in cmd:
            out.append(int(d.name))
    return out


@pytest.fixture
def picker(qtbot: QtBot, make_service: ServiceFactory) -> Iterator[PairPickerDialog]:
    """A picker whose self-drafts calibrate on one short prompt (the app passes the history's prompts)."""
    dlg = PairPickerDialog(make_service(), calibration_prompts=lambda: (["hello world"], "test"))
    qtbot.addWidget(dlg)
    dlg.show()  # visibility of the progress bar and buttons is part of what is tested
    with qtbot.waitSignal(dlg.scan_finished, timeout=10_000):
        pass
    dlg.tabs.setCurrentWidget(dlg.own_tab)
    yield dlg
    dlg.close()
    assert not _build_children(), "a self-draft build process was left running"


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every question box is answered Yes; its text is kept."""
    asked: list[str] = []

    def exec_(box: QMessageBox) -> int:
        asked.append(box.text())
        return int(QMessageBox.StandardButton.Yes)

    monkeypatch.setattr(QMessageBox, "exec", exec_)
    return asked


def _drafts(store: ModelStore) -> list[Path]:
    return sorted(store.self_drafts_root.rglob("*.gguf")) if store.self_drafts_root.exists() else []


def test_a_self_draft_is_made_with_progress_and_then_the_pair_is_usable(
        qtbot: QtBot, picker: PairPickerDialog, answers: list[str], tiny_family: Family, store: ModelStore) -> None:
    """Breaking the panel's ``draft_ready`` connection left the draft field empty and the pair unusable."""
    panel = picker.own_tab.self_draft
    assert not panel.make_button.isEnabled(), "nothing to cut before a target is chosen"
    picker.target_edit.setText(str(tiny_family.target))
    assert panel.make_button.isEnabled()
    messages: list[str] = []
    panel._progressed.connect(lambda ev: messages.append(ev.message))
    with qtbot.waitSignal(panel.build_finished, timeout=BUILD_MS) as finished:
        panel.make_button.click()
    assert not isinstance(finished.args[0], str), finished.args[0]
    with qtbot.waitSignal(picker.own_pair_checked, timeout=10_000) as checked:
        pass  # the built draft fills the draft field, which starts the pair's check
    assert len(answers) == 1 and "memory" in answers[0] and "tiny-target.gguf" in answers[0]
    report = checked.args[0]
    assert not isinstance(report, str) and report.ok, report
    drafts = _drafts(store)
    assert len(drafts) == 1 and picker.draft_edit.text() == str(drafts[0])
    assert any("candidate" in m for m in messages), messages
    assert "Made a self-draft" in panel.status_label.text()
    assert not panel.progress.isVisible() and not panel.cancel_button.isVisible()
    with qtbot.waitSignal(picker.pair_chosen, timeout=5000) as chosen:
        picker.own_use_button.click()
    assert chosen.args[0].draft == drafts[0]


def test_a_self_draft_in_the_store_is_offered_for_its_target(
        qtbot: QtBot, picker: PairPickerDialog, tiny_family: Family, store: ModelStore) -> None:
    """Built earlier (by ``outrider models self-draft``): choosing its target offers it, and using it makes the
    pair usable. Breaking the lookup by path (a wrong size in the match) hid the button."""
    built = SelfDraftBuild(store, preview(store, tiny_family.target, "0,3"), ["hello"], max_tokens=4,
                           threads=1).wait(BUILD_MS / 1000)
    panel = picker.own_tab.self_draft
    picker.target_edit.setText(str(tiny_family.draft))
    picker.target_edit.setText(str(tiny_family.target))
    qtbot.waitUntil(panel.use_found_button.isVisible, timeout=10_000)
    assert "In the store: self-draft of tiny-target.gguf: blocks 0,3 of 4" in panel.status_label.text()
    with qtbot.waitSignal(picker.own_pair_checked, timeout=10_000) as checked:
        panel.use_found_button.click()
    assert not isinstance(checked.args[0], str) and checked.args[0].ok
    assert picker.draft_edit.text() == str(built.path) and picker.own_use_button.isEnabled()
    picker.target_edit.setText(str(tiny_family.draft))
    qtbot.waitUntil(lambda: not panel.use_found_button.isVisible(), timeout=10_000)


def test_a_build_can_be_cancelled_and_leaves_nothing(qtbot: QtBot, picker: PairPickerDialog, answers: list[str],
                                                     smollm_path: Path, store: ModelStore) -> None:
    panel = picker.own_tab.self_draft
    picker.target_edit.setText(str(smollm_path))
    started: list[str] = []
    panel._progressed.connect(lambda ev: started.append(ev.stage))
    panel.make_button.click()
    qtbot.waitUntil(lambda: "build" in started or "calibrate" in started, timeout=BUILD_MS)
    assert panel.progress.isVisible() and panel.cancel_button.isVisible()
    with qtbot.waitSignal(panel.build_finished, timeout=60_000) as finished:
        panel.cancel_button.click()
    assert isinstance(finished.args[0], str) and finished.args[0].startswith("Cancelled")
    assert panel.status_label.text().startswith("Cancelled")
    assert panel.make_button.isEnabled() and not panel.progress.isVisible()
    assert _drafts(store) == []
    assert not list(store.self_drafts_root.glob(".build-*"))
    qtbot.waitUntil(lambda: not _build_children(), timeout=10_000)


def test_declining_the_question_builds_nothing(qtbot: QtBot, picker: PairPickerDialog, tiny_family: Family,
                                               store: ModelStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(QMessageBox, "exec", lambda _box: int(QMessageBox.StandardButton.No))
    panel = picker.own_tab.self_draft
    picker.target_edit.setText(str(tiny_family.target))
    panel.make_button.click()
    qtbot.waitUntil(lambda: panel.status_label.text() == "No draft made.", timeout=10_000)
    assert panel.build is None and _drafts(store) == []


def test_a_target_that_cannot_be_cut_is_said_in_words(qtbot: QtBot, picker: PairPickerDialog, answers: list[str],
                                                      tiny_family: Family, tmp_path: Path, store: ModelStore) -> None:
    panel = picker.own_tab.self_draft
    notes = tmp_path / "notes.gguf"
    notes.write_text("not a model")
    for target, words in ((notes, "is not a GGUF"), (tiny_family.draft, "a self-draft needs at least 3")):
        picker.target_edit.setText(str(target))
        with qtbot.waitSignal(panel.build_finished, timeout=10_000) as finished:
            panel.make_button.click()
        assert isinstance(finished.args[0], str) and words in finished.args[0], finished.args[0]
        assert finished.args[0].startswith("No draft made:") and "Error" not in finished.args[0]
    assert answers == [], "nothing is asked about a target that cannot be cut"
    assert _drafts(store) == []


def test_a_disk_that_fills_up_during_the_build_is_said_and_leaves_nothing(
        qtbot: QtBot, picker: PairPickerDialog, answers: list[str], tiny_family: Family, store: ModelStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The build process may write at most 200 kB per file (RLIMIT_FSIZE: llama.cpp's own writes fail as on a
    full disk): the panel says the disk is full in words, the make button comes back, and the store holds no
    draft and no scratch file. (With the build's error shown as its repr, the status read "No draft made:
    SelfDraftError('disk_full', ...)".)"""
    import outrider.ui.picker.self_draft_panel as panel_module

    monkeypatch.setattr(panel_module, "SelfDraftBuild", functools.partial(SelfDraftBuild, fsize_limit=200_000))
    panel = picker.own_tab.self_draft
    picker.target_edit.setText(str(tiny_family.target))
    with qtbot.waitSignal(panel.build_finished, timeout=BUILD_MS) as finished:
        panel.make_button.click()
    words = finished.args[0]
    assert isinstance(words, str) and words.startswith("No draft made:") and "disk" in words, words
    assert "Error" not in words and "Errno" not in words
    assert panel.status_label.text() == words and panel.make_button.isEnabled()
    assert _drafts(store) == [] and not [p for p in store.self_drafts_root.rglob("*") if p.is_file()]
    qtbot.waitUntil(lambda: not _build_children(), timeout=10_000)


def _self_draft_of(store: ModelStore, target: Path, name: str) -> Path:
    """A self-draft record of ``target`` in the store, as a build leaves it (the file's contents do not matter to
    the delete flow: the target's bytes stand in for a pruned copy)."""
    built = store.self_drafts_root / f".{name}.building"
    built.parent.mkdir(parents=True, exist_ok=True)
    built.write_bytes(target.read_bytes())
    sha = store.file_sha256(target)
    assert sha is not None
    record = store.add_self_draft(built, name, {"target_sha256": sha, "target_name": target.name, "n_layer": 2,
                                                "keep": [0], "type": "q8_0", "acceptance": 0.5})
    return record.path


@pytest.mark.parametrize(("answer", "target_left", "drafts_left"), [
    (QMessageBox.StandardButton.Yes, False, 0),
    (QMessageBox.StandardButton.No, False, 2),
    (QMessageBox.StandardButton.Cancel, True, 2),
])
def test_deleting_a_target_offers_to_delete_its_self_drafts(
        qtbot: QtBot, make_service: ServiceFactory, store: ModelStore, installed: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch, answer: QMessageBox.StandardButton, target_left: bool,
        drafts_left: int) -> None:
    """On disk → a store file → Delete: the question names the two self-drafts made from it (found through their
    records' target sha256); Yes deletes the target and both, No the target only, Cancel nothing. Another
    model's files are untouched. (Before the flow existed the tab had no Delete button at all; with the drafts
    left out of the deleted paths, the Yes case kept 2.)"""
    target = installed["target"]
    drafts = [_self_draft_of(store, target, "tiny-target-self-a.gguf"),
              _self_draft_of(store, target, "tiny-target-self-b.gguf")]
    asked: list[str] = []

    def exec_(box: QMessageBox) -> int:
        asked.append(box.text())
        return int(answer)

    monkeypatch.setattr(QMessageBox, "exec", exec_)
    dlg = PairPickerDialog(make_service())
    qtbot.addWidget(dlg)
    with qtbot.waitSignal(dlg.scan_finished, timeout=10_000):
        pass
    tab = dlg.on_disk_tab
    dlg.tabs.setCurrentWidget(tab)
    assert tab.select_path(str(target)) and tab.delete_button.isEnabled()
    if answer == QMessageBox.StandardButton.Cancel:
        tab.delete_button.click()
        qtbot.waitUntil(lambda: tab.status_label.text() == "Nothing deleted.", timeout=10_000)
    else:
        with qtbot.waitSignal(dlg.scan_finished, timeout=10_000):  # deleting rescans
            tab.delete_button.click()
    assert len(asked) == 1 and all(d.name in asked[0] for d in drafts), asked
    assert target.exists() == target_left
    assert sum(d.exists() for d in drafts) == drafts_left == len(store.self_drafts())
    assert installed["draft"].exists() and installed["incompatible"].exists()
    if not target_left:
        assert tab.status_label.text().startswith(f"Deleted {target.name}")
        assert str(target) not in [dlg.found_model.index(i, 0).data(FoundRole.Path)
                                   for i in range(dlg.found_model.rowCount())]
    dlg.close()


def test_delete_is_offered_only_for_the_stores_files_and_a_failure_is_said(
        qtbot: QtBot, make_service: ServiceFactory, store: ModelStore, installed: dict[str, Path],
        tmp_path: Path, tiny_family: Family, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of the user's own folder cannot be deleted from the picker (button disabled); a store file that
    cannot be deleted (permission refused) says why and is kept. (With the button enabled for every
    source, the user's own file was offered for deletion.)"""
    folder = tmp_path / "mine"
    folder.mkdir()
    mine = folder / "my-model.gguf"
    shutil.copyfile(tiny_family.draft, mine)
    store.add_folder(folder)
    monkeypatch.setattr(QMessageBox, "exec", lambda box: int(QMessageBox.StandardButton.Yes))
    dlg = PairPickerDialog(make_service())
    qtbot.addWidget(dlg)
    with qtbot.waitSignal(dlg.scan_finished, timeout=10_000):
        pass
    tab = dlg.on_disk_tab
    assert tab.select_path(str(mine)) and not tab.delete_button.isEnabled()
    target = installed["target"]
    assert tab.select_path(str(target)) and tab.delete_button.isEnabled()

    def refused(self: ModelStore, path: Path) -> None:  # as unlink on a read-only folder (tests may run as root)
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(ModelStore, "delete_model", refused)
    tab.delete_button.click()
    qtbot.waitUntil(lambda: tab.status_label.text().startswith("Could not delete"), timeout=10_000)
    assert target.exists() and mine.exists()
    assert target.name in tab.status_label.text() and "ermission" in tab.status_label.text()
    assert tab.delete_button.isEnabled()
    dlg.close()
