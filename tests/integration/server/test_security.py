"""What a web page, or a crowd of idle sockets, can do to the server (a scripted engine, no model):

* a rebinding ``Host: evil.example:PORT`` is refused (421) on every route, loopback names, IP literals and
  ``--allowed-host`` names pass;
* a cross-site ``Origin`` is refused (403) unless allowed (``cors_origins``: then CORS headers and a preflight);
  the server's own origin passes;
* a body sent as ``text/plain`` (what a page may POST without a preflight) is 415;
* 1,100 idle sockets: beyond the cap each new one closes the oldest idle one (one log line each), a real request
  is answered at once, and the log stays small (no tracebacks); when every connection is busy, one more is 503.

Breaking it on purpose: with ``RequestGuard`` removed from ``create_app`` the Host and Origin tests answered 200;
with the connection cap in ``connections.py`` disabled, the flood test found no eviction lines (and with a cap
that only refused, the request behind the flood got 503 until the header deadline).
"""

from __future__ import annotations

import http.client
import json
import logging
import resource
import socket
import time
from typing import Any

import pytest
from test_scheduler import FakeEngine

from outrider.server.app import ServerConfig
from outrider.server.connections import ConnectionLimits
from outrider.server.guard import AccessPolicy
from outrider.server.local import LocalServer

CHAT = json.dumps({"prompt": "hi", "max_tokens": 4})  # the scripted engine answers prompts


def request(server: LocalServer, method: str, path: str, body: str | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request(method, path, body, {"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(raw) if raw else None


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def served(**config: Any) -> LocalServer:
    limits = config.pop("limits", ConnectionLimits())
    return LocalServer(FakeEngine(steps=3, step_s=0.0), ServerConfig(model_name=lambda: "m", limits=limits, **config),
                       port=0)


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/v1/completions"])
def test_a_rebinding_host_is_refused(path: str) -> None:
    with served() as server:
        method, body = ("POST", CHAT) if "completions" in path else ("GET", None)
        status, _, data = request(server, method, path, body, {"Host": f"evil.example:{server.port}"})
        assert status == 421 and data["error"]["code"] == "invalid_host"
        assert "evil.example" in data["error"]["message"]


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "app.localhost:{port}",
                                  "192.168.1.7:{port}", "LOCALHOST", "mybox.lan:{port}"])
def test_this_machines_names_are_served(host: str) -> None:
    with served(access=AccessPolicy(allowed_hosts=("MyBox.lan",))) as server:
        status, _, data = request(server, "POST", "/v1/completions", CHAT,
                                  {"Host": host.format(port=server.port)})
        assert status == 200, data


def test_a_page_on_another_origin_is_refused_before_anything_runs() -> None:
    engine = FakeEngine(steps=3, step_s=0.0)
    with LocalServer(engine, ServerConfig(model_name=lambda: "m"), port=0) as server:
        for origin in ("https://evil.example", "null", "http://localhost:3000"):
            status, headers, data = request(server, "POST", "/v1/completions", CHAT, {"Origin": origin})
            assert status == 403 and data["error"]["code"] == "invalid_origin", origin
            assert "access-control-allow-origin" not in headers
        status, _, _ = request(server, "OPTIONS", "/v1/completions", None,
                               {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert status == 403
        assert engine.started == []  # nothing reached the engine
        own = f"http://127.0.0.1:{server.port}"
        status, _, _ = request(server, "POST", "/v1/completions", CHAT, {"Origin": own})
        assert status == 200


def test_an_allowed_origin_gets_cors_headers_and_a_preflight() -> None:
    origin = "http://localhost:3000"
    with served(access=AccessPolicy(cors_origins=(origin + "/",))) as server:
        status, headers, _ = request(server, "OPTIONS", "/v1/completions", None,
                                     {"Origin": origin, "Access-Control-Request-Method": "POST",
                                      "Access-Control-Request-Headers": "authorization, content-type"})
        assert status == 204
        assert headers["access-control-allow-origin"] == origin
        assert "POST" in headers["access-control-allow-methods"]
        assert "content-type" in headers["access-control-allow-headers"].lower()
        status, headers, data = request(server, "POST", "/v1/completions", CHAT, {"Origin": origin})
        assert status == 200 and headers["access-control-allow-origin"] == origin
        assert data["object"] == "text_completion"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                          ""])
def test_a_body_that_is_not_declared_json_is_415(content_type: str) -> None:
    engine = FakeEngine(steps=3, step_s=0.0)
    with LocalServer(engine, ServerConfig(model_name=lambda: "m"), port=0) as server:
        status, _, data = request(server, "POST", "/v1/completions", CHAT, {"Content-Type": content_type})
        assert status == 415 and data["error"]["code"] == "unsupported_media_type"
        assert engine.started == []
        status, _, _ = request(server, "POST", "/v1/completions", CHAT,
                               {"Content-Type": "Application/JSON; charset=utf-8"})
        assert status == 200


def test_a_body_that_never_arrives_is_408() -> None:
    with served(limits=ConnectionLimits(body_timeout_s=0.5)) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"messages\"")
        answer = read_all(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer


def test_headers_that_never_finish_are_cut_at_the_deadline() -> None:
    with served(limits=ConnectionLimits(header_timeout_s=0.5)) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408")
        assert sock.recv(4096) == b""  # closed
        sock.close()


def test_many_idle_sockets_leave_the_server_reachable_and_the_log_small(caplog: pytest.LogCaptureFixture) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        pytest.skip(f"the descriptor limit ({hard}) cannot hold 1,100 client and 256 server sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)) if hard != resource.RLIM_INFINITY
                                                else 4096, hard))
    caplog.set_level(logging.WARNING)
    idle: list[socket.socket] = []
    try:
        with served(limits=ConnectionLimits(max_connections=256, header_timeout_s=3.0)) as server:
            for _ in range(1100):
                idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=30))
            status, _, data = request(server, "POST", "/v1/completions", CHAT)  # well before the header deadline
            assert status == 200 and data["object"] == "text_completion"
            evicted = [r for r in caplog.records if "closed an idle connection" in r.getMessage()]
            assert len(evicted) >= 1100 - 256
            assert all(r.exc_info is None for r in caplog.records)  # one line each, no tracebacks
            assert sum(len(r.getMessage()) for r in caplog.records) < 150 * len(caplog.records)
            assert read_all(idle[0]) == b""  # the oldest idle sockets were closed
    finally:
        for s in idle:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_when_every_connection_is_busy_one_more_is_503() -> None:
    engine = FakeEngine(steps=50, step_s=0.05)
    with LocalServer(engine, ServerConfig(model_name=lambda: "m", limits=ConnectionLimits(max_connections=2)),
                     port=0) as server:
        busy = []
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(CHAT), CHAT.encode()))
            busy.append(sock)
        deadline = time.monotonic() + 30
        while not (engine.started and server.scheduler.waiting == 1) and time.monotonic() < deadline:  # both read
            time.sleep(0.01)
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        assert read_all(extra).startswith(b"HTTP/1.1 503")
        extra.close()
        for sock in busy:
            assert read_all(sock).startswith(b"HTTP/1.1 200")
            sock.close()
