"""Chat templates are bounded in time and size: hostile ones fail fast (TemplateLimitError), then fall back."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from outrider.engine.chat import ChatFormatter, ChatMessage, TemplateLimitError
from outrider.engine.errors import TemplateError

MSGS = [ChatMessage("system", "S"), ChatMessage("user", "U")]
LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
HOSTILE = {
    "string_times_billion": "{{ 'A'*10**9 }}",
    "string_times_ten_billion": "{{ 'A'*10**10 }}",
    "power_tower": "{{ 10 ** (10 ** 10) }}",
    "nested_range": LOOP,
    "loop_over_a_long_string": "{% set s = 'A'*50000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "doubling_concat": "{% set ns = namespace(s='AAAAAAAA') %}{% for i in range(40) %}"
                       "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "doubling_plus": "{% set ns = namespace(s='AAAAAAAA') %}{% for i in range(40) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    "center_filter": "{{ 'x'|center(10**9) }}",
    "ljust_method": "{{ 'x'.ljust(10**9) }}",
    "format_width": "{{ '%0999999999d' % 1 }}",
    "str_format_width": "{{ '{:>999999999}'.format(1) }}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "list_times": "{{ ([1] * 10**9)|length }}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_fails_fast_within_its_budget(name: str) -> None:
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(TemplateError) as info:
            ChatFormatter(HOSTILE[name], bos_token="", eos_token="", has_chatml_tokens=False,
                          render_seconds=1.0).render(MSGS)
        elapsed = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(info.value, TemplateLimitError), info.value
    assert elapsed < 3.0, f"{name}: {elapsed:.1f} s"
    assert peak < 200 * 1024 * 1024, f"{name}: {peak / 2**20:.0f} MiB"


def test_ordinary_templates_still_render() -> None:
    template = ("{{ bos_token }}{% for m in messages %}{% if loop.first and m.role == 'system' %}"
                "{{ m.content | trim }}\n{% else %}{{ '<|' ~ m.role ~ '|>' }}{{ m.content }}{% endif %}{% endfor %}"
                "{% for i in range(3) %}{{ i }}{% endfor %}{{ ('-' * 3) ~ (2 ** 10) }}{{ 'a b'.split(' ')|join(',') }}"
                "{{ '%d' % 5 }}{{ '{}!'.format('x') }}{{ 'x'|center(5) }}")
    text = ChatFormatter(template, bos_token="<s>", eos_token="</s>", has_chatml_tokens=False).render(MSGS)
    assert text == "<s>S\n<|user|>U012---1024a,b5x!  x  "


def test_a_long_conversation_is_not_a_violation() -> None:
    chat = ChatFormatter(None, bos_token="", eos_token="", has_chatml_tokens=True)
    big = [ChatMessage("user" if i % 2 == 0 else "assistant", "word " * 200_000) for i in range(9)]
    assert len(chat.render(big)) > 9_000_000


def test_a_template_that_explodes_on_a_later_message_falls_back_with_a_note() -> None:
    template = ("{% for m in messages %}{% if 'boom' in m.content %}" + LOOP + "{% endif %}"
                "[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    chat = ChatFormatter(template, bos_token="", eos_token="", has_chatml_tokens=True, render_seconds=1.0)
    assert chat.render(MSGS) == "[system] S\n[user] U\n"  # the load-time sample renders
    assert chat.take_notes() == []
    t0 = time.monotonic()
    text = chat.render([ChatMessage("user", "boom")])
    assert time.monotonic() - t0 < 3.0
    assert chat.source == "chatml" and text.startswith("<|im_start|>user\nboom")
    notes = chat.take_notes()
    assert len(notes) == 1 and notes[0].endswith("— using the built-in template") and "1 s" in notes[0]
    assert chat.take_notes() == []


def test_after_a_timed_out_render_the_interpreter_is_sane_under_a_tracer() -> None:
    """The watchdog's asynchronous exception is delivered, never cleared with NULL (CPython 3.11 would then keep
    its eval breaker set, and spin forever once a tracer — a debugger, coverage — is installed)."""
    import sys

    with pytest.raises(TemplateLimitError):
        ChatFormatter(LOOP, bos_token="", eos_token="", has_chatml_tokens=False, render_seconds=0.2).render(MSGS)

    def tracer(*_args: object) -> None:
        return None

    sys.settrace(tracer)
    try:
        text = ChatFormatter(None, bos_token="", eos_token="", has_chatml_tokens=False).render(MSGS)
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(None)
    assert text == "S\n\nUser: U\nAssistant:"
