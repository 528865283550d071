"""SmolLM2-135M-Instruct (real tokenizer, template and text): chat, multi-turn reuse, stop strings, lookup."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from outrider.engine.chat import ChatMessage
from outrider.engine.engine import Engine, PairSpec, TextRequest
from outrider.engine.errors import ContextOverflowError
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings
from outrider.engine.speculative import DoneEvent, DraftParams, StepEvent

QUOTE = (
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do: "
    "once or twice she had peeped into the book her sister was reading, but it had no pictures or "
    "conversations in it."
)


def _run(engine: Engine, request: TextRequest) -> tuple[str, DoneEvent, list[StepEvent]]:
    steps: list[StepEvent] = []
    for event in engine.run(request):
        if isinstance(event, DoneEvent):
            return "".join(s.text for s in steps), event, steps
        steps.append(event)
    raise AssertionError("no done event")


def test_chat_template_is_the_models_own(smol: Engine) -> None:
    assert smol.info is not None and smol.info.chat_template == "model"
    tokens = smol.tokenize_chat([ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")])
    text = b"".join(smol.target.piece(t) for t in tokens).decode()
    assert "Be brief." in text and "Hi" in text
    assert smol.target.token_text(tokens[0]) == "<|im_start|>"  # parsed as a special token, not as text


def test_lookup_accepts_a_lot_when_quoting(smol: Engine) -> None:
    request = TextRequest(
        messages=(ChatMessage("user", f"Repeat this text exactly:\n\n{QUOTE}"),), max_tokens=80, draft=DraftParams(k=6)
    )
    text, done, _ = _run(smol, request)
    assert "Alice was beginning" in text
    assert done.stats.acceptance_rate is not None and done.stats.acceptance_rate > 0.5
    assert done.stats.tokens_per_pass is not None and done.stats.tokens_per_pass > 1.5
    plain_text, _, _ = _run(smol, TextRequest(messages=request.messages, max_tokens=80, plain=True))
    assert plain_text == text


def test_multi_turn_reuses_cache_and_matches_fresh_run(smol: Engine, backend: Backend, smollm_path: Path) -> None:
    first = (ChatMessage("user", "Name three colours."),)
    reply, _, _ = _run(smol, TextRequest(messages=first, max_tokens=30))
    second = (*first, ChatMessage("assistant", reply), ChatMessage("user", "Now name three animals."))
    text, done, _ = _run(smol, TextRequest(messages=second, max_tokens=30))
    assert done.stats.prompt_tokens_reused > 10
    fresh = Engine(backend)
    fresh.load(PairSpec(target=str(smollm_path), lookup=True, context=ContextSettings(n_ctx=1024, threads=2)))
    try:
        fresh_text, fresh_done, _ = _run(fresh, TextRequest(messages=second, max_tokens=30))
    finally:
        fresh.unload()
    assert fresh_done.stats.prompt_tokens_reused == 0
    assert fresh_text == text


def test_stop_string_across_token_boundaries(smol: Engine) -> None:
    messages = (ChatMessage("user", "Write two sentences about the moon."),)
    full, _, steps = _run(smol, TextRequest(messages=messages, max_tokens=60))
    pieces = [p for s in steps for p in s.pieces]
    # A stop string that starts inside one token and ends inside a later one.
    offsets = [sum(len(p) for p in pieces[:i]) for i in range(len(pieces) + 1)]
    start = next(o for o in offsets[3:] if o + 6 < len(full)) - 2
    stop = full[start : start + 6]
    text, done, steps = _run(smol, TextRequest(messages=messages, max_tokens=60, stop=(stop,)))
    assert done.stop_reason == "stop"
    assert text == full[: full.index(stop)]
    shown = ""
    for s in steps:  # no step ever shows a prefix of the stop string that is later completed
        shown += s.text
        assert stop not in shown
    assert shown == text


def test_utf8_is_never_broken(smol: Engine) -> None:
    text = "héllo wörld — 世界 😀 👩‍👩‍👧 مرحبا"
    tokens = smol.target.tokenize(text, add_special=False, parse_special=False)
    from outrider.engine.llama.text import IncrementalDetokenizer

    detok = IncrementalDetokenizer()
    parts = [detok.feed(smol.target.piece(t)) for t in tokens]
    assert all("\ufffd" not in p for p in parts)
    assert "".join(parts) + detok.flush() == text


def test_hostile_text_is_cleaned_not_fatal(smol: Engine) -> None:
    hostile = "a\x00b \ud800 lone surrogate \u202eRTL\u202c 👩\u200d👩\u200d👧"
    cleaned = "ab \ufffd lone surrogate \u202eRTL\u202c 👩\u200d👩\u200d👧"  # NUL gone, the lone surrogate one U+FFFD
    messages = (ChatMessage("user", hostile),)
    prompt = smol.tokenize_chat(messages, reserve=5)
    rendered = b"".join(smol.target.piece(t) for t in prompt).decode("utf-8")  # strict: no broken bytes
    assert cleaned in rendered
    assert rendered.count("\ufffd") == 1 and "\x00" not in rendered
    assert prompt == smol.tokenize_chat((ChatMessage("user", cleaned),), reserve=5)
    text, done, _ = _run(smol, TextRequest(messages=messages, max_tokens=5))
    assert done.stats.generated == 5 and done.stats.prompt_tokens == len(prompt)
    assert text == done.text and "\ufffd" not in text and "\x00" not in text
    reference, _, _ = _run(smol, TextRequest(messages=(ChatMessage("user", cleaned),), max_tokens=5))
    assert text == reference


def test_prompt_longer_than_context_is_refused_before_decoding(smol: Engine) -> None:
    long = "word " * 3000
    with pytest.raises(ContextOverflowError, match=r"message is \d+ tokens; this model's context is 1024"):
        list(smol.run(TextRequest(prompt=long, max_tokens=5)))


def test_long_conversation_is_trimmed_keeping_system_and_latest(smol: Engine) -> None:
    history: list[ChatMessage] = [ChatMessage("system", "You are terse.")]
    for i in range(40):
        history += [ChatMessage("user", f"Message {i}: " + "blah " * 20), ChatMessage("assistant", "ok " * 10)]
    history.append(ChatMessage("user", "Final question: say yes."))
    tokens = smol.tokenize_chat(history, reserve=64)
    rendered = b"".join(smol.target.piece(t) for t in tokens).decode()
    assert "You are terse." in rendered and "Final question" in rendered and "Message 0:" not in rendered
    assert len(tokens) <= 1024 - 64


def test_cancel_stops_within_one_step(smol: Engine) -> None:
    events = smol.run(TextRequest(messages=(ChatMessage("user", "Write a long essay about the sea."),), max_tokens=500))
    first = next(events)
    assert isinstance(first, StepEvent) and first.tokens
    canceller = threading.Thread(target=smol.cancel)  # from another thread, while the reply is suspended
    canceller.start()
    canceller.join()
    rest = list(events)
    done = rest[-1]
    assert isinstance(done, DoneEvent) and done.stop_reason == "cancelled"
    # No step runs after the cancel: at most a flush of held-back text (no tokens), then done.
    assert len(rest) <= 2 and all(not e.tokens for e in rest[:-1] if isinstance(e, StepEvent))
    assert done.stats.generated == len(first.tokens) < 500
    assert done.text == first.text + "".join(e.text for e in rest[:-1] if isinstance(e, StepEvent))
