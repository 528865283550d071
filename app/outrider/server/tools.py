"""Tool calling: OpenAI's ``tools`` / ``tool_choice`` to what the engine renders and forces, and replies back to
``tool_calls``.

* The tools go to the model's own chat template (its ``tools`` variable; a template without one gets them in the
  Hermes layout: ``ChatFormatter.with_tools``). ``tool_choice: "none"`` sends none.
* ``required`` or a named function: the reply is forced by a grammar to be one call,
  ``{"name": …, "arguments": {…}}`` with the arguments following the function's ``parameters`` schema (llama.cpp's
  JSON-schema grammar: always valid JSON of the right shape — what ``strict`` asks for). ``auto``: the model
  chooses; a reply that is such an object, or holds ``<tool_call>…</tool_call>`` blocks, is read back as calls.
  With a ``strict`` function, ``auto`` is a grammar too: free text, or calls whose arguments follow the schema.
* Replies: ``message.tool_calls`` with ``finish_reason: "tool_calls"``; streamed, as OpenAI's incremental
  ``delta.tool_calls`` chunks (``ToolCallStream``: a call's id and name as soon as the name is read, then its
  arguments in fragments; text as content, held back only where it may begin the ``<tool_call>`` tag).
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
        functions.append({"name": name, "parameters": parameters, "strict": function.get("strict") is True})
    names = tuple(f["name"] for f in functions)
    if len(set(names)) != len(names):
        raise bad("two tools have the same name", "tools")
    if choice in (None, "auto"):
        return ToolChoice(json.dumps(tools), names, "auto", _auto_grammar(functions))
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


def _call_schema(functions: list[dict[str, Any]], *, free: bool = False) -> dict[str, Any]:
    """One call of one of ``functions``: ``{"name": NAME, "arguments": <its parameters>}``, name first (so a stream
    can name the call before its arguments). ``free``: a function that is not ``strict`` takes any object."""
    options = [{"type": "object", "properties": {
        "name": {"const": f["name"]},
        "arguments": f["parameters"] if f["strict"] or not free else {"type": "object"}},
        "required": ["name", "arguments"], "additionalProperties": False} for f in functions]
    return options[0] if len(options) == 1 else {"anyOf": options}


def _call_grammar(functions: list[dict[str, Any]]) -> GrammarSpec:
    """A forced call (``required``, a named function): its arguments always follow the schema."""
    return GrammarSpec("json_schema", json.dumps(_call_schema(functions)))


def _auto_grammar(functions: list[dict[str, Any]]) -> GrammarSpec | None:
    """``auto`` with at least one ``strict`` function: text, or calls whose arguments follow the strict functions'
    schemas (``engine.grammar.text_or_tool_calls_gbnf``); None when no function is strict (the model is free)."""
    if not any(f["strict"] for f in functions):
        return None
    return GrammarSpec("text_or_tool_calls", json.dumps(_call_schema(functions, free=True)))


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


TAG_OPEN, TAG_CLOSE = "<tool_call>", "</tool_call>"
_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
HEAD_LIMIT = 256  # characters of a call's start read for its name before it is held whole to the end instead


@dataclasses.dataclass(frozen=True)
class CallDelta:
    """One streamed piece of a reply with tools: ``content`` text, or a piece of call ``index`` — its start (``id``
    and ``name``, empty arguments) or a fragment of its arguments' JSON text."""

    content: str | None = None
    index: int = 0
    id: str | None = None
    name: str | None = None
    arguments: str | None = None

    def tool_call(self) -> dict[str, Any]:
        """The ``delta.tool_calls[0]`` entry OpenAI streams."""
        if self.id is not None:
            return {"index": self.index, "id": self.id, "type": "function",
                    "function": {"name": self.name, "arguments": ""}}
        return {"index": self.index, "function": {"arguments": self.arguments}}


class ToolCallStream:
    """A streamed reply with tools, read as it grows: text goes out as content, a call as OpenAI's incremental
    ``tool_calls`` deltas — its start (id, name) as soon as the name is read, then its arguments' JSON text in the
    fragments it arrives in. ``feed(text)`` returns what can be sent now; ``finish()`` the rest.

    A call is ``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` (any number, after text) or the whole reply
    as one such object (what the forced and the strict grammars produce: name first). Text that may be the start of
    the tag is held back until it is known not to be. A call written otherwise (arguments first, arguments as a
    string, a name not among the tools) is held to the end and read there whole (``read_calls``): a client never
    gets a call it would have to take back."""

    def __init__(self, tools: ToolChoice) -> None:
        self._tools = tools
        self._buffer = ""  # received, not yet sent or consumed
        self._mode = "start"  # start | text | head | arguments | after | held
        self._calls = 0
        self._depth = 0  # the arguments' JSON nesting
        self._in_string = False
        self._escaped = False
        self._tagged = False  # the call being read is inside <tool_call> … </tool_call>

    @property
    def calls(self) -> int:
        """Calls started so far (streamed or read at the end)."""
        return self._calls

    def feed(self, text: str) -> list[CallDelta]:
        self._buffer += text
        out: list[CallDelta] = []
        while True:
            before = (self._mode, len(self._buffer))
            step = getattr(self, f"_{self._mode}")
            out += step()
            if (self._mode, len(self._buffer)) == before:
                return [d for d in out if d.content != ""]

    def finish(self) -> list[CallDelta]:
        """The end of the reply: held text as content, a held call read whole."""
        if self._mode == "head":  # a call's start never completed (cut short, or not a call after all)
            self._hold()
        rest, self._buffer = self._buffer, ""
        if self._mode == "held":
            content, calls = read_calls(rest, self._tools)
            out = [CallDelta(content=content)] if content else []
            for call in calls:
                index = self._calls
                self._calls += 1
                out += [CallDelta(index=index, id=call["id"], name=call["function"]["name"]),
                        CallDelta(index=index, arguments=call["function"]["arguments"])]
            return out
        if self._mode in ("start", "text", "after") and rest.strip():
            return [CallDelta(content=rest)]
        return []  # a call cut short (max_tokens): what was sent of it stands

    # -- the modes: each consumes what it can of the buffer ---------------------------------------------------
    def _start(self) -> list[CallDelta]:
        stripped = self._buffer.lstrip()
        if not stripped:
            return []
        if stripped.startswith("{"):
            self._buffer, self._tagged, self._mode = stripped, False, "head"
        elif stripped.startswith(TAG_OPEN):
            self._buffer, self._tagged, self._mode = stripped[len(TAG_OPEN):], True, "head"
        elif not TAG_OPEN.startswith(stripped):
            self._mode = "text"
        return []

    def _text(self) -> list[CallDelta]:
        at = self._buffer.find(TAG_OPEN)
        if at >= 0:
            content, self._buffer = self._buffer[:at], self._buffer[at + len(TAG_OPEN):]
            self._tagged, self._mode = True, "head"
            return [CallDelta(content=content)]
        keep = _tag_prefix_length(self._buffer)
        content, self._buffer = self._buffer[:len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
        return [CallDelta(content=content)]

    def _head(self) -> list[CallDelta]:
        match = _CALL_HEAD.match(self._buffer)
        if match is None:
            if len(self._buffer) > HEAD_LIMIT or '"arguments"' in self._buffer or '"parameters"' in self._buffer:
                self._hold()
            return []
        rest = self._buffer[match.end():]
        if not rest:
            return []  # the arguments' first character decides
        try:
            name = json.loads(f'"{match.group(1)}"')
        except ValueError:
            name = None
        if name not in self._tools.names or not rest.startswith("{"):
            self._hold()
            return []
        index = self._calls
        self._calls += 1
        self._buffer = rest
        self._depth, self._in_string, self._escaped = 0, False, False
        self._mode = "arguments"
        return [CallDelta(index=index, id=f"call_{uuid.uuid4().hex[:24]}", name=name)]

    def _arguments(self) -> list[CallDelta]:
        for i, char in enumerate(self._buffer):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth == 0:
                    fragment, self._buffer = self._buffer[:i + 1], self._buffer[i + 1:]
                    self._mode = "after"
                    return [CallDelta(index=self._calls - 1, arguments=fragment)]
        fragment, self._buffer = self._buffer, ""
        return [CallDelta(index=self._calls - 1, arguments=fragment)] if fragment else []

    def _after(self) -> list[CallDelta]:
        """After a call's arguments: its closing brace (and tag), then text or the next tagged call."""
        stripped = self._buffer.lstrip()
        if not stripped:
            return []
        if stripped.startswith("}"):
            self._buffer = stripped[1:]
            if self._tagged:
                self._mode = "close"
                return self._close()
            return []
        self._mode = "text"
        return []

    def _close(self) -> list[CallDelta]:
        stripped = self._buffer.lstrip()
        if stripped.startswith(TAG_CLOSE):
            self._buffer, self._mode = stripped[len(TAG_CLOSE):], "start"
        elif stripped and not TAG_CLOSE.startswith(stripped):
            self._mode = "text"  # no closing tag: what follows is text
        return []

    def _hold(self) -> None:
        """Keep the rest (from this call's start) for ``finish``."""
        if self._tagged:
            self._buffer = TAG_OPEN + self._buffer
        self._mode = "held"

    def _held(self) -> list[CallDelta]:
        return []


def _tag_prefix_length(text: str) -> int:
    """The length of the longest end of ``text`` that begins ``<tool_call>`` (held back: the tag may follow)."""
    for n in range(min(len(TAG_OPEN) - 1, len(text)), 0, -1):
        if TAG_OPEN.startswith(text[-n:]):
            return n
    return 0
