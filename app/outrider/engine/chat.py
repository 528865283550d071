"""Chat messages to a prompt, with the GGUF's own chat template rendered in a sandbox.

Like llama-cpp-python's Jinja2ChatFormatter, templates run in Jinja2's ImmutableSandboxedEnvironment (templates
ship inside downloaded files: CVE-2024-34359), with ``raise_exception`` and ``strftime_now`` available. The
rendered text already contains the template's BOS, so it is tokenised without adding special tokens and with
special-token parsing on. A model without a template gets ChatML when its vocabulary has ChatML markers, and a
plain "User:/Assistant:" layout otherwise.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from outrider.engine.errors import ContextOverflowError, TemplateError
from outrider.engine.params import ChatMessage
from outrider.engine.text import clean_text

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




class _StrictSandbox(ImmutableSandboxedEnvironment):
    """A sandbox that *raises* on unsafe attribute access instead of rendering it as undefined, so a hostile
    template (``lipsum.__globals__``…) is reported as unsafe rather than silently half-rendered."""

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise jinja2.exceptions.SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} is unsafe")


def _raise_exception(message: str) -> None:
    raise TemplateError(f"the model's chat template refused the conversation: {message}")


class ChatFormatter:
    """Renders a conversation with a template (the model's own, or a fallback).

    Attributes:
        source: ``model``, ``chatml`` or ``plain`` — where the template came from.
    """

    def __init__(self, template: str | None, *, bos_token: str, eos_token: str, has_chatml_tokens: bool) -> None:
        self.bos_token = bos_token
        self.eos_token = eos_token
        if template:
            self.source = "model"
        elif has_chatml_tokens:
            self.source, template = "chatml", CHATML_TEMPLATE
        else:
            self.source, template = "plain", PLAIN_TEMPLATE
        env = _StrictSandbox(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(template)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the model's chat template is broken: {exc}") from exc

    def render(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> str:
        payload: list[dict[str, Any]] = [{"role": m.role, "content": clean_text(m.content)} for m in messages]
        try:
            text = self._template.render(
                messages=payload,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError:
            raise
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateError(f"the model's chat template is unsafe: {exc}") from exc
        except (jinja2.TemplateError, TypeError, ValueError, OverflowError, MemoryError) as exc:
            raise TemplateError(f"the model's chat template failed: {exc}") from exc
        if len(text) > MAX_RENDERED_CHARS:
            raise TemplateError("the model's chat template produced an implausibly long prompt")
        return text


def fit_conversation(
    messages: Sequence[ChatMessage],
    count_tokens: Callable[[Sequence[ChatMessage]], int],
    budget: int,
) -> list[ChatMessage]:
    """Drop the oldest turns (never the system prompt or the latest message) until the prompt fits ``budget``.

    Raises ContextOverflowError when the system prompt plus the latest message alone do not fit.
    """
    system = [m for m in messages[:1] if m.role == "system"]
    rest = list(messages[len(system):])
    while True:
        candidate = system + rest
        n = count_tokens(candidate)
        if n <= budget:
            return candidate
        if len(rest) <= 1:
            raise ContextOverflowError(n, budget)
        rest = rest[1:]
        while len(rest) > 1 and rest[0].role == "assistant":  # a conversation restarts on a user turn
            rest = rest[1:]
