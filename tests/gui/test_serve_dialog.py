""""Serve on localhost" in the real window (SmolLM2 demo pair, real engine process): the menu action opens the panel,
the toggle serves the chat's own engine at the address shown (Copy puts it on the clipboard), the official openai
client gets replies, a request made while the chat is replying waits its turn and both replies are intact, a busy
port and a non-loopback host are explained, and stopping closes the port."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import threading
from pathlib import Path
from typing import Any

import openai
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel

pytestmark = [pytest.mark.smollm, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _open_panel(win: Any) -> Any:
    win.actions_by_id["serve"].trigger()
    dialog = win.findChild(__import__("outrider.ui.dialogs.serve_dialog", fromlist=["ServeDialog"]).ServeDialog)
    assert dialog is not None and dialog.isVisible()
    return dialog


def _serve(qtbot: Any, dialog: Any, port: int) -> str:
    dialog.port.setValue(port)
    with qtbot.waitSignal(dialog.server.started, timeout=20_000) as blocker:
        dialog.toggle.click()
    url = str(blocker.args[0])
    assert url == f"http://127.0.0.1:{port}/v1"
    return url


def _stop(qtbot: Any, dialog: Any) -> None:
    with qtbot.waitSignal(dialog.server.stopped, timeout=20_000):
        dialog.toggle.click()


def test_serve_toggle_address_copy_and_a_reply(qtbot: Any, window: Any) -> None:
    dialog = _open_panel(window)
    assert not dialog.toggle.isChecked() and not dialog.copy_button.isEnabled()
    url = _serve(qtbot, dialog, _free_port())
    assert dialog.toggle.isChecked() and dialog.address.text() == url and not dialog.host.isEnabled()
    indicator = window.statusBar().findChild(QLabel, "serve_indicator")
    assert indicator.isVisible() and indicator.text() == f"Serving {url}"
    assert window.actions_by_id["serve"].text() == f"Serving at {url}…"
    qtbot.mouseClick(dialog.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == url
    api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
    assert [m.id for m in api.models.list().data] == ["smollm2-135m-lookup"]
    with qtbot.waitSignal(dialog.server.request_finished, timeout=60_000):
        reply = api.chat.completions.create(model="smollm2-135m-lookup", max_tokens=8, temperature=0,
                                            messages=[{"role": "user", "content": "Say hi."}])
    assert reply.choices[0].message.content and reply.usage is not None and reply.usage.completion_tokens <= 8
    qtbot.waitUntil(lambda: "1 reply served" in dialog.status.text(), timeout=5_000)
    # the last served reply's own figures (before: only the count)
    assert f"Last reply: {reply.usage.completion_tokens} tokens" in dialog.status.text()
    assert "tok/s" in dialog.status.text()
    qtbot.mouseClick(dialog.example_button, Qt.MouseButton.LeftButton)
    example = QGuiApplication.clipboard().text()
    assert example.startswith("from openai import OpenAI\n") and f'base_url="{url}"' in example
    assert len(example.splitlines()) == 3 and 'model="smollm2-135m-lookup"' in example
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "example", "exec"), {})  # the example runs as copied
    assert printed.getvalue().strip()
    _stop(qtbot, dialog)
    assert dialog.address.text() == "" and dialog.status.text() == "Stopped."
    assert not indicator.isVisible() and window.actions_by_id["serve"].text() == "Serve on &localhost…"
    with pytest.raises(openai.APIConnectionError):
        api.models.list()


def test_a_server_request_waits_for_the_chat_reply_and_both_are_intact(qtbot: Any, window: Any) -> None:
    dialog = _open_panel(window)
    url = _serve(qtbot, dialog, _free_port())
    api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
    messages: Any = [{"role": "user", "content": "Name three fruits."}]
    alone = api.chat.completions.create(model="m", max_tokens=24, temperature=0, messages=messages)
    window.controller.max_tokens_override = 48
    results: dict[str, Any] = {}

    def ask() -> None:
        results["reply"] = api.chat.completions.create(model="m", max_tokens=24, temperature=0, messages=messages)

    with qtbot.waitSignal(window.controller.steps_received, timeout=60_000):
        window.chat.composer.setPlainText("Write a short poem about rain.")
        qtbot.keyClick(window.chat.composer, Qt.Key.Key_Return)
    asker = threading.Thread(target=ask)
    with qtbot.waitSignal(window.controller.reply_ended, timeout=120_000) as ended:
        asker.start()
    assert ended.args[0] == "complete" and ended.args[1].strip()
    asker.join(120)
    assert results["reply"].choices[0].message.content == alone.choices[0].message.content
    _stop(qtbot, dialog)


def test_a_busy_port_and_another_host_are_explained(qtbot: Any, window: Any) -> None:
    dialog = _open_panel(window)
    assert not dialog.host_warning.isVisible()
    dialog.host.setText("0.0.0.0")
    assert dialog.host_warning.isVisible() and "every network interface" in dialog.host_warning.text()
    dialog.host.setText("127.0.0.1")
    assert not dialog.host_warning.isVisible()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        dialog.port.setValue(taken.getsockname()[1])
        with qtbot.waitSignal(dialog.server.failed, timeout=5_000):
            dialog.toggle.click()
    assert "Could not serve: cannot listen on 127.0.0.1" in dialog.status.text()
    assert not dialog.toggle.isChecked() and not dialog.server.running and dialog.host.isEnabled()


def test_stopping_the_chat_reply_never_cancels_a_reply_of_the_server(qtbot: Any, window: Any) -> None:
    """The chat and the server share one engine: the chat's Stop cancels the chat's own reply — here
    still waiting behind the server's — and the server's reply runs to its full length."""
    dialog = _open_panel(window)
    url = _serve(qtbot, dialog, _free_port())
    api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
    # ignore_eos: the model would end this reply itself after 25 tokens on some CPUs (its numerics vary), before
    # the chat's Stop is even clicked; through end-of-generation tokens it runs 160 whatever it says.
    stream = api.chat.completions.create(model="m", max_tokens=160, temperature=0, stream=True, messages=[
        {"role": "user", "content": "Count from one to three hundred in words."}], extra_body={"ignore_eos": True})
    chunks = iter(stream)
    next(chunks)  # the server's reply holds the engine
    finished = threading.Event()
    collected: list[Any] = []

    def drain() -> None:
        collected.extend(chunks)
        finished.set()

    threading.Thread(target=drain, daemon=True).start()
    window.controller.max_tokens_override = 200
    window.chat.composer.setPlainText("Write a long story.")
    qtbot.keyClick(window.chat.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.bridge.busy, timeout=10_000)  # the chat's reply waits for the engine
    with qtbot.waitSignal(window.controller.reply_ended, timeout=120_000) as ended:
        window.chat.stop_button.click()
    assert ended.args[0] == "interrupted"
    assert finished.wait(120)
    final = [c for c in collected if c.choices and c.choices[0].finish_reason]
    assert final and final[-1].choices[0].finish_reason == "length"
    assert final[-1].model_extra["timings"]["predicted_n"] == 160
    _stop(qtbot, dialog)


def test_closing_the_window_stops_serving(qtbot: Any, window: Any) -> None:
    dialog = _open_panel(window)
    url = _serve(qtbot, dialog, _free_port())
    window.close()
    assert not window.server_bridge.running
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=10).models.list()


def test_the_address_and_key_served_with_are_remembered_and_the_key_is_never_logged(
        qtbot: Any, window: Any, capfd: pytest.CaptureFixture[str]) -> None:
    from outrider.settings import settings_path
    from outrider.ui.settings import QtSettings

    key = "key-9f3b7c1e-never-logged"
    dialog = _open_panel(window)
    qtbot.keyClicks(dialog.api_key, key)
    port = _free_port()
    url = _serve(qtbot, dialog, port)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="wrong", max_retries=0, timeout=60).models.list()
    api = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)
    with qtbot.waitSignal(dialog.server.request_finished, timeout=60_000):
        api.chat.completions.create(model="m", max_tokens=4, temperature=0,
                                    messages=[{"role": "user", "content": "Say hi."}])
    _stop(qtbot, dialog)
    restored = QtSettings().value  # what the next start of the app reads
    assert (restored.serve_host, restored.serve_port, restored.serve_api_key) == ("127.0.0.1", port, key)
    window.close()
    out, err = capfd.readouterr()
    assert key not in out and key not in err
    home = Path(os.environ["OUTRIDER_HOME"])  # data, logs, caches of this test's app (conftest)
    leaked = [p for p in home.rglob("*") if p.is_file() and p != settings_path()
              and key.encode() in p.read_bytes()]
    assert not leaked, leaked  # engine and app logs, crash reports, history: nowhere but the settings file
