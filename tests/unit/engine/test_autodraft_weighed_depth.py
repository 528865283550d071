"""An MTP head's draft grows one position past where its recent drafts reached (``CostModel.weighed_depth``).

The costs are flat enough that, at the acceptance a run of kept drafts leaves, the longest draft looks best:
one pass of n tokens 10 ms + 0.1 ms a token, 0.1 ms a drafted token. Positions no draft reached are priced by
extrapolation only, so the draft made now (``AutoDraftLength.choose``) stops one past the deepest position reached
REACHED_ENOUGH times; asked what a depth could yield (``best_k`` without ``longest``: would a probe, a warm-up or
waking pay), every depth is weighed — under load only a long draft may pay, and no draft could reach it otherwise.
"""

from __future__ import annotations

import json

from outrider.engine.autodraft import FALLOFF_DECAY, REACHED_ENOUGH, AutoDraftLength, CostModel


def flat_costs(m: CostModel) -> None:
    """Every batch size 1..k_max+1 timed a few times (no draft counted)."""
    for _ in range(4):
        for n in range(1, m.k_max + 2):
            m.observe(batch=n, verify_s=0.010 + 0.0001 * (n - 1), drafted=0, accepted=0, draft_s=0.0)


def kept_drafts(m: CostModel, k: int, times: int) -> None:
    for _ in range(times):
        m.observe(batch=k + 1, verify_s=0.010 + 0.0001 * k, drafted=k, accepted=k, draft_s=0.0001 * k)


def head() -> AutoDraftLength:
    """An MTP head's policy (positions weighed) with every batch size timed."""
    policy = AutoDraftLength(k_max=8, score_first=True)
    flat_costs(policy.model)
    return policy


def test_a_head_whose_drafts_of_2_were_all_kept_drafts_3_then_grows_as_drafts_reach_deeper() -> None:
    policy = head()
    m = policy.model
    assert m.weighed_depth == 8  # (no draft counted: nothing to go on but the costs)
    kept_drafts(m, 2, 10)
    assert (m.acceptance or 0) > 0.9
    assert m.best_k() == 8  # what a depth could yield: every depth weighed
    assert policy.choose() == 3
    kept_drafts(m, 3, 1)
    assert policy.choose() == 4
    kept_drafts(m, 4, 1)
    assert policy.choose() == 5


def test_a_position_reached_long_ago_no_longer_counts() -> None:
    """Position 5 reached once, then 40 drafts of 2: its decayed count is under REACHED_ENOUGH, the depth 3."""
    policy = head()
    kept_drafts(policy.model, 5, 1)
    kept_drafts(policy.model, 2, 40)
    assert FALLOFF_DECAY ** 40 < REACHED_ENOUGH
    assert policy.choose() == 3


def test_a_draft_model_is_not_held_to_the_positions_reached() -> None:
    """A draft model's positions are not weighed (its acceptance is one number per token): all 8 are priced."""
    policy = AutoDraftLength(k_max=8)
    flat_costs(policy.model)
    kept_drafts(policy.model, 2, 10)
    assert policy.choose() == 8


def test_the_depth_weighed_is_restored_from_a_snapshot() -> None:
    policy = head()
    kept_drafts(policy.model, 3, 10)
    restored = AutoDraftLength.restore(json.loads(json.dumps(policy.snapshot())))
    assert restored.model.weighed_depth == policy.model.weighed_depth == 4
    assert restored.choose() == policy.choose() == 4
