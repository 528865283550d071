"""Seeded replies through the server's HTTP API on 127.0.0.1 (the ``openai`` SDK; SmolLM2-135M-Instruct with
prompt lookup, the coupled sampler that a seeded request gets by default): the same request with the same seed
is the same text with automatic k, with a fixed k and with drafting off, as the first request after the load and
as a later one — repeated at once, after another request sharing its system prompt, streamed, and as choice 0
of ``n`` = 2. A seeded request evaluates its prompt afresh (``SpeculativeDecoder._prefill``): on a CPU, llama.cpp's
flash attention rounds a micro-batch of 64+ rows (tiled) differently from fewer (row by row), so a prefix built
from a cached part and a new part differs from the prompt evaluated at once. An unseeded request keeps reusing
the cache (its text promises nothing to repeat; its speed does).

Breaking it on purpose: with the prefix reused for seeded requests too, the request after another one sharing its
system prompt sampled other text and ``test_a_seeded_reply_does_not_depend_on_the_cache`` failed (seed 1,
temperature 1; seed 7 at 0.7 happened to agree) — the difference the last session saw through ``outrider serve``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from server_helpers import Served, serve

from outrider.worker.client import EngineClient

SYSTEM = ("You are a careful assistant. Answer in plain English, in full sentences, and explain your reasoning "
          "step by step. Keep a friendly tone and avoid jargon where a simpler word will do. When a question is "
          "unclear, say what you assumed. Prefer short paragraphs, and end with one sentence that sums it up.")
ASK: Any = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Tell me a short story about a lighthouse keeper who finds a bottle."}]
OTHER: Any = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Write a poem about the sea."}]
TOKENS = 40


@pytest.fixture(scope="module")
def servers(demo_engine: EngineClient) -> Iterator[dict[str, Served]]:
    """Three servers over one engine: automatic k, a fixed k of 4, drafting off (k 0)."""
    served = {name: serve(demo_engine, "smollm2", k=k) for name, k in (("auto", None), ("k4", 4), ("off", 0))}
    yield served
    for s in served.values():
        s.server.stop()


def _reply(served: Served, messages: Any, seed: int, temperature: float, *, n: int = 1) -> tuple[list[str], Any]:
    reply = served.api.chat.completions.create(model="m", messages=messages, max_tokens=TOKENS, seed=seed,
                                               temperature=temperature, n=n)
    return [c.message.content or "" for c in reply.choices], (reply.model_extra or {})["timings"]


def _streamed(served: Served, messages: Any, seed: int, temperature: float) -> str:
    stream = served.api.chat.completions.create(model="m", messages=messages, max_tokens=TOKENS, seed=seed,
                                                temperature=temperature, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


@pytest.mark.parametrize(("seed", "temperature"), [(1, 1.0), (7, 0.7)])
def test_a_seeded_reply_does_not_depend_on_the_cache(servers: dict[str, Served], seed: int,
                                                     temperature: float) -> None:
    auto = servers["auto"]
    # An unrelated request first: the prompt then shares only its first token with the cache.
    _reply(auto, [{"role": "user", "content": "Hello."}], seed + 100, temperature)
    first, timings = _reply(auto, ASK, seed, temperature)
    assert timings["cache_n"] == 0 and timings["prompt_n"] >= 64, timings  # evaluated afresh, in one pass
    again, timings_again = _reply(auto, ASK, seed, temperature)
    assert timings_again["cache_n"] == 0  # seeded: afresh again, though the cache holds its whole prompt
    assert again == first, "the same request repeated at once"
    _reply(auto, OTHER, seed + 1, temperature)
    after_other, timings_after = _reply(auto, ASK, seed, temperature)
    assert timings_after["cache_n"] == 0
    assert after_other == first, "the same request after another one sharing its system prompt"
    drafted = timings["draft_n"] + timings_again["draft_n"] + timings_after["draft_n"]
    for name in ("k4", "off"):
        text, other_timings = _reply(servers[name], ASK, seed, temperature)
        assert text == first, f"the same request with {name}"
        drafted += other_timings["draft_n"]
    assert _streamed(auto, ASK, seed, temperature) == first[0], "streamed"
    choices, _ = _reply(auto, ASK, seed, temperature, n=2)
    assert choices[0] == first[0] and choices[1] != first[0], "choice 0 of n = 2 is the request's own seed"
    assert drafted > 0, "nothing was drafted: the identity with drafting off is trivial"


def test_an_unseeded_request_still_reuses_the_cache(servers: dict[str, Served]) -> None:
    """Evaluating afresh is for seeded requests only: an unseeded one repeated at once reuses its prompt."""
    auto = servers["auto"]
    unseeded: Any = {"model": "m", "messages": ASK, "max_tokens": 8, "temperature": 0.7}
    _reply(auto, [{"role": "user", "content": "Hello."}], 3, 0.7)  # the cache holds another prompt first
    first = (auto.api.chat.completions.create(**unseeded).model_extra or {})["timings"]
    again = (auto.api.chat.completions.create(**unseeded).model_extra or {})["timings"]
    assert first["prompt_n"] >= 64 and again["cache_n"] >= first["prompt_n"] - 1, (first, again)
