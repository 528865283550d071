"""Structured output through the server with the ``openai`` SDK's own examples, unchanged: ``chat.completions.parse``
with a Pydantic model (``response_format`` json_schema, strict), ``json_object``, a streamed schema reply; every
answer validates against its schema (``jsonschema``), and speculation ran (drafted > 0 in ``timings``). A schema
llama.cpp cannot turn into a grammar is a 400 naming ``response_format``. Exactness against an independent
reference is tested in the engine (tests/integration/engine/test_grammar.py).

Breaking it on purpose: with ``_response_format`` returning None for json_schema, ``parse`` failed on the reply
(SmolLM2 answers in prose without the grammar).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pydantic
import pytest
from server_helpers import Served

pytestmark = pytest.mark.slow


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    age: int
    languages: list[str] = pydantic.Field(max_length=3)


ASK = [{"role": "system", "content": "Extract the person."},
       {"role": "user", "content": "Ada Lovelace, 36, writes Python and C."}]


def test_the_sdk_parse_example_runs_unchanged(demo: Served) -> None:
    completion = demo.api.chat.completions.parse(model="outrider", messages=ASK,  # type: ignore[arg-type]
                                                 response_format=Person, max_tokens=120, temperature=0)
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop", message.content
    assert isinstance(message.parsed, Person)
    jsonschema.validate(json.loads(message.content or ""), Person.model_json_schema())
    timings: Any = completion.model_extra["timings"]  # type: ignore[index]
    assert timings["draft_n"] > 0


def test_json_object_and_a_streamed_schema_reply(demo: Served) -> None:
    reply = demo.api.chat.completions.create(model="outrider", messages=ASK, max_tokens=24,  # type: ignore[arg-type]
                                             response_format={"type": "json_object"})
    content = reply.choices[0].message.content or ""
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)
    else:  # any JSON object may go on for long: cut at max_tokens, a JSON object's beginning
        assert content.startswith("{") and "\"" in content
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
              "required": ["city"], "additionalProperties": False}
    stream = demo.api.chat.completions.create(
        model="outrider", messages=[{"role": "user", "content": "Name a city."}], max_tokens=60, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), schema)


def test_a_schema_that_cannot_be_a_grammar_is_400(demo: Served) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        demo.api.chat.completions.create(
            model="outrider", messages=ASK, max_tokens=8,  # type: ignore[arg-type]
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}})
    body: Any = caught.value.body
    assert body["param"] == "response_format"
    with pytest.raises(openai.BadRequestError) as caught:
        demo.api.chat.completions.create(model="outrider", messages=ASK, max_tokens=8,  # type: ignore[arg-type]
                                         response_format={"type": "xml"})  # type: ignore[arg-type, typeddict-item]
    assert caught.value.body["param"] == "response_format.type"  # type: ignore[index]
