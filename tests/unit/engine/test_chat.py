"""Chat templates: sandboxed, with sane fallbacks, and conversation trimming."""

from __future__ import annotations

from pathlib import Path

import pytest

from outrider.engine.chat import ChatFormatter, ChatMessage, clean_text, fit_conversation  # re-exported
from outrider.engine.errors import ContextOverflowError, TemplateError

MSGS = [ChatMessage("system", "S"), ChatMessage("user", "U")]


def test_template_injection_is_blocked(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    evil = "{{ lipsum.__globals__['os'].popen('touch " + str(marker) + "').read() }}"
    with pytest.raises(TemplateError, match="unsafe"):
        ChatFormatter(evil, bos_token="", eos_token="", has_chatml_tokens=False).render(MSGS)
    assert not marker.exists()
    evil_attr = "{{ ''|attr('__class__') }}"
    with pytest.raises(TemplateError):
        ChatFormatter(evil_attr, bos_token="", eos_token="", has_chatml_tokens=False).render(MSGS)


def test_raise_exception_in_template_becomes_a_template_error() -> None:
    t = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(TemplateError, match="roles must alternate"):
        ChatFormatter(t, bos_token="", eos_token="", has_chatml_tokens=False).render(MSGS)


def test_fallbacks() -> None:
    chatml = ChatFormatter(None, bos_token="", eos_token="", has_chatml_tokens=True)
    assert chatml.source == "chatml"
    assert chatml.render(MSGS).endswith("<|im_start|>assistant\n")
    plain = ChatFormatter(None, bos_token="", eos_token="", has_chatml_tokens=False)
    assert plain.source == "plain"
    assert plain.render(MSGS) == "S\n\nUser: U\nAssistant:"
    with pytest.raises(TemplateError, match="broken"):
        ChatFormatter("{% for %}", bos_token="", eos_token="", has_chatml_tokens=False)


def test_clean_text() -> None:
    assert clean_text("a\x00b\ud800c") == "ab\ufffdc"


def test_fit_conversation_keeps_system_and_latest() -> None:
    history = [ChatMessage("system", "sys")]
    for i in range(10):
        history += [ChatMessage("user", f"u{i}"), ChatMessage("assistant", f"a{i}")]
    history.append(ChatMessage("user", "last"))
    fitted = fit_conversation(history, lambda m: sum(len(x.content) + 1 for x in m), 20)
    assert fitted[0].content == "sys" and fitted[-1].content == "last"
    assert fitted[1].role == "user"
    with pytest.raises(ContextOverflowError):
        fit_conversation([ChatMessage("user", "x" * 100)], lambda m: 100, 10)
