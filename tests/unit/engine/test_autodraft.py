"""The automatic draft length follows the cost model."""

from __future__ import annotations

import pytest

from outrider.engine.autodraft import AutoDraftLength, CostModel, expected_tokens_per_pass


def test_expected_tokens_formula() -> None:
    assert expected_tokens_per_pass(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert expected_tokens_per_pass(1.0, 4) == 5
    assert expected_tokens_per_pass(0.0, 8) == 1
    assert expected_tokens_per_pass(0.5, 0) == 1


def _feed(
    policy: AutoDraftLength, *, acceptance: float, c1: float, slope: float, c_draft: float, steps: int
) -> list[int]:
    chosen = []
    for _ in range(steps):
        k = policy.choose()
        chosen.append(k)
        accepted = round(acceptance * k)
        policy.observe(batch=k + 1, verify_s=c1 * (1 + slope * k), drafted=k, accepted=accepted, draft_s=c_draft * k)
    return chosen


def test_drops_to_plain_when_nothing_is_accepted_and_probes_rarely() -> None:
    policy = AutoDraftLength(k_max=8)
    chosen = _feed(policy, acceptance=0.0, c1=0.01, slope=0.3, c_draft=0.002, steps=600)
    late = chosen[100:]
    assert sum(1 for k in late if k > 0) / len(late) < 0.02


def test_long_drafts_when_verify_is_flat_and_acceptance_high() -> None:
    policy = AutoDraftLength(k_max=16)
    chosen = _feed(policy, acceptance=0.95, c1=0.01, slope=0.01, c_draft=0.0005, steps=200)
    assert sorted(chosen[50:])[len(chosen[50:]) // 2] >= 6


def test_short_drafts_when_verify_cost_grows() -> None:
    policy = AutoDraftLength(k_max=16)
    chosen = _feed(policy, acceptance=0.6, c1=0.01, slope=0.3, c_draft=0.001, steps=200)
    median = sorted(chosen[50:])[len(chosen[50:]) // 2]
    assert 1 <= median <= 4


def test_unmeasured_batch_sizes_are_extrapolated_from_measurements() -> None:
    m = CostModel(k_max=8)
    m.observe(batch=1, verify_s=0.010, drafted=0, accepted=0, draft_s=0)
    m.observe(batch=3, verify_s=0.014, drafted=2, accepted=1, draft_s=0.001)
    assert m.verify_cost(5) == pytest.approx(0.018)
