"""bench_mtp_replay.py's capture: the head's guesses it records are what a live reply's drafts keep.

For each reply position the capture records how many of the head's chained guesses from there match the greedy
reply; a replay then keeps min(match, k) of a draft of k made there. Checked against live replies at fixed depths 1
to 3 on the generated dense MTP target (``support/mtp_gguf.py``): every draft the decoder made, at the position it
made it, kept exactly what the capture says. And a replay at a fixed depth drafts where the live reply did, on the
same schedule of forced plain steps (no load moving: the replay's timings are held still). Broken on purpose (the
capture recording the first step's drafted count instead of its kept count): the kept counts differ, the test fails.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams
from outrider.engine.speculative import StepEvent
from outrider.engine.stats import PlainRateMeter
from support.mtp_gguf import make_mtp_models

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_mtp_replay import capture_engines, replay

TEXTS = ["the model is fast", "hello world def return"]
TOKENS = 24


def _live_steps(engine: Engine, ids: list[int], depth: int) -> list[tuple[int, int, int]]:
    """(reply position, tokens drafted, tokens kept) per step of a live greedy reply at ``depth``."""
    engine._decoder_or_raise().reset()
    steps: list[tuple[int, int, int]] = []
    position = 0
    for event in engine.generate(ids, max_tokens=TOKENS, draft=DraftParams(k=depth), ignore_eos=True):
        if isinstance(event, StepEvent) and event.tokens:
            kept = sum(event.drafted)
            steps.append((position, event.k, kept))
            position += len(event.tokens)
    return steps


def test_the_captured_guesses_are_what_live_drafts_keep(backend: Backend, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The replay's timings are held still, so no load moves and no plain run is forced by one: the live replies
    # are held to the same schedule (a busy test machine would otherwise add runs at random).
    monkeypatch.setattr(PlainRateMeter, "_load_moved", lambda self: False)
    models = make_mtp_models(tmp_path / "mtp")
    context = ContextSettings(n_ctx=256)
    engine, plain_engine = Engine(backend), Engine(backend)
    engine.load(PairSpec(target=str(models.target), mtp=True, context=context))
    plain_engine.load(PairSpec(target=str(models.target), context=context))
    try:
        captured, costs = capture_engines(engine, plain_engine, TEXTS, TOKENS)
        live = {(c.text, depth): _live_steps(engine, engine.tokenize_prompt(c.text), depth)
                for c in captured for depth in (1, 2, 3)}
    finally:
        engine.unload()
        plain_engine.unload()
    assert all(len(c.match) == TOKENS for c in captured)
    assert all(c.prompt_score[1] > 0 for c in captured)
    assert costs.plain > 0 and all(s > 0 for s in costs.verify.values())
    # Drafts timed per length (every fixed depth of the capture drafted), and passes after one of another size.
    assert set(costs.draft) >= {1, 2, 3} and all(s > 0 for s in costs.draft.values())
    assert set(costs.switched) >= {1, 2, 3, 4} and costs.draft_at_load > 0
    kept = 0
    for c in captured:
        for depth in (1, 2, 3):
            steps = live[(c.text, depth)]
            drafts = [(p, k, a) for p, k, a in steps if k > 0]
            assert drafts, (c.text, depth)
            for p, k, a in drafts:
                assert a == min(c.match[p], k), (c.text, depth, p, k, a, c.match)
            kept += sum(a for _, _, a in drafts)
            replayed: list[tuple[int, int, int]] = []
            replay(c, costs, f"depth {depth}", random.Random(0), 0.0, 0.0, steps=replayed)
            assert replayed == steps, (c.text, depth)
    assert kept > 0, "no draft kept a token: the head never agreed, nothing was checked"
