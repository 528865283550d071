"""Damaged settings and a damaged history are never silent (RELIABILITY.md "Results (session 2)", items 3 and 6):
the settings file is kept aside (never overwritten), and the main window's banner names every kept file at start,
even when last time's crash report is shown too."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from outrider.settings import AppSettings, SettingsNotice, load_settings
from outrider.ui.settings import QtSettings

SAVED = {"system_prompt": "Answer like a ship's captain.", "pair_target": "/models/t.gguf", "theme": "dark"}


def test_damaged_settings_are_kept_aside_reported_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    damaged = json.dumps(SAVED)[:-12]  # cut short (a full disk, a crash of another tool)
    path.write_text(damaged, encoding="utf-8")
    settings = QtSettings(path)
    notice = settings.notice
    assert isinstance(notice, SettingsNotice) and notice.kept_at is not None
    assert notice.kept_at.name.startswith("settings.json.damaged-")
    assert notice.kept_at.read_text(encoding="utf-8") == damaged
    assert str(notice.kept_at) in notice.message and "\n" not in notice.message
    assert settings.value == AppSettings()
    settings.set(theme="dark")  # the next change writes a new file; the damaged one stays as it was
    assert json.loads(path.read_text(encoding="utf-8"))["theme"] == "dark"
    assert notice.kept_at.read_text(encoding="utf-8") == damaged
    assert QtSettings(path).notice is None


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": ' * 100_000, "\xff\xfe{}", "[]", ""])
def test_deeply_nested_or_odd_settings_never_crash(tmp_path: Path, text: str) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(text.encode("latin-1"))
    value, notice = load_settings(path)  # plain data: no Qt needed to read settings
    assert value == AppSettings() and notice is not None and notice.kept_at is not None
    assert notice.kept_at.read_bytes() == text.encode("latin-1")
    assert not path.exists()


def test_good_settings_load_without_a_notice(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(SAVED), encoding="utf-8")
    value, notice = load_settings(path)
    assert notice is None and value.system_prompt == SAVED["system_prompt"] and value.theme == "dark"


def test_start_up_banner_names_the_kept_history_and_settings_beside_a_crash_report(
    qtbot: Any, _private_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from outrider.ui import app as app_module
    from outrider.ui.main_window import MainWindow

    (_private_home / "history.sqlite3").write_bytes(os.urandom(8192))
    (_private_home / "settings.json").write_text('{"system_prompt": "kept', encoding="utf-8")
    crash = "Outrider closed unexpectedly last time. A crash report was written to /logs/crash-1.txt"
    monkeypatch.setattr(app_module, "crash_notice", lambda: crash)
    monkeypatch.setattr(app_module, "_catalogue_service", lambda: None)
    monkeypatch.setattr(app_module, "_startup_choice", lambda saved=None: "a pair")
    monkeypatch.setattr(MainWindow, "load_pair", lambda self, choice, automatic=False: None)
    shown: list[str] = []
    original = MainWindow.show_notice

    def record(self: MainWindow, text: str) -> None:
        shown.append(text)
        original(self, text)

    monkeypatch.setattr(MainWindow, "show_notice", record)
    QTimer.singleShot(200, QApplication.quit)  # the real start-up, then out of the event loop
    assert app_module._run(smoke_test=False) == 0
    banner = shown[0]
    (kept_history,) = _private_home.glob("history.sqlite3.corrupt-*")
    assert crash in banner
    assert str(kept_history) in banner and "no messages could be recovered" in banner  # not hidden by the crash
    (kept_settings,) = _private_home.glob("settings.json.damaged-*")
    assert str(kept_settings) in banner
