"""OpenAI request bodies → the engine's ``TextRequest``, with a precise ``ApiError`` for every bad field.

Only JSON the OpenAI API defines (plus llama-server's ``top_k`` and ``min_p``, and Outrider's ``trim_history``:
a chat too long for the context loses its oldest turns instead of being refused) is understood. A field Outrider
cannot honour (``logit_bias``, penalties …) is refused by name rather than silently ignored;
fields that change nothing here (``user``, ``metadata``, ``store``…) are accepted. Ranges follow the OpenAI
reference: ``temperature`` 0–2, ``top_p`` (0, 1], at most ``MAX_STOP`` stop strings.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from outrider.engine.params import SAMPLERS, ChatMessage, DraftParams, GrammarSpec, Sampler, SamplingParams, TextRequest
from outrider.server.tools import ToolChoice, ToolError, tool_choice

MAX_STOP = 4  # OpenAI's limit on stop strings
# Choices are generated one after another on the one engine: n of them take n times as long. 16 covers what
# clients ask for (best-of-a-few, self-consistency voting) and keeps one request from holding the engine for long.
MAX_CHOICES = 16
MAX_STOP_CHARS = 256
_N = TypeVar("_N", int, float)  # a number read from a request
_D = TypeVar("_D")  # its default


class ApiError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    """A 400 ``invalid_request_error`` about ``param``."""
    return ApiError(400, message, param=param, code=code)


@dataclasses.dataclass(frozen=True)
class Defaults:
    """What a request gets for a field it leaves out (the ``serve`` command's options), and the bounds.

    ``max_tokens_limit``: the largest ``max_tokens`` a request may ask for (also the default when absent).
    """

    sampling: SamplingParams = SamplingParams()
    draft: DraftParams = DraftParams()
    max_tokens_limit: int = 4096


@dataclasses.dataclass(frozen=True)
class ParsedRequest:
    """A validated request: what to generate, and how to answer."""

    text: TextRequest
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with ``usage`` and no choices
    model: str | None
    tools: ToolChoice | None = None  # the tools the reply may call (tools.py)
    n: int = 1  # choices, generated one after another (``choice_requests``)

    def choice_requests(self) -> list[TextRequest]:
        """One request per choice: choice 0 is ``text`` itself, choice i > 0 the same with the seed
        ``choice_seed(seed, i)`` (an unseeded request stays unseeded: each choice gets a fresh seed)."""
        seed = self.text.sampling.seed
        return [self.text if i == 0 or seed is None else dataclasses.replace(
            self.text, sampling=dataclasses.replace(self.text.sampling, seed=choice_seed(seed, i)))
            for i in range(self.n)]

    @property
    def input_param(self) -> str:
        """The field holding the input: ``messages`` (chat) or ``prompt`` (completion), named by errors about it."""
        return "prompt" if self.text.prompt is not None else "messages"


# Fields that change nothing for a local single-model server and are accepted as they are.
_HARMLESS = frozenset({"model", "user", "metadata", "store", "service_tier", "parallel_tool_calls",
                       "prediction", "modalities", "reasoning_effort"})
_NOT_SUPPORTED = {
    "functions": "the legacy functions field is not supported (use tools)",
    "function_call": "the legacy function_call field is not supported (use tool_choice)",
    "logit_bias": "logit_bias is not supported", "audio": "audio output is not supported",
    "web_search_options": "web search is not supported", "best_of": "best_of is not supported",
}
_CHAT_FIELDS = frozenset({"trim_history",  # Outrider's extension: drop the oldest turns rather than refuse
                          "tools", "tool_choice", "messages", "max_tokens", "max_completion_tokens",
                          "temperature", "top_p", "top_k", "min_p", "stop", "seed", "stream", "stream_options",
                          "n", "logprobs", "top_logprobs",
                          "presence_penalty", "frequency_penalty", "response_format"})
_COMPLETION_FIELDS = frozenset({"suffix", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p",
                                "stop", "seed", "stream", "stream_options", "n", "logprobs", "echo",
                                "presence_penalty", "frequency_penalty"})


# Outrider's own request fields, on both endpoints: ``sampler`` (coupled | rejection, see SamplingParams) and
# llama-server's ``ignore_eos`` (generate through end-of-generation tokens: a reply of exactly max_tokens, as a
# benchmark or a test of a full-length reply needs whatever the model would say).
_EXTENSIONS = frozenset({"sampler", "ignore_eos"})


def choice_seed(seed: int, index: int) -> int:
    """The seed of choice ``index`` of a request seeded with ``seed`` (0 ≤ result < 2^63): ``seed`` itself for
    choice 0 (so n = 1 is unchanged), else a SplitMix64 mix of (seed, index) — reproducible, different per choice,
    and not the seed of a neighbouring request (``seed + index`` would make choice 1 of seed 0 equal choice 0 of
    seed 1)."""
    if index == 0:
        return seed
    mask = (1 << 64) - 1
    z = (seed + index * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return (z ^ (z >> 31)) >> 1


def _choices(data: Mapping[str, Any]) -> int:
    """``n``: 1 … ``MAX_CHOICES`` (null: 1)."""
    n = data.get("n")
    if n is None:
        return 1
    n = _integer(n, "n")
    if not 1 <= n <= MAX_CHOICES:
        raise bad(f"n must be between 1 and {MAX_CHOICES} (choices are generated one after another), got {n}", "n")
    return n


def parse_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying what is wrong with it."""
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        raise bad("the request body is not UTF-8", code="invalid_json") from None
    except json.JSONDecodeError as exc:
        raise bad(f"the request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                  code="invalid_json") from None
    except RecursionError:
        raise bad("the request body nests too deeply", code="invalid_json") from None
    except ValueError as exc:  # an integer of more than 4,300 digits (Python's conversion limit)
        raise bad(f"the request body holds a number Outrider does not read: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad(f"the request body must be a JSON object, got {type(data).__name__}", code="invalid_json")
    return data


def chat_request(data: Mapping[str, Any], defaults: Defaults) -> ParsedRequest:
    """``POST /v1/chat/completions``."""
    _check_fields(data, _CHAT_FIELDS)
    messages = _messages(data.get("messages"))
    limit = data.get("max_completion_tokens", data.get("max_tokens"))
    param = "max_completion_tokens" if "max_completion_tokens" in data else "max_tokens"
    grammar = _response_format(data.get("response_format"))
    try:
        tools = tool_choice(data)
    except ToolError as exc:
        raise bad(str(exc), exc.param, exc.code) from None
    if tools is not None and tools.grammar is not None:
        if grammar is not None and tools.mode != "auto":
            raise bad("a forced tool call and a response_format cannot both shape the reply", "response_format")
        grammar = grammar or tools.grammar  # auto: a response_format shapes the reply (its calls are then free)
    parsed = _parsed(data, defaults, messages=messages, prompt=None, max_tokens=limit, max_param=param,
                     grammar=grammar, tools=tools.tools_json if tools is not None else None)
    return dataclasses.replace(parsed, tools=tools)


def _response_format(fmt: Any) -> GrammarSpec | None:
    """``response_format``: ``text`` (none), ``json_object`` (any JSON object) or ``json_schema`` (its ``schema``,
    strict or not: the grammar enforces it either way) — decoded through a llama.cpp grammar (engine/grammar.py)."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise bad("response_format must be an object with a type", "response_format", "invalid_type")
    kind = fmt["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return GrammarSpec("json")
    if kind != "json_schema":
        raise bad(f"response_format.type must be text, json_object or json_schema, got {kind!r}",
                  "response_format.type", "unsupported_value")
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        raise bad("response_format.json_schema must be an object with a schema", "response_format.json_schema",
                  "missing_required_parameter" if spec is None else "invalid_type")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict | bool):
        raise bad("response_format.json_schema.schema must be a JSON schema (an object)",
                  "response_format.json_schema.schema", "invalid_type")
    return GrammarSpec("json_schema", json.dumps(schema))


def completion_request(data: Mapping[str, Any], defaults: Defaults) -> ParsedRequest:
    """``POST /v1/completions``: raw text, tokenised with the model's BOS rule (no chat template)."""
    _check_fields(data, _COMPLETION_FIELDS)
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise bad("prompt must be a string (or a list of exactly one string)", "prompt",
                  "missing_required_parameter" if prompt is None else "invalid_type")
    if not prompt:
        raise bad("prompt must not be empty (there is nothing to continue)", "prompt")
    if data.get("echo"):
        raise bad("echo is not supported", "echo", "unsupported_parameter")
    suffix = data.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise bad("suffix must be a string", "suffix", "invalid_type")
    parsed = _parsed(data, defaults, messages=None, prompt=prompt, max_tokens=data.get("max_tokens"),
                     max_param="max_tokens")
    return dataclasses.replace(parsed, text=dataclasses.replace(parsed.text, suffix=suffix)) if suffix else parsed


def _check_fields(data: Mapping[str, Any], known: frozenset[str]) -> None:
    for name, value in data.items():
        if name in _NOT_SUPPORTED and value not in (None, [], {}, "none", "auto"):
            raise bad(_NOT_SUPPORTED[name], name, "unsupported_parameter")
        if name not in known and name not in _HARMLESS and name not in _NOT_SUPPORTED and name not in _EXTENSIONS:
            raise bad(f"unknown field {name!r}", name, "unknown_parameter")
    for name in ("presence_penalty", "frequency_penalty"):
        value = data.get(name)
        if value is not None and _number(value, name) != 0:
            raise bad(f"{name} is not supported (only 0)", name, "unsupported_value")


def _messages(value: Any) -> tuple[ChatMessage, ...]:
    if value is None:
        raise bad("messages is required", "messages", "missing_required_parameter")
    if not isinstance(value, list):
        raise bad(f"messages must be an array, got {type(value).__name__}", "messages", "invalid_type")
    if not value:
        raise bad("messages must not be empty", "messages", "empty_array")
    out = [_message(m, f"messages[{i}]") for i, m in enumerate(value)]
    if out[-1].role == "assistant":
        raise bad("the last message must not be the assistant's (there is nothing to reply to)",
                  f"messages[{len(out) - 1}].role")
    return tuple(out)


def _message(value: Any, where: str) -> ChatMessage:
    if not isinstance(value, dict):
        raise bad(f"{where} must be an object with role and content", where, "invalid_type")
    role = value.get("role")
    if role == "developer":
        role = "system"  # OpenAI's newer name for the system message
    if role == "function":
        raise bad(f"{where}.role 'function' is the legacy form: send role 'tool' with tool_call_id",
                  f"{where}.role", "unsupported_value")
    if role not in ("system", "user", "assistant", "tool"):
        raise bad(f"{where}.role must be system, developer, user, assistant or tool, got {role!r}", f"{where}.role")
    if role == "tool":
        call_id = value.get("tool_call_id")
        if not isinstance(call_id, str):
            raise bad(f"{where}.tool_call_id is required for a tool message", f"{where}.tool_call_id",
                      "missing_required_parameter")
        return ChatMessage("tool", _content(value.get("content"), f"{where}.content"), tool_call_id=call_id)
    calls = value.get("tool_calls") if role == "assistant" else None
    if calls:
        if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("function"), dict)
                                                  for c in calls):
            raise bad(f"{where}.tool_calls must be an array of {{\"id\", \"type\": \"function\", \"function\"}}",
                      f"{where}.tool_calls", "invalid_type")
        content = value.get("content")
        text = "" if content is None else _content(content, f"{where}.content")
        return ChatMessage("assistant", text, tool_calls=json.dumps(calls))
    return ChatMessage(role, _content(value.get("content"), f"{where}.content"))


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: only text ones
        texts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}[{i}] must be a text part ({{\"type\": \"text\", \"text\": …}}); images and "
                          f"audio are not supported", f"{where}[{i}]", "unsupported_value")
            texts.append(part["text"])
        return "".join(texts)
    if value is None:
        raise bad(f"{where} is required", where, "missing_required_parameter")
    raise bad(f"{where} must be a string or an array of text parts, got {type(value).__name__}", where,
              "invalid_type")


def _number(value: Any, param: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad(f"{param} must be a number, got {json.dumps(value)}", param, "invalid_type")
    return float(value)


def _integer(value: Any, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(f"{param} must be an integer, got {json.dumps(value)}", param, "invalid_type")
    return value


def _ranged(data: Mapping[str, Any], name: str, default: _D, read: Callable[[Any, str], _N],
            within: Callable[[_N], bool], wanted: str) -> _N | _D:
    """``data[name]`` read as a number by ``read`` (which refuses another type) and checked by ``within`` (else a
    400 saying it must be ``wanted``); ``default`` when absent or null."""
    raw = data.get(name)
    if raw is None:
        return default
    value = read(raw, name)
    if not within(value):
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        raise bad(f"{name} must be {wanted}, got {shown}", name)
    return value


MAX_TOP_LOGPROBS = 20  # OpenAI's limit


def _logprobs(data: Mapping[str, Any], *, chat: bool) -> int | None:
    """How many alternatives per token to report, or None for no log-probabilities. Chat: ``logprobs: true`` and
    ``top_logprobs`` 0–20; completions (the legacy form): ``logprobs`` 0–20, the number of alternatives."""
    value = data.get("logprobs")
    if chat:
        top = data.get("top_logprobs")
        if value is not None and not isinstance(value, bool):
            raise bad("logprobs must be true or false", "logprobs", "invalid_type")
        if top is not None:
            top = _integer(top, "top_logprobs")
            if not 0 <= top <= MAX_TOP_LOGPROBS:
                raise bad(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {top}", "top_logprobs")
            if not value:
                raise bad("top_logprobs needs logprobs: true", "top_logprobs")
        return (top or 0) if value else None
    if value is None or value is False:
        return None
    top = _integer(value, "logprobs")
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        raise bad(f"logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {top}", "logprobs")
    return top


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("stop must be a string or an array of strings", "stop", "invalid_type")
    if len(stops) > MAX_STOP:
        raise bad(f"at most {MAX_STOP} stop strings, got {len(stops)}", "stop")
    if any(not s or len(s) > MAX_STOP_CHARS for s in stops):
        raise bad(f"each stop string must have 1 to {MAX_STOP_CHARS} characters", "stop")
    return tuple(stops)


def _sampler(value: Any, default: Sampler) -> Sampler:
    """The extension field ``sampler`` (``coupled`` or ``rejection``, see SamplingParams); absent or null: the
    server's default."""
    if value is None:
        return default
    if value not in SAMPLERS:
        raise bad(f"sampler must be one of {', '.join(SAMPLERS)}, got {value!r}", "sampler")
    return cast(Sampler, value)


def _parsed(data: Mapping[str, Any], defaults: Defaults, *, messages: tuple[ChatMessage, ...] | None,
            prompt: str | None, max_tokens: Any, max_param: str, grammar: GrammarSpec | None = None,
            tools: str | None = None) -> ParsedRequest:
    limit = defaults.max_tokens_limit
    if max_tokens is None:
        n_max = limit
    else:
        n_max = _integer(max_tokens, max_param)
        if not 1 <= n_max <= limit:
            raise bad(f"{max_param} must be between 1 and {limit} (this server's limit), got {n_max}", max_param)
    base = defaults.sampling
    temperature = _ranged(data, "temperature", base.temperature, _number, lambda v: 0 <= v <= 2, "between 0 and 2")
    top_p = _ranged(data, "top_p", base.top_p, _number, lambda v: 0 < v <= 1, "in (0, 1]")
    top_k = _ranged(data, "top_k", base.top_k, _integer, lambda v: 0 <= v < 1 << 31, "between 0 and 2^31 - 1")
    min_p = _ranged(data, "min_p", base.min_p, _number, lambda v: 0 <= v <= 1, "in [0, 1]")
    seed = _ranged(data, "seed", base.seed, _integer, lambda v: 0 <= v < 1 << 63, "between 0 and 2^63 - 1")
    sampler = _sampler(data.get("sampler"), base.sampler)
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad("stream must be true or false", "stream", "invalid_type")
    options = data.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("stream_options must be an object", "stream_options", "invalid_type")
    include_usage = bool((options or {}).get("include_usage", False))
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise bad("model must be a string", "model", "invalid_type")
    top_logprobs = _logprobs(data, chat=messages is not None)
    trim = data.get("trim_history", False)
    if not isinstance(trim, bool | None):
        raise bad("trim_history must be true or false", "trim_history", "invalid_type")
    ignore_eos = data.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool | None):
        raise bad("ignore_eos must be true or false", "ignore_eos", "invalid_type")
    text = TextRequest(prompt=prompt, messages=messages, max_tokens=n_max,
                       sampling=SamplingParams(temperature, top_k, top_p, min_p, seed, sampler), draft=defaults.draft,
                       stop=_stops(data.get("stop")), trim=bool(trim), grammar=grammar,
                       tools=tools, top_logprobs=top_logprobs, ignore_eos=bool(ignore_eos))
    return ParsedRequest(text, stream, include_usage and stream, model, n=_choices(data))
