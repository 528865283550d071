"""How the API reports what the engine could not do, with a scripted engine (no model): no pair loaded (503 on
every route that needs one), the engine process crashed (500 ``engine_crashed``), not running (503), and a failure
after a stream has started (one ``error`` event, no ``[DONE]``: the openai client raises)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import openai
import pytest
from test_scheduler import FakeEngine, FakeGeneration

from outrider.engine.params import TextRequest
from outrider.server.app import ServerConfig
from outrider.server.local import LocalServer
from outrider.worker.errors import EngineCrashed, EngineNotRunning


class FailingGeneration(FakeGeneration):
    """Two steps, then the engine process dies."""

    def _run(self) -> Iterator[Any]:
        steps = super()._run()
        yield next(steps)
        yield next(steps)
        raise EngineCrashed("SIGSEGV", "generating")


class ScriptedEngine(FakeEngine):
    def __init__(self, failure: BaseException | None = None, mid_reply: bool = False) -> None:
        super().__init__(steps=5, step_s=0.01)
        self.failure, self.mid_reply = failure, mid_reply

    def generate(self, request: TextRequest) -> FakeGeneration:
        if self.mid_reply:
            return FailingGeneration(self, request)
        if self.failure is not None:
            raise self.failure
        return super().generate(request)


def get(server: LocalServer, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    url = urlparse(server.url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    conn.request(method, path, None if body is None else json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = json.loads(response.read())
    conn.close()
    return response.status, data


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_no_pair_loaded_is_503_and_an_empty_model_list() -> None:
    with LocalServer(ScriptedEngine(), ServerConfig(model_name=lambda: None), port=0) as server:
        assert get(server, "GET", "/v1/models") == (200, {"object": "list", "data": []})
        status, data = get(server, "POST", "/v1/chat/completions", CHAT)
        assert status == 503 and data["error"]["code"] == "model_not_loaded"
        status, data = get(server, "GET", "/health")
        assert status == 503 and data["status"] == "no model"


@pytest.mark.parametrize(("failure", "status", "code"), [
    (EngineCrashed("SIGSEGV", "generating"), 500, "engine_crashed"),
    (EngineNotRunning("the engine is not running"), 503, "model_not_loaded"),
])
def test_engine_failures_before_the_reply(failure: BaseException, status: int, code: str) -> None:
    with LocalServer(ScriptedEngine(failure), ServerConfig(model_name=lambda: "m"), port=0) as server:
        got, data = get(server, "POST", "/v1/chat/completions", {**CHAT, "stream": True})
        assert got == status and data["error"]["code"] == code
        assert set(data["error"]) == {"message", "type", "param", "code"}
        assert data["error"]["type"] == "server_error"


def test_a_crash_after_the_stream_started_is_an_error_event() -> None:
    with LocalServer(ScriptedEngine(mid_reply=True), ServerConfig(model_name=lambda: "m"), port=0) as server:
        api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        received: list[Any] = []
        with pytest.raises(openai.APIError) as caught:
            for chunk in api.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                     stream=True):
                received.append(chunk)
        assert "engine crashed (SIGSEGV) while generating" in str(caught.value)
        text = "".join(c.choices[0].delta.content or "" for c in received if c.choices)
        assert text  # what was streamed before the crash arrived
        # the whole answer of the same failure is a 500
        status, data = get(server, "POST", "/v1/completions", {"prompt": "p"})
        assert status == 500 and data["error"]["code"] == "engine_crashed"
