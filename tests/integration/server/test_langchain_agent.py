"""An agent framework drives ``outrider serve`` through a tool loop: LangChain's ``ChatOpenAI`` (langchain-openai)
pointed at the server on 127.0.0.1, a ``@tool`` bound with ``bind_tools`` (forced, strict: deterministic on the demo
pair, greedy), the framework's own tool call executed, its ``ToolMessage`` sent back, and the model's text answer
after it — whole, and streamed (LangChain merges the incremental ``tool_calls`` deltas into ``tool_call_chunks``).

Breaking it on purpose: with the argument fragments of a streamed call sent without their ``index``
(``CallDelta.tool_call``), LangChain could not join them to the call's start and the merged message held more than
one tool call: the streamed test failed.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from server_helpers import Served

pytestmark = pytest.mark.slow

CALLED: list[dict[str, Any]] = []


@tool
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
    """The current weather in a city."""
    CALLED.append({"city": city, "unit": unit})
    return json.dumps({"city": city, "temperature": 18, "unit": unit})


def chat_model(demo: Served, max_tokens: int) -> ChatOpenAI:
    return ChatOpenAI(base_url=f"{demo.url}/v1", api_key="none", model="outrider",  # type: ignore[arg-type]
                      temperature=0, max_tokens=max_tokens, max_retries=0, timeout=600)  # type: ignore[call-arg]


def test_a_langchain_tool_loop(demo: Served) -> None:
    CALLED.clear()
    llm = chat_model(demo, 60)
    forced = llm.bind_tools([get_weather], tool_choice="get_weather", strict=True)
    messages: list[Any] = [HumanMessage("What is the weather in Paris?")]
    first = forced.invoke(messages)
    assert isinstance(first, AIMessage)
    (call,) = first.tool_calls
    assert call["name"] == "get_weather" and call["id"]
    schema = get_weather.tool_call_schema.model_json_schema()
    jsonschema.validate(call["args"], {k: v for k, v in schema.items() if k != "title"})
    messages.append(first)
    result = get_weather.invoke(call)  # the framework runs the tool: a ToolMessage with the call's id
    assert isinstance(result, ToolMessage) and result.tool_call_id == call["id"] and [call["args"]] == CALLED
    messages.append(result)
    answer = chat_model(demo, 16).bind_tools([get_weather], tool_choice="none").invoke(messages)
    assert isinstance(answer, AIMessage) and isinstance(answer.content, str) and answer.content.strip()
    assert not answer.tool_calls


def test_a_langchain_streamed_tool_call(demo: Served) -> None:
    forced = chat_model(demo, 60).bind_tools([get_weather], tool_choice="get_weather", strict=True)
    merged: AIMessageChunk | None = None
    pieces = 0
    for chunk in forced.stream([HumanMessage("What is the weather in Rome?")]):
        assert isinstance(chunk, AIMessageChunk)
        pieces += bool(chunk.tool_call_chunks)
        merged = chunk if merged is None else merged + chunk
    assert merged is not None and pieces >= 2  # the start, then the arguments (in at least one more chunk)
    (call,) = merged.tool_calls
    assert call["name"] == "get_weather" and call["id"]
    assert set(call["args"]) == {"city", "unit"} and call["args"]["unit"] in ("celsius", "fahrenheit")
