""""Serve on localhost": the loaded pair over an OpenAI-compatible API, from the GUI (docs/server.md).

``ServeDialog`` is a small non-modal panel: a toggle, the address (host, port) and an optional API key, the base URL
with a Copy button once serving, a warning when the host is not this machine only, and a count of the replies
served. ``add_serve_action`` puts the menu entry in the main window and keeps one ``QtServerBridge`` per window,
following the chat's pair and stopped when the app quits.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, Slot
from PySide6.QtGui import QAction, QGuiApplication, QHideEvent
from PySide6.QtWidgets import (
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from outrider.engine.stats import GenerationStats
from outrider.server.runner import DEFAULT_HOST, DEFAULT_PORT, api_key_problem, host_warning
from outrider.ui.bridges.server_bridge import QtServerBridge
from outrider.ui.settings import QtSettings
from outrider.ui.widgets.live_stats import format_speedup

ACTION_SERVE = "serve"
SERVE_TEXT = "Serve on &localhost…"
CLIENT_EXAMPLE = ('from openai import OpenAI\n'
                  'client = OpenAI(base_url="{url}", api_key="{key}")\n'
                  'print(client.chat.completions.create(model="{model}", '
                  'messages=[{{"role": "user", "content": "Hello"}}]).choices[0].message.content)')


class ServeDialog(QDialog):
    """The server's controls. Reads and drives a ``QtServerBridge``; closing the dialog keeps the server running.

    ``defaults()`` (given by the window) returns the request defaults ``(sampling, draft)`` at start: the chat's
    own settings. With ``settings`` (the app's ``QtSettings``) the host, port and API key shown are the last ones
    used, and what is typed is remembered (``serve_host``, ``serve_port``, ``serve_api_key``) when a field is left,
    when serving starts and when the panel closes; the key goes into the owner-only settings file, nowhere else.

    Attributes:
        toggle: the Serve / Stop button (checkable).
        address: the base URL (read-only) once serving; ``copy_button`` copies it, ``example_button`` copies three
            lines of Python that use it with the official ``openai`` client.
        status: one line: stopped, starting, serving (with the count of replies), or why it failed.
    """

    def __init__(self, server: QtServerBridge, parent: QWidget | None = None, *,
                 defaults: Any = None, settings: QtSettings | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Serve on localhost")
        self.server = server
        self._defaults = defaults
        self._settings = settings
        self.host = QLineEdit(DEFAULT_HOST)
        self.host.setToolTip("127.0.0.1 serves this machine only; 0.0.0.0 serves every network interface")
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(DEFAULT_PORT)
        self.api_key = QLineEdit()
        self.api_key.setPlaceholderText("optional: clients must send it as a bearer token")
        self.api_key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.host_warning = QLabel()
        self.host_warning.setWordWrap(True)
        self.host_warning.setVisible(False)
        self.toggle = QPushButton("Serve")
        self.toggle.setCheckable(True)
        self.address = QLineEdit()
        self.address.setReadOnly(True)
        self.address.setPlaceholderText("not serving")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setEnabled(False)
        self.copy_button.setToolTip("copy the base URL for an OpenAI client")
        self.example_button = QPushButton("Copy Python example")
        self.example_button.setEnabled(False)
        self.example_button.setToolTip("three lines of Python using this server with the openai package")
        self.status = QLabel("Stopped.")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._build()
        self._restore()
        self.host.textChanged.connect(self._on_host_text_changed)
        for field in (self.host, self.port, self.api_key):
            field.editingFinished.connect(self._on_field_editing_finished)
        self.toggle.toggled.connect(self._on_toggle_toggled)
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        self.example_button.clicked.connect(self._on_example_button_clicked)
        server.started.connect(self._on_server_started)
        server.stopped.connect(self._on_server_stopped)
        server.failed.connect(self._on_server_failed)
        server.request_finished.connect(self._on_server_request_finished)
        self._sync()

    def _build(self) -> None:
        form = QFormLayout()
        form.addRow("Host", self.host)
        form.addRow("Port", self.port)
        form.addRow("API key", self.api_key)
        url_row = QHBoxLayout()
        url_row.addWidget(self.address, 1)
        url_row.addWidget(self.copy_button)
        url_row.addWidget(self.example_button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.host_warning)
        layout.addWidget(self.toggle)
        layout.addLayout(url_row)
        layout.addWidget(self.status)

    # -- remembered address ------------------------------------------------------------------------------------
    def _restore(self) -> None:
        if self._settings is None:
            return
        value = self._settings.value
        self.host.setText(value.serve_host)
        self.port.setValue(value.serve_port)
        self.api_key.setText(value.serve_api_key)

    def remember(self) -> None:
        """Keep the host, port and API key as typed for the next start (a blank host: the default)."""
        if self._settings is not None:
            self._settings.set(serve_host=self.host.text().strip() or DEFAULT_HOST, serve_port=self.port.value(),
                               serve_api_key=self.api_key.text())

    def hideEvent(self, event: QHideEvent) -> None:  # Qt override: closing the panel keeps what was typed
        self.remember()
        super().hideEvent(event)

    # -- view state -------------------------------------------------------------------------------------------
    def _sync(self) -> None:
        running = self.server.running
        for field in (self.host, self.port, self.api_key):
            field.setEnabled(not running)
        self.toggle.blockSignals(True)
        self.toggle.setChecked(running)
        self.toggle.blockSignals(False)
        self.toggle.setText("Stop serving" if running else "Serve")
        self.address.setText(self.server.url or "")
        self.copy_button.setEnabled(bool(self.server.url))
        self.example_button.setEnabled(bool(self.server.url))
        self._on_host_text_changed(self.host.text())

    def client_example(self) -> str:
        """Three lines of Python for the address shown (the key as typed, else a placeholder)."""
        return CLIENT_EXAMPLE.format(url=self.server.url or "", key=self.api_key.text() or "none",
                                     model=self.server.served_model() or "outrider")

    # -- slots ------------------------------------------------------------------------------------------------
    @Slot()
    def _on_field_editing_finished(self) -> None:  # the host, port or API key field was left
        self.remember()

    @Slot(str)
    def _on_host_text_changed(self, text: str) -> None:
        warning = host_warning(text.strip() or DEFAULT_HOST, self.port.value(), self.api_key.text() or None)
        self.host_warning.setText(f"⚠ Not this machine only: {warning}." if warning else "")
        self.host_warning.setVisible(bool(warning))

    @Slot(bool)
    def _on_toggle_toggled(self, on: bool) -> None:
        if not on:
            self.server.stop()
            self.status.setText("Stopping…")
            self._sync()
            return
        self.remember()
        problem = api_key_problem(self.api_key.text()) if self.api_key.text() else None
        if problem is not None:  # refused before anything starts; what was typed stays for correcting
            self.status.setText(f"Could not serve: {problem}.")
            self._sync()
            self.api_key.setFocus()
            return
        sampling, draft = self._defaults() if self._defaults is not None else (None, None)
        ok = self.server.start(self.host.text().strip() or DEFAULT_HOST, self.port.value(),
                               self.api_key.text() or None, sampling=sampling, draft=draft)
        if ok:
            self.status.setText("Starting…")
        self._sync()

    @Slot()
    def _on_copy_button_clicked(self) -> None:
        if self.server.url:
            QGuiApplication.clipboard().setText(self.server.url)
            self.status.setText(f"Copied {self.server.url}")

    @Slot()
    def _on_example_button_clicked(self) -> None:
        if self.server.url:
            QGuiApplication.clipboard().setText(self.client_example())
            self.status.setText("Copied a Python example using this server.")

    @Slot(str)
    def _on_server_started(self, url: str) -> None:
        self._sync()
        self.status.setText(f"Serving at {url} — OpenAI-compatible; requests wait their turn with the chat.")

    @Slot()
    def _on_server_stopped(self) -> None:
        self._sync()
        self.status.setText("Stopped.")

    @Slot(str)
    def _on_server_failed(self, message: str) -> None:
        self._sync()
        self.status.setText(f"Could not serve: {message}")

    @Slot(int)
    def _on_server_request_finished(self, count: int) -> None:
        if self.server.running:
            self.status.setText(f"Serving at {self.server.url} — {count} {'reply' if count == 1 else 'replies'} "
                                f"served.{last_request_text(self.server.last_stats)}")


def last_request_text(stats: GenerationStats | None) -> str:
    """The last served reply's figures, as the chat's panel defines them (docs/metrics.md): "" when none."""
    if stats is None:
        return ""
    parts = [f"{stats.generated} tokens"]
    if stats.decode_tps is not None:
        parts.append(f"{stats.decode_tps:.1f} tok/s")
    if stats.acceptance_rate is not None:
        parts.append(f"acceptance {stats.acceptance_rate:.0%}")
    if stats.drafted:
        figure = format_speedup(stats.speedup, stats.speedup_low, stats.speedup_high, streaming=False)
        parts.append(f"speed-up {figure}")
    return "\nLast reply: " + " · ".join(parts)


class _StopOnClose(QObject):
    """Stops the server when the main window closes (the chat's engine is about to go with it)."""

    def __init__(self, server: QtServerBridge, parent: QObject) -> None:
        super().__init__(parent)
        self._server = server

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # Qt override
        if event.type() == QEvent.Type.Close and event.isAccepted():
            self._server.shutdown()
        return False


def add_serve_action(window: Any, menu: QMenu) -> QAction:
    """Add "Serve on localhost…" to ``menu`` of the main ``window`` (its ``bridge``, ``controller``, ``settings`` and
    ``actions_by_id``). The server follows the chat's pair and stops when the app quits."""
    server = QtServerBridge(window.bridge.client, window)
    window.server_bridge = server
    window.controller.engine_changed.connect(lambda info: server.on_pair_loaded(
        window.controller.choice if info is not None else None))
    app = QCoreApplication.instance()
    if app is not None:
        app.aboutToQuit.connect(server.shutdown)
    window.installEventFilter(_StopOnClose(server, window))
    dialog: list[ServeDialog] = []

    def defaults() -> tuple[Any, Any]:
        value = window.settings.value
        return value.sampling(), value.draft_params()

    def open_dialog() -> None:
        if not dialog:
            dialog.append(ServeDialog(server, window, defaults=defaults, settings=window.settings))
        if dialog[0].isVisible():
            dialog[0].raise_()  # already open behind the window: bring it forward
        dialog[0].show()

    action = QAction(SERVE_TEXT, window)
    action.setObjectName(ACTION_SERVE)
    action.triggered.connect(open_dialog)
    menu.addAction(action)
    window.actions_by_id[ACTION_SERVE] = action
    # While serving, the status bar says where (the panel may be closed): a click-free reminder that the port is open.
    indicator = QLabel()
    indicator.setObjectName("serve_indicator")
    indicator.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    indicator.setVisible(False)
    window.statusBar().addPermanentWidget(indicator)

    def on_started(url: str) -> None:
        indicator.setText(f"Serving {url}")
        indicator.setToolTip("OpenAI-compatible server on the chat's engine (Models → Serve on localhost…)")
        indicator.setVisible(True)
        action.setText(f"Serving at {url}…")

    def on_stopped(*_: object) -> None:
        indicator.setVisible(False)
        action.setText(SERVE_TEXT)

    # Queued: the bridge emits these from its start/stop threads, and a plain function connected directly would
    # touch the widgets there ("QBasicTimer::start: Timers cannot be started from another thread").
    queued = Qt.ConnectionType.QueuedConnection
    server.started.connect(on_started, queued)
    server.stopped.connect(on_stopped, queued)
    server.failed.connect(on_stopped, queued)
    return action
