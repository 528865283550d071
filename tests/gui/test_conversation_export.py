"""Export of a conversation from the GUI (File > Export conversation…, the list's context menu): the same Markdown
or JSON as ``outrider chats export``, written on the store thread; failures in words; the format from the name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QFileDialog
from tests.support.gui_windows import offline_main_window

from outrider.history import ExportFormat, Role
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.main_window import MainWindow
from outrider.ui.widgets.conversation_export import (
    ACTION_EXPORT,
    ACTION_EXPORT_ALL,
    ACTION_IMPORT,
    JSON_FILTER,
    MARKDOWN_FILTER,
    all_exported_text,
    export_error_text,
    export_target,
    import_error_text,
    suggested_file_name,
)
from outrider.ui.widgets.conversation_list import ConversationRole

ROOT = Path(__file__).resolve().parents[2]
REPLY = "Use `\\d{4}-\\d{2}-\\d{2}`:\n\n```python\nre.findall(r'\\d{4}-\\d{2}-\\d{2}', text)\n```"


@pytest.fixture
def parts(qtbot: Any) -> Iterator[tuple[MainWindow, QtStoreBridge, QtEngineBridge, int]]:
    with offline_main_window(qtbot) as (window, store, bridge):
        history = store.store
        other = history.create_conversation(title="Packing list")
        history.add_message(other, Role.USER, "socks and a raincoat")
        cid = history.create_conversation(title="Regex help: ISO dates")
        history.add_message(cid, Role.USER, "match ISO dates like 2024-05-01 — ünïcode too")
        history.add_message(cid, Role.ASSISTANT, REPLY)
        window.refresh_conversations()
        window.show()
        yield window, store, bridge, cid


def _dialog(monkeypatch: pytest.MonkeyPatch, name: str, path: Path | None, selected: str, record: int) -> list[str]:
    """``QFileDialog.<name>`` answers ``path`` (None: the user cancelled); returns argument ``record`` of each call
    (2: the suggested path, 3: the filters)."""
    asked: list[str] = []

    def answer(*args: str) -> tuple[str, str]:
        asked.append(args[record])
        return ("", "") if path is None else (str(path), selected)

    monkeypatch.setattr(QFileDialog, name, staticmethod(answer))
    return asked


def _choose_file(monkeypatch: pytest.MonkeyPatch, path: Path | None, selected: str = MARKDOWN_FILTER) -> list[str]:
    """The save dialog answers ``path``; returns the suggested names it was given."""
    return _dialog(monkeypatch, "getSaveFileName", path, selected, 2)


def _choose_open(monkeypatch: pytest.MonkeyPatch, path: Path | None) -> list[str]:
    """The open dialog answers ``path``; returns the filters it was given."""
    return _dialog(monkeypatch, "getOpenFileName", path, JSON_FILTER, 3)


def _cli_export(home: Path, cid: int, fmt: str) -> str:
    env = dict(os.environ, OUTRIDER_HOME=str(home))
    r = subprocess.run([sys.executable, "-m", "outrider.cli", "chats", "export", str(cid), "--format", fmt],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _select(win: MainWindow, cid: int) -> None:
    win.conversations.list.setCurrentIndex(win.list_model.index(win.list_model.row_of(cid), 0))


def test_file_menu_exports_markdown_like_the_cli(qtbot: Any, parts: Any, tmp_path: Path, _private_home: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    win, store, bridge, cid = parts
    target = tmp_path / "out" / "regex.md"
    target.parent.mkdir()
    asked = _choose_file(monkeypatch, target)
    _select(win, cid)
    action = win.actions_by_id[ACTION_EXPORT]
    assert action.shortcut().toString() == "Ctrl+Shift+E" and action.text() == "&Export conversation…"
    with qtbot.waitSignal(win.exporter.exported, timeout=10_000) as blocker:
        action.trigger()
    assert blocker.args == [str(target)]
    assert Path(asked[0]).name == "Regex-help-ISO-dates.md"  # a safe name from the title
    written = target.read_text(encoding="utf-8")
    assert "Regex help: ISO dates" in written and "```python" in written and "ünïcode" in written
    assert "socks" not in written  # only the selected conversation
    win.close()
    bridge.shutdown()
    store.close()  # the store's lock is released: the CLI may open the same history
    assert _cli_export(_private_home, cid, "md") == written


def test_context_menu_exports_json_with_the_suffix_from_the_filter(qtbot: Any, parts: Any, tmp_path: Path,
                                                                   _private_home: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    win, store, bridge, cid = parts
    _choose_file(monkeypatch, tmp_path / "regex", JSON_FILTER)  # no suffix typed: the JSON filter decides
    _select(win, cid)
    menu = win.conversations.context_menu(win.conversations.list.currentIndex())
    assert menu is not None
    export = next(a for a in menu.actions() if "Export" in a.text())
    with qtbot.waitSignal(win.exporter.exported, timeout=10_000):
        export.trigger()
    target = tmp_path / "regex.json"
    doc = json.loads(target.read_text(encoding="utf-8"))
    assert [m["text"] for c in doc["conversations"] for m in c["messages"]][-1] == REPLY
    win.close()
    bridge.shutdown()
    store.close()
    cli = json.loads(_cli_export(_private_home, cid, "json"))
    doc.pop("exported_at")
    cli.pop("exported_at")
    assert doc == cli


def test_a_failed_export_is_said_in_words_and_writes_nothing(qtbot: Any, parts: Any, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    win, _store, _bridge, cid = parts
    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    missing = tmp_path / "a-file" / "x.md"
    _choose_file(monkeypatch, missing)
    _select(win, cid)
    with qtbot.waitSignal(win.exporter.failed, timeout=10_000) as blocker:
        win.actions_by_id[ACTION_EXPORT].trigger()
    assert blocker.args == [f"Not exported: {missing.parent} is a file, not a folder."]
    assert not missing.exists() and (tmp_path / "a-file").read_text(encoding="utf-8") == "not a folder"


def test_cancelling_the_save_dialog_writes_nothing(qtbot: Any, parts: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    win, _store, _bridge, cid = parts
    asked = _choose_file(monkeypatch, None)
    _select(win, cid)
    with qtbot.assertNotEmitted(win.exporter.exported), qtbot.assertNotEmitted(win.exporter.failed, wait=200):
        win.actions_by_id[ACTION_EXPORT].trigger()
    assert len(asked) == 1 and not list(tmp_path.glob("*.md"))


def test_list_rows_are_readable_and_export_needs_a_conversation(qtbot: Any, parts: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing selected and no conversation open, Export says so instead of asking for a file."""
    win, _store, _bridge, _cid = parts
    asked = _choose_file(monkeypatch, None)
    notices: list[str] = []
    monkeypatch.setattr(win, "show_notice", lambda text, scope="app": notices.append(text))
    win.conversations.list.setCurrentIndex(win.list_model.index(-1, 0))
    assert win.conversations.selected_id() is None and win.controller.conversation_id is None
    win.actions_by_id[ACTION_EXPORT].trigger()
    assert asked == [] and notices == ["Nothing to export yet: open or start a conversation first."]
    assert all(win.list_model.index(i, 0).data(ConversationRole.READABLE) for i in range(win.list_model.rowCount()))


@pytest.mark.parametrize(("chosen", "selected", "expected"), [
    ("/t/a.md", JSON_FILTER, ("/t/a.md", ExportFormat.MARKDOWN)),  # the typed suffix wins over the filter
    ("/t/a.JSON", MARKDOWN_FILTER, ("/t/a.JSON", ExportFormat.JSON)),
    ("/t/a", JSON_FILTER, ("/t/a.json", ExportFormat.JSON)),
    ("/t/a", "", ("/t/a.md", ExportFormat.MARKDOWN)),
    ("/t/notes.txt", MARKDOWN_FILTER, ("/t/notes.txt.md", ExportFormat.MARKDOWN)),
])
def test_export_target(chosen: str, selected: str, expected: tuple[str, ExportFormat]) -> None:
    path, fmt = export_target(chosen, selected)
    assert (str(path), fmt) == expected


def test_suggested_file_name() -> None:
    assert suggested_file_name("Regex help") == "Regex-help.md"
    assert suggested_file_name("../../etc/passwd", ExportFormat.JSON) == "etc-passwd.json"
    assert suggested_file_name("   ") == "conversation.md"


def _cli_export_all(home: Path, fmt: str) -> str:
    env = dict(os.environ, OUTRIDER_HOME=str(home))
    r = subprocess.run([sys.executable, "-m", "outrider.cli", "chats", "export", "all", "--format", fmt],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_export_all_writes_every_conversation_like_the_cli(qtbot: Any, parts: Any, tmp_path: Path,
                                                           _private_home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    win, store, bridge, _cid = parts
    asked = _choose_file(monkeypatch, tmp_path / "everything", JSON_FILTER)
    action = win.actions_by_id[ACTION_EXPORT_ALL]
    assert action.text() == "Export &all conversations…"
    with qtbot.waitSignal(win.exporter.exported_all, timeout=10_000) as blocker:
        action.trigger()
    target = tmp_path / "everything.json"
    assert blocker.args == [str(target), 0] and Path(asked[0]).name == "conversations.md"
    assert win.notice_label.text() == f"All conversations exported to {target}"
    doc = json.loads(target.read_text(encoding="utf-8"))
    assert sorted(c["title"] for c in doc["conversations"]) == ["Packing list", "Regex help: ISO dates"]
    win.close()
    bridge.shutdown()
    store.close()
    cli = json.loads(_cli_export_all(_private_home, "json"))
    doc.pop("exported_at")
    cli.pop("exported_at")
    assert doc == cli


def test_export_all_with_no_conversation_explains(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _choose_file(monkeypatch, None)
    with offline_main_window(qtbot) as (win, _store, _bridge):
        win.actions_by_id[ACTION_EXPORT_ALL].trigger()
        assert asked == [] and win.notice_label.text() == "Nothing to export yet: there is no conversation."


def test_all_exported_text_counts_what_was_left_out() -> None:
    assert all_exported_text("/t/a.md", 0) == "All conversations exported to /t/a.md"
    assert all_exported_text("/t/a.md", 1).startswith("Conversations exported to /t/a.md; 1 could not be read and "
                                                      "was left out")
    assert "2 could not be read and were left out" in all_exported_text("/t/a.md", 2)


def test_errors_in_words() -> None:
    from outrider.history import ConversationNotFoundError, RecordUnreadableError

    path = Path("/t/chat.md")
    unreadable = RecordUnreadableError("message", 12, "bad UTF-8")
    assert export_error_text(unreadable, path, 3) == (
        "Not exported: message 12 of the history could not be read (bad UTF-8); "
        "`outrider chats export 3 --raw` saves it exactly as stored.")
    assert "`outrider chats export ID --raw`" in export_error_text(unreadable, path)
    assert export_error_text(ConversationNotFoundError(3), path) == (
        "Not exported: the conversation no longer exists (deleted?).")
    assert export_error_text(OSError(28, "No space left on device"), path) == "Not exported: the disk is full (/t)."
    assert export_error_text(IsADirectoryError(21, "Is a directory"), path) == (
        "Not exported: /t/chat.md is a folder; choose a file name.")
    for exc in (OSError(5, "Input/output error"), PermissionError(13, "Permission denied")):
        assert "Errno" not in export_error_text(exc, path)



def test_import_adds_an_export_and_skips_what_is_already_here(qtbot: Any, parts: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    win, store, _bridge, cid = parts
    doc = json.loads(store.store.render_conversation(cid, ExportFormat.JSON))
    again = tmp_path / "again.json"
    again.write_text(json.dumps(doc), encoding="utf-8")
    doc["conversations"][0]["uuid"] = "00000000-0000-4000-8000-000000000001"  # another conversation
    doc["conversations"][0]["title"] = "Imported regex help"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc), encoding="utf-8")
    action = win.actions_by_id[ACTION_IMPORT]
    assert action.text() == "&Import conversations…"

    asked = _choose_open(monkeypatch, again)
    action.trigger()
    qtbot.waitUntil(lambda: win.notice_label.text().startswith("Imported 0 conversations"), timeout=10_000)
    assert win.notice_label.text() == f"Imported 0 conversations from {again}; 1 was already here (skipped)"
    assert asked == [f"{JSON_FILTER};;All files (*)"]

    _choose_open(monkeypatch, other)
    with qtbot.waitSignal(win.store.conversations_changed, timeout=10_000):
        action.trigger()
    assert win.notice_label.text() == f"Imported 1 conversation from {other}"
    titles = [r.title for r in win.list_model.rows()]
    assert "Imported regex help" in titles and len(titles) == 3
    imported = next(r.id for r in win.list_model.rows() if r.title == "Imported regex help")
    assert [m.text for m in win.store.conversation(imported).messages][-1] == REPLY


def test_import_of_a_file_that_is_not_an_export_changes_nothing(qtbot: Any, parts: Any, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    win, _store, _bridge, _cid = parts
    before = [r.title for r in win.list_model.rows()]
    notes = tmp_path / "notes.json"
    notes.write_text('{"hello": "world"}', encoding="utf-8")
    _choose_open(monkeypatch, notes)
    win.actions_by_id[ACTION_IMPORT].trigger()
    qtbot.waitUntil(lambda: win.notice_label.text().startswith("Not imported"), timeout=10_000)
    text = win.notice_label.text()
    assert text.startswith("Not imported: notes.json is not an Outrider export (") and "nothing was changed" in text
    assert [r.title for r in win.list_model.rows()] == before
    _choose_open(monkeypatch, tmp_path / "missing.json")
    win.actions_by_id[ACTION_IMPORT].trigger()
    qtbot.waitUntil(lambda: "does not exist" in win.notice_label.text(), timeout=10_000)
    assert win.notice_label.text() == f"Not imported: {tmp_path / 'missing.json'} does not exist."
    _choose_open(monkeypatch, None)  # cancelled: nothing happens
    win.actions_by_id[ACTION_IMPORT].trigger()
    assert win.notice_label.text() == f"Not imported: {tmp_path / 'missing.json'} does not exist."


def test_import_errors_in_words() -> None:
    path = Path("/t/chats.json")
    assert import_error_text(IsADirectoryError(21, "Is a directory"), path) == (
        "Not imported: /t/chats.json is a folder.")
    assert import_error_text(PermissionError(13, "Permission denied"), path) == (
        "Not imported: no permission to read /t/chats.json.")
    assert import_error_text(OSError(5, "Input/output error"), path) == (
        "Not imported: cannot read /t/chats.json (input/output error).")
    assert import_error_text(ValueError("odd"), path) == "Not imported: odd."
