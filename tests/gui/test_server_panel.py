"""The "Serve on localhost" panel without a model (its server is never started here): it remembers its host, port
and API key across restarts (the app's settings file, owner-only), whether the panel is closed after typing, a field
is left, or serving starts; a damaged value in the file falls back to the default; a key that cannot be a bearer
token is refused in words before anything starts, and stays as typed."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from outrider.server.runner import DEFAULT_HOST, DEFAULT_PORT
from outrider.settings import settings_path
from outrider.ui.bridges.server_bridge import QtServerBridge
from outrider.ui.dialogs.serve_dialog import ServeDialog
from outrider.ui.settings import QtSettings
from outrider.worker.client import EngineClient


@pytest.fixture
def bridge(qtbot: Any) -> Iterator[QtServerBridge]:
    server = QtServerBridge(EngineClient())  # never started: the engine process is not needed
    yield server
    server.shutdown()


def panel(qtbot: Any, bridge: QtServerBridge) -> ServeDialog:
    """A new panel over settings read afresh from the file (as at the next start of the app, which waits for the
    last one's saves before it exits: ``saved``)."""
    settings = QtSettings()
    _PANEL_SETTINGS.append(settings)
    dialog = ServeDialog(bridge, settings=settings)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


_PANEL_SETTINGS: list[QtSettings] = []  # the settings of this test's panels


@pytest.fixture(autouse=True)
def _forget_panel_settings() -> Iterator[None]:
    yield
    _PANEL_SETTINGS.clear()


def saved() -> QtSettings:
    """The settings file as the next start reads it, once every panel's saves are written (the app flushes its
    settings on exit; saving itself runs off the GUI thread)."""
    for settings in _PANEL_SETTINGS:
        settings.flush()
    return QtSettings()


def test_a_fresh_panel_shows_the_defaults(qtbot: Any, bridge: QtServerBridge) -> None:
    dialog = panel(qtbot, bridge)
    assert (dialog.host.text(), dialog.port.value(), dialog.api_key.text()) == (DEFAULT_HOST, DEFAULT_PORT, "")


def test_host_port_and_key_typed_then_the_panel_closed_are_restored(qtbot: Any, bridge: QtServerBridge) -> None:
    dialog = panel(qtbot, bridge)
    dialog.host.clear()
    qtbot.keyClicks(dialog.host, "0.0.0.0")
    dialog.port.setValue(9123)
    qtbot.keyClicks(dialog.api_key, "s3cret-key")
    dialog.close()  # no field was left: closing the panel keeps them
    saved()
    again = panel(qtbot, bridge)
    assert (again.host.text(), again.port.value(), again.api_key.text()) == ("0.0.0.0", 9123, "s3cret-key")
    assert again.host_warning.isVisible()  # the restored host is explained as before
    assert again.api_key.echoMode() != again.api_key.EchoMode.Normal  # the key is not shown in clear


def test_leaving_a_field_remembers_it_at_once(qtbot: Any, bridge: QtServerBridge) -> None:
    dialog = panel(qtbot, bridge)
    dialog.activateWindow()
    qtbot.waitUntil(dialog.isActiveWindow, timeout=5000)
    dialog.api_key.setFocus()
    qtbot.keyClicks(dialog.api_key, "k1")
    qtbot.keyClick(dialog.api_key, Qt.Key.Key_Tab)  # focus moves on: editing finished
    assert saved().value.serve_api_key == "k1"
    assert dialog.isVisible() and not bridge.running
    dialog.api_key.clear()
    dialog.close()
    assert saved().value.serve_api_key == ""  # a key removed is forgotten too


def test_a_blank_host_is_remembered_as_the_default(qtbot: Any, bridge: QtServerBridge) -> None:
    dialog = panel(qtbot, bridge)
    dialog.host.clear()
    dialog.close()
    saved()
    assert panel(qtbot, bridge).host.text() == DEFAULT_HOST


def test_the_key_is_in_the_owner_only_settings_file(qtbot: Any, bridge: QtServerBridge) -> None:
    dialog = panel(qtbot, bridge)
    qtbot.keyClicks(dialog.api_key, "s3cret-key")
    dialog.close()
    saved()
    path = settings_path()
    assert json.loads(path.read_text())["serve_api_key"] == "s3cret-key"
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(("stored", "expected"), [
    ({"serve_port": 0}, (DEFAULT_HOST, DEFAULT_PORT, "")),
    ({"serve_port": 70000, "serve_host": "   "}, (DEFAULT_HOST, DEFAULT_PORT, "")),
    ({"serve_port": "9000", "serve_api_key": 42}, (DEFAULT_HOST, DEFAULT_PORT, "")),
    ({"serve_port": 9000, "serve_host": "::1", "serve_api_key": "k"}, ("::1", 9000, "k")),
])
def test_bad_stored_values_fall_back_to_the_defaults(qtbot: Any, bridge: QtServerBridge, stored: dict[str, Any],
                                                     expected: tuple[str, int, str]) -> None:
    path: Path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"theme": "dark", **stored}))
    dialog = panel(qtbot, bridge)
    assert (dialog.host.text(), dialog.port.value(), dialog.api_key.text()) == expected
    assert QtSettings().value.theme == "dark"  # the rest of the file is kept


@pytest.mark.parametrize("key", ["two words", "   ", "tab\tkey"])
def test_a_key_that_cannot_be_a_bearer_token_is_refused_and_kept(qtbot: Any, bridge: QtServerBridge,
                                                                   key: str) -> None:
    dialog = panel(qtbot, bridge)
    dialog.api_key.setText(key)  # as pasted (a tab cannot be typed into the field)
    dialog.toggle.click()
    assert dialog.status.text() == "Could not serve: the API key must be printable text without spaces."
    assert not bridge.running and not dialog.toggle.isChecked() and dialog.toggle.text() == "Serve"
    assert dialog.api_key.text() == key and dialog.api_key.isEnabled()
