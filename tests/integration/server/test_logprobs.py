"""logprobs through the server with the ``openai`` SDK's example, unchanged (``logprobs=True, top_logprobs=3``),
whole and streamed, and the legacy completions form; a suffix on a model without FIM tokens is a clear 400; the
number of choices ``n`` above 1 is a clear 400. (The values are checked against an independent reference in
tests/integration/engine/test_logprobs_fim.py, where breaking the row read showed.)
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from server_helpers import Served

pytestmark = pytest.mark.slow
ASK: Any = [{"role": "user", "content": "Say hello."}]


def test_the_sdk_logprobs_example(demo: Served) -> None:
    reply = demo.api.chat.completions.create(model="outrider", messages=ASK, max_tokens=8, temperature=0,
                                             logprobs=True, top_logprobs=3)
    choice = reply.choices[0]
    content = choice.logprobs.content  # type: ignore[union-attr]
    assert content is not None and reply.usage is not None
    assert len(content) == reply.usage.completion_tokens
    assert "".join(t.token for t in content) == choice.message.content
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)  # greedy: the likeliest token
        assert bytes(entry.bytes or []).decode() == entry.token
    stream = demo.api.chat.completions.create(model="outrider", messages=ASK, max_tokens=8, temperature=0,
                                              logprobs=True, top_logprobs=3, stream=True)
    streamed = [t for c in stream if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content or []]
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content]


def test_legacy_completion_logprobs_and_the_limits(demo: Served) -> None:
    reply = demo.api.completions.create(model="outrider", prompt="The sky is", max_tokens=5, temperature=0,
                                        logprobs=2)
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens and len(logprobs.tokens) == len(logprobs.token_logprobs or [])
    assert all(len(top) <= 2 for top in logprobs.top_logprobs or [])
    assert "".join(logprobs.tokens) == reply.choices[0].text
    for bad, param in (({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                       ({"top_logprobs": 2}, "top_logprobs"), ({"n": 17}, "n")):
        with pytest.raises(openai.BadRequestError) as caught:
            demo.api.chat.completions.create(model="outrider", messages=ASK, max_tokens=2, **bad)
        assert caught.value.body["param"] == param  # type: ignore[index]


def test_a_suffix_needs_fim_tokens(demo: Served) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        demo.api.completions.create(model="outrider", prompt="def add(a, b):\n    return", suffix="\n\nprint(1)",
                                    max_tokens=4)
    body: Any = caught.value.body
    assert body["param"] == "suffix" and "fill-in-the-middle" in body["message"]
