"""Temperature 0 against an independent reference: speculative output == target-only greedy decoding.

The reference (``support/reference_decoding.py``) is the target GGUF in a fresh llama.cpp context, driven directly
through llama-cpp-python's low-level API, one token per ``llama_decode``, each next token its own ``np.argmax`` of
``llama_get_logits_ith``: no Outrider engine code at all. The engine runs with a draft model (the family draft) and
prompt lookup, several k, draft-min and p-min. A divergence is forgiven only where the reference's top-two logits
are within ``TIE_GAP`` at the first differing position (a batched and a one-token evaluation may round a near-tie
differently); the number of such ties is bounded too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams
from outrider.engine.speculative import DoneEvent
from support.reference_decoding import ReferenceModel
from support.tiny_gguf import Family

PROMPTS = [
    "the",
    "hello world",
    "def return class",
    "the model is fast",
    "a b a b a b",
    "token token token token",
    "1 2 3 4 5 6 7 8",
    "print(value)",
    "text code text code text",
    "x = y + z * 2",
]
N_TOKENS = 24
TIE_GAP = 1e-3
DRAFT_SETTINGS = [
    DraftParams(k=1),
    DraftParams(k=3),
    DraftParams(k=8),
    DraftParams(k=4, draft_min=2),
    DraftParams(k=4, p_min=0.5),
    DraftParams(k=8, draft_min=2, p_min=0.9),
    DraftParams(k=None),
]


@pytest.fixture(scope="module")
def references(backend: Backend, tiny_family: Family) -> dict[str, list[int]]:
    """prompt text -> the reference's greedy continuation (and the prompt tokens under key 'prompt:' + text)."""
    out: dict[str, list[int]] = {}
    with ReferenceModel(tiny_family.target, n_ctx=128) as reference:
        for text in PROMPTS:
            prompt = reference.tokenize(text)
            out["prompt:" + text] = prompt
            out[text] = reference.greedy(prompt, N_TOKENS)
    return out


@pytest.fixture(scope="module", params=["family", "lookup"])
def engine(request: pytest.FixtureRequest, backend: Backend, tiny_family: Family) -> Iterator[tuple[str, Engine]]:
    kind = request.param
    draft = tiny_family.draft if kind == "family" else None
    e = Engine(backend)
    e.load(
        PairSpec(
            target=str(tiny_family.target),
            draft=str(draft) if draft else None,
            lookup=kind == "lookup",
            context=ContextSettings(n_ctx=128, threads=1),
        )
    )
    yield kind, e
    e.unload()


def _generate(
    engine: Engine, prompt: list[int], draft: DraftParams, *, plain: bool = False
) -> tuple[list[int], DoneEvent]:
    tokens: list[int] = []
    for event in engine.generate(prompt, max_tokens=N_TOKENS, draft=draft, plain=plain, ignore_eos=True):
        if isinstance(event, DoneEvent):
            return tokens, event
        tokens.extend(event.tokens)
    raise AssertionError("no done event")


def test_speculative_greedy_equals_the_independent_reference(
    engine: tuple[str, Engine], references: dict[str, list[int]], tiny_family: Family
) -> None:
    kind, e = engine
    drafted = accepted = 0
    ties: list[str] = []
    mismatches: list[str] = []
    with ReferenceModel(tiny_family.target, n_ctx=128) as reference:
        for text in PROMPTS:
            prompt = references["prompt:" + text]
            assert e.tokenize_prompt(text) == prompt
            expected = references[text]
            for draft in [DraftParams(k=0), *DRAFT_SETTINGS]:
                got, done = _generate(e, prompt, draft)
                drafted += done.stats.drafted
                accepted += done.stats.accepted
                assert len(got) == N_TOKENS, (text, draft, got)
                if got == expected:
                    continue
                i = next(j for j, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
                gap = reference.top2_gap(prompt + expected[:i])
                where = f"{text!r} {draft}: first difference at token {i} (logit gap {gap:.3g})"
                (ties if gap < TIE_GAP else mismatches).append(where)
    assert not mismatches, f"{kind}: speculative output is not target-only greedy decoding:\n" + "\n".join(mismatches)
    assert len(ties) <= 2, f"{kind}: too many near-tie divergences to be rounding:\n" + "\n".join(ties)
    assert drafted > 0, f"{kind}: nothing was drafted"
    if kind == "family":
        assert accepted > drafted * 0.3, (accepted, drafted)
    assert accepted < drafted, f"{kind}: every draft token was accepted: rejections are not tested"


def test_a_cancelled_reply_stops_and_leaves_exact_caches(
    engine: tuple[str, Engine], references: dict[str, list[int]]
) -> None:
    """Cancel (from another thread) once 3 tokens are out: 'cancelled', fewer tokens than asked, the tokens so
    far are the reference's, and the next reply (same prompt, caches reused) is the full reference again."""
    kind, e = engine
    text = "the model is fast"
    prompt, expected = references["prompt:" + text], references[text]
    got: list[int] = []
    done: DoneEvent | None = None
    cancelled = False
    for event in e.generate(prompt, max_tokens=N_TOKENS, draft=DraftParams(k=4), ignore_eos=True):
        if isinstance(event, DoneEvent):
            done = event
            break
        got.extend(event.tokens)
        if len(got) >= 3 and not cancelled:
            canceller = threading.Thread(target=e.cancel)
            canceller.start()
            canceller.join()
            cancelled = True
    assert done is not None and done.stop_reason == "cancelled", kind
    assert 3 <= done.stats.generated == len(got) < N_TOKENS
    assert got == expected[: len(got)]
    again, done_again = _generate(e, prompt, DraftParams(k=4))
    assert again == expected and done_again.stop_reason == "length"


def test_plain_decoding_equals_the_independent_reference(
    backend: Backend, tiny_family: Family, references: dict[str, list[int]]
) -> None:
    e = Engine(backend)
    e.load(PairSpec(target=str(tiny_family.target), context=ContextSettings(n_ctx=128, threads=1)))
    try:
        for text in PROMPTS:
            got, done = _generate(e, references["prompt:" + text], DraftParams(k=0), plain=True)
            assert got == references[text], text
            assert done.stats.drafted == 0
    finally:
        e.unload()
