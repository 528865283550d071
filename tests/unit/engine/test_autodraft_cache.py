"""The cost model's caches (engine/autodraft.py, ``CostModel.observe``) give what a recomputation gives.

A plain step that changes no estimate keeps the verify-cost caches (a switched-off chain member recomputed them
every step); this checks, over long random runs of plain steps, drafts and stale batch sizes, that every answer
equals that of the same model with its caches cleared before asking."""

from __future__ import annotations

import random

from outrider.engine.autodraft import STALE_AFTER, CostModel


def _fresh_answers(model: CostModel) -> tuple[object, ...]:
    model._line_cache = model._estimates_cache = model._costs_cache = None
    return _answers(model)


def _answers(model: CostModel) -> tuple[object, ...]:
    return (model.best_k(), model.best_k(0.9), model._verify_costs(), model._verify_line())


def test_kept_caches_answer_as_a_recomputation_would() -> None:
    """Steps of batch 1 mostly (k = 0), with drafts now and then, timings drawn from a few values so that lower
    medians often stay put, and gaps longer than STALE_AFTER so that sizes go stale. (Keeping the caches without
    the staleness check — ``_none_turned_stale`` always true — answered with a stale size's cost: the assert
    failed at the observation where it went stale; keeping them when the batch's count still grew failed too.)"""
    rng = random.Random(3)
    for run in range(20):
        cached, shadow = CostModel(k_max=8), CostModel(k_max=8)
        kept = 0
        for step in range(400):
            drafting = rng.random() < (0.3 if step < 40 or (step // (STALE_AFTER + 20)) % 2 else 0.02)
            batch = rng.randint(2, 9) if drafting else 1
            verify_s = rng.choice([0.010, 0.011, 0.012, 0.03]) * (1 + 0.1 * (batch - 1))
            drafted = batch - 1
            accepted = rng.randint(0, drafted)
            for model in (cached, shadow):
                model.observe(batch=batch, verify_s=verify_s, drafted=drafted, accepted=accepted,
                              draft_s=0.0002 * drafted, timed=step % 50 != 0)
            kept += cached._costs_cache is not None
            _answers(cached)  # fill the caches, as choose() does every step
            assert _answers(cached) == _fresh_answers(shadow), (run, step)
        assert kept > 100  # the caches were kept on many steps: the comparison tested something
