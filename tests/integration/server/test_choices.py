"""``n`` > 1 with the ``openai`` SDK on the tiny family: the choices are generated one after another, each its own
sample — indexed 0 … n - 1, choice 0 the request's own seed and choice i the seed ``choice_seed(seed, i)``, so they
differ and repeat — whole and streamed (every chunk names its choice's ``index``), for chat and completions,
``usage`` summed over the choices (the prompt once), and more than ``MAX_CHOICES`` a 400 naming ``n``.

The reference is independent of the n code: each choice equals a request with ``n`` = 1 and that choice's seed.

Breaking it on purpose: with every choice given the request's seed (``choice_requests`` not deriving), the choices
were all the same text and ``test_seeded_choices_differ_and_repeat`` failed; with the stream's chunks all sent as
index 0 (``for_choice`` not used), ``test_streamed_choices_carry_their_index`` failed (the SDK saw one choice).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from server_helpers import TINY_CTX, Served, serve

from outrider.server.requests import MAX_CHOICES, choice_seed
from outrider.worker.client import EngineClient

ASK: Any = [{"role": "user", "content": "the model"}]


@pytest.fixture
def tiny(tiny_engine: EngineClient) -> Iterator[Served]:
    """A fixed k: every request drafts alike, so a seed repeats its reply whatever the requests before it (with
    automatic k the first reply drafts and later ones may not, and the tiny family's seeded text then differed
    with and without drafting — noted for the sampler's owners)."""
    served = serve(tiny_engine, "tiny", max_tokens_limit=TINY_CTX, k=3)
    yield served
    served.server.stop()


def one(tiny: Served, seed: int, *, chat: bool) -> tuple[str, int]:
    """An n = 1 reply's text and completion tokens (the reference)."""
    if chat:
        reply = tiny.api.chat.completions.create(model="t", messages=ASK, max_tokens=8, temperature=1.0, seed=seed)
        assert reply.usage is not None
        return reply.choices[0].message.content or "", reply.usage.completion_tokens
    legacy = tiny.api.completions.create(model="t", prompt="the model", max_tokens=8, temperature=1.0, seed=seed)
    assert legacy.usage is not None
    return legacy.choices[0].text, legacy.usage.completion_tokens


def test_seeded_choices_differ_and_repeat(tiny: Served) -> None:
    reply = tiny.api.chat.completions.create(model="t", messages=ASK, max_tokens=8, temperature=1.0, seed=11, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    texts = [c.message.content for c in reply.choices]
    assert len(set(texts)) >= 2, texts  # different samples
    again = tiny.api.chat.completions.create(model="t", messages=ASK, max_tokens=8, temperature=1.0, seed=11, n=3)
    assert [c.message.content for c in again.choices] == texts  # reproducible
    references = [one(tiny, choice_seed(11, i), chat=True) for i in range(3)]
    assert texts == [text for text, _ in references]
    assert choice_seed(11, 0) == 11  # n = 1 unchanged
    assert reply.usage is not None
    assert reply.usage.completion_tokens == sum(n for _, n in references)
    single = tiny.api.chat.completions.create(model="t", messages=ASK, max_tokens=8, temperature=1.0, seed=11)
    assert single.usage is not None and reply.usage.prompt_tokens == single.usage.prompt_tokens
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    timings = [c.model_extra["timings"] for c in reply.choices if c.model_extra]
    assert len(timings) == 3 and sum(t["predicted_n"] for t in timings) == reply.usage.completion_tokens


def test_streamed_choices_carry_their_index(tiny: Served) -> None:
    stream = tiny.api.completions.create(model="t", prompt="the model", max_tokens=8, temperature=1.0, seed=5, n=2,
                                         stream=True, stream_options={"include_usage": True})
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    whole = tiny.api.completions.create(model="t", prompt="the model", max_tokens=8, temperature=1.0, seed=5, n=2)
    assert texts == {c.index: c.text for c in whole.choices}
    assert set(finishes) == {0, 1}
    assert [texts[i] for i in (0, 1)] == [one(tiny, choice_seed(5, i), chat=False)[0] for i in (0, 1)]
    assert usage is not None and whole.usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_streamed_chat_choices(tiny: Served) -> None:
    stream = tiny.api.chat.completions.create(model="t", messages=ASK, max_tokens=8, temperature=1.0, seed=3, n=2,
                                              stream=True)
    texts: dict[int, str] = {}
    roles: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.role:
                roles[choice.index] = choice.delta.role
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    assert roles == {0: "assistant", 1: "assistant"}
    assert [texts[0], texts[1]] == [one(tiny, choice_seed(3, i), chat=True)[0] for i in (0, 1)]


@pytest.mark.parametrize("n", [0, MAX_CHOICES + 1])
def test_too_many_choices_is_400(tiny: Served, n: int) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        tiny.api.chat.completions.create(model="t", messages=ASK, max_tokens=2, n=n)
    body = caught.value.body
    assert isinstance(body, dict) and body["param"] == "n" and body["code"] == "invalid_value"
    assert str(MAX_CHOICES) in json.dumps(body)
