"""No silent truncation and clear answers to client mistakes:

* a conversation over the context is 400 ``context_length_exceeded`` naming its tokens (200 messages at a 2,048
  context), unless the request sends ``trim_history: true`` (then the oldest turns go and it is answered);
* trimming is a bisection — a dozen renders for 3,000 messages — and stops when the reply is cancelled;
* ``/models`` and ``/chat/completions`` without ``/v1``; an empty prompt, a 5,000-digit number, ``n: null``;
* a queued request whose client left frees its ``--max-queued`` slot at once;
* a stopping server ends an open stream with an error event and ``[DONE]``.

Breaking it on purpose: with ``trim`` left True in ``requests._parsed`` the 200-message request came back 200;
with the old one-turn-at-a-time loop in ``fit_conversation`` the render count was 2,999; with
``Job.cancel`` not withdrawing queued jobs the request after the departed one got 429.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any

import openai
import pytest
from server_helpers import Served
from test_scheduler import FakeEngine

from outrider.engine.chat import TrimCancelled, fit_conversation
from outrider.engine.params import ChatMessage
from outrider.server.app import ServerConfig, create_app
from outrider.server.local import LocalServer
from outrider.server.runner import ServerThread
from outrider.server.scheduler import EngineScheduler


def raw(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data) if data else None


def conversation(n: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"the of and to in {i} is that it for on"}
            for i in range(n - 1)] + [{"role": "user", "content": "the of and"}]


@pytest.mark.slow
def test_an_overlong_conversation_is_refused_unless_trimming_is_asked_for(tiny: Served) -> None:
    messages = conversation(201)
    with pytest.raises(openai.BadRequestError) as caught:
        tiny.api.chat.completions.create(model="t", messages=messages, max_tokens=4)  # type: ignore[arg-type]
    error: Any = caught.value.body
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert "maximum context length is 2048 tokens" in error["message"]
    assert "trim_history" in error["message"]
    n = int(error["message"].split("resulted in ")[1].split(" ")[0])
    assert n > 2048 - 4
    reply = tiny.api.chat.completions.create(model="t", messages=messages, max_tokens=4,  # type: ignore[arg-type]
                                             extra_body={"trim_history": True})
    assert reply.usage is not None and reply.usage.prompt_tokens <= 2048 - 4
    assert reply.usage.completion_tokens >= 1


def test_trimming_is_a_bisection_and_can_be_cancelled() -> None:
    messages = [ChatMessage("user" if i % 2 == 0 else "assistant", "x" * 10) for i in range(3001)]
    calls: list[int] = []

    def count(msgs: Any) -> int:
        calls.append(len(msgs))
        return 11 * len(msgs)

    fitted = fit_conversation(messages, count, 11 * 500)
    assert len(fitted) == 499 and fitted[0].role == "user"  # the longest tail that fits and starts on a user turn
    assert len(calls) <= 16, len(calls)  # 3,001 messages: log2 + 2 renders, never one per turn
    seen = iter(range(100))
    with pytest.raises(TrimCancelled):
        fit_conversation(messages, count, 11 * 500, cancelled=lambda: next(seen) >= 3)


def scripted(**config: Any) -> LocalServer:
    return LocalServer(FakeEngine(steps=3, step_s=0.0), ServerConfig(model_name=lambda: "m", **config), port=0)


def test_the_base_url_without_v1_is_served() -> None:
    with scripted() as server:
        api = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=30)
        assert [m.id for m in api.models.list()] == ["m"]
        assert api.completions.create(model="m", prompt="p", max_tokens=3).object == "text_completion"
        assert raw(server.port, "GET", "/models/m")[0] == 200


@pytest.mark.parametrize(("body", "param"), [
    (b'{"prompt": "", "max_tokens": 3}', "prompt"),
    (b'{"prompt": "p", "max_tokens": ' + b"9" * 5000 + b"}", None),
    (b'{"prompt": "p", "seed": ' + b"9" * 40 + b"}", "seed"),
    (b'{"prompt": "p", "top_k": ' + b"9" * 40 + b"}", "top_k"),
])
def test_client_mistakes_are_400(body: bytes, param: str | None) -> None:
    with scripted() as server:
        status, data = raw(server.port, "POST", "/v1/completions", body)
        assert status == 400, data
        assert data["error"]["param"] == param and data["error"]["type"] == "invalid_request_error"


def test_n_null_is_one_choice() -> None:
    with scripted() as server:
        status, data = raw(server.port, "POST", "/v1/completions", b'{"prompt": "p", "n": null}')
        assert status == 200 and len(data["choices"]) == 1


def test_a_queued_request_whose_client_left_frees_its_slot_at_once() -> None:
    engine = FakeEngine(steps=400, step_s=0.05)  # 20 s: the first reply outlasts the test
    with LocalServer(engine, ServerConfig(model_name=lambda: "m"), port=0, max_queued=1) as server:
        body = json.dumps({"prompt": "p", "max_tokens": 3}).encode()
        running = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body))
        running.sendall(head + body)
        deadline = time.monotonic() + 30
        while not engine.started and time.monotonic() < deadline:
            time.sleep(0.01)
        queued = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        queued.sendall(head + body)
        while server.scheduler.waiting != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.scheduler.waiting == 1
        queued.close()  # the client leaves while its request waits
        while server.scheduler.waiting != 0 and time.monotonic() < deadline:  # noticed within a poll (0.25 s)
            time.sleep(0.01)
        assert server.scheduler.waiting == 0 and len(engine.started) == 1
        late = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        late.sendall(head + body)
        late.settimeout(1.0)
        with pytest.raises(TimeoutError):  # queued (no 429): it waits behind the running reply
            late.recv(100)
        late.close()
        running.close()


def test_a_stopping_server_ends_open_streams_with_an_error_and_done() -> None:
    engine = FakeEngine(steps=10_000, step_s=0.01)
    scheduler = EngineScheduler(engine)
    thread = ServerThread(create_app(scheduler, ServerConfig(model_name=lambda: "m")), port=0)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", thread.port, timeout=30)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": "p", "stream": True}),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        assert response.read1(4096).startswith(b"data: ")  # streaming (read1: what has arrived, unchunked)
        started = time.monotonic()
        thread.stop()
        rest = response.read().decode()
        assert time.monotonic() - started < 5
        events = [line[6:] for line in rest.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == "shutting_down" and "shutting down" in error["message"]
    finally:
        scheduler.close()
        thread.stop()
