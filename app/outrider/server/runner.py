"""Running the API with uvicorn: on a socket bound here first (a busy port is a clear error before anything starts),
in the calling thread (``outrider serve``) or in a thread of its own (the GUI, tests).

Safe by default: ``DEFAULT_HOST`` is the loopback address; any other host is served only when asked, and
``host_warning`` says what that exposes.
"""

from __future__ import annotations

import contextlib
import ipaddress
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from outrider.server.connections import ConnectionLimits

if TYPE_CHECKING:  # imported where a server is made: importing this module stays cheap (the GUI's start-up)
    import uvicorn

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
STARTUP_TIMEOUT_S = 10.0
LISTEN_BACKLOG = 128  # connections the kernel holds before accept: a burst of clients is not turned away
GRACEFUL_SHUTDOWN_S = 2  # open streams get this long after a stop before they are cut (their jobs are cancelled)


class BindError(Exception):
    """The address cannot be served (port in use, unknown host, not allowed)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_warning(host: str, port: int, api_key: str | None) -> str | None:
    """What serving on ``host`` exposes, or None for a loopback address."""
    if is_loopback(host):
        return None
    who = "every network interface" if host in ("0.0.0.0", "::") else host
    guard = "requests need the API key" if api_key else "anyone who can reach it can use the model (no --api-key)"
    return f"serving on {who}, port {port}, not only this machine: {guard}"


def api_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be an API key (a bearer token: printable, no spaces), or None when it can."""
    if not key.strip() or any(c.isspace() or not c.isprintable() for c in key):
        return "the API key must be printable text without spaces"
    return None


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (port 0 = any free port); ``BindError`` with the reason."""
    if not 0 <= port <= 65535:
        raise BindError(f"port must be between 0 and 65535, got {port}")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BindError(f"cannot resolve host {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise BindError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _config(app: Any, limits: ConnectionLimits) -> uvicorn.Config:
    import uvicorn

    from outrider.server.connections import protocol_class

    # asyncio loop, h11 (with the connection limits), no websockets, no lifespan: a small, fixed set of modules
    # (the PyInstaller bundle too).
    return uvicorn.Config(app, loop="asyncio", http=protocol_class(limits), ws="none", lifespan="off",
                          log_level="warning", access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                          timeout_keep_alive=max(1, round(limits.keep_alive_s)))


def _server(app: Any, limits: ConnectionLimits) -> uvicorn.Server:
    """A uvicorn server that, when stopping, lets the app end its open replies properly (``drain``)."""
    import asyncio

    import uvicorn

    class _DrainingServer(uvicorn.Server):
        async def _wait_tasks_to_complete(self) -> None:
            # uvicorn's graceful wait (cut after GRACEFUL_SHUTDOWN_S): the app's drain runs alongside it, ending
            # the replies still open with an error event and [DONE] just before the cut.
            drain = getattr(getattr(app, "state", None), "outrider_drain", None)
            task = asyncio.ensure_future(drain()) if drain is not None else None
            try:
                await super()._wait_tasks_to_complete()
            finally:
                if task is not None and not task.done():
                    task.cancel()

    return _DrainingServer(_config(app, limits))


def serve_forever(app: Any, sock: socket.socket, limits: ConnectionLimits = ConnectionLimits()) -> None:
    """Serve in this thread until SIGINT/SIGTERM (uvicorn's handlers; it re-raises the signal after stopping)."""
    server = _server(app, limits)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if signal.SIGINT in getattr(server, "_captured_signals", ()):
        # uvicorn re-raises a Ctrl-C it stopped for, but asyncio's runner can swallow it when the serving task has
        # already ended (seen under load: exit 0 instead of 130); a Ctrl-C always ends as an interrupt.
        raise KeyboardInterrupt


class ServerThread:
    """The API served from a daemon thread: ``start()`` returns once it accepts connections, ``stop()`` ends it.

    ``url`` is known as soon as the object exists (the socket is bound in the constructor: ``BindError``)."""

    def __init__(self, app: Any, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 limits: ConnectionLimits = ConnectionLimits()) -> None:
        self._sock = bind(host, port)
        self.url = url_of(self._sock)
        self.port: int = self._sock.getsockname()[1]
        self._server = _server(app, limits)
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="outrider-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive():
                raise BindError(f"the server stopped at start-up: {self.error}")
            if time.monotonic() > deadline:
                self.stop()
                raise BindError(f"the server did not start within {STARTUP_TIMEOUT_S:.0f} s")
            time.sleep(0.01)

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # reported through start() or .error: a thread has nowhere to raise to
            self.error = exc

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, end open connections (after ``GRACEFUL_SHUTDOWN_S``), join the thread. Idempotent."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        with contextlib.suppress(OSError):
            self._sock.close()
