"""Queueing and cancellation against a real engine process (a tiny generated family): two concurrent streams both
complete, each equal to the same request served alone; a client that disconnects — mid-stream, while waiting for a
whole answer, or while still queued — cancels its generation in the engine."""

from __future__ import annotations

import functools
import http.client
import json
import socket
import time
from typing import Any
from urllib.parse import urlparse

import pytest
from server_helpers import Served, at_once, serve

from outrider.engine.events import DoneEvent

pytestmark = pytest.mark.slow

PROMPT = "the of and"
LONG = 1800  # tokens: seconds of generation, far longer than any test waits for


def stream_text(served: Served, prompt: str, max_tokens: int) -> tuple[str, str | None]:
    """The streamed text and the finish reason of its last chunk."""
    stream = served.api.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                           stream=True)
    chunks = list(stream)
    return "".join(c.choices[0].text for c in chunks), chunks[-1].choices[0].finish_reason


def _engine_texts(served: Served, count: int) -> set[str]:
    """The whole reply text the engine reported for each of the first ``count`` finished jobs."""
    jobs = served.wait_finished(count)
    assert all(isinstance(j.result, DoneEvent) and j.result.stop_reason == "length" for j in jobs)
    return {j.result.text for j in jobs if isinstance(j.result, DoneEvent)}


# The tiny family's random weights have near-ties that a different KV-cache history can flip, so here each stream
# is checked against what the engine itself produced for it; equality with the same request served alone is
# checked with the real demo model (test_openai_client.py).
def test_two_concurrent_streams_both_complete_correctly(tiny: Served) -> None:
    tiny.reset()
    a, b = at_once([lambda: stream_text(tiny, PROMPT, 48), lambda: stream_text(tiny, "and the of", 40)])
    out = {"a": a, "b": b}
    assert out["a"][1] == out["b"][1] == "length"
    assert {out["a"][0], out["b"][0]} == _engine_texts(tiny, 2)
    assert out["a"][0] and out["b"][0] and out["a"][0] != out["b"][0]


def test_many_concurrent_requests_are_served_in_turn(tiny: Served) -> None:
    tiny.reset()

    def ask(i: int) -> Any:
        return tiny.api.completions.create(model="t", prompt=f"{PROMPT} {'of ' * i}", max_tokens=12, temperature=0)

    results = at_once([functools.partial(ask, i) for i in range(6)])
    assert len(results) == 6
    assert all(r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length" for r in results)
    assert {r.choices[0].text for r in results} == _engine_texts(tiny, 6)
    assert tiny.engine.running


def _wait_cancelled(served: Served, count: int) -> DoneEvent:
    job = served.wait_finished(count)[-1]
    assert isinstance(job.result, DoneEvent), job.result
    return job.result


def test_a_client_that_disconnects_mid_stream_cancels_its_generation(tiny: Served) -> None:
    tiny.reset()
    stream = tiny.api.completions.create(model="t", prompt=PROMPT, max_tokens=LONG, temperature=0, stream=True)
    first = next(iter(stream))
    assert first.choices[0].text is not None
    stream.close()  # the client goes away
    done = _wait_cancelled(tiny, 1)
    assert done.stop_reason == "cancelled"
    assert done.stats.generated < LONG
    assert tiny.engine.running  # the engine is free and well: the next request is answered
    assert tiny.api.completions.create(model="t", prompt=PROMPT, max_tokens=4).usage.completion_tokens == 4  # type: ignore[union-attr]


def _raw_request(served: Served, body: dict[str, Any]) -> socket.socket:
    """A non-streaming request sent on a bare socket (so the test can hang up without reading the answer)."""
    url = urlparse(served.url)
    sock = socket.create_connection((url.hostname, url.port))
    data = json.dumps(body).encode()
    # A loopback Host (the server refuses any other: a page's DNS rebinding would send its own name).
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def test_a_client_that_disconnects_while_waiting_for_a_whole_answer_cancels_it(tiny: Served) -> None:
    tiny.reset()
    sock = _raw_request(tiny, {"prompt": PROMPT, "max_tokens": LONG, "temperature": 0})
    deadline = time.monotonic() + 10
    while not tiny.server.scheduler.busy:  # the reply is under way
        assert time.monotonic() < deadline
        time.sleep(0.01)
    sock.close()
    done = _wait_cancelled(tiny, 1)
    assert done.stop_reason == "cancelled" and done.stats.generated < LONG


def test_a_queued_request_whose_client_left_never_runs(tiny: Served) -> None:
    tiny.reset()
    running = tiny.api.completions.create(model="t", prompt=PROMPT, max_tokens=LONG, temperature=0, stream=True)
    next(iter(running))  # the first request holds the engine
    queued = _raw_request(tiny, {"prompt": PROMPT, "max_tokens": LONG})
    deadline = time.monotonic() + 10
    while not tiny.server.scheduler.queued_jobs():
        assert time.monotonic() < deadline, "the second request was queued"
        time.sleep(0.02)
    (waiting,) = tiny.server.scheduler.queued_jobs()
    queued.close()
    deadline = time.monotonic() + 10
    while not waiting.cancelled:  # the server notices within its disconnect poll (0.25 s)
        assert time.monotonic() < deadline, "the queued request was cancelled when its client left"
        time.sleep(0.02)
    running.close()
    finished = tiny.wait_finished(2)
    # The queued job left the queue the moment its client did (its slot is free at once), so it may finish first.
    assert waiting in finished
    assert isinstance(waiting.result, DoneEvent) and waiting.result.stop_reason == "cancelled"
    assert waiting.result.stats.generated == 0 and waiting.result.stats.prompt_tokens == 0  # never reached the engine
    (first,) = [job for job in finished if job is not waiting]
    assert isinstance(first.result, DoneEvent) and first.result.stop_reason == "cancelled"  # the stream was closed


def test_the_queue_is_bounded(tiny_engine: Any) -> None:

    served = serve(tiny_engine, "tiny", max_queued=0, max_tokens_limit=LONG)
    try:
        running = served.api.completions.create(model="t", prompt=PROMPT, max_tokens=LONG, stream=True)
        next(iter(running))
        url = urlparse(served.url)
        conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 2}),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 429
        assert json.loads(response.read())["error"]["code"] == "queue_full"
        running.close()
    finally:
        served.server.stop()


def test_stopping_the_server_cancels_the_running_reply(tiny_engine: Any) -> None:

    served = serve(tiny_engine, "tiny", max_tokens_limit=LONG)
    stream = served.api.completions.create(model="t", prompt=PROMPT, max_tokens=LONG, stream=True)
    next(iter(stream))
    served.server.stop()
    done = _wait_cancelled(served, 1)
    assert done.stop_reason == "cancelled" and done.stats.generated < LONG
    assert not served.server.running


def _content_chunks(served: Served, max_tokens: int) -> tuple[list[str], float]:
    t0 = time.perf_counter()
    chunks = [c.choices[0].text for c in served.api.completions.create(
        model="t", prompt=PROMPT, max_tokens=max_tokens, temperature=0, stream=True) if c.choices[0].text]
    return chunks, time.perf_counter() - t0


def test_a_fast_stream_is_sent_in_chunks_at_most_every_interval(tiny_engine: Any) -> None:
    every_step = serve(tiny_engine, "tiny", max_tokens_limit=LONG, stream_interval_s=0.0)
    try:
        fine, _ = _content_chunks(every_step, 600)
        assert {"".join(fine)} == _engine_texts(every_step, 1)
    finally:
        every_step.server.stop()
    paced = serve(tiny_engine, "tiny", max_tokens_limit=LONG, stream_interval_s=0.1)
    try:
        coarse, seconds = _content_chunks(paced, 600)
        assert {"".join(coarse)} == _engine_texts(paced, 1)  # every piece of text arrives, joined
    finally:
        paced.server.stop()
    assert len(coarse) <= seconds / 0.1 + 2 < len(fine)
