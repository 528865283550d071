"""Conversation list actions in the real main window (no engine): new, rename, delete with undo, search."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import Qt

from outrider.history import HistoryStore, Role
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.main_window import MainWindow
from outrider.ui.settings import QtSettings
from outrider.ui.widgets.conversation_list import ConversationRole


class _NoEngine:
    """An engine client that is never asked to do anything in these tests."""

    def __init__(self) -> None:
        self.backend: dict[str, Any] = {}

    pid = None
    log_path = None
    loaded = None

    def cancel(self) -> None: ...
    def stop(self, timeout: float = 10.0) -> None: ...


@pytest.fixture
def win(qtbot: Any) -> Iterator[MainWindow]:
    store = QtStoreBridge(HistoryStore.open())
    bridge = QtEngineBridge(_NoEngine())  # type: ignore[arg-type]
    window = MainWindow(bridge, store, QtSettings())
    qtbot.addWidget(window)
    history = store.store
    for title, text in (("Packing list", "socks, charger and a raincoat"),
                        ("Regex help", "match ISO dates like 2024-05-01"),
                        ("Quarterly report", "summarise revenue and churn")):
        cid = history.create_conversation(title=title)
        history.add_message(cid, Role.USER, text)
        history.add_message(cid, Role.ASSISTANT, f"About {title.lower()}.")
    window.refresh_conversations()
    window.show()
    yield window
    window.close()
    bridge.shutdown()
    store.close()


def titles(win: MainWindow) -> list[str]:
    return [row.title for row in win.list_model.rows()]


def select(win: MainWindow, title: str) -> int:
    row = titles(win).index(title)
    index = win.list_model.index(row, 0)
    win.conversations.list.setCurrentIndex(index)
    return int(win.list_model.data(index, ConversationRole.ID))


def test_open_then_new_starts_an_empty_conversation(qtbot: Any, win: MainWindow) -> None:
    assert sorted(titles(win)) == ["Packing list", "Quarterly report", "Regex help"]
    cid = select(win, "Regex help")
    with qtbot.waitSignal(win.session.conversation_opened):
        win.conversations.list.activated.emit(win.conversations.list.currentIndex())
    assert win.session.conversation_id == cid and [m.role for m in win.chat.messages] == ["user", "assistant"]
    with qtbot.waitSignal(win.session.conversation_opened, check_params_cb=lambda cid, items: cid is None):
        qtbot.mouseClick(win.conversations.new_button, Qt.MouseButton.LeftButton)
    assert win.session.conversation_id is None and win.chat.messages == []
    assert win.chat.composer.hasFocus() or not win.isActiveWindow()


def test_rename(qtbot: Any, win: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    cid = select(win, "Packing list")
    asked: list[str] = []

    def get_text(parent: Any, caption: str, label: str, mode: Any, text: str) -> tuple[str, bool]:
        asked.append(text)
        return "  Lisbon trip  ", True

    monkeypatch.setattr("outrider.ui.widgets.conversation_list.QInputDialog.getText", get_text)
    with qtbot.waitSignal(win.store.conversations_changed):
        qtbot.mouseClick(win.conversations.rename_button, Qt.MouseButton.LeftButton)
    assert asked == ["Packing list"]  # the dialog starts from the current title
    assert "Lisbon trip" in titles(win) and "Packing list" not in titles(win)
    assert win.store.conversation(cid).title == "Lisbon trip"


def test_rename_cancelled_or_blank_changes_nothing(qtbot: Any, win: MainWindow,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    select(win, "Packing list")
    for answer in (("whatever", False), ("   ", True)):
        monkeypatch.setattr("outrider.ui.widgets.conversation_list.QInputDialog.getText",
                            lambda *a, answer=answer: answer)
        with qtbot.assertNotEmitted(win.conversations.rename_requested):
            qtbot.mouseClick(win.conversations.rename_button, Qt.MouseButton.LeftButton)
    assert "Packing list" in titles(win)


def test_delete_then_undo(qtbot: Any, win: MainWindow) -> None:
    cid = select(win, "Quarterly report")
    with qtbot.waitSignal(win.store.conversations_changed):
        qtbot.mouseClick(win.conversations.delete_button, Qt.MouseButton.LeftButton)
    assert "Quarterly report" not in titles(win)
    bar = win.conversations.undo_bar
    assert bar.isVisible() and "Quarterly report" in win.conversations.undo_label.text()
    with qtbot.waitSignal(win.store.conversations_changed):
        qtbot.mouseClick(win.conversations.undo_button, Qt.MouseButton.LeftButton)
    assert "Quarterly report" in titles(win) and not bar.isVisible()
    first = win.store.conversation(cid).messages[0]
    assert getattr(first, "text", None) == "summarise revenue and churn"


def test_delete_the_open_conversation_opens_a_new_one_and_undo_expires(qtbot: Any, win: MainWindow) -> None:
    cid = select(win, "Regex help")
    win.session.open_conversation(cid)
    win.conversations._undo_timer.setInterval(50)  # the 8 s undo window, shortened
    with qtbot.waitSignal(win.session.conversation_opened, check_params_cb=lambda c, items: c is None):
        qtbot.mouseClick(win.conversations.delete_button, Qt.MouseButton.LeftButton)
    assert win.session.conversation_id is None
    qtbot.waitUntil(lambda: "Regex help" not in titles(win))
    qtbot.waitUntil(lambda: not win.conversations.undo_bar.isVisible())
    assert sorted(titles(win)) == ["Packing list", "Quarterly report"]


def test_delete_without_selection_does_nothing(qtbot: Any, win: MainWindow) -> None:
    win.conversations.list.setCurrentIndex(win.list_model.index(-1, 0))
    with qtbot.assertNotEmitted(win.conversations.delete_requested):
        qtbot.mouseClick(win.conversations.delete_button, Qt.MouseButton.LeftButton)
    assert len(titles(win)) == 3


def test_search_filters_by_message_text_and_clearing_shows_all(qtbot: Any, win: MainWindow) -> None:
    qtbot.keyClicks(win.conversations.search, "raincoat")
    rows = win.list_model.rows()
    assert [r.title for r in rows] == ["Packing list"] and "raincoat" in rows[0].snippet
    win.conversations.search.clear()
    assert len(titles(win)) == 3
    qtbot.keyClicks(win.conversations.search, "nothing-matches-this")
    assert titles(win) == []
    win.conversations.search.clear()
    cid = select(win, "Regex help")
    with qtbot.waitSignal(win.session.conversation_opened, check_params_cb=lambda c, items: c == cid):
        win.conversations.list.clicked.emit(win.conversations.list.currentIndex())
