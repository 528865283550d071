"""The text-or-calls grammar of ``tool_choice: "auto"`` with a strict function (``engine.grammar.
text_or_tool_calls_gbnf``), walked by llama.cpp's grammar sampler over a real vocabulary (the tiny family's, which
spells any text with its byte tokens): free text is allowed — with ``<`` in it, and an unfinished ``<tool`` —, so
are calls, bare or in ``<tool_call>`` blocks after text, whose arguments follow the schema; a call whose arguments
do not, text that starts like a bare object, and a call of another function are not.

Breaking it on purpose: without the "does not contain the tag" states (``otc-text ::= [^{<…] .*``-like free text),
``'text <tool_call>{"name": "other"'`` was allowed: an unconstrained call hidden in the text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from outrider.engine.engine import Engine
from outrider.engine.grammar import GrammarMask
from outrider.engine.params import ContextSettings, GrammarSpec, PairSpec
from support.tiny_gguf import Family

CALL = {"type": "object", "properties": {
    "name": {"const": "get_weather"},
    "arguments": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                  "additionalProperties": False}},
    "required": ["name", "arguments"], "additionalProperties": False}
SPEC = GrammarSpec("text_or_tool_calls", json.dumps(CALL))
GOOD_CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


@pytest.fixture(scope="module")
def engine(tiny_family: Family) -> Iterator[Engine]:
    e = Engine()
    e.load(PairSpec(str(tiny_family.target), context=ContextSettings(n_ctx=256, threads=1)))
    yield e
    e.close()


def allowed(engine: Engine, text: str) -> bool:
    grammar = GrammarMask.of(engine.target, SPEC)
    try:
        tokens = engine.target.tokenize(text, add_special=False, parse_special=False)
        return grammar.allowed_prefix(tokens) == len(tokens)
    finally:
        grammar.close()


@pytest.mark.parametrize("text", [
    "Hello there, friend.", "a < b, and then <tool", "", "  \n",
    GOOD_CALL, f"\n{GOOD_CALL}\n",
    f"<tool_call>\n{GOOD_CALL}\n</tool_call>",
    f"Let me check.\n<tool_call>\n{GOOD_CALL}\n</tool_call>\n<tool_call>{GOOD_CALL}</tool_call>",
])
def test_text_and_valid_calls_are_allowed(engine: Engine, text: str) -> None:
    assert allowed(engine, text)


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Paris"}}',  # arguments off the schema
    ' {"name": "x"}',  # text starting like a bare object
    'text <tool_call>{"name": "other"',  # another function, after text
    f"<tool_call>{GOOD_CALL}</tool_call> and then text",  # text after the calls
])
def test_invalid_calls_are_forbidden(engine: Engine, text: str) -> None:
    assert not allowed(engine, text)
