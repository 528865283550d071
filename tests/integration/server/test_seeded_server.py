"""Seeded replies through the server's HTTP API on 127.0.0.1 (the ``openai`` SDK, the engine process behind it;
the tiny family on two threads with its draft model, the coupled sampler that a seeded request gets by default):
the same request with the same seed is the same text, and the same log-probabilities bit for bit, with automatic
k (cold, as the first request after the load, and warm), a fixed k of 4 and drafting off — repeated at once,
after another request sharing its 283-token system prompt, streamed, and as choice 0 of ``n`` = 2.

Two things make that hold on a CPU (``SpeculativeDecoder.generate``): a seeded request evaluates its prompt afresh
in every context (llama.cpp's flash attention rounds a pass of 64+ rows differently from fewer, so a cached prefix
plus a short new part is not the prompt evaluated at once), and each of its target passes has 2 .. 63 rows (a
one-row pass has routines of its own: an F16 matrix product, and past 256 cache cells attention split over the
threads). An unseeded request keeps the prompt cache (its text promises nothing to repeat; its speed does).

The log-probabilities are compared as well as the text: on these tiny random models a 1e-3 difference in the
logits rarely changes a sampled token, but always a log-probability.

Breaking it on purpose: without the padding row of a seeded plain step (``pad_plain`` False) it failed "repeated
at once: the log-probabilities differ" — the cold first reply with automatic k and the warm second one planned
their plain steps differently, and a one-row pass rounds otherwise than a row of a verify pass. With the target
prefilled with reuse for seeded requests too (the code before the fix) it failed "assert 305 == 289" on
``cache_n`` (the prefix reused) while the texts still agreed: this engine's 256-row micro-batches evaluate the
prompt's tail (past row 256) row by row either way. That difference is shown at the engine level
(tests/integration/engine/test_seeded_afresh.py, where the same break failed on the log-probabilities).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from server_helpers import TINY_CTX, Served, serve

from outrider.worker.client import EngineClient

WORDS = "the model of the text is fast and the draft is slow so we can see what they were when there".split()
SYSTEM = " ".join(WORDS * 6)
ASK: Any = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello world"}]
OTHER: Any = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "def return class import"}]
TOKENS = 32

Reply = tuple[list[str], list[list[tuple[str, float]]], dict[str, Any]]


@pytest.fixture(scope="module")
def servers(tiny_engine: EngineClient) -> Iterator[dict[str, Served]]:
    """Three servers over one engine: automatic k, a fixed k of 4, drafting off (k 0)."""
    served = {name: serve(tiny_engine, "tiny", k=k, max_tokens_limit=TINY_CTX)
              for name, k in (("auto", None), ("k4", 4), ("off", 0))}
    yield served
    for s in served.values():
        s.server.stop()


def _reply(served: Served, messages: Any, seed: int | None, *, n: int = 1) -> Reply:
    """Each choice's text and (token, log-probability) list, and the server's ``timings``."""
    reply = served.api.chat.completions.create(model="t", messages=messages, max_tokens=TOKENS, seed=seed,
                                               temperature=1.0, n=n, logprobs=True)
    texts = [c.message.content or "" for c in reply.choices]
    logprobs = [[(t.token, t.logprob) for t in (c.logprobs.content or [])] if c.logprobs else []
                for c in reply.choices]
    return texts, logprobs, (reply.model_extra or {})["timings"]


def _streamed(served: Served, messages: Any, seed: int) -> str:
    stream = served.api.chat.completions.create(model="t", messages=messages, max_tokens=TOKENS, seed=seed,
                                                temperature=1.0, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def _same(reply: Reply, first: Reply, what: str) -> None:
    assert reply[1][0] == first[1][0], f"{what}: the log-probabilities differ"
    assert reply[0][0] == first[0][0], f"{what}: the text differs"


def test_a_seeded_reply_does_not_depend_on_the_requests_before_or_on_k(servers: dict[str, Served]) -> None:
    auto = servers["auto"]
    seed = 5
    # An unrelated request first: the cache then shares only the template's first tokens with the prompt.
    _reply(auto, [{"role": "user", "content": "the model"}], None)
    first = _reply(auto, ASK, seed)
    timings = first[2]
    assert timings["cache_n"] == 0 and timings["prompt_n"] >= 256, timings  # afresh, past 256 cells
    assert len(first[1][0]) == TOKENS, "the log-probabilities were not returned"
    again = _reply(auto, ASK, seed)
    _same(again, first, "repeated at once")
    _reply(auto, OTHER, None)  # unseeded: it reuses the system prompt and leaves its own continuation cached
    after_other = _reply(auto, ASK, seed)
    _same(after_other, first, "after another request sharing its system prompt")
    # Seeded: afresh each time, though the cache held its whole prompt, then its system prompt.
    assert again[2]["cache_n"] == after_other[2]["cache_n"] == 0
    drafted = timings["draft_n"] + again[2]["draft_n"] + after_other[2]["draft_n"]
    for name, what in (("k4", "a fixed k of 4"), ("off", "drafting off")):
        other_k = _reply(servers[name], ASK, seed)
        _same(other_k, first, what)
        drafted += other_k[2]["draft_n"]
    assert _streamed(auto, ASK, seed) == first[0][0], "streamed"
    texts, logprobs, _ = _reply(auto, ASK, seed, n=2)
    assert logprobs[0] == first[1][0] and texts[0] == first[0][0], "choice 0 of n = 2 is the request's own seed"
    assert texts[1] != texts[0], "choice 1 has a seed of its own"
    assert drafted > 0, "nothing was drafted: the identity with drafting off is trivial"


def test_an_unseeded_request_still_reuses_the_cache(servers: dict[str, Served]) -> None:
    """Evaluating afresh is for seeded requests only: an unseeded one after another sharing its system prompt
    reuses that prefix."""
    auto = servers["auto"]
    _reply(auto, OTHER, None)
    _, _, timings = _reply(auto, ASK, None)
    assert timings["cache_n"] >= 256 and timings["prompt_n"] < 64, timings  # only the new part evaluated
