"""Export of a conversation from the GUI (File > Export conversation…, the list's context menu): the file holds the
same document as `outrider chats export`, the format follows the file name or the dialog's filter, and a failed
write is reported in words with nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from outrider import cli
from outrider.history import ExportFormat, HistoryStore, Role
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.main_window import MainWindow
from outrider.ui.settings import QtSettings
from outrider.ui.widgets.conversation_export import (
    ACTION_EXPORT,
    JSON_FILTER,
    MARKDOWN_FILTER,
    export_target,
    suggested_file_name,
)

DIALOG = "outrider.ui.widgets.conversation_export.QFileDialog.getSaveFileName"


class _NoEngine:
    def __init__(self) -> None:
        self.backend: dict[str, Any] = {}

    pid = None
    log_path = None
    loaded = None

    def cancel(self) -> None: ...
    def stop(self, timeout: float = 10.0) -> None: ...


@pytest.fixture
def parts(qtbot: Any) -> Iterator[tuple[MainWindow, QtStoreBridge, QtEngineBridge, int]]:
    store = QtStoreBridge(HistoryStore.open())
    bridge = QtEngineBridge(_NoEngine())  # type: ignore[arg-type]
    history = store.store
    cid = history.create_conversation(title="Regex help")
    history.add_message(cid, Role.USER, "Match ISO dates like 2024-05-01 ✓")
    history.add_message(cid, Role.ASSISTANT, "Use:\n```python\nre.compile(r'\\d{4}-\\d{2}-\\d{2}')\n```")
    window = MainWindow(bridge, store, QtSettings())
    qtbot.addWidget(window)
    window.show()
    yield window, store, bridge, cid
    window.close()
    bridge.shutdown()
    store.close()


def _close(parts: tuple[MainWindow, QtStoreBridge, QtEngineBridge, int]) -> None:
    window, store, bridge, _ = parts
    window.close()
    bridge.shutdown()
    store.close()


def _cli_export(cid: int, fmt: ExportFormat, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert cli.main(["chats", "export", str(cid), "--format", fmt.value]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("name", "selected", "fmt"), [
    ("chat.md", MARKDOWN_FILTER, ExportFormat.MARKDOWN),
    ("chat", JSON_FILTER, ExportFormat.JSON),  # no suffix: the filter decides and its suffix is added
])
def test_menu_export_writes_what_the_cli_exports(qtbot: Any, parts: Any, tmp_path: Path, name: str, selected: str,
                                                 fmt: ExportFormat, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    window, _store, _bridge, cid = parts
    window.session.open_conversation(cid)
    asked: list[str] = []

    def save_dialog(_parent: Any, _caption: str, suggested: str, filters: str, *_a: Any) -> tuple[str, str]:
        asked.append(suggested)
        assert filters == f"{MARKDOWN_FILTER};;{JSON_FILTER}"
        return str(tmp_path / name), selected

    monkeypatch.setattr(DIALOG, save_dialog)
    action = window.actions_by_id[ACTION_EXPORT]
    assert action.shortcut().toString() == "Ctrl+Shift+E"
    with qtbot.waitSignal(window.exporter.exported, timeout=5000) as blocker:
        action.trigger()
    written = Path(blocker.args[0])
    assert written == tmp_path / (name if name.endswith(".md") else f"{name}.{fmt.value}")
    assert Path(asked[0]).name == "Regex-help.md"
    assert str(written) in window.notice_label.text()
    text = written.read_text(encoding="utf-8")
    _close(parts)  # the store is single-writer: the command line opens it after the window is gone
    expected = _cli_export(cid, fmt, capsys)
    if fmt is ExportFormat.JSON:
        doc, cli_doc = json.loads(text), json.loads(expected)
        doc.pop("exported_at", None), cli_doc.pop("exported_at", None)
        assert doc == cli_doc and doc["conversations"][0]["title"] == "Regex help"
    else:
        assert text == expected and "✓" in text and "```python" in text


def test_export_below_a_file_says_so_in_words(qtbot: Any, parts: Any, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    window, _store, _bridge, cid = parts
    blocker_file = tmp_path / "notes.txt"
    blocker_file.write_text("not a folder", encoding="utf-8")
    target = blocker_file / "sub" / "chat.md"
    monkeypatch.setattr(DIALOG, lambda *_a: (str(target), MARKDOWN_FILTER))
    window.conversations.select(cid)
    with qtbot.waitSignal(window.exporter.failed, timeout=5000) as blocker:
        window.actions_by_id[ACTION_EXPORT].trigger()
    message = blocker.args[0]
    assert message == f"Not exported: {blocker_file} is a file, not a folder."
    assert window.notice_label.text() == message and "Errno" not in message
    assert blocker_file.read_text(encoding="utf-8") == "not a folder"


def test_export_with_nothing_open_explains(qtbot: Any, parts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    window = parts[0]
    window.conversations.list.clearSelection()
    window.conversations.list.setCurrentIndex(window.list_model.index(-1, 0))
    monkeypatch.setattr(DIALOG, lambda *_a: pytest.fail("no dialog without a conversation"))
    window.actions_by_id[ACTION_EXPORT].trigger()
    assert window.notice_label.text() == "Nothing to export yet: open or start a conversation first."


def test_cancelled_dialog_writes_nothing(qtbot: Any, parts: Any, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    window, _store, _bridge, cid = parts
    monkeypatch.setattr(DIALOG, lambda *_a: ("", ""))
    with qtbot.assertNotEmitted(window.exporter.exported), qtbot.assertNotEmitted(window.exporter.failed):
        window.conversations.export_requested.emit(cid)
        qtbot.wait(100)
    assert list(tmp_path.iterdir()) == [p for p in tmp_path.iterdir() if p.name == "home"]


def test_export_target_and_suggested_name() -> None:
    assert export_target("/x/a.JSON", MARKDOWN_FILTER) == (Path("/x/a.JSON"), ExportFormat.JSON)
    assert export_target("/x/a.markdown", JSON_FILTER) == (Path("/x/a.markdown"), ExportFormat.MARKDOWN)
    assert export_target("/x/a.txt", JSON_FILTER) == (Path("/x/a.txt.json"), ExportFormat.JSON)
    assert export_target("/x/a", "") == (Path("/x/a.md"), ExportFormat.MARKDOWN)
    assert suggested_file_name("Regex help: ISO/dates?") == "Regex-help-ISO-dates.md"
    assert suggested_file_name("???", ExportFormat.JSON) == "conversation.json"
