"""The speed-up a reply reports against a measured A/B of the same replies (docs/metrics.md).

The A/B is independent of the estimator: a plain reply and a speculative reply of the same prompt and length
(``ignore_eos``), run back to back, their decode wall times (first step to last, ``decode_s``, timed by the
decoder apart from the estimator's sums) divided. The tolerance is generous (a factor of
2, the median of five rounds) because the machine running the tests may be busy; the benchmark
tests/benchmarks/bench_speedup_truth.py holds the real goals (±15 % quiet, ±25 % loaded).
"""

from __future__ import annotations

import statistics

import pytest

from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams
from outrider.engine.session import Engine, PairSpec
from outrider.engine.speculative import DoneEvent
from outrider.engine.stats import GenerationStats
from support.tiny_gguf import Family

ROUNDS = 5
TOKENS = 64


def _reply(engine: Engine, prompt: list[int], draft: DraftParams, *, plain: bool) -> GenerationStats:
    done = [e for e in engine.generate(prompt, max_tokens=TOKENS, draft=draft, plain=plain, ignore_eos=True)
            if isinstance(e, DoneEvent)]
    assert done and done[0].stats.generated == TOKENS
    return done[0].stats


def _ab_and_reported(engine: Engine, prompt: list[int], draft: DraftParams) -> tuple[float, float, list[float]]:
    _reply(engine, prompt, draft, plain=False)  # page the weights in
    ab, reported, drafting = [], [], []
    for _ in range(ROUNDS):
        plain = _reply(engine, prompt, draft, plain=True)
        spec = _reply(engine, prompt, draft, plain=False)
        assert spec.drafted > 0 and spec.accepted > 0  # speculation really happened
        assert spec.speedup is not None and spec.speedup_low is not None and spec.speedup_high is not None
        assert spec.speedup_low <= spec.speedup <= spec.speedup_high
        ab.append(plain.decode_s / spec.decode_s)  # wall time, first step to last: not the meter's sums
        reported.append(spec.speedup)
        drafting.append(spec.draft_s / spec.step_s)
    return statistics.median(ab), statistics.median(reported), drafting


@pytest.mark.slow
def test_the_reported_speedup_agrees_with_an_ab_on_a_family_pair(backend: Backend, tiny_family: Family) -> None:
    """A family draft at k = 4 over 64-token replies: the reported figure within a factor of 2 of the A/B.

    Mutation check: with the drafter's time no longer charged to speculation (``step_s=now - t1`` given to the
    meter in ``SpeculativeDecoder.generate``) one run read 1.62x against an A/B of 2.47x on a machine at load
    average 25 (two cores), within the factor of 2 — that run's A/B was itself 10x off the unbroken run's 0.20x
    (0.16x reported): this test catches only a gross error; tests/unit/engine/test_stats.py catches that
    mutation exactly (2.52x against 1.27x)."""
    engine = Engine(backend)
    engine.load(PairSpec(target=str(tiny_family.target), draft=str(tiny_family.draft),
                         context=ContextSettings(n_ctx=512, threads=2)))
    try:
        ab, reported, drafting = _ab_and_reported(engine, engine.tokenize_prompt("the model is fast and"),
                                                  DraftParams(k=4))
    finally:
        engine.unload()
    assert statistics.median(drafting) > 0.1  # the drafter's time is a real share: charging it matters here
    assert ab / 2 <= reported <= ab * 2, f"reported {reported:.2f}x against an A/B of {ab:.2f}x"


@pytest.mark.slow
def test_the_reported_speedup_agrees_with_an_ab_with_prompt_lookup(smol: Engine) -> None:
    """Prompt lookup on SmolLM2 copying a text: the reported figure within a factor of 2 of the A/B.

    Not yet run under a mutation (see the family-pair test and tests/unit/engine/test_stats.py)."""
    from outrider.engine.params import ChatMessage

    text = ("The lighthouse stood on a rock at the edge of the bay. Every evening the keeper climbed the spiral "
            "stairs, trimmed the wick, wound the clockwork that turned the lens, and wrote the weather in a book.")
    prompt = smol.tokenize_chat([ChatMessage("user", "Repeat this text exactly, word for word:\n\n" + text)])
    ab, reported, _ = _ab_and_reported(smol, prompt, DraftParams(k=8))
    assert ab / 2 <= reported <= ab * 2, f"reported {reported:.2f}x against an A/B of {ab:.2f}x"
