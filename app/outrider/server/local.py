"""``LocalServer``: the scheduler, the API and a server thread around one ``EngineClient`` (GUI and tests).

``outrider serve`` builds the same pieces but serves from its main thread (``runner.serve_forever``), so Ctrl-C
stops it the way it stops every command.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from outrider.server.app import ServerConfig, create_app
from outrider.server.runner import DEFAULT_HOST, DEFAULT_PORT, ServerThread
from outrider.server.scheduler import DEFAULT_MAX_QUEUED, EngineLike, EngineScheduler, Job


class LocalServer:
    """Serves ``engine`` (an ``EngineClient``) on ``host``:``port`` from a thread. ``start``/``stop``; ``url``.

    The socket is bound in the constructor (``runner.BindError``: port in use, bad host), nothing runs before
    ``start``. ``stop`` cancels the running and queued replies and ends open connections."""

    def __init__(self, engine: EngineLike, config: ServerConfig, *, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT, max_queued: int = DEFAULT_MAX_QUEUED,
                 prepare: Callable[[], None] | None = None,
                 on_finished: Callable[[Job], None] | None = None) -> None:
        self.scheduler = EngineScheduler(engine, max_queued=max_queued, prepare=prepare, on_finished=on_finished)
        # the name it listens on is this machine's own (a GUI Host field set to the machine's name)
        access = dataclasses.replace(config.access, allowed_hosts=(*config.access.allowed_hosts, host))
        config = dataclasses.replace(config, access=access)
        self.app: Any = create_app(self.scheduler, config)
        self._thread = ServerThread(self.app, host, port, config.limits)
        self.url = self._thread.url
        self.port = self._thread.port
        self.host = host

    @property
    def running(self) -> bool:
        return self._thread.running

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Idempotent; returns once the server thread ended (or after ``timeout``)."""
        self.scheduler.close(timeout)
        self._thread.stop(timeout)

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
