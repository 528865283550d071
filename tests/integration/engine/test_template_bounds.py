"""Chat templates that would cost the user a conversation or minutes: bounded and named as the cause.

Before: a template that expanded a 2-token message into 1 MB of text passed the check at load (the budget was
1 MB of the template's own text), tokenising it took 24-172 s on a busy machine, and the turn was refused as
"message is 800002 tokens", blaming the user; a whitespace-only template (or one that leaves the messages out)
was kept and every prompt lost the conversation. Each test failed that way on the old code.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from outrider.engine.chat import BASE_RENDER_CHARS, ChatFormatter, ChatMessage, TemplateLimitError
from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings
from support import bad_models

EXPANDING = "{% for m in messages %}{{ m.content }}{% for i in range(20000) %}" + "A" * 50 + "{% endfor %}{% endfor %}"
REPEATING = "{% for m in messages %}{{ m.content }}{{ 'A' * 900000 }}{% endfor %}"


@pytest.fixture
def engine() -> Iterator[Engine]:
    e = Engine(Backend())
    yield e
    e.unload()


def _load(engine: Engine, tmp_path: Path, template: str) -> tuple[str, tuple[str, ...]]:
    model = bad_models.small_model(tmp_path / "m.gguf", chat_template=template)
    info = engine.load(PairSpec(target=str(model), context=ContextSettings(n_ctx=512)))
    return info.chat_template, tuple(info.notes)


@pytest.mark.parametrize(("template", "words"), [(EXPANDING, "characters of prompt"), (REPEATING, "900,000 items")])
def test_a_template_that_expands_a_short_message_is_replaced_at_load(engine: Engine, tmp_path: Path,
                                                                      template: str, words: str) -> None:
    source, notes = _load(engine, tmp_path, template)
    assert source != "model"
    assert len(notes) == 1 and notes[0].startswith("the model's chat template") and words in notes[0]
    assert notes[0].endswith("— using the built-in template")
    t0 = time.monotonic()
    tokens = engine.tokenize_chat([ChatMessage("user", "hi")])
    assert len(tokens) < 50 and time.monotonic() - t0 < 30  # the built-in template: a few tokens, no megabyte


@pytest.mark.parametrize("template", ["   \n\t ", "\n"])
def test_a_blank_template_is_refused_with_a_note(engine: Engine, tmp_path: Path, template: str) -> None:
    source, notes = _load(engine, tmp_path, template)
    assert source != "model"
    assert notes == ("the model's chat template is empty (it would leave the conversation out of the prompt) "
                     "— using the built-in template",)
    text = b"".join(engine.target.piece(t) for t in engine.tokenize_chat([ChatMessage("user", "the of and")]))
    assert b"the of and" in text


def test_a_template_that_leaves_the_messages_out_is_refused(engine: Engine, tmp_path: Path) -> None:
    source, notes = _load(engine, tmp_path, "{{ bos_token }}{% if add_generation_prompt %}Assistant:{% endif %}")
    assert source != "model"
    assert notes == ("the model's chat template leaves the user's message out of the prompt — using the "
                     "built-in template",)


def test_a_sound_template_is_kept(engine: Engine, tmp_path: Path) -> None:
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}<assistant>"
    source, notes = _load(engine, tmp_path, template)
    assert source == "model" and notes == ()


def test_the_rendered_size_is_bounded_by_the_conversation_not_a_megabyte() -> None:
    formatter = ChatFormatter(EXPANDING, bos_token="", eos_token="", has_chatml_tokens=False)
    with pytest.raises(TemplateLimitError, match=r"turned 2 characters of conversation into more than 64,\d{3}"):
        formatter.render([ChatMessage("user", "hi")])
    # A long conversation may render long: the budget grows with what the user wrote.
    long = "word " * 40_000
    echo = ChatFormatter("{% for m in messages %}{{ m.content }}{{ m.content }}{% endfor %}", bos_token="",
                         eos_token="", has_chatml_tokens=False)
    assert len(echo.render([ChatMessage("user", long)])) == 2 * len(long) > BASE_RENDER_CHARS
