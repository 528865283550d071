"""Tool calling: OpenAI's ``tools`` / ``tool_choice`` to what the engine renders and forces, and replies back to
``tool_calls``.

* The tools go to the model's own chat template (its ``tools`` variable; a template without one gets them in the
  Hermes layout: ``ChatFormatter.with_tools``). ``tool_choice: "none"`` sends none.
* ``required`` or a named function: the reply is forced by a grammar to be one call,
  ``{"name": …, "arguments": {…}}`` with the arguments following the function's ``parameters`` schema (llama.cpp's
  JSON-schema grammar: always valid JSON of the right shape — what ``strict`` asks for). ``auto``: the model
  chooses; a reply that is such an object, or holds ``<tool_call>…</tool_call>`` blocks, is read back as calls.
* Replies: ``message.tool_calls`` with ``finish_reason: "tool_calls"``; streamed, as ``delta.tool_calls`` chunks
  (a reply with tools is held back until it is known to be text or calls: a call must arrive whole to be useful).
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from outrider.engine.params import GrammarSpec

_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class ToolError(ValueError):
    """A malformed ``tools`` / ``tool_choice``: ``param`` names the field (the server answers 400)."""

    def __init__(self, message: str, param: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


bad = ToolError


@dataclasses.dataclass(frozen=True)
class ToolChoice:
    """The tools of one request. ``forced``: the function every reply must call (``None``: any of ``names``, when
    ``required``); ``grammar``: the constraint that forces a call (None with ``auto``)."""

    tools_json: str
    names: tuple[str, ...]
    mode: str  # "auto" | "required" | "function"
    grammar: GrammarSpec | None


def tool_choice(data: Mapping[str, Any]) -> ToolChoice | None:
    """``tools`` and ``tool_choice`` of a chat request, checked (400 naming the field); None when no tool may be
    called (no tools, or ``tool_choice: "none"``)."""
    tools = data.get("tools")
    choice = data.get("tool_choice")
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise bad("tool_choice needs tools", "tool_choice")
        return None
    if not isinstance(tools, list):
        raise bad("tools must be an array of {\"type\": \"function\", \"function\": {…}}", "tools", "invalid_type")
    functions: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise bad(f"{where} must be {{\"type\": \"function\", \"function\": {{…}}}}", where, "invalid_type")
        function = tool["function"]
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise bad(f"{where}.function.name must be 1-64 letters, digits, _ . or -", f"{where}.function.name")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise bad(f"{where}.function.parameters must be a JSON schema object", f"{where}.function.parameters",
                      "invalid_type")
        functions.append({"name": name, "parameters": parameters})
    names = tuple(f["name"] for f in functions)
    if len(set(names)) != len(names):
        raise bad("two tools have the same name", "tools")
    if choice in (None, "auto"):
        return ToolChoice(json.dumps(tools), names, "auto", None)
    if choice == "none":
        return None
    if choice == "required":
        return ToolChoice(json.dumps(tools), names, "required", _call_grammar(functions))
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        chosen = [f for f in functions if f["name"] == name]
        if not chosen:
            raise bad(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
        return ToolChoice(json.dumps(tools), names, "function", _call_grammar(chosen))
    raise bad("tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": …}}",
              "tool_choice")


def _call_grammar(functions: list[dict[str, Any]]) -> GrammarSpec:
    """One call of one of ``functions``: ``{"name": NAME, "arguments": <its parameters>}``, name first."""
    options = [{"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": f["parameters"]},
                "required": ["name", "arguments"], "additionalProperties": False} for f in functions]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    return GrammarSpec("json_schema", json.dumps(schema))


def read_calls(text: str, tools: ToolChoice) -> tuple[str | None, list[dict[str, Any]]]:
    """The reply's text and the calls it makes: the whole reply as one ``{"name", "arguments"}`` object, or the
    ``<tool_call>`` blocks in it (the text around them is the content). Only calls of the request's tools count."""
    stripped = text.strip()
    calls = []
    whole = _as_call(stripped, tools)
    if whole is not None:
        return None, [whole]
    for match in _CALL_BLOCK.finditer(text):
        call = _as_call(match.group(1), tools)
        if call is not None:
            calls.append(call)
    if not calls:
        return text, []
    content = _CALL_BLOCK.sub("", text).strip()
    return content or None, calls


def _as_call(text: str, tools: ToolChoice) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("name") not in tools.names:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": value["name"],
                         "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}
