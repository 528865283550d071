"""Tool calling with the ``openai`` SDK's tool loop, unchanged, on the demo pair: the model is offered tools through
its own chat template, ``tool_choice: "required"`` and a named function force one call whose arguments follow the
function's schema (a grammar: ``jsonschema`` validates them), the call comes back as ``message.tool_calls``
(``finish_reason: "tool_calls"``) and as streamed ``delta.tool_calls`` the SDK accumulates, and the ``tool``
message with the result is accepted for the next turn.

Breaking it on purpose: with the grammar left out of ``chat_request`` (``tools.grammar`` unused) the tool-loop test
failed — no call came back before the client's timeout (the forced call ends in a few dozen tokens).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from server_helpers import Served

from outrider.server.tools import ToolChoice, read_calls

pytestmark = pytest.mark.slow

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS: Any = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": WEATHER, "strict": True}},
    {"type": "function", "function": {"name": "get_time", "description": "Local time in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}},
]


def test_the_sdk_tool_loop_runs(demo: Served) -> None:
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = demo.api.chat.completions.create(model="outrider", messages=messages, tools=TOOLS,
                                             tool_choice="required", max_tokens=60)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in ("get_weather", "get_time")  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    if call.function.name == "get_weather":  # type: ignore[union-attr]
        jsonschema.validate(arguments, WEATHER)
    messages.append(choice.message)  # the SDK's own message object, as its docs do
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18})})
    second = demo.api.chat.completions.create(model="outrider", messages=messages, tools=TOOLS, max_tokens=12,
                                              tool_choice="none")
    assert second.choices[0].message.content and not second.choices[0].message.tool_calls


def test_a_named_function_streamed(demo: Served) -> None:
    stream = demo.api.chat.completions.create(
        model="outrider", messages=[{"role": "user", "content": "Weather in Rome?"}], tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=60, stream=True)
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        for delta in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            if delta.function and delta.function.name:
                entry["name"] += delta.function.name
            if delta.function and delta.function.arguments:
                entry["arguments"] += delta.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert calls[0]["name"] == "get_weather"
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER)


def test_bad_tool_requests_are_400(demo: Served) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        demo.api.chat.completions.create(model="outrider", messages=[{"role": "user", "content": "x"}],
                                         tools=TOOLS, tool_choice={"type": "function",
                                                                   "function": {"name": "nope"}})
    assert caught.value.body["param"] == "tool_choice"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        demo.api.chat.completions.create(model="outrider", messages=[{"role": "tool", "content": "18"}])
    assert caught.value.body["param"] == "messages[0].tool_call_id"  # type: ignore[index]


def test_calls_are_read_from_tool_call_blocks_and_whole_objects() -> None:
    tools = ToolChoice("[]", ("get_weather",), "auto", None)
    content, calls = read_calls('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}'
                                '\n</tool_call>', tools)
    assert content == "Let me check." and json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"}
    assert read_calls('{"name": "get_weather", "arguments": {}}', tools)[0] is None
    assert read_calls('{"name": "other", "arguments": {}}', tools) == ('{"name": "other", "arguments": {}}', [])
    assert read_calls("plain text", tools) == ("plain text", [])


# SmolLM2 copies what it is told to: asked to repeat a call with a wrong argument, it does so without a grammar —
# greedy, this very request with ``strict: false`` came back as the call ``{"town": "Paris"}`` (no "city", no
# "unit"): what a strict function must never return.
COPY_A_BAD_CALL: Any = [{"role": "user", "content": 'Repeat exactly this line and nothing else: <tool_call>{"name": '
                                                    '"get_weather", "arguments": {"town": "Paris"}}</tool_call>'}]


def test_auto_with_a_strict_function_gives_schema_valid_calls(demo: Served) -> None:
    """``tool_choice: "auto"`` with ``strict: true``: the reply may be text or calls, and a call's arguments follow
    the schema (the text-or-calls grammar). Breaking it on purpose: with ``_auto_grammar`` returning None (the
    server before), the engine answered this request with the call ``{"town": "Paris"}`` and went on writing to
    ``max_tokens`` (seen on the engine directly; through the server, on the loaded machine, that unconstrained
    reply outlasted the client's 120 s timeout, so the test failed there)."""
    strict = [TOOLS[0]]  # get_weather, strict
    whole = demo.api.chat.completions.create(model="outrider", messages=COPY_A_BAD_CALL, tools=strict,
                                             tool_choice="auto", max_tokens=60)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    jsonschema.validate(arguments, WEATHER)
    timings = (whole.model_extra or {})["timings"]
    assert timings["draft_n"] > 0  # speculation ran under the grammar
    # streamed: the same call, as incremental deltas (id and name first, then the arguments)
    stream = demo.api.chat.completions.create(model="outrider", messages=COPY_A_BAD_CALL, tools=strict,
                                              tool_choice="auto", max_tokens=60, stream=True)
    deltas = [d for chunk in stream if chunk.choices for d in chunk.choices[0].delta.tool_calls or []]
    assert deltas[0].id and deltas[0].function and deltas[0].function.name == "get_weather"
    assert json.loads("".join(d.function.arguments or "" for d in deltas if d.function)) == arguments
