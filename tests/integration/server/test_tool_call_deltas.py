"""Streamed tool calls arrive as OpenAI's incremental deltas, read by the ``openai`` SDK: the call's id, type and
name first (empty arguments), then its arguments in the fragments the engine produces them in. A scripted engine
writes a ``<tool_call>`` reply and waits, half-way through the arguments, until the client has seen the call start:
so the test knows that the name went out before the arguments were even generated.

Breaking it on purpose: with the server holding a reply with tools back to its end (as before ``ToolCallStream``),
the call's start reached the client only after the engine's wait had run out (``started_early`` False) and the
arguments came as one fragment.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from outrider.engine.events import DoneEvent, StepBatch, StepEvent
from outrider.engine.params import TextRequest
from outrider.engine.stats import GenerationStats
from outrider.server.app import ServerConfig
from outrider.server.local import LocalServer

PIECES = ['<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": ', '"Paris", ', '"unit": "celsius"}}',
          "\n</tool_call>"]
GATE_AFTER = 2  # pieces produced before the engine waits for the client
TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


class GatedGeneration:
    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self._steps = self._run()

    def _run(self) -> Iterator[Any]:
        for i, piece in enumerate(PIECES):
            if i == GATE_AFTER:
                self.gate.wait(30)  # released by the client once it has seen the call's start
            yield StepBatch((StepEvent([i], [False], [piece], 0),), GenerationStats(generated=i + 1))
        yield DoneEvent("stop", GenerationStats(generated=len(PIECES)), "".join(PIECES))

    def __iter__(self) -> GatedGeneration:
        return self

    def __next__(self) -> Any:
        return next(self._steps)

    def cancel(self) -> None:
        self.gate.set()

    def close(self) -> None:
        self.gate.set()
        for _ in self._steps:
            pass


class GatedEngine:
    def __init__(self) -> None:
        self.gate = threading.Event()

    def generate(self, request: TextRequest) -> GatedGeneration:
        return GatedGeneration(self.gate)


@pytest.fixture
def gated() -> Iterator[tuple[LocalServer, GatedEngine]]:
    engine = GatedEngine()
    local = LocalServer(engine, ServerConfig(model_name=lambda: "fake", stream_interval_s=0.0), port=0)
    local.start()
    yield local, engine
    engine.gate.set()
    local.stop()


def test_the_call_starts_before_its_arguments_are_generated(gated: tuple[LocalServer, GatedEngine]) -> None:
    local, engine = gated
    api = openai.OpenAI(base_url=f"{local.url}/v1", api_key="none", max_retries=0, timeout=60)
    stream = api.chat.completions.create(model="fake", messages=[{"role": "user", "content": "weather?"}],
                                         tools=TOOLS, stream=True)
    deltas = []
    started_early = None
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        for delta in chunk.choices[0].delta.tool_calls or []:
            if started_early is None:
                started_early = not engine.gate.is_set()
                engine.gate.set()
            deltas.append(delta)
        assert not chunk.choices[0].delta.content  # a call, no text
        finish = chunk.choices[0].finish_reason or finish
    assert started_early is True
    start, *rest = deltas
    assert start.index == 0 and start.id and start.id.startswith("call_") and start.type == "function"
    assert start.function is not None and start.function.name == "get_weather" and start.function.arguments == ""
    fragments = [d.function.arguments for d in rest if d.function is not None]
    assert all(d.id is None and d.index == 0 for d in rest)
    assert len(fragments) >= 2 and fragments[0] == '{"city": '  # the part before the engine's wait
    assert json.loads("".join(f or "" for f in fragments)) == {"city": "Paris", "unit": "celsius"}
    assert finish == "tool_calls"
