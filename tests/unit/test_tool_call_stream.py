"""``ToolCallStream``: a streamed reply with tools read as it grows — text as content, each call as OpenAI's
incremental deltas (id and name as soon as the name is read, then the arguments' JSON text in fragments) — for
every way the text can be cut into pieces; the result agrees with the whole reply's ``read_calls``.

Breaking it on purpose: with the text held to the end (the server before: ``read_calls`` on the final text), the
incremental test failed (no delta before the reply ended); with ``_tag_prefix_length`` returning 0 the text test
failed for "<tool" cuts (a half tag went out as content, then the call's tag could no longer be recognised).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from outrider.server.tools import CallDelta, ToolCallStream, read_calls, tool_choice

TOOLS = tool_choice({"tools": [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]})
assert TOOLS is not None

REPLIES = [
    "Hello <b>there</b>, a < b. <tool",
    '{"name": "get_weather", "arguments": {"city": "Pa\\"ris}", "x": [1, {"y": "]"}]}}',
    'Let me see.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"city": "Rome"}}\n</tool_call>',
    '<tool_call>{"arguments": {"city": "Paris"}, "name": "get_weather"}</tool_call>',  # arguments first: held
    '<tool_call>{"name": "launch", "arguments": {}}</tool_call>',  # not a tool of the request
    '{"name": "get_wea',  # cut short by max_tokens
    "",
]


def streamed(text: str, step: int) -> list[CallDelta]:
    stream = ToolCallStream(TOOLS)  # type: ignore[arg-type]
    out: list[CallDelta] = []
    for i in range(0, len(text), step):
        out += stream.feed(text[i:i + step])
    return out + stream.finish()


def assemble(deltas: list[CallDelta]) -> tuple[str, list[dict[str, Any]]]:
    """What a client accumulates: the content, and per index the name and the arguments."""
    content = "".join(d.content for d in deltas if d.content is not None)
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        if d.content is None:
            entry = calls.setdefault(d.index, {"name": None, "arguments": ""})
            wire = d.tool_call()
            if "id" in wire:
                assert entry["name"] is None and wire["type"] == "function" and wire["id"].startswith("call_")
                assert wire["function"]["arguments"] == ""  # the start carries no arguments
                entry["name"] = wire["function"]["name"]
            else:
                assert entry["name"] is not None  # arguments only after the call's start
                entry["arguments"] += wire["function"]["arguments"]
    return content, [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("text", REPLIES)
@pytest.mark.parametrize("step", [1, 2, 3, 5, 8, 1000])
def test_any_cut_gives_what_the_whole_reply_holds(text: str, step: int) -> None:
    content, calls = assemble(streamed(text, step))
    whole_content, whole_calls = read_calls(text, TOOLS)  # type: ignore[arg-type]
    assert [c["name"] for c in calls] == [c["function"]["name"] for c in whole_calls]
    assert [json.loads(c["arguments"]) for c in calls] == [json.loads(c["function"]["arguments"])
                                                           for c in whole_calls]
    assert content.strip() == (whole_content or "").strip()


def test_a_call_starts_before_its_arguments_end() -> None:
    stream = ToolCallStream(TOOLS)  # type: ignore[arg-type]
    first = stream.feed('<tool_call>\n{"name": "get_weather", "arguments": {"ci')
    assert [d.tool_call()["function"]["name"] for d in first if d.id] == ["get_weather"]
    assert "".join(d.arguments or "" for d in first) == '{"ci'
    more = stream.feed('ty": "Oslo"}}\n</tool_call>')
    assert "".join(d.arguments or "" for d in more) == 'ty": "Oslo"}'
    assert stream.finish() == [] and stream.calls == 1


def test_text_goes_out_as_it_comes_except_a_possible_tag() -> None:
    stream = ToolCallStream(TOOLS)  # type: ignore[arg-type]
    assert [d.content for d in stream.feed("It is sunny <to")] == ["It is sunny "]
    assert [d.content for d in stream.feed("day>")] == ["<today>"]
    assert stream.calls == 0
