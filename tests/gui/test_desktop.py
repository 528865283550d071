"""The app on a desktop: no display is a clear message (not an invisible window), Tab walks composer → Send → list
→ statistics with a visible focus, every menu action is reachable from the keyboard, and Help > About tells the
version, the llama.cpp build and backend, the licences and where the numbers are explained.

`make test` runs this file offscreen and again under xvfb with QT_QPA_PLATFORM=xcb (the desktop platform).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QApplication, QWidget

import outrider
from outrider.ui import app as app_module

NO_DISPLAY_ENV = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")


def _bare_window(qtbot: Any, app_parts: dict[str, Any]) -> Any:
    from outrider.ui.main_window import MainWindow

    win = MainWindow(app_parts["bridge"], app_parts["store"], app_parts["settings"])
    qtbot.addWidget(win)
    win.show()
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    return win


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DISPLAY/WAYLAND_DISPLAY: Linux desktops")
def test_no_display_says_so_and_exits_instead_of_running_invisibly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in NO_DISPLAY_ENV}
    env["OUTRIDER_HOME"] = str(tmp_path / "home")
    code = "import sys; from outrider.cli import main; sys.exit(main([]))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("outrider: no display found") and "--smoke-test" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not list((tmp_path / "home").glob("history*"))  # refused before opening the history


def test_display_problem_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    problem = app_module.display_problem
    assert problem({}, offscreen_ok=False) == app_module.NO_DISPLAY_MESSAGE
    assert problem({}, offscreen_ok=True) is None  # the smoke test draws offscreen (CI, ssh)
    assert problem({"WAYLAND_DISPLAY": "wayland-0"}, offscreen_ok=False) is None
    assert problem({"QT_QPA_PLATFORM": "offscreen"}, offscreen_ok=False) is None  # asked for explicitly
    everything = problem({"DISPLAY": ":0"}, offscreen_ok=False, can_load=lambda soname: True,
                         can_connect=lambda display: True)
    assert everything is None
    missing = problem({"DISPLAY": ":0"}, offscreen_ok=False, can_load=lambda soname: "icccm" not in soname,
                      can_connect=lambda display: True)
    assert missing is not None and missing.endswith("sudo apt install libxcb-icccm4")
    gone = problem({"DISPLAY": ":7"}, offscreen_ok=True, can_load=lambda soname: True,
                   can_connect=lambda display: display != ":7")  # a stale DISPLAY: no X server answers
    assert gone is not None and gone.startswith("outrider: cannot connect to the X display :7")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 displays: Linux desktops")
def test_an_x_display_that_does_not_answer_is_said_in_words_not_a_core_dump(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in NO_DISPLAY_ENV}
    env.update(DISPLAY=":173", OUTRIDER_HOME=str(tmp_path / "home"))  # no X server runs there
    code = "import sys; from outrider.cli import main; sys.exit(main([]))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("outrider: cannot connect to the X display :173") and "ssh -X" in done.stderr
    assert "Traceback" not in done.stderr and "Could not load the Qt platform plugin" not in done.stderr


def _tab_cycle(qtbot: Any, win: Any, start: QWidget, limit: int = 40) -> list[QWidget]:
    start.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is start, timeout=3000)
    seen = [start]
    for _ in range(limit):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        current = QApplication.focusWidget()
        if current is start:
            return seen
        seen.append(current)
    raise AssertionError(f"Tab never came back to the composer: {[type(w).__name__ for w in seen]}")


def test_tab_walks_composer_send_list_statistics_and_back(qtbot: Any, app_parts: dict[str, Any]) -> None:
    win = _bare_window(qtbot, app_parts)
    win.chat.composer.setPlainText("a question")  # Send is enabled with text to send
    cycle = _tab_cycle(qtbot, win, win.chat.composer)
    order = [cycle.index(w) for w in (win.chat.composer, win.chat.send_button, win.conversations.list,
                                      win.stats.numbers)]
    assert order == sorted(order) and order[0] == 0
    assert win.conversations.search in cycle and win.chat.browser in cycle
    assert all(w.isEnabled() and w.isVisible() for w in cycle)
    assert "\t" not in win.chat.composer.toPlainText()  # Tab moved focus, it typed nothing


def test_tab_reaches_the_search_box_before_the_links_of_a_long_chat(qtbot: Any, app_parts: dict[str, Any]) -> None:
    """Before: the chat came right after the reply's buttons, and Tab walked every Copy/Edit link of a long chat
    (two per message) before it reached the search box."""
    from outrider.ui.widgets.chat_items import MessageItem

    win = _bare_window(qtbot, app_parts)
    items = [MessageItem("user" if i % 2 == 0 else "assistant", f"message {i}", "complete", i + 1) for i in range(60)]
    win.chat.set_messages(items)
    win.chat.composer.setPlainText("a question")
    win.chat.composer.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is win.chat.composer, timeout=3000)
    presses = 0
    while QApplication.focusWidget() is not win.conversations.search and presses < 11:
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        presses += 1
    assert QApplication.focusWidget() is win.conversations.search and presses <= 6, presses


def test_keyboard_focus_is_visible(qtbot: Any, app_parts: dict[str, Any]) -> None:
    win = _bare_window(qtbot, app_parts)
    for widget in (win.chat.composer, win.conversations.list, win.chat.browser):
        win.chat.send_button.setFocus()
        qtbot.waitUntil(lambda w=widget: not w.hasFocus(), timeout=3000)
        unfocused = widget.grab().toImage()
        widget.setFocus()
        qtbot.waitUntil(widget.hasFocus, timeout=3000)
        focused = widget.grab().toImage()
        assert focused != unfocused, f"{type(widget).__name__} looks the same with and without focus"


def test_every_menu_action_is_reachable_from_the_keyboard(qtbot: Any, app_parts: dict[str, Any]) -> None:
    win = _bare_window(qtbot, app_parts)
    menus = [a.menu() for a in win.menuBar().actions() if a.menu() is not None]
    assert all("&" in m.title() for m in menus)  # Alt+letter opens each menu
    in_menus = {id(a) for m in menus for a in m.actions()}
    for ident, action in win.actions_by_id.items():
        assert id(action) in in_menus, f"{ident} is in no menu"
        assert "&" in action.text() or not action.shortcut().isEmpty(), f"{ident} has no mnemonic or shortcut"


def test_chat_menu_shortcuts_focus_toggle_and_follow_the_buttons(qtbot: Any, app_parts: dict[str, Any]) -> None:
    win = _bare_window(qtbot, app_parts)
    ctrl, shift = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier
    qtbot.keyClick(win.chat.composer, Qt.Key.Key_F, ctrl)
    qtbot.waitUntil(win.conversations.search.hasFocus, timeout=3000)
    qtbot.keyClick(win.conversations.search, Qt.Key.Key_L, ctrl)
    qtbot.waitUntil(win.chat.composer.hasFocus, timeout=3000)
    before = win.chat.provenance_box.isChecked()
    qtbot.keyClick(win.chat.composer, Qt.Key.Key_P, ctrl | shift)
    assert win.chat.provenance_box.isChecked() is not before
    assert win.actions_by_id["provenance"].isChecked() is not before  # the View entry follows the box
    win.chat.provenance_box.setChecked(before)
    assert win.actions_by_id["provenance"].isChecked() is before
    asked: list[bool] = []
    win.chat.regenerate_requested.connect(lambda: asked.append(True))
    qtbot.keyClick(win.chat.composer, Qt.Key.Key_R, ctrl)
    assert asked == []  # an empty chat has nothing to regenerate: the shortcut does what the disabled button does
    win._sync_chat_actions()  # what opening the Chat menu does
    enabled = {k: win.actions_by_id[k].isEnabled() for k in ("send", "stop", "regenerate", "continue", "copy_reply")}
    assert enabled == {"send": win.chat.send_button.isEnabled(), "stop": False, "regenerate": False,
                       "continue": False, "copy_reply": False}


def test_help_about_shows_version_llama_build_backend_licences_and_metrics_doc(
        qtbot: Any, app_parts: dict[str, Any]) -> None:
    from outrider.ui.dialogs.about_dialog import AboutDialog

    win = _bare_window(qtbot, app_parts)
    win.actions_by_id["about"].trigger()
    dialog = win.about_dialog
    assert isinstance(dialog, AboutDialog) and dialog.isVisible()
    assert dialog.facts["Version"].text() == outrider.__version__
    assert importlib.metadata.version("llama_cpp_python") in dialog.facts["llama.cpp build"].text()
    assert dialog.facts["Backend"].text() == "engine not started yet"  # no engine process yet: said so
    table = dialog.licences
    rows = {table.item(r, 0).text(): (table.item(r, 1).text(), table.item(r, 2).text())
            for r in range(table.rowCount())}
    assert rows["Outrider"] == (outrider.__version__, "Apache-2.0")
    assert rows["llama.cpp (through llama-cpp-python)"][1] == "MIT"
    assert "LGPL" in rows["Qt for Python"][1]
    href = dialog.metrics_link.text().split('href="', 1)[1].split('"', 1)[0]
    path = Path(QUrl(href).toLocalFile())
    assert path.name == "metrics.md" and path.is_file() and "acceptance" in path.read_text(encoding="utf-8").lower()
    dialog.close()


@pytest.mark.smollm
def test_keyboard_sends_copies_regenerates_and_about_names_the_engines_backend(qtbot: Any, window: Any) -> None:
    ctrl, shift = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier
    window.controller.max_tokens_override = 12
    window.chat.composer.setPlainText("Say hello.")
    with qtbot.waitSignal(window.controller.reply_ended, timeout=60_000) as first:
        qtbot.keyClick(window.chat.composer, Qt.Key.Key_Return, ctrl)
    assert first.args[0] == "complete" and first.args[1]
    qtbot.waitUntil(lambda: window._last_reply_text() is not None, timeout=5000)
    QApplication.clipboard().clear()
    qtbot.keyClick(window.chat.composer, Qt.Key.Key_C, ctrl | shift)
    assert QApplication.clipboard().text() == window._last_reply_text()
    with qtbot.waitSignal(window.controller.reply_ended, timeout=60_000) as again:
        qtbot.keyClick(window.chat.composer, Qt.Key.Key_R, ctrl)
    assert again.args[0] == "complete"
    assert [m.role for m in window.chat.messages] == ["user", "assistant"]  # regenerated, not appended

    backend = window.bridge.client.backend
    assert backend.get("name")
    window.actions_by_id["about"].trigger()
    shown = window.about_dialog.facts["Backend"].text()
    assert shown.startswith(str(backend["name"]))
    assert ("GPU offload available" in shown) == bool(backend.get("gpu_offload"))
    assert window.about_dialog.facts["System"].text() == str(backend.get("system_info") or "–")
    window.about_dialog.close()


def test_licence_of_reads_expression_short_text_or_classifier() -> None:
    from email.message import Message

    from outrider.ui.dialogs.about_dialog import _licence_of

    def meta(**fields: str | list[str]) -> Message:
        m = Message()
        for key, value in fields.items():
            for v in value if isinstance(value, list) else [value]:
                m[key.replace("_", "-")] = v
        return m

    assert _licence_of(meta(License_Expression="BSD-2-Clause", License="long text")) == "BSD-2-Clause"
    assert _licence_of(meta(License="MIT")) == "MIT"
    assert _licence_of(meta(License="x" * 200, Classifier=["Topic :: A", "License :: OSI Approved :: MIT License"])
                       ) == "MIT License"
    assert _licence_of(meta()) == "see the package's licence file"
