"""Qt adapter over ``outrider.server.local.LocalServer``: the GUI's "Serve on localhost" on its own engine process.

The server runs on the ``EngineClient`` the chat uses (``QtEngineBridge.client``): one loaded pair, one engine
process. Its replies wait in the server's ``EngineScheduler`` queue, and the client serialises them with the
chat's own generations (one reply at a time, never interleaved). Starting binds the socket on the GUI thread (a
busy port or a bad host is reported at once, on ``failed``); waiting for uvicorn to accept connections and stopping
(which may wait up to ``runner.GRACEFUL_SHUTDOWN_S`` for open streams) run on the bridge's ``QtTaskRunner`` (one
thread, so a stop never overtakes the start before it), and the GUI thread never blocks. ``started``, ``stopped``
and a ``failed`` start are emitted from that thread as soon as the server is up or down (connections to them are
queued; the serve panel's are queued explicitly), an unexpected error comes back through the runner on the GUI
thread; ``shutdown`` waits for a start or stop still running.

The served model's id is set on the GUI thread (``set_model_name``) and read by the server's thread as a plain
string; while no pair is loaded the API answers 503.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal, Slot

from outrider.engine.events import DoneEvent
from outrider.engine.params import DraftParams, SamplingParams
from outrider.engine.stats import GenerationStats
from outrider.server.requests import Defaults
from outrider.server.runner import DEFAULT_HOST, DEFAULT_PORT, BindError, host_warning
from outrider.server.scheduler import Job
from outrider.ui.bridges.tasks import QtTaskRunner
from outrider.worker.client import EngineClient

if TYPE_CHECKING:  # FastAPI (~1 s to import) is loaded when serving starts, not with the main window
    from outrider.server.local import LocalServer

_log = logging.getLogger(__name__)


class QtServerBridge(QObject):
    """Starts and stops the OpenAI-compatible server on the GUI's engine client.

    Signals:
        started(str): the server accepts connections at this base URL (``http://127.0.0.1:8080/v1``).
        stopped(): the server has stopped (after ``stop``).
        failed(str): it could not start (port in use, bad host), one line for the user.
        request_finished(int): a reply of the server ended; the count of replies served since it started.

    Attributes:
        url: the base URL while running (``…/v1``), else None.
        warning: what the chosen host exposes (not loopback), else None.
    """

    started = Signal(str)
    stopped = Signal()
    failed = Signal(str)
    request_finished = Signal(int)

    def __init__(self, client: EngineClient, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._client = client
        self._server: LocalServer | None = None
        self._tasks = QtTaskRunner("outrider-server-control", self)  # start and stop, in order, off the GUI thread
        self.last_stats: GenerationStats | None = None  # the engine's figures for the last reply served
        self._model_name: str | None = None
        self._served = 0
        self._lock = threading.Lock()
        self.url: str | None = None
        self.warning: str | None = None

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._server is not None

    def set_model_name(self, name: str | None) -> None:
        """The id ``/v1/models`` reports for the pair the chat has loaded (None: no pair)."""
        self._model_name = name

    def served_model(self) -> str | None:
        """Called on the server's thread: the model id, or None (503) while the engine has no pair loaded."""
        if self._client.loaded is None:
            return None
        name = self._model_name
        if name:
            return name
        return self._client.loaded.target.path.rsplit("/", 1)[-1] or "outrider"

    # -- start / stop -----------------------------------------------------------------------------------------
    def start(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, api_key: str | None = None, *,
              sampling: SamplingParams | None = None, draft: DraftParams | None = None,
              max_tokens_limit: int = 4096) -> bool:
        """Bind ``host``:``port`` and start serving; False (and ``failed``) when the address cannot be used.

        ``sampling``/``draft``: defaults of requests that leave them out (the chat's own settings)."""
        if self._server is not None:
            return True
        loaded = self._client.loaded
        if loaded is not None:  # no reply can outgrow the context of the pair loaded now
            max_tokens_limit = min(max_tokens_limit, loaded.n_ctx)
        from outrider.server.app import ServerConfig
        from outrider.server.local import LocalServer

        defaults = Defaults(sampling=sampling or SamplingParams(), draft=draft or DraftParams(),
                            max_tokens_limit=max_tokens_limit)
        config = ServerConfig(model_name=self.served_model, api_key=api_key or None, defaults=defaults)
        try:
            server = LocalServer(self._client, config, host=host, port=port, on_finished=self._on_job_finished)
        except BindError as exc:
            self.failed.emit(str(exc))
            return False
        self._server = server
        self._served = 0
        self.warning = host_warning(host, server.port, api_key or None)
        self.url = f"{server.url}/v1"
        self._tasks.submit(lambda: self._start_and_report(server),
                           on_error=lambda exc: self._on_start_failed(server, exc))
        return True

    def _start_and_report(self, server: LocalServer) -> None:
        """On the task runner's thread: wait until uvicorn accepts connections; ``started`` or ``failed``.
        A server stopped meanwhile (``stop``, ``shutdown``) is not announced: ``stopped`` (or nothing) follows."""
        try:
            server.start()
        except BindError as exc:
            self._forget(server)
            self.failed.emit(str(exc))
            return
        with self._lock:
            current = self._server is server
        if current:
            self.started.emit(f"{server.url}/v1")

    def _on_start_failed(self, server: LocalServer, exc: Exception) -> None:
        """On the GUI thread: starting raised something else than ``BindError`` (a bug), said as what failed."""
        self._forget(server)
        self.failed.emit(f"the server could not start: {exc}")

    def stop(self) -> None:
        """Stop serving: open streams are ended and their replies cancelled; ``stopped`` follows. Idempotent."""
        server = self._server
        if server is None:
            return
        self._forget(server)
        self._tasks.submit(lambda: self._stop_and_report(server), on_error=self._on_stop_failed)

    def _stop_and_report(self, server: LocalServer) -> None:
        """On the task runner's thread: end open streams, stop uvicorn; then ``stopped``."""
        server.stop()
        self.stopped.emit()

    def _on_stop_failed(self, exc: Exception) -> None:
        """On the GUI thread: stopping raised; the server is forgotten all the same (its thread is a daemon)."""
        _log.warning("the local server did not stop cleanly: %s", exc)
        self.stopped.emit()

    def shutdown(self) -> None:
        """Stop now and wait (the app is quitting: the engine goes next), then wait for a start or stop still
        running and drop their results (no signal after this). Idempotent."""
        server = self._server
        if server is not None:
            self._forget(server)
            server.stop(timeout=5.0)
        self._tasks.close(cancel_pending=True)

    def _forget(self, server: LocalServer) -> None:
        with self._lock:
            if self._server is server:
                self._server = None
                self.url = None
                self.warning = None

    # -- server thread → GUI ----------------------------------------------------------------------------------
    def _on_job_finished(self, job: Job) -> None:
        with self._lock:
            self._served += 1
            count = self._served
            if isinstance(job.result, DoneEvent):
                self.last_stats = job.result.stats
        self.request_finished.emit(count)

    @Slot(object)
    def on_pair_loaded(self, choice: Any) -> None:
        """Follow the chat's pair: ``choice`` a ``PairChoice`` (its catalogue id or name), or None."""
        if choice is None:
            self.set_model_name(None)
            return
        self.set_model_name(getattr(choice, "pair_id", None) or getattr(choice, "name", None) or None)
