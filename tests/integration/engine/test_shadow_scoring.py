"""Shadow scoring of a draft model while automatic k decodes plainly: the drafter's greedy guesses are compared
with the target's own tokens, so acceptance keeps being learned without drafting (engine/autodraft.py).

A draft identical to the target must agree on every scored token; an unrelated draft on almost none. Each
scoring after the first reuses the draft's cache (it was synced by the scoring before): that is the case that
once scored nothing at all (0 trials), leaving automatic k blind while plain."""

from __future__ import annotations

from pathlib import Path

import pytest

from outrider.engine.drafters import SHADOW_WINDOW, ModelDraft
from outrider.engine.engine import Engine
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams, PairSpec
from outrider.engine.speculative import DoneEvent, StepEvent
from support.reference_decoding import ReferenceModel
from support.tiny_gguf import TinyShape, make_family

SHAPE = TinyShape(n_layer=3, n_embd=128, n_head=4, n_ff=256)


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_family(tmp_path_factory.mktemp("shadow"), shape=SHAPE, extra_layer_scale=0.05, prefix="sh")


def _drafter(engine: Engine) -> ModelDraft:
    drafter = engine._decoder_or_raise().drafter
    assert isinstance(drafter, ModelDraft)
    return drafter


def test_a_draft_equal_to_the_target_agrees_on_every_scored_token(backend: Backend, family) -> None:  # type: ignore[no-untyped-def]
    target = Path(family.target)
    engine = Engine(backend)
    engine.load(PairSpec(target=str(target), draft=str(target), context=ContextSettings(n_ctx=256)))
    try:
        prompt = engine.tokenize_prompt("the model is fast and")
        generated = ReferenceModel(target).greedy(prompt, 8 + 8 + 40)
        drafter = _drafter(engine)
        drafter.prefill(prompt)
        seen = len(prompt)
        scores = []
        for n in (8, 8, 40):  # the second and third reuse the cache the scoring before left
            committed = [*prompt, *generated[: seen - len(prompt) + n]]
            scores.append(drafter.observe(committed, seen))
            seen = len(committed)
            assert drafter.cached == committed
        assert scores == [(8, 8), (8, 8), (SHADOW_WINDOW, SHADOW_WINDOW)]
    finally:
        engine.unload()


def test_automatic_k_scores_an_unrelated_draft_while_plain(backend: Backend, family) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(backend)
    engine.load(PairSpec(target=str(family.target), draft=str(family.unrelated), context=ContextSettings(n_ctx=512)))
    try:
        decoder = engine._decoder_or_raise()
        prompt = engine.tokenize_prompt("the model is fast and the draft is")
        scored: list[tuple[int, int]] = []
        timed: list[float | None] = []
        done = None
        spying = False
        for event in engine.generate(prompt, max_tokens=160, draft=DraftParams(k=None), ignore_eos=True):
            if isinstance(event, StepEvent) and decoder.auto_policy is not None and not spying:
                spying = True
                policy = decoder.auto_policy
                original = policy.observe_shadow

                def spy(hits: int, trials: int, seconds: float | None = None,  # type: ignore[no-untyped-def]
                        original=original) -> None:
                    scored.append((hits, trials))
                    timed.append(seconds)
                    original(hits, trials, seconds)

                policy.observe_shadow = spy  # type: ignore[method-assign]
            elif isinstance(event, DoneEvent):
                done = event
        assert done is not None and done.stats.generated == 160
        trials = sum(t for _, t in scored)
        hits = sum(h for h, _ in scored)
        assert len(scored) >= 2 and trials >= 16, scored
        assert hits / trials < 0.5
        # Each scoring is timed by the decoder: what plain decoding that keeps scoring costs (autodraft.py).
        assert all(t is not None and 0 < t < 1 for t in timed), timed
        # With acceptance measured near 0, the draft is not probed again: at most the cold start drafts.
        assert done.stats.drafted <= 2 * 4, done.stats
    finally:
        engine.unload()
