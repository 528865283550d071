"""Safe by default: bad input is an HTTP 400 in OpenAI's error shape (the openai client raises BadRequestError), a
wrong or missing key 401, an oversized body 413, ``max_tokens`` bounded; nothing is lost: the server answers the
next request as before. Runs against a tiny generated family in a real engine process."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlparse

import openai
import pytest
from server_helpers import TINY_CTX, Served, serve

pytestmark = pytest.mark.slow


def raw(served: Served, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    url = urlparse(served.url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=60)
    conn.request(method, path, body, {"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data)


def assert_openai_error(body: dict[str, Any], *, param: str | None, code: str | None) -> str:
    """The OpenAI error shape with exactly its four fields; returns the message."""
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["param"] == param and error["code"] == code
    return str(error["message"])


def still_serving(served: Served) -> None:
    reply = served.api.completions.create(model="t", prompt="the of", max_tokens=3, temperature=0)
    assert reply.usage is not None and reply.usage.completion_tokens == 3


@pytest.mark.parametrize("body", [b"{not json", b"", b"\xff\xfe", b"[1, 2]", b'"text"',
                                  b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
def test_malformed_json_is_400(tiny: Served, body: bytes) -> None:
    status, data = raw(tiny, "POST", "/v1/chat/completions", body)
    assert status == 400
    assert_openai_error(data, param=None, code="invalid_json")
    assert data["error"]["type"] == "invalid_request_error"
    still_serving(tiny)


@pytest.mark.parametrize(("messages", "param"), [
    ("hello", "messages"),
    ([], "messages"),
    ([{"role": "user"}], "messages[0].content"),
    ([{"role": "robot", "content": "hi"}], "messages[0].role"),
    ([{"content": "hi"}], "messages[0].role"),
    (["hi"], "messages[0]"),
    ([{"role": "user", "content": 42}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "messages[0].content[0]"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "messages[1].role"),
])
def test_malformed_messages_are_400_through_the_openai_client(tiny: Served, messages: Any, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        tiny.api.chat.completions.create(model="t", messages=messages, max_tokens=4)
    assert caught.value.status_code == 400
    body: Any = caught.value.body
    assert body["param"] == param, body
    assert caught.value.response.json()["error"]["param"] == param


def test_missing_messages_is_400(tiny: Served) -> None:
    status, data = raw(tiny, "POST", "/v1/chat/completions", b'{"model": "t"}')
    assert status == 400
    assert_openai_error(data, param="messages", code="missing_required_parameter")


@pytest.mark.parametrize(("field", "value", "code"), [
    ("temperature", 3, "invalid_value"), ("temperature", "hot", "invalid_type"), ("top_p", 0, "invalid_value"),
    ("max_tokens", 0, "invalid_value"), ("max_tokens", 1.5, "invalid_type"), ("seed", -1, "invalid_value"),
    ("stop", ["a", "b", "c", "d", "e"], "invalid_value"), ("stop", 5, "invalid_type"),
    ("n", 17, "invalid_value"), ("n", 0, "invalid_value"), ("n", "2", "invalid_type"),
    ("stream", "yes", "invalid_type"), ("frobnicate", 1, "unknown_parameter"),
    ("tools", 5, "invalid_type"), ("tool_choice", "required", "invalid_value"),
    ("logprobs", "yes", "invalid_type"), ("top_logprobs", 21, "invalid_value"),
])
def test_bad_fields_are_400_naming_the_field(tiny: Served, field: str, value: Any, code: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, field: value}
    status, data = raw(tiny, "POST", "/v1/chat/completions", json.dumps(body).encode())
    assert status == 400, data
    assert_openai_error(data, param=field, code=code)


def test_max_tokens_is_bounded_by_the_server(tiny: Served) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        tiny.api.completions.create(model="t", prompt="x", max_tokens=TINY_CTX + 1)
    body: Any = caught.value.body
    assert body["param"] == "max_tokens" and str(TINY_CTX) in body["message"]


def test_completion_prompt_must_be_text(tiny: Served) -> None:
    status, data = raw(tiny, "POST", "/v1/completions", json.dumps({"prompt": [1, 2, 3]}).encode())
    assert status == 400
    assert_openai_error(data, param="prompt", code="invalid_type")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("param", ["messages", "prompt"])
def test_an_input_longer_than_the_context_is_400_naming_its_field(tiny: Served, param: str, stream: bool) -> None:
    """``messages`` on chat completions, ``prompt`` on completions: whole or streamed, the refusal is a 400."""
    words = " ".join(["the of and"] * TINY_CTX)
    with pytest.raises(openai.BadRequestError) as caught:
        if param == "messages":
            tiny.api.chat.completions.create(model="t", messages=[{"role": "user", "content": words}],
                                             max_tokens=4, stream=stream)
        else:
            tiny.api.completions.create(model="t", prompt=words, max_tokens=4, stream=stream)
    assert caught.value.status_code == 400
    data = caught.value.response.json()
    message = assert_openai_error(data, param=param, code=data["error"]["code"])
    assert data["error"]["code"] == "context_length_exceeded", data  # OpenAI's code (litellm knows it)
    assert data["error"]["type"] == "invalid_request_error" and "context" in message.lower(), message
    still_serving(tiny)


def test_unknown_route_and_method_keep_the_error_shape(tiny: Served) -> None:
    status, data = raw(tiny, "GET", "/v1/nothing")
    assert status == 404
    assert_openai_error(data, param=None, code="not_found")
    status, data = raw(tiny, "GET", "/v1/chat/completions")
    assert status == 405
    assert_openai_error(data, param=None, code="method_not_allowed")


def test_an_oversized_request_is_413(tiny_engine: Any) -> None:
    served = serve(tiny_engine, "tiny", max_request_bytes=4096, max_tokens_limit=64)
    try:
        big = json.dumps({"prompt": "x" * 10_000, "max_tokens": 2}).encode()
        status, data = raw(served, "POST", "/v1/completions", big)
        assert status == 413
        assert_openai_error(data, param=None, code="request_too_large")
        still_serving(served)
    finally:
        served.server.stop()


def test_the_api_key_is_required_when_set(tiny_engine: Any) -> None:
    served = serve(tiny_engine, "tiny", api_key="s3cret", max_tokens_limit=64)
    try:
        still_serving(served)  # the right key works (the client sends it as a bearer token)
        wrong = openai.OpenAI(base_url=f"{served.url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as caught:
            wrong.models.list()
        assert caught.value.status_code == 401
        body: Any = caught.value.body
        assert body["code"] == "invalid_api_key" and body["type"] == "invalid_request_error"
        status, data = raw(served, "POST", "/v1/chat/completions", b"{}")  # no key at all, before any parsing
        assert status == 401
        assert_openai_error(data, param=None, code="invalid_api_key")
        status, data = raw(served, "GET", "/health")  # the health check needs no key
        assert status == 200 and data["status"] == "ok"
    finally:
        served.server.stop()
