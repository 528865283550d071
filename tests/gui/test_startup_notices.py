"""Damaged settings and a damaged history are never silent:
the settings file is kept aside (never overwritten), and the main window's banner names every kept file at start,
even when last time's crash report is shown too."""

from __future__ import annotations

import json
from pathlib import Path

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
    settings.flush()
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
