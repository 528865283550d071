"""How a stream is written (scripted engine, no model; the HTTP/1.1 chunked framing read off a raw socket: one
frame per write of the server). What one pass of the stream has to say goes out as one write: the opening chat chunk
with the first text; the closing chunk (``finish_reason``, ``timings``), the usage chunk and ``[DONE]`` (with the
last text when it arrives with the end). Each write costs a socket send in the server and a wake-up in the client
(docs/server.md, Overhead)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import openai
import pytest
from test_scheduler import FakeEngine, FakeGeneration

from outrider.engine.events import StepBatch, StepEvent
from outrider.engine.params import TextRequest
from outrider.engine.stats import GenerationStats
from outrider.server import DEFAULT_STREAM_INTERVAL_S
from outrider.server.app import ServerConfig
from outrider.server.local import LocalServer

STEPS = 12


def scripted(step_s: float = 0.01, stream_interval_s: float = DEFAULT_STREAM_INTERVAL_S) -> LocalServer:
    """A started server over a scripted engine of ``STEPS`` steps of ``step_s`` seconds each."""
    engine = FakeEngine(steps=STEPS, step_s=step_s)
    engine.fail_on = "never asked"  # (its default, None, refuses a chat: a chat request has no prompt)
    local = LocalServer(engine, ServerConfig(model_name=lambda: "fake", stream_interval_s=stream_interval_s),
                        port=0)
    local.start()
    return local


@pytest.fixture
def server() -> Iterator[LocalServer]:
    local = scripted()
    yield local
    local.stop()


def frames(server: LocalServer, path: str, body: dict[str, Any]) -> list[bytes]:
    """The chunked-encoding frames of a streamed response, in order (the terminating empty frame left out)."""
    url = urlparse(server.url)
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((url.hostname or "", url.port or 0), timeout=30) as sock:
        sock.sendall(head + payload)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    headers, _, rest = raw.partition(b"\r\n\r\n")
    assert headers.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in headers.lower(), raw
    out: list[bytes] = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out.append(rest[:size])
        assert rest[size:size + 2] == b"\r\n"
        rest = rest[size + 2:]


def events(frame: bytes) -> list[Any]:
    assert frame.endswith(b"\n\n"), frame  # a frame holds whole events, never half of one
    return [e if e == "[DONE]" else json.loads(e) for e in
            (part.removeprefix("data: ") for part in frame.decode().split("\n\n")[:-1])]


def text_of(event: Any) -> str:
    if event == "[DONE]" or not event["choices"]:
        return ""
    choice = event["choices"][0]
    return str(choice["delta"].get("content") or "") if "delta" in choice else str(choice["text"])


@pytest.mark.parametrize("chat", [True, False])
def test_a_stream_opens_and_closes_in_one_write_each(server: LocalServer, chat: bool) -> None:
    body: dict[str, Any] = {"max_tokens": STEPS, "stream": True, "stream_options": {"include_usage": True}}
    body.update({"messages": [{"role": "user", "content": "x"}]} if chat else {"prompt": "p"})
    written = frames(server, "/v1/chat/completions" if chat else "/v1/completions", body)
    parsed = [events(f) for f in written]
    prefix = "" if chat else "p"
    assert "".join(text_of(e) for frame in parsed for e in frame) == "".join(f"{prefix}{i} " for i in range(STEPS))
    first = parsed[0]
    if chat:
        assert first[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert text_of(first[1]) == "0 ", first  # the first text rides with the opening chunk
    else:
        assert text_of(first[0]) == "p0 "
    last = parsed[-1]
    assert last[-1] == "[DONE]" and last[-2]["choices"] == [] and last[-2]["usage"]["completion_tokens"] == STEPS
    assert last[-3]["choices"][0]["finish_reason"] == "length" and "timings" in last[-3]
    finals = [e for frame in parsed for e in frame if e != "[DONE]" and e["choices"]
              and e["choices"][0]["finish_reason"] is not None]
    assert len(finals) == 1
    assert len(written) < sum(len(frame) for frame in parsed)  # fewer writes than events


def test_pacing_never_delays_the_end_of_a_reply() -> None:
    """Steps wait for the next write (here 2 s away), the end does not: the stream closes when the reply does."""
    local = scripted(step_s=0.02, stream_interval_s=2.0)
    try:
        started = time.perf_counter()
        written = frames(local, "/v1/completions", {"prompt": "p", "max_tokens": STEPS, "stream": True})
        elapsed = time.perf_counter() - started
    finally:
        local.stop()
    assert elapsed < 1.5, f"the stream ended {elapsed:.2f} s after the request, for a reply of {STEPS * 0.02:.2f} s"
    parsed = [events(f) for f in written]
    assert len(written) == 2  # the first text at once; every other step with the end, the moment it came
    assert "".join(text_of(e) for frame in parsed for e in frame) == "".join(f"p{i} " for i in range(STEPS))
    assert parsed[-1][-1] == "[DONE]"


class HeldFirstGeneration(FakeGeneration):
    """Its first step releases no text (held back, as a partial UTF-8 character or a stop-string prefix is)."""

    def _run(self) -> Iterator[Any]:
        steps = super()._run()
        next(steps)
        yield StepBatch((StepEvent([0], [False], [""], 0),), GenerationStats(generated=1))
        yield from steps


class HeldFirstEngine(FakeEngine):
    def generate(self, request: TextRequest) -> FakeGeneration:
        return HeldFirstGeneration(self, request)


def test_the_first_text_goes_at_once_even_after_an_empty_first_step() -> None:
    """The chat's opening chunk goes with the first step; text that comes after it is not paced behind it."""
    local = LocalServer(HeldFirstEngine(steps=10, step_s=0.15),
                        ServerConfig(model_name=lambda: "fake", stream_interval_s=1.0), port=0)
    local.start()
    try:
        api = openai.OpenAI(base_url=f"{local.url}/v1", api_key="x", max_retries=0, timeout=30)
        started = time.perf_counter()
        first_text_at = None
        texts: list[str] = []
        for chunk in api.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                 stream=True):
            content = chunk.choices[0].delta.content if chunk.choices else None
            if content:
                first_text_at = first_text_at or time.perf_counter() - started
                texts.append(content)
    finally:
        local.stop()
    assert "".join(texts) == "".join(f"{i} " for i in range(1, 10))
    assert first_text_at is not None and first_text_at < 0.7, first_text_at  # its step comes at 0.3 s; pacing: 1.0 s
