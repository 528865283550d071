"""Very long and hostile input through the engine process."""

from __future__ import annotations

import re

import pytest
from worker_helpers import N_CTX, family_spec

from outrider.engine.events import DoneEvent, StepBatch, StepEvent
from outrider.engine.llama.text import clean_text
from outrider.engine.params import ChatMessage, TextRequest
from outrider.worker.client import EngineClient
from outrider.worker.errors import EngineRequestError
from support.tiny_gguf import Family

HOSTILE = {
    "lone_surrogates": "abc \ud800 def \udfff ghi \udc00\ud800",
    "surrogate_pair": "clipboard \ud83d\ude00 smile",
    "nul_bytes": "before\x00after\x00\x00",
    "rtl": "\u202eabc\u202c שלום עולם مرحبا \u200f",
    "zwj_emoji": "family 👨\u200d👩\u200d👧\u200d👦 flag 🏳️\u200d🌈 skin 👍🏽",
    "controls": "".join(chr(c) for c in range(1, 32)) + "\x7f\u2028\u2029\ufeff\ufffe",
}


@pytest.fixture()
def loaded(client: EngineClient, tiny_family: Family) -> EngineClient:
    client.load(family_spec(tiny_family))
    return client


def _run(client: EngineClient, request: TextRequest) -> tuple[list[StepEvent], DoneEvent]:
    with client.generate(request) as gen:
        events = list(gen)
    done = events[-1]
    assert isinstance(done, DoneEvent)
    return [s for e in events if isinstance(e, StepBatch) for s in e.steps], done


def test_prompt_longer_than_context_is_refused_before_decoding(loaded: EngineClient) -> None:
    pid = loaded.pid
    prompt = " ".join(["the of and to"] * 200)  # ~800 tokens, context 512
    gen = loaded.generate(TextRequest(prompt=prompt, max_tokens=8))
    with pytest.raises(EngineRequestError) as info:
        next(gen)  # the error is the very first event: nothing was decoded
    assert info.value.kind == "context_overflow"
    assert re.fullmatch(rf"message is \d+ tokens; this model's context is {N_CTX}", str(info.value))
    assert info.value.details["n_ctx"] == N_CTX and info.value.details["n_tokens"] > N_CTX
    assert loaded.pid == pid
    _run(loaded, TextRequest(prompt="the of", max_tokens=4))


def test_single_chat_message_larger_than_context(loaded: EngineClient) -> None:
    big = " ".join(["hello world model"] * 300)
    with pytest.raises(EngineRequestError, match=r"^message is \d+ tokens; this model's context is \d+$") as info:
        _run(loaded, TextRequest(messages=(ChatMessage("user", big),), max_tokens=8))
    assert info.value.kind == "context_overflow"


def test_long_conversation_is_trimmed_not_refused(loaded: EngineClient) -> None:
    turns: list[ChatMessage] = [ChatMessage("system", "you are a fast model")]
    for i in range(30):
        turns.append(ChatMessage("user", f"question {i}: what is the speed of the draft model and the target"))
        turns.append(ChatMessage("assistant", "the draft is fast and the target is slow " * 3))
    turns.append(ChatMessage("user", "and now?"))
    _, done = _run(loaded, TextRequest(messages=tuple(turns), max_tokens=16))
    assert done.stop_reason in ("stop", "length")
    assert done.stats.prompt_tokens < N_CTX


# What the engine must receive: UTF-16 surrogate pairs joined, each lone surrogate one U+FFFD, NUL removed,
# everything else (bidi controls, joiners, C0 controls, noncharacters) kept as it is.
CLEANED = {
    "lone_surrogates": "abc \ufffd def \ufffd ghi \ufffd\ufffd",
    "surrogate_pair": "clipboard \U0001f600 smile",
    "nul_bytes": "beforeafter",
    "rtl": HOSTILE["rtl"],
    "zwj_emoji": HOSTILE["zwj_emoji"],
    "controls": HOSTILE["controls"],
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_text_is_cleaned_exactly(name: str, loaded: EngineClient) -> None:
    """The engine receives exactly the cleaned text: a reply to the hostile text is the reply to ``CLEANED``."""
    pid = loaded.pid
    text, cleaned = HOSTILE[name], CLEANED[name]
    assert clean_text(text) == cleaned
    assert cleaned.count("\ufffd") == (4 if name == "lone_surrogates" else 0)
    assert "\x00" not in cleaned
    cleaned.encode("utf-8")  # no surrogate is left

    def chat(t: str) -> TextRequest:
        return TextRequest(messages=(ChatMessage("system", t), ChatMessage("user", t)), max_tokens=8, stop=(t,))

    for hostile_request, clean_request in ((TextRequest(prompt=text, max_tokens=8),
                                            TextRequest(prompt=cleaned, max_tokens=8)),
                                           (chat(text), chat(cleaned))):
        steps, done = _run(loaded, hostile_request)
        ref_steps, ref_done = _run(loaded, clean_request)
        assert done.stats.prompt_tokens == ref_done.stats.prompt_tokens
        assert [t for s in steps for t in s.tokens] == [t for s in ref_steps for t in s.tokens]
        assert done.text == ref_done.text == "".join(s.text for s in steps)
        done.text.encode("utf-8")
    assert loaded.pid == pid


def test_five_megabyte_paste_is_refused_by_length(loaded: EngineClient) -> None:
    pid = loaded.pid
    paste = ("lorem ipsum \ud800 שלום 👨\u200d👩\u200d👧 \x00 " * 200_000)[: 5 * 1024 * 1024]
    for request in (TextRequest(prompt=paste, max_tokens=8),
                    TextRequest(messages=(ChatMessage("user", paste),), max_tokens=8)):
        with pytest.raises(EngineRequestError) as info:
            _run(loaded, request)
        assert info.value.kind == "input_too_long"
        assert "characters" in str(info.value) and f"context of {N_CTX} tokens" in str(info.value)
    # a huge history with a short last message is trimmed instead
    history = tuple(ChatMessage("user" if i % 2 == 0 else "assistant", paste[:100_000]) for i in range(50))
    _, done = _run(loaded, TextRequest(messages=(*history, ChatMessage("user", "hi")), max_tokens=4))
    assert done.stats.prompt_tokens < N_CTX
    assert loaded.pid == pid


def test_streamed_text_is_valid_unicode(loaded: EngineClient) -> None:
    steps, done = _run(loaded, TextRequest(prompt="👨\u200d👩 שלום", max_tokens=24))
    for step in steps:
        step.text.encode("utf-8")  # no lone surrogates or broken characters reach the app
    assert "".join(s.text for s in steps) == done.text


def test_clean_text() -> None:
    assert clean_text("a\ud83d\ude00b") == "a😀b"  # a UTF-16 pair from a clipboard is joined
    assert clean_text("a\ud800b\x00c") == "a\ufffdbc"
    assert clean_text("plain") == "plain"
