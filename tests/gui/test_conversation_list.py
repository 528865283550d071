"""Conversation list actions in the real main window (no engine): new, rename, delete with undo, search; dates,
plain-text snippets, the empty-list line and the context menu."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QStyleOptionViewItem
from tests.support.gui_windows import offline_main_window

from outrider.history import Role
from outrider.ui.main_window import MainWindow
from outrider.ui.widgets.conversation_list import NO_CONVERSATIONS_TEXT, ConversationListModel
from outrider.ui.widgets.conversation_rows import (
    ConversationDelegate,
    ConversationRole,
    ConversationRow,
    date_label,
    focus_on_match,
    highlight_words,
    plain_snippet,
)


@pytest.fixture
def win(qtbot: Any) -> Iterator[MainWindow]:
    with offline_main_window(qtbot) as (window, store, _bridge):
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
    with qtbot.waitSignal(win.controller.conversation_opened):
        win.conversations.list.activated.emit(win.conversations.list.currentIndex())
    assert win.controller.conversation_id == cid and [m.role for m in win.chat.messages] == ["user", "assistant"]
    with qtbot.waitSignal(win.controller.conversation_opened, check_params_cb=lambda cid, items: cid is None):
        qtbot.mouseClick(win.conversations.new_button, Qt.MouseButton.LeftButton)
    assert win.controller.conversation_id is None and win.chat.messages == []
    assert win.chat.composer.hasFocus() or not win.isActiveWindow()


def answer_rename(monkeypatch: pytest.MonkeyPatch, answer: str, ok: bool = True,
                  asked: list[tuple[str, int]] | None = None) -> None:
    """The rename dialog, answered: records (the title it started from, its minimum width) in ``asked``."""
    from PySide6.QtWidgets import QInputDialog

    def run(dialog: QInputDialog) -> int:
        if asked is not None:
            asked.append((dialog.textValue(), dialog.minimumWidth()))
        dialog.setTextValue(answer)
        return int(QInputDialog.DialogCode.Accepted if ok else QInputDialog.DialogCode.Rejected)

    monkeypatch.setattr("outrider.ui.widgets.conversation_list.QInputDialog.exec", run)


def test_rename(qtbot: Any, win: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    cid = select(win, "Packing list")
    asked: list[tuple[str, int]] = []
    answer_rename(monkeypatch, "  Lisbon trip  ", asked=asked)
    with qtbot.waitSignal(win.store.conversations_changed):
        qtbot.mouseClick(win.conversations.rename_button, Qt.MouseButton.LeftButton)
    assert [title for title, _ in asked] == ["Packing list"]  # the dialog starts from the current title
    assert asked[0][1] >= 400  # wide enough for a title (the default dialog was ~170 px)
    assert "Lisbon trip" in titles(win) and "Packing list" not in titles(win)
    assert win.store.conversation(cid).title == "Lisbon trip"


def test_rename_cancelled_or_blank_changes_nothing(qtbot: Any, win: MainWindow,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    select(win, "Packing list")
    for text, ok in (("whatever", False), ("   ", True)):
        answer_rename(monkeypatch, text, ok)
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
    win.controller.open_conversation(cid)
    win.conversations._undo_timer.setInterval(50)  # the 8 s undo window, shortened
    with qtbot.waitSignal(win.controller.conversation_opened, check_params_cb=lambda c, items: c is None):
        qtbot.mouseClick(win.conversations.delete_button, Qt.MouseButton.LeftButton)
    assert win.controller.conversation_id is None
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
    with qtbot.waitSignal(win.controller.conversation_opened, check_params_cb=lambda c, items: c == cid):
        win.conversations.list.clicked.emit(win.conversations.list.currentIndex())


# -- dates, plain snippets, empty states ------------------------------------------------------------------------
def _local(year: int, month: int, day: int, hour: int = 12, minute: int = 0) -> float:
    return time.mktime((year, month, day, hour, minute, 0, 0, 0, -1))


def test_date_label_is_short_and_relative_to_today() -> None:
    now = _local(2026, 12, 3, 18, 30)  # a Thursday
    assert date_label(_local(2026, 12, 3, 9, 5), now) == "09:05"
    assert date_label(_local(2026, 12, 2, 23, 59), now) == "yesterday"
    assert date_label(_local(2026, 11, 30), now) == "Mon"
    assert date_label(_local(2026, 11, 3), now) == "3 Nov"
    assert date_label(_local(2024, 5, 1), now) == "1 May 2024"
    assert date_label(_local(2027, 1, 1), now) == "1 Jan 2027"  # a clock set back: a full date, not "Fri"


def test_rows_show_when_and_how_many_messages(win: MainWindow) -> None:
    row = win.list_model.rows()[titles(win).index("Regex help")]
    index = win.list_model.index(titles(win).index("Regex help"), 0)
    title, detail = str(win.list_model.data(index, Qt.ItemDataRole.DisplayRole)).split("\n")
    assert title == "Regex help"
    assert detail == f"{date_label(row.updated_at or 0)} · 2 messages" and ":" in detail  # changed today: a time
    assert row.updated_at is not None and abs(row.updated_at - time.time()) < 60
    assert "last changed" in str(win.list_model.data(index, Qt.ItemDataRole.ToolTipRole))


@pytest.mark.parametrize(("raw", "plain"), [
    ("use **[raincoat]** and `git [stash]`", "use raincoat and git stash"),
    ("```python\nprint([x])\n``` then", "print(x) then"),
    ("see [the docs](https://example.org/a) for [match]", "see the docs for match"),
    ("## Heading\n> quoted\n- item one\n1. item two", "Heading quoted item one item two"),
    ("<think>[hm]</think> _fine_ snake_case", "hm fine snake_case"),
])
def test_plain_snippet_strips_markup_and_match_markers(raw: str, plain: str) -> None:
    assert plain_snippet(raw) == plain


def test_search_snippet_is_plain_text(qtbot: Any, win: MainWindow) -> None:
    history = win.store.store
    cid = history.create_conversation(title="Code")
    history.add_message(cid, Role.ASSISTANT, "Here:\n```python\nprint('umbrella')\n```\nUse **umbrella** `now`.")
    qtbot.keyClicks(win.conversations.search, "umbrella")
    rows = win.list_model.rows()
    assert [r.title for r in rows] == ["Code"]
    snippet = rows[0].snippet
    assert "umbrella" in snippet and not set("[]`*") & set(snippet), snippet
    assert snippet in str(win.list_model.data(win.list_model.index(0, 0), Qt.ItemDataRole.DisplayRole))
    assert not win.conversations.empty_label.isVisible()


def test_a_search_without_match_says_so_and_clearing_hides_it(qtbot: Any, win: MainWindow) -> None:
    label = win.conversations.empty_label
    assert not label.isVisible()
    qtbot.keyClicks(win.conversations.search, "zebra")
    assert titles(win) == [] and label.isVisible()
    assert label.text().startswith("No message matches “zebra”")
    win.conversations.search.clear()
    assert len(titles(win)) == 3 and not label.isVisible()


def test_an_empty_history_says_how_to_start(qtbot: Any) -> None:
    with offline_main_window(qtbot) as (window, _store, _bridge):
        window.show()
        label = window.conversations.empty_label
        assert label.isVisible() and label.text() == NO_CONVERSATIONS_TEXT


def test_context_menu_offers_export_rename_delete(qtbot: Any, win: MainWindow,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def cancelled_save_dialog(_parent: Any, _caption: str, suggested: str, *_a: Any) -> tuple[str, str]:
        asked.append(suggested)
        return "", ""

    monkeypatch.setattr("outrider.ui.widgets.conversation_export.QFileDialog.getSaveFileName",
                        cancelled_save_dialog)
    row = titles(win).index("Packing list")
    index = win.list_model.index(row, 0)
    menu = win.conversations.context_menu(index)
    assert menu is not None
    assert [a.text() for a in menu.actions()] == ["&Export…", "&Rename…", "&Delete"]
    cid = int(win.list_model.data(index, ConversationRole.ID))
    with qtbot.waitSignal(win.conversations.export_requested, check_params_cb=lambda c: c == cid):
        menu.actions()[0].trigger()
    assert [Path(p).name for p in asked] == ["Packing-list.md"]  # the save dialog, cancelled: nothing written
    assert win.conversations.context_menu(win.list_model.index(-1, 0)) is None


def test_keys_in_the_list_delete_and_rename(qtbot: Any, win: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    cid = select(win, "Quarterly report")
    win.activateWindow()  # keys go to the active window (xcb: after the window manager's answer)
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    win.conversations.list.setFocus()
    qtbot.waitUntil(win.conversations.list.hasFocus)
    answer_rename(monkeypatch, "Q3 report")
    renamed = win.conversations.rename_requested
    with qtbot.waitSignal(renamed, check_params_cb=lambda c, t: (c, t) == (cid, "Q3 report")):
        qtbot.keyClick(win.conversations.list, Qt.Key.Key_F2)
    with qtbot.waitSignal(win.conversations.delete_requested, check_params_cb=lambda c: c == cid):
        qtbot.keyClick(win.conversations.list, Qt.Key.Key_Delete)
    assert win.conversations.undo_bar.isVisible()
    win.chat.composer.setFocus()  # elsewhere, Delete is the text's own key: no conversation is deleted
    with qtbot.assertNotEmitted(win.conversations.delete_requested):
        qtbot.keyClick(win.chat.composer, Qt.Key.Key_Delete)


def test_relative_dates_follow_the_clock(qtbot: Any, win: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    """Labels are made when the row is painted and the list repaints every minute: after midnight "09:05" reads
    "yesterday" without a reload."""
    index = win.list_model.index(0, 0)
    updated = win.list_model.rows()[0].updated_at
    assert updated is not None and win.conversations._clock.isActive()
    assert win.conversations._clock.interval() == 60_000
    tomorrow = time.time() + 86_400
    monkeypatch.setattr("outrider.ui.widgets.conversation_rows.time.time", lambda: tomorrow)
    assert str(index.data(Qt.ItemDataRole.DisplayRole)).split("\n")[1].startswith("yesterday · ")


def test_highlight_words_bolds_what_the_search_matched() -> None:
    assert highlight_words("socks, charger and a raincoat", "rain") == "socks, charger and a <b>raincoat</b>"
    assert highlight_words("Rain <b>or</b> shine", "rain OR") == "<b>Rain</b> &lt;b&gt;<b>or</b>&lt;/b&gt; shine"
    assert highlight_words("a < b", "") == "a &lt; b"
    assert highlight_words("x (y)", "(y") == "x (<b>y</b>)"  # query punctuation is not a pattern


def test_rows_are_drawn_as_title_over_a_muted_line(qtbot: Any, win: MainWindow) -> None:
    view = win.conversations
    assert isinstance(view.list.itemDelegate(), ConversationDelegate)
    qtbot.keyClicks(view.search, "raincoat")
    index = win.list_model.index(0, 0)
    option = QStyleOptionViewItem()
    option.initFrom(view.list)
    option.font = view.list.font()
    doc = view.delegate.document(option, win.list_model.rows()[0], 400)
    def weight(word: str) -> int:
        return int(doc.find(word).charFormat().fontWeight())

    bold = int(QFont.Weight.Bold)
    assert weight("Packing list") >= bold and weight("raincoat") >= bold  # the title and what matched
    assert "· …and a raincoat" in doc.toPlainText() and weight("and a") < bold  # starts near the match
    assert doc.toPlainText().split("\n")[0] == "Packing list"
    assert "raincoat" in doc.toPlainText().split("\n")[1]
    line = QFontMetrics(view.list.font()).height()
    hint = view.delegate.sizeHint(option, index).height()
    assert hint >= 2 * line and hint >= doc.size().height()  # two lines, never cut
    narrow = view.delegate.document(option, win.list_model.rows()[0], 40).toPlainText()
    assert "…" in narrow and "\n" in narrow  # elided to the width, still two lines
    assert not view.list.grab().isNull()  # painted without a Qt warning (warnings fail these tests)


def test_focus_on_match_starts_the_snippet_near_the_first_match() -> None:
    text = "socks, charger, a hat, gloves and a raincoat for the rain"
    assert focus_on_match(text, "rain") == "…and a raincoat for the rain"
    assert focus_on_match(text, "socks") == text  # the match is already at the start
    assert focus_on_match(text, "zebra") == text and focus_on_match(text, "") == text
    assert focus_on_match("a b raincoat", "rain") == "a b raincoat"  # two words before: nothing to cut
    assert ConversationListModel.rows_from_hits([]) == []  # no hits: no rows


def test_row_heights_need_no_text_layout(qtbot: Any, win: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    """Qt asks every row's height when the list is filled (2,000 conversations at start-up): font metrics only,
    no rich-text document per row (that took 0.4 s for 2,000 rows)."""
    view = win.conversations
    delegate = ConversationDelegate(lambda: "")  # the same painter, not attached: only sizeHint is asked here
    monkeypatch.setattr(delegate, "document", lambda *_a: pytest.fail("a text layout for a row height"))
    rows = [ConversationRow(i, f"Chat {i}", message_count=i, updated_at=time.time()) for i in range(1, 301)]
    unreadable = ConversationRow(9, "(conversation 9 could not be read)", readable=False)
    win.list_model.set_rows([*rows, unreadable])
    option = QStyleOptionViewItem()
    option.initFrom(view.list)
    option.font = view.list.font()
    heights = {delegate.sizeHint(option, win.list_model.index(i, 0)).height() for i in range(300)}
    assert len(heights) == 1
    assert delegate.sizeHint(option, win.list_model.index(300, 0)).height() < heights.pop()  # one line


def test_the_open_chat_stays_listed_while_a_search_filters(qtbot: Any, win: MainWindow) -> None:
    """Before: a chat started (or opened) while the list was filtered vanished from it: it matched nothing."""
    cid = select(win, "Regex help")
    with qtbot.waitSignal(win.controller.conversation_opened, check_params_cb=lambda c, items: c == cid):
        win.conversations.list.clicked.emit(win.conversations.list.currentIndex())
    qtbot.keyClicks(win.conversations.search, "raincoat")
    rows = win.list_model.rows()
    assert [r.title for r in rows] == ["Regex help", "Packing list"]
    assert rows[0].snippet == "open now · no match" and "raincoat" in rows[1].snippet
    assert win.conversations.selected_id() == cid
