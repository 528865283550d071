"""Automatic k with drafts that cost a catch-up once and a guess per token (``CostModel.draft_line``).

Shaped like the 8 x 768 hybrid + NextN target of bench_mtp.py on a CPU, measured live: a draft of k tokens costs
about 0.9 ms (the head's catch-up on the last pass's cells, which also gives its first guess) plus 0.5 ms per
chained guess — 1.4 ms for 1, 2.1 for 2, 3.1 for 4, 3.7 for 6; one pass of n tokens 4.4 ms for 1 token, then
6.0 ms for 2 and 0.3 ms a token more.
"""

from __future__ import annotations

import json

import pytest

from outrider.engine.autodraft import MIN_SAMPLES, AutoDraftLength, CostModel, expected_tokens_per_pass

CATCH_UP, PER_GUESS = 0.0009, 0.0005  # seconds


def draft_seconds(k: int) -> float:
    return CATCH_UP + PER_GUESS * k


def verify_seconds(n: int) -> float:
    return 0.0044 if n == 1 else 0.0060 + 0.0003 * (n - 2)


def model_with_drafts(lengths: list[int], rounds: int = 4) -> CostModel:
    """A cost model fed plain passes and, ``rounds`` times, a draft of each of ``lengths`` (every token kept)."""
    m = CostModel(k_max=8)
    for _ in range(rounds):
        for k in lengths:
            m.observe(batch=1, verify_s=verify_seconds(1), drafted=0, accepted=0, draft_s=0.0)
            m.observe(batch=k + 1, verify_s=verify_seconds(k + 1), drafted=k, accepted=k, draft_s=draft_seconds(k))
    return m


def true_best_k(a: float, k_max: int) -> int:
    """argmax over k of E(k) / (draft(k) + verify(k + 1)) on the true costs above (k = 0: plain)."""
    rates = [1.0 / verify_seconds(1)] + [
        expected_tokens_per_pass(a, k) / (draft_seconds(k) + verify_seconds(k + 1)) for k in range(1, k_max + 1)]
    return max(range(k_max + 1), key=lambda k: (rates[k], k))


def test_drafts_of_two_lengths_give_the_catch_up_and_the_cost_of_a_guess() -> None:
    m = model_with_drafts([2, 6])
    line = m.draft_line()
    assert line is not None
    assert line[0] == pytest.approx(CATCH_UP) and line[1] == pytest.approx(PER_GUESS)
    # A length never drafted is read off the line, not at one cost per token.
    assert m.draft_cost(4) == pytest.approx(draft_seconds(4))
    assert m.rate(4, acceptance=0.8) == pytest.approx(
        expected_tokens_per_pass(0.8, 4) / (draft_seconds(4) + m.verify_cost(5)))  # type: ignore[operator]


def test_with_drafts_of_one_length_a_draft_costs_its_tokens_at_their_measured_price() -> None:
    m = model_with_drafts([2])
    assert m.draft_line() is None
    assert m.draft_cost(6) == pytest.approx(6 * draft_seconds(2) / 2)


@pytest.mark.parametrize("a", [0.55, 0.7, 0.8, 0.9])
def test_the_depth_chosen_is_the_one_that_pays_on_the_true_costs(a: float) -> None:
    """Drafts of 1, 2 and 4 timed: the depth best_k chooses at acceptance ``a`` is the true best (worked out here
    from the true costs, not by the cost model). At one cost per token (``draft_line`` broken to None), the lower
    median of 1.4, 0.95 and 0.73 ms prices every token at 0.95 ms: at 0.7 it chooses 3 where 4 pays, at 0.8 4
    where 5, at 0.9 6 where 8 — those three cases fail."""
    m = model_with_drafts([1, 2, 4])
    assert m.best_k(acceptance=a) == true_best_k(a, m.k_max)


def test_a_line_that_falls_is_not_believed() -> None:
    """Noise that timed drafts of 6 cheaper than drafts of 2 would make every longer draft cheaper: one cost per
    token is kept instead."""
    m = CostModel(k_max=8)
    for _ in range(MIN_SAMPLES):
        m.observe(batch=3, verify_s=verify_seconds(3), drafted=2, accepted=2, draft_s=0.0030)
        m.observe(batch=7, verify_s=verify_seconds(7), drafted=6, accepted=6, draft_s=0.0025)
    assert m.draft_line() is None
    assert m.draft_cost(6) == pytest.approx(6 * m.draft_per_token.value)  # type: ignore[operator]


def test_the_drafts_per_length_travel_in_a_snapshot() -> None:
    policy = AutoDraftLength(k_max=8)
    for k in (2, 6, 2, 6, 2, 6):
        policy.observe(batch=k + 1, verify_s=verify_seconds(k + 1), drafted=k, accepted=k, draft_s=draft_seconds(k))
    restored = AutoDraftLength.restore(json.loads(json.dumps(policy.snapshot())))
    assert restored.model.draft_line() == policy.model.draft_line() is not None
    old = policy.snapshot()
    del old["draft_by_length"]  # saved before drafts were timed per length: restored without them
    assert AutoDraftLength.restore(old).model.draft_line() is None


@pytest.mark.parametrize(("entry", "message"), [
    ({"0": [0.001]}, "draft length '0' is not between 1 and 8"),
    ({"03": [0.001]}, "draft length '03' is not between 1 and 8"),  # (read as 3, it would be missing as "3")
    ({"3": [-0.001]}, "draft_by_length.3 must be a list of at most"),
    ({"3": "fast"}, "draft_by_length.3 must be a list of at most"),
])
def test_a_damaged_draft_timing_in_a_snapshot_is_refused_by_name(entry: dict[str, object], message: str) -> None:
    snapshot = AutoDraftLength(k_max=8).snapshot()
    snapshot["draft_by_length"] = entry
    with pytest.raises(ValueError, match=message):
        AutoDraftLength.restore(snapshot)
