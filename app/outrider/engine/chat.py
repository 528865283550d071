"""Chat messages to a prompt, with the GGUF's own chat template rendered in a sandbox.

Like llama-cpp-python's Jinja2ChatFormatter, templates run in Jinja2's ImmutableSandboxedEnvironment (templates
ship inside downloaded files: CVE-2024-34359), with ``raise_exception`` and ``strftime_now`` available. The
rendered text already contains the template's BOS, so it is tokenised without adding special tokens and with
special-token parsing on — for the template's own markup only: a message's text is never read as control tokens
(``<|im_start|>`` typed in a message must not open a fake system turn). ``ChatFormatter.segments`` says which
parts of the prompt are message text, so the engine can tokenise those with special-token parsing off.
A model without a template gets ChatML when its vocabulary has ChatML markers, and a plain "User:/Assistant:"
layout otherwise.

A template is also bounded in time and size (``TemplateLimitError``): every render has a deadline
(``RENDER_SECONDS``: checked in ``range``, operators and every call, and enforced by a watchdog timer that raises
in the rendering thread, so a loop that makes no call is stopped too), and the
operations that can blow up in one C call are checked *before* they run — ``*``, ``**``, ``+``, ``%`` and ``~`` on
strings, lists and integers, ``range`` (at most ``MAX_RANGE`` items), string methods and filters that pad or
repeat (``center``, ``ljust``, ``zfill``, ``expandtabs``, ``replace``, ``indent``, ``format`` widths…) — against a
per-render output budget, and the output itself is capped. Deep recursion (a macro calling itself) is caught.
A template that breaks a limit on the sample conversation at load is replaced by the built-in one (the engine
notes it: ``engine._chat_formatter``); one that breaks it later, on a real conversation, is replaced from then
on, and the note waits in ``ChatFormatter.take_notes()``.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import dataclasses
import datetime
import functools
import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jinja2
from jinja2.compiler import CodeGenerator, Frame
from jinja2.nodes import Concat
from jinja2.sandbox import ImmutableSandboxedEnvironment

from outrider.engine.errors import ContextOverflowError, TemplateError
from outrider.engine.llama.text import clean_text
from outrider.engine.params import ChatMessage

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PLAIN_TEMPLATE = (
    "{% for message in messages %}{% if message.role == 'system' %}{{ message.content }}\n\n"
    "{% elif message.role == 'user' %}User: {{ message.content }}\n"
    "{% else %}Assistant: {{ message.content }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
MAX_RENDERED_CHARS = 50_000_000  # a template that expands beyond this is treated as hostile
# A render may produce this much text of the template's own plus OUTPUT_PER_INPUT_CHAR per character of input.
# The wordiest real templates add about 10 KB (a default system prompt, tool instructions); tokenising costs about
# 5 us a character on a quiet CPU and ten times that on a busy one, so at 1 MB a template that expanded a 2-token
# message made the user wait 24-172 s for a refusal that blamed their message. 64 KB stays under a second.
BASE_RENDER_CHARS = 64_000
OUTPUT_PER_INPUT_CHAR = 4
RENDER_SECONDS = 2.0  # a chat template renders in milliseconds; one that takes seconds is hostile
MAX_RANGE = 100_000  # items of one range() (Jinja's sandbox limit)
MAX_INT_BITS = 1 << 16  # integers a template computes (about 20,000 digits)
MAX_CALL_INT = 100_000  # an integer argument to a method or filter (a width, a count)
_WIDE_FORMAT = re.compile(r"\d{6,}|%[-+ #0]*\*")  # a format width of a million or more, or a width from args
_EXPANDING_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "join", "format",
                                "format_map"})
_EXPANDING_FILTERS = frozenset({"center", "indent", "wordwrap", "format", "replace", "join", "batch", "slice"})




@dataclasses.dataclass(frozen=True)
class Segment:
    """A part of a rendered prompt: the template's markup (``content`` False: its control tokens are real) or a
    message's text (``content`` True: tokenised as plain text, whatever it contains)."""

    text: str
    content: bool


class TemplateLimitError(TemplateError):
    """A chat template exceeded its time or size budget (or recursed too deeply) while rendering."""


@dataclasses.dataclass
class _Budget:
    seconds: float
    deadline: float
    max_chars: int
    input_chars: int = 0  # the conversation's own characters (the rendered prompt's budget grows with them)

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(f"the model's chat template took longer than {self.seconds:g} s to render")

    def check_size(self, n: int, what: str = "text") -> None:
        if n <= self.max_chars:
            return
        if what == "a prompt":  # the output itself: the template is the cause, never the user's message
            raise TemplateLimitError(f"the model's chat template turned {self.input_chars:,} characters of "
                                     f"conversation into more than {self.max_chars:,} characters of prompt")
        raise TemplateLimitError(f"the model's chat template tried to build {what} of {n:,} items "
                                 f"(the limit is {self.max_chars:,})")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("outrider_template_budget", default=None)


def _budget() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:  # rendering outside ChatFormatter.render (a test): the defaults
        budget = _Budget(RENDER_SECONDS, time.monotonic() + RENDER_SECONDS, MAX_RENDERED_CHARS)
        _BUDGET.set(budget)
    return budget


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, str | bytes | list | tuple) else None


def _check_int(value: Any, budget: _Budget) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise TemplateLimitError(f"the model's chat template computed an integer of {value.bit_length():,} bits")


def _check_product(left: Any, right: Any, budget: _Budget) -> None:
    """``left * right`` before it runs: a repeated sequence within the budget, integers within MAX_INT_BITS."""
    for seq, n in ((left, right), (right, left)):
        size = _size(seq)
        if size is not None and isinstance(n, int):
            budget.check_size(size * max(0, n), "a repeated string or list")
            return
    if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
        raise TemplateLimitError("the model's chat template multiplies integers that are too large")


def _check_power(left: Any, right: Any) -> None:
    if (isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1
            and left.bit_length() * right > MAX_INT_BITS):
        raise TemplateLimitError(f"the model's chat template computes {left}**{right}, an integer that is "
                                     "too large")


def _check_format(fmt: Any) -> None:
    if isinstance(fmt, str) and _WIDE_FORMAT.search(fmt):
        raise TemplateLimitError("the model's chat template uses a format width that is too large")


def _check_args(args: Sequence[Any], kwargs: dict[str, Any], budget: _Budget, subject: Any, expanding: bool) -> None:
    """Arguments of a call from a template: no huge counts or widths; an expanding call within the budget."""
    numbers = [v for v in (*args, *kwargs.values()) if isinstance(v, int) and not isinstance(v, bool)]
    if any(abs(n) > MAX_CALL_INT for n in numbers):
        raise TemplateLimitError(f"the model's chat template passes a number larger than {MAX_CALL_INT:,}")
    if not expanding:
        return
    for value in (*args, *kwargs.values()):
        _check_format(value)
    _check_format(subject)
    base = _size(subject) or 0
    longest = max([n for n in numbers if n > 0] + [_size(v) or 0 for v in (*args, *kwargs.values())] + [1])
    lines = subject.count("\n") + 1 if isinstance(subject, str) else 1
    budget.check_size((base + 1) * longest if base else longest * lines, "text")


def _checked_result(value: Any, budget: _Budget) -> Any:
    size = _size(value)
    if size is not None:
        budget.check_size(size)
    else:
        _check_int(value, budget)
    return value


def _bounded_range(*args: int) -> Iterator[int]:
    """``range`` for templates: at most MAX_RANGE items, and the render's deadline checked at every item."""
    budget = _budget()
    items = range(*args)
    if len(items) > MAX_RANGE:
        raise TemplateLimitError(f"the model's chat template asks for range() of {len(items):,} items "
                                 f"(the limit is {MAX_RANGE:,})")
    for i in items:
        budget.check_time()
        yield i


def _checked_concat(parts: Sequence[Any]) -> str:
    """The ``~`` operator, with the result's length checked before it is built."""
    texts = [str(p) for p in parts]
    _budget().check_size(sum(len(t) for t in texts), "text")
    return "".join(texts)


class _LimitedCodeGenerator(CodeGenerator):
    """Compiles ``a ~ b`` to a size-checked join (Jinja's own ``str_join`` cannot be hooked)."""

    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        self.write("environment.outrider_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _wrap_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    expanding = name in _EXPANDING_FILTERS

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.check_time()
        # filters take (environment/context/eval_ctx,) value, *args: the subject is the first str/list argument
        subject = next((a for a in args if _size(a) is not None), None)
        rest = [a for a in args if a is not subject]
        _check_args(rest, kwargs, budget, subject, expanding)
        return _checked_result(func(*args, **kwargs), budget)

    return wrapper


class _StrictSandbox(ImmutableSandboxedEnvironment):
    """A sandbox that *raises* on unsafe attribute access instead of rendering it as undefined, so a hostile
    template (``lipsum.__globals__``…) is reported as unsafe rather than silently half-rendered; and that checks
    the operators, calls and filters that could exhaust time or memory (see the module docstring)."""

    code_generator_class = _LimitedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%", "//"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.filters = {name: _wrap_filter(name, f) for name, f in self.filters.items()}
        self.outrider_concat = _checked_concat

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise jinja2.exceptions.SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} is unsafe")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        budget.check_time()
        if operator == "*":
            _check_product(left, right, budget)
        elif operator == "**":
            _check_power(left, right)
        elif operator == "+":
            if _size(left) is not None and _size(right) is not None:
                budget.check_size((_size(left) or 0) + (_size(right) or 0))
        elif operator == "%" and isinstance(left, str):
            _check_format(left)
        return _checked_result(super().call_binop(context, operator, left, right), budget)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.check_time()
        if __obj is _bounded_range:
            return __context.call(__obj, *args, **kwargs)
        target = getattr(__obj, "__wrapped__", __obj)
        subject = getattr(target, "__self__", None)
        expanding = _size(subject) is not None and getattr(target, "__name__", "") in _EXPANDING_METHODS
        _check_args(args, kwargs, budget, subject, expanding)
        return _checked_result(super().call(__context, __obj, *args, **kwargs), budget)


def _raise_exception(message: str) -> None:
    raise TemplateError(f"the model's chat template refused the conversation: {message}")


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """Jinja's ``lipsum``, with at most 10 paragraphs of at most 100 words."""
    from jinja2.utils import generate_lorem_ipsum

    return str(generate_lorem_ipsum(n=_min(n, 10), html=html, min=_min(min, 100), max=_min(max, 100)))


_min = min


class _Deadline(BaseException):
    """Raised asynchronously in a rendering thread at its deadline (a BaseException: templates and Jinja's
    ``except Exception`` cannot swallow it)."""


class _Watchdog:
    """Raises ``_Deadline`` in the calling thread after ``seconds`` unless ``finish()`` came first.

    ``PyThreadState_SetAsyncExc`` interrupts pure-Python loops (compiled templates are Python), at almost no cost
    while nothing is wrong (one timer per render; line tracing would make every render ~3× slower). The timer
    fires only while the render runs (a lock and a flag); an exception it set just as the render ended is
    delivered inside ``__exit__`` (it is never cleared with NULL: in CPython 3.11 that leaves the eval breaker set
    for good, and with a tracer active the interpreter then spins), so it cannot escape later."""

    def __init__(self, seconds: float) -> None:
        self._thread = threading.get_ident()
        self._lock = threading.Lock()
        self._done = False
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _set_async(self, exc: Any) -> None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), exc)

    def _fire(self) -> None:
        with self._lock:
            if not self._done:
                self.fired = True
                self._set_async(ctypes.py_object(_Deadline))

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()
        if self.fired and exc_type is None:
            for _ in range(1000):  # a pending _Deadline is delivered at the next bytecode boundary: here
                pass


class ChatFormatter:
    """Renders a conversation with a template (the model's own, or a fallback).

    Attributes:
        source: ``model``, ``chatml`` or ``plain`` — where the template came from.
        render_seconds: the deadline of one render.
    """

    def __init__(self, template: str | None, *, bos_token: str, eos_token: str, has_chatml_tokens: bool,
                 render_seconds: float = RENDER_SECONDS) -> None:
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.render_seconds = render_seconds
        self._has_chatml_tokens = has_chatml_tokens
        self._rendered_once = False
        self._notes: list[str] = []
        if template and template.strip():  # a blank template would render the conversation as nothing
            self.source = "model"
        elif has_chatml_tokens:
            self.source, template = "chatml", CHATML_TEMPLATE
        else:
            self.source, template = "plain", PLAIN_TEMPLATE
        self._knows_tools = "tools" in template
        self._template = self._compile(template)

    @staticmethod
    def _compile(template: str) -> jinja2.Template:
        env = _StrictSandbox(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
        env.globals["range"] = _bounded_range
        env.globals["lipsum"] = _lipsum
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            return env.from_string(template)
        except (jinja2.TemplateError, RecursionError, MemoryError) as exc:
            raise TemplateError(f"the model's chat template is broken: {exc or type(exc).__name__}") from exc

    def take_notes(self) -> list[str]:
        """Notes about a switch to the built-in template since the last call (then forgotten)."""
        notes, self._notes = self._notes, []
        return notes

    @property
    def supports_tools(self) -> bool:
        """Whether the template renders tool definitions itself (it reads a ``tools`` variable)."""
        return self.source == "model" and self._knows_tools

    def with_tools(self, messages: Sequence[ChatMessage], tools: str | None
                   ) -> tuple[list[ChatMessage], list[Any] | None]:
        """The conversation and the ``tools`` variable for a request with tools (``tools``: the OpenAI ``tools``
        array as JSON). A template that renders tools gets them as its ``tools`` variable, and the messages'
        tool calls and tool results as they are; for one that does not, they are written into the conversation
        in the Hermes layout most instruction-tuned models know: the tools in the system prompt, each call as
        ``<tool_call>{"name", "arguments"}</tool_call>``, each result as a user turn in ``<tool_response>``."""
        listed: list[Any] | None = json.loads(tools) if tools else None
        if self.supports_tools or (not listed and not any(m.role == "tool" or m.tool_calls for m in messages)):
            return list(messages), listed
        out: list[ChatMessage] = []
        if listed:
            described = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in listed)
            intro = (f"{TOOLS_PROMPT}\n<tools>\n{described}\n</tools>\n{TOOL_CALL_FORMAT}")
            if messages and messages[0].role == "system":
                out.append(ChatMessage("system", f"{messages[0].content}\n\n{intro}"))
                messages = messages[1:]
            else:
                out.append(ChatMessage("system", intro))
        for m in messages:
            if m.role == "tool":
                out.append(ChatMessage("user", f"<tool_response>\n{m.content}\n</tool_response>"))
            elif m.tool_calls:
                calls = "\n".join(f"<tool_call>\n{json.dumps(c, ensure_ascii=False)}\n</tool_call>"
                                  for c in _calls(m.tool_calls))
                out.append(ChatMessage("assistant", f"{m.content}\n{calls}".strip()))
            else:
                out.append(m)
        return out, None

    def render(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True,
               tools: list[Any] | None = None) -> str:
        """The prompt text (``tools``: the template's ``tools`` variable, from ``with_tools``). A model template
        that breaks a time or size limit raises ``TemplateLimitError`` on its first render (the sample at load:
        the engine then uses a built-in template, with a note); on a later render it is replaced by the built-in
        template from then on, and the note waits in ``take_notes()``."""
        try:
            text = self._render(messages, add_generation_prompt, tools)
        except TemplateLimitError as exc:
            if self.source != "model" or not self._rendered_once:
                raise
            fallback = ChatFormatter(None, bos_token=self.bos_token, eos_token=self.eos_token,
                                     has_chatml_tokens=self._has_chatml_tokens, render_seconds=self.render_seconds)
            self.source, self._template = fallback.source, fallback._template
            self._notes.append(f"{exc} — using the built-in template")
            text = self._render(messages, add_generation_prompt, tools)
        self._rendered_once = True
        return text

    def segments(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True,
                 tools: list[Any] | None = None) -> list[Segment] | None:
        """``render(messages)`` split into markup and message text, or None when the template transforms a
        message's text beyond trimming its ends (then the parts cannot be told apart).

        The template renders once with each message's text replaced by a mark (its leading and trailing spaces
        kept, so a template that trims sees what it would see), the marks are replaced by the texts, and the
        result must equal the ordinary render character for character."""
        real = self.render(messages, add_generation_prompt=add_generation_prompt, tools=tools)
        # Private-use marks with a fresh nonce stand for message i: a message cannot forge one.
        nonce = secrets.token_hex(8)
        sentinel = re.compile(f"\ue000{nonce}:(\\d+)\ue001")
        cores: list[str] = []
        payload: list[dict[str, Any]] = []
        for i, m in enumerate(messages):
            text = clean_text(m.content)
            core = text.strip()
            cores.append(core)
            lead, trail = text[:len(text) - len(text.lstrip())], text[len(text.rstrip()):]
            payload.append({**_message_payload(m),
                            "content": f"{lead}\ue000{nonce}:{i}\ue001{trail}" if core else text})
        marked = self._render_payload(payload, add_generation_prompt, tools)
        out: list[Segment] = []
        at = 0
        for match in sentinel.finditer(marked):
            index = int(match.group(1))
            if index >= len(cores):
                return None
            if match.start() > at:
                out.append(Segment(marked[at:match.start()], False))
            out.append(Segment(cores[index], True))
            at = match.end()
        if at < len(marked):
            out.append(Segment(marked[at:], False))
        if "".join(seg.text for seg in out) != real:
            return None
        return out

    def _render(self, messages: Sequence[ChatMessage], add_generation_prompt: bool,
                tools: list[Any] | None = None) -> str:
        return self._render_payload([_message_payload(m) for m in messages], add_generation_prompt, tools)

    def _render_payload(self, payload: list[dict[str, Any]], add_generation_prompt: bool,
                        tools: list[Any] | None = None) -> str:
        input_chars = sum(len(m["content"]) for m in payload) + len(self.bos_token) + len(self.eos_token)
        budget = _Budget(self.render_seconds, time.monotonic() + self.render_seconds,
                         min(MAX_RENDERED_CHARS, BASE_RENDER_CHARS + OUTPUT_PER_INPUT_CHAR * input_chars),
                         input_chars)
        token = _BUDGET.set(budget)
        try:
            parts: list[str] = []
            total = 0
            try:
                with _Watchdog(self.render_seconds):
                    for part in self._template.generate(
                        messages=payload,
                        add_generation_prompt=add_generation_prompt,
                        bos_token=self.bos_token,
                        eos_token=self.eos_token,
                        **({"tools": tools} if tools else {}),
                    ):
                        total += len(part)
                        budget.check_size(total, "a prompt")
                        parts.append(part)
            except _Deadline:
                budget.deadline = 0.0
                budget.check_time()
            return "".join(parts)
        except TemplateError:
            raise
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateError(f"the model's chat template is unsafe: {exc}") from exc
        except RecursionError as exc:
            raise TemplateLimitError("the model's chat template recursed too deeply") from exc
        except MemoryError as exc:
            raise TemplateLimitError("the model's chat template ran out of memory") from exc
        except (jinja2.TemplateError, TypeError, ValueError, OverflowError, ArithmeticError, LookupError,
                AttributeError) as exc:
            raise TemplateError(f"the model's chat template failed: {exc}") from exc
        finally:
            _BUDGET.reset(token)


TOOLS_PROMPT = ("You are a function calling AI model. You may call one or more functions to assist with the user "
                "query. The function signatures are within <tools></tools> XML tags:")
TOOL_CALL_FORMAT = ("For each function call, return a JSON object with the function name and arguments within "
                    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                    "<args-json-object>}\n</tool_call>")


def _calls(tool_calls: str) -> list[dict[str, Any]]:
    """A message's tool calls (OpenAI's ``tool_calls`` as JSON) as ``{"name", "arguments"}`` with the arguments
    parsed (templates write them with ``tojson``)."""
    out = []
    for call in json.loads(tool_calls):
        function = call.get("function", call)
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # not JSON: kept as the text it is
                arguments = json.loads(arguments)
        out.append({"name": function.get("name", ""), "arguments": arguments})
    return out


def _message_payload(m: ChatMessage) -> dict[str, Any]:
    """One message as templates read it: role, content, and (tools) ``tool_calls`` / ``tool_call_id``."""
    payload: dict[str, Any] = {"role": m.role, "content": clean_text(m.content)}
    if m.tool_calls:
        ids = [c.get("id", f"call_{i}") for i, c in enumerate(json.loads(m.tool_calls))]
        payload["tool_calls"] = [{"id": ids[i], "type": "function", "function": c, **c}
                                 for i, c in enumerate(_calls(m.tool_calls))]
    if m.tool_call_id is not None:
        payload["tool_call_id"] = m.tool_call_id
    return payload


class TrimCancelled(Exception):
    """``fit_conversation`` stopped because the reply was cancelled."""


def fit_conversation(
    messages: Sequence[ChatMessage],
    count_tokens: Callable[[Sequence[ChatMessage]], int],
    budget: int,
    cancelled: Callable[[], bool] | None = None,
    *,
    reserved: int = 0,
) -> list[ChatMessage]:
    """Drop the oldest turns (never the system prompt or the latest message) until the prompt fits ``budget``.

    The kept conversation starts on a user turn (or is the latest message alone). The number of turns dropped is
    found by bisection — about log2(turns) renders of the conversation, not one per dropped turn (3,000 messages:
    a dozen renders instead of 3,000) — on the ground that dropping more turns never makes the prompt longer.
    ``cancelled()`` is checked before every render (``TrimCancelled``). Raises ContextOverflowError (with
    ``reserved``, the tokens kept for the reply) when the system prompt plus the latest message alone do not fit.
    """
    system = [m for m in messages[:1] if m.role == "system"]
    rest = list(messages[len(system):])
    last = len(rest) - 1
    # Where the kept part may start: the whole, any user (or system) turn, or the latest message alone.
    starts = [j for j in range(len(rest)) if j == 0 or j == last or rest[j].role != "assistant"]

    def count(j: int) -> int:
        if cancelled is not None and cancelled():
            raise TrimCancelled
        return count_tokens(system + rest[starts[j]:])

    n = count(0)
    if n <= budget:
        return system + rest
    n_last = count(len(starts) - 1)
    if n_last > budget:
        raise ContextOverflowError(n_last, budget + reserved, reserved=reserved)
    low, high = 0, len(starts) - 1  # count(low) > budget >= count(high)
    while high - low > 1:
        mid = (low + high) // 2
        if count(mid) <= budget:
            high = mid
        else:
            low = mid
    return system + rest[starts[high]:]
