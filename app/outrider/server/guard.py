"""Who may talk to the server: the ``Host`` and ``Origin`` checks that keep web pages out (an ASGI middleware).

The threat (docs/server.md, Threat model): a page the user visits in a browser can send requests to
``http://127.0.0.1:8080`` — the browser is on this machine, so "loopback only" does not keep it out.

* **DNS rebinding**: a page on ``evil.example`` re-points its own name at 127.0.0.1; its requests then reach this
  server as same-origin requests and it can *read* the answers. They arrive with ``Host: evil.example:8080``, so
  only ``Host`` values that name this machine are served: the loopback names (``localhost``, ``*.localhost``), any
  IP address literal (a rebinding needs a DNS name: a page loaded from an IP address is that address's own
  origin) and the names the user configured (``--allowed-host``). Anything else: 421 ``invalid_host``.
* **Cross-site requests (CSRF)**: a page on another origin can *send* a POST (a form, or ``fetch`` with
  ``mode: "no-cors"``) even when it cannot read the answer — and making the model generate is already harm (CPU,
  the queue, the GUI's engine). Browsers mark every such request with ``Origin``; a request whose ``Origin`` is
  neither this server's own address nor one allowed with ``--cors-origin`` is refused (403 ``invalid_origin``)
  before its body is read. Allowed origins get CORS headers, preflights (``OPTIONS``) included.
* A body that is not ``application/json`` is refused by the routes (415): ``text/plain`` is what a page can send
  without a preflight (``app.py``).

Clients that are not browsers (the ``openai`` SDK, curl, editors) send no ``Origin`` and a loopback ``Host``: they
pass unchanged.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOG = logging.getLogger("outrider.server")
ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, OpenAI-Organization, OpenAI-Project, X-Stainless-Lang, " \
                "X-Stainless-Package-Version, X-Stainless-OS, X-Stainless-Arch, X-Stainless-Runtime, " \
                "X-Stainless-Runtime-Version, X-Stainless-Retry-Count, X-Stainless-Timeout"
PREFLIGHT_MAX_AGE_S = 600


@dataclasses.dataclass(frozen=True)
class AccessPolicy:
    """Which ``Host`` names (beyond loopback names and IP literals) and which cross-site ``Origin`` values are
    served. Names are compared case-insensitively, without the port; origins as ``scheme://host[:port]``
    (``*``: any origin, for a deliberately public server)."""

    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_hosts", tuple(h.strip().lower().rstrip(".") for h in self.allowed_hosts))
        object.__setattr__(self, "cors_origins", tuple(normalise_origin(o) for o in self.cors_origins))

    def host_allowed(self, host_header: str) -> bool:
        """Whether a request with ``Host: host_header`` names this machine (see the module docstring)."""
        name = host_name(host_header)
        if name is None:
            return False
        if name == "localhost" or name.endswith(".localhost") or name in self.allowed_hosts:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def origin_allowed(self, origin: str, host_header: str | None) -> bool:
        """Whether a browser request from ``origin`` may be served: this server's own origin (same ``Host``), or
        one allowed with ``--cors-origin``. The opaque origin ``null`` (sandboxed frames, files) never is."""
        normal = normalise_origin(origin)
        if "*" in self.cors_origins and normal != "null":
            return True
        if normal in self.cors_origins:
            return True
        if host_header is None or normal == "null":
            return False
        parts = urlsplit(normal)
        return parts.scheme == "http" and parts.netloc == host_header.strip().lower()


def normalise_origin(origin: str) -> str:
    """``Origin`` as browsers send it: lower case, no trailing slash."""
    return origin.strip().lower().rstrip("/")


def host_name(host_header: str) -> str | None:
    """The name part of a ``Host`` header (no port, no IPv6 brackets, no trailing dot); None when malformed."""
    value = host_header.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        return value[1:end]
    name, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


async def _refuse(send: Send, status: int, message: str, code: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": code}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """ASGI middleware: refuses a foreign ``Host`` (421) or ``Origin`` (403), answers CORS preflights for allowed
    origins and adds CORS headers to their responses. One log line per refusal (never a traceback)."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host")
        client = scope.get("client") or ("?", 0)
        where = f"{client[0]}:{client[1]}"
        if host is not None and not self.policy.host_allowed(host):
            LOG.warning("refused a request from %s: Host %r is not this machine (DNS rebinding?)", where, host[:100])
            await _refuse(send, 421, f"this server does not serve the host {host!r}: only this machine's own "
                          "names (localhost, an IP address, or a name allowed with --allowed-host)", "invalid_host")
            return
        origin = headers.get("origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        if not self.policy.origin_allowed(origin, host):
            LOG.warning("refused a request from %s: Origin %r is another site", where, origin[:100])
            await _refuse(send, 403, f"requests from the web page at {origin!r} are not allowed (a page on another "
                          "site may not drive this server; allow it with --cors-origin)", "invalid_origin")
            return
        cors = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await send({"type": "http.response.start", "status": 204,
                        "headers": [*cors, (b"access-control-allow-methods", ALLOW_METHODS.encode()),
                                    (b"access-control-allow-headers", ALLOW_HEADERS.encode()),
                                    (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode())]})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)
