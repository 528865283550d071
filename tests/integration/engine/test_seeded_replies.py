"""Seeded replies through the real engine: the coupled sampler gives the same tokens with and without drafting
(a draft model and prompt lookup, any k, automatic k included), and a seeded request repeats exactly — the first
request after a load (automatic k cold) as later ones (automatic k warm, choosing other k).

Mutation checks (each made once, each failed here): the draft model proposing with the noise of the next position
(``len(committed) + len(tokens) + 1`` in ``ModelDraft.propose``) still passed the identity tests, as it must — the
coupled output does not depend on the draft at all — but dropped acceptance (``test_coupled_drafts_are_accepted``);
the target's choice keyed by the step's first position for every row (``position`` instead of ``position + i`` in
``verify_sampled``) failed the identity tests with the draft model (a reply then depends on where steps start).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outrider.engine.engine import Engine
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams, PairSpec, SamplingParams
from outrider.engine.speculative import DoneEvent
from support.tiny_gguf import Family

N_TOKENS = 24
SEEDS = (1, 2, 3, 4, 5)


@pytest.fixture(scope="module")
def engines(backend: Backend, tiny_family: Family) -> Iterator[dict[str, Engine]]:
    context = ContextSettings(n_ctx=512, threads=1)
    model, lookup = Engine(backend), Engine(backend)
    model.load(PairSpec(target=str(tiny_family.target), draft=str(tiny_family.draft), context=context))
    lookup.load(PairSpec(target=str(tiny_family.target), lookup=True, context=context))
    yield {"model": model, "lookup": lookup}
    model.unload()
    lookup.unload()


def _reply(engine: Engine, prompt: list[int], sampling: SamplingParams, draft: DraftParams,
           plain: bool = False) -> tuple[list[int], int, int]:
    tokens: list[int] = []
    drafted = accepted = 0
    for event in engine.generate(prompt, max_tokens=N_TOKENS, sampling=sampling, draft=draft, plain=plain,
                                 ignore_eos=True):
        if isinstance(event, DoneEvent):
            drafted, accepted = event.stats.drafted, event.stats.accepted
        else:
            tokens.extend(event.tokens)
    return tokens, drafted, accepted


def _prompt(engine: Engine, drafter: str) -> list[int]:
    # Repeated text, so prompt lookup finds n-grams to propose from at most positions.
    text = "the model of the model of the model" if drafter == "lookup" else "the model"
    return engine.tokenize_prompt(text)


@pytest.mark.parametrize("drafter", ["model", "lookup"])
@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.5])
def test_coupled_speculative_reply_equals_the_plain_reply(engines: dict[str, Engine], drafter: str,
                                                          temperature: float) -> None:
    engine = engines[drafter]
    prompt = _prompt(engine, drafter)
    drafted_total = 0
    for seed in SEEDS:
        sampling = SamplingParams(temperature=temperature, top_k=0 if seed == 5 else 40, top_p=0.95, min_p=0.05,
                                  seed=seed, sampler="coupled")
        plain, _, _ = _reply(engine, prompt, sampling, DraftParams(k=0), plain=True)
        for draft in (DraftParams(k=1), DraftParams(k=4), DraftParams(k=None), DraftParams(k=3, p_min=0.6),
                      DraftParams(k=4, draft_min=2)):
            tokens, drafted, _ = _reply(engine, prompt, sampling, draft)
            assert tokens == plain, f"seed {seed}, {draft}: the speculative reply differs from the plain one"
            drafted_total += drafted
    assert drafted_total > 0, "nothing was drafted: the identity is trivial"


def test_coupled_drafts_are_accepted(engines: dict[str, Engine]) -> None:
    """The family draft shares the target's noise: its acceptance a_c is at least (1 - TV) / (1 + TV) per position,
    so over the reply at least r / (2 - r) where r = 1 - TV is the rejection sampler's (convexity), here measured."""
    engine = engines["model"]
    rates = {}
    for sampler in ("coupled", "rejection"):
        drafted = accepted = 0
        for seed in range(1, 21):
            _, d, a = _reply(engine, _prompt(engine, "model"),
                             SamplingParams(temperature=0.7, seed=seed, sampler=sampler),  # type: ignore[arg-type]
                             DraftParams(k=4))
            drafted, accepted = drafted + d, accepted + a
        assert drafted > 0
        rates[sampler] = accepted / drafted
    r = rates["rejection"]
    assert rates["coupled"] >= r / (2 - r) - 0.05, rates


@pytest.mark.parametrize(("sampler", "k"), [("coupled", None), ("rejection", 3)])
def test_a_seeded_request_repeats_after_a_cold_start(backend: Backend, tiny_family: Family, sampler: str,
                                                     k: int | None) -> None:
    """A fresh load (automatic k has learned nothing), then the same seeded request three times: the same tokens.
    The coupled sampler repeats whatever k automatic k picks; the rejection sampler repeats for a fixed k."""
    engine = Engine(backend)
    engine.load(PairSpec(target=str(tiny_family.target), draft=str(tiny_family.draft),
                         context=ContextSettings(n_ctx=512, threads=1)))
    try:
        prompt = engine.tokenize_prompt("the model")
        sampling = SamplingParams(temperature=0.8, seed=11, sampler=sampler)  # type: ignore[arg-type]
        replies = [_reply(engine, prompt, sampling, DraftParams(k=k)) for _ in range(3)]
        assert replies[0][1] > 0, "nothing drafted"
        assert replies[0][0] == replies[1][0] == replies[2][0]
        other = _reply(engine, prompt, SamplingParams(temperature=0.8, seed=12, sampler=sampler),  # type: ignore[arg-type]
                       DraftParams(k=k))
        assert other[0] != replies[0][0]  # the seed decides: another seed, another reply
    finally:
        engine.unload()
