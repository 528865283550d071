"""Connection limits: a cap on open connections and deadlines for request headers and idle keep-alive.

uvicorn on its own waits forever for the first request on a connection and has no cap on open sockets: 1,100
idle sockets exhausted the process's file descriptors, after which every ``accept`` failed and asyncio logged a
traceback per attempt (106 MB of log) while no client could connect. Here:

* at most ``max_connections`` connections are open: one more closes the oldest connection that has not sent a
  request (idle sockets are what a flood is made of), or, when every connection has a request in flight, is
  answered ``503`` and closed at once — one log line each (never a traceback), so descriptors are never
  exhausted and a new client is served at once whatever number of idle sockets is held open;
* a connection must deliver a request's headers within ``header_timeout_s`` of its first byte (or of opening),
  else it gets ``408`` and is closed (slow-loris);
* between requests a keep-alive connection is closed after ``keep_alive_s`` idle (uvicorn's own timer);
* a request body must arrive within ``body_timeout_s`` (checked by the routes while they read it: ``app.py``).

A streamed reply is never cut by these deadlines: they only cover what the client sends.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
from typing import Any

LOG = logging.getLogger("outrider.server")
DEFAULT_MAX_CONNECTIONS = 256  # far above what one person's tools open, far below the usual 1,024 descriptors
DESCRIPTORS_KEPT = 64  # descriptors left for the engine's pipes, model files, logs when the limit is lowered
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_KEEP_ALIVE_S = 5.0


@dataclasses.dataclass(frozen=True)
class ConnectionLimits:
    """Bounds on what clients may hold open. Seconds; ``max_connections`` counts open TCP connections."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    keep_alive_s: float = DEFAULT_KEEP_ALIVE_S

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"the connection limit must be >= 1, got {self.max_connections}")
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    def effective_max_connections(self) -> int:
        """``max_connections``, lowered to leave ``DESCRIPTORS_KEPT`` of this process's descriptor limit free."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(1, min(self.max_connections, soft - DESCRIPTORS_KEPT))


def _raw_response(status: str, message: str) -> bytes:
    body = ('{"error":{"message":"' + message + '","type":"server_error","param":null,"code":null}}').encode()
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n").encode() + body


_BUSY = _raw_response("503 Service Unavailable", "too many open connections; try again later")
_SLOW = _raw_response("408 Request Timeout", "the request headers did not arrive in time")


def protocol_class(limits: ConnectionLimits) -> type[Any]:
    """uvicorn's h11 protocol with ``limits`` enforced (a class per server: uvicorn instantiates it per
    connection)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    cap = limits.effective_max_connections()

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._header_timer: Any = None
            self._opened_at = self.loop.time()
            if len(self.connections) > cap and not self._evict_idle():
                peer = self.client or ("?", 0)
                LOG.warning("refused a connection from %s:%s: %d connections are open, all busy (the limit)",
                            peer[0], peer[1], cap)
                transport.write(_BUSY)
                transport.close()
                return
            self._arm_header_timer()

        def _idle(self) -> bool:
            """No request in flight: waiting for (or receiving) a request's headers."""
            return (not self.transport.is_closing() and self.conn.their_state is h11.IDLE
                    and (self.cycle is None or self.cycle.response_complete))

        def _evict_idle(self) -> bool:
            """Close the oldest idle connection other than this one; False when there is none."""
            idle = [c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol) and c._idle()]
            if not idle:
                return False
            oldest = min(idle, key=lambda c: c._opened_at)
            peer = oldest.client or ("?", 0)
            LOG.warning("closed an idle connection from %s:%s: %d connections are open (the limit)",
                        peer[0], peer[1], cap)
            oldest._disarm_header_timer()
            oldest.transport.close()
            self.connections.discard(oldest)  # at once: connection_lost comes on the next loop iteration
            return True

        def _arm_header_timer(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(limits.header_timeout_s, self._headers_too_slow)

        def _disarm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            peer = self.client or ("?", 0)
            LOG.warning("closed a connection from %s:%s: no request headers within %g s", peer[0], peer[1],
                        limits.header_timeout_s)
            self.transport.write(_SLOW)
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.transport.is_closing():
                self._disarm_header_timer()
            elif self.conn.their_state is h11.IDLE:  # a request's headers have started (or not yet)
                self._arm_header_timer()
            else:
                self._disarm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            super().connection_lost(exc)

    return GuardedH11Protocol
