"""Continue resumes a reply cut at the token limit from the token ids the model generated, not from its text read
back: SmolLM2 writes a blank line as two "\\n" tokens, while its tokenizer reads "\\n\\n" as one, and a continuation
from the re-read text then differs from the reply the model would have written uninterrupted."""

from __future__ import annotations

import pytest

from outrider.engine.chat import ChatMessage
from outrider.engine.session import Engine, TextRequest
from outrider.engine.speculative import DoneEvent, StepEvent

pytestmark = pytest.mark.smollm

# Greedy SmolLM2 on this question: its 12th and 13th tokens are "\n", "\n" (found by search; checked below).
QUESTION = [ChatMessage("user", "List five prime numbers with emoji.")]
CUT = 13


def reply(engine: Engine, request: TextRequest) -> tuple[list[int], DoneEvent]:
    tokens: list[int] = []
    for event in engine.run(request):
        if isinstance(event, StepEvent):
            tokens += event.tokens
        else:
            return tokens, event
    raise AssertionError("no done event")


def test_a_continued_reply_equals_the_uninterrupted_one_when_its_text_reads_back_differently(smol: Engine) -> None:
    cut, cut_done = reply(smol, TextRequest(messages=QUESTION, max_tokens=CUT))
    assert cut_done.stop_reason == "length" and len(cut) == CUT
    read_back = smol.target.tokenize(cut_done.text, add_special=False, parse_special=True)
    assert read_back != cut, "the case this test exists for: the text must tokenise differently from the reply"
    more, _ = reply(smol, TextRequest(messages=[*QUESTION, ChatMessage("assistant", cut_done.text)], max_tokens=8,
                                      continue_reply=True))
    whole, _ = reply(smol, TextRequest(messages=QUESTION, max_tokens=CUT + 8))
    assert cut + more == whole[: len(cut) + len(more)] and len(more) == 8


def test_a_reply_edited_or_from_another_session_is_continued_from_its_text(smol: Engine) -> None:
    """With no matching reply in memory (other text, or after a reload), Continue tokenises the text: it still
    continues it, and the prompt ends with exactly that text's tokens."""
    _, cut_done = reply(smol, TextRequest(messages=QUESTION, max_tokens=CUT))
    edited = cut_done.text.replace("\n\n", "\n")
    more, done = reply(smol, TextRequest(messages=[*QUESTION, ChatMessage("assistant", edited)], max_tokens=4,
                                         continue_reply=True))
    assert done.stop_reason == "length" and len(more) == 4
    prompt = smol.tokenize_chat([*QUESTION, ChatMessage("assistant", edited)], continue_reply=True)
    suffix = smol.target.tokenize(edited, add_special=False, parse_special=True)
    assert prompt[-len(suffix):] == suffix


def test_continue_twice_keeps_the_generated_tokens(smol: Engine) -> None:
    cut, first = reply(smol, TextRequest(messages=QUESTION, max_tokens=CUT))
    more, second = reply(smol, TextRequest(messages=[*QUESTION, ChatMessage("assistant", first.text)], max_tokens=5,
                                           continue_reply=True))
    text = first.text + second.text
    again, _ = reply(smol, TextRequest(messages=[*QUESTION, ChatMessage("assistant", text)], max_tokens=5,
                                       continue_reply=True))
    whole, _ = reply(smol, TextRequest(messages=QUESTION, max_tokens=CUT + 10))
    assert cut + more + again == whole[: CUT + 10]
