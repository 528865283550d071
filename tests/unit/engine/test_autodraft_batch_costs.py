"""Automatic k on costs shaped like a hybrid target's on a CPU, and on an MTP head's cheap scoring.

The numbers are the quiet measurements of bench_mtp.py's generated 8 x 768 ``qwen35`` + NextN target (2 CPU
threads): one token 3.9 ms, a batch of 2 tokens 7.5 ms, of 4 8.3 ms, of 9 14.5 ms (a one-token pass takes
another path than a batch), and 0.74 ms per drafted MTP token.
"""

from __future__ import annotations

import json

import pytest

from outrider.engine.autodraft import (
    LOAD_MOVED,
    SCORING_SHARE,
    SHADOW_MAX,
    SHADOW_START,
    STALE_AFTER,
    STALE_LONGEST,
    WINDOW,
    AutoDraftLength,
    CostModel,
)

ONE, TWO, FOUR, NINE = 0.0039, 0.0075, 0.0083, 0.0145
DRAFT = 0.00074


def test_one_tokens_cost_does_not_bend_the_line_of_batches() -> None:
    """Plain passes and depth-1 probes timed (batches 1 and 2): the line through them rose 3.6 ms per token and
    read 14.7 ms for a batch of 4 (measured: 8.3), so no depth paid at acceptance 0.85 and automatic depth stayed
    plain on the hybrid where depth 3 paid 1.1x. Fitted through the batches alone (the prior slope through the one
    batched size), a batch of 4 reads under 10 ms and depth 3-4 pays.

    Breaking it (``_batch_line`` replaced by the plain ``_fit`` again): verify_cost(4) is 14.7 ms and best_k 0."""
    m = CostModel(k_max=8)
    for _ in range(15):
        m.observe(batch=1, verify_s=ONE, drafted=0, accepted=0, draft_s=0.0)
    for _ in range(5):
        m.observe(batch=2, verify_s=TWO, drafted=1, accepted=1, draft_s=DRAFT)
    four = m.verify_cost(4)
    assert four is not None and FOUR * 0.9 <= four <= 0.010
    assert (m.best_k(0.85) or 0) >= 2
    assert m.best_k(0.5) == 0  # a poor head still does not pay


def test_two_batched_sizes_give_the_slope_of_batches() -> None:
    """Batches of 2 and 9 measured: the sizes between are read off the line through them, not through one token."""
    m = CostModel(k_max=8)
    for batch, cost in ((1, ONE), (2, TWO), (9, NINE)):
        for _ in range(5):
            m.observe(batch=batch, verify_s=cost, drafted=batch - 1, accepted=0, draft_s=DRAFT * (batch - 1))
    assert m.verify_cost(4) == pytest.approx(TWO + 2 * (NINE - TWO) / 7, rel=1e-6)
    assert m.verify_cost(1) == pytest.approx(ONE)


def test_a_cheap_scoring_keeps_watching_a_head_close_to_paying() -> None:
    """An MTP head scored at 0.65 while plain (break-even on these costs is about 0.8): with ``score_first`` (its
    scoring feeds the cells the next draft needs anyway) it is scored again after SHADOW_START tokens, so a
    stretch where it is right every time is seen at once; a draft model's scoring (a batched pass of its own)
    doubles its interval as before, and a head scored at 0.05 doubles it with either.

    Breaking it (no margin for ``score_first``): the 0.65 head was scored every 128 tokens on the hybrid target,
    and automatic depth stayed plain for 95 % of its steps (bench_mtp.py)."""
    def scored(score_first: bool, hits: int) -> int:
        policy = AutoDraftLength(k_max=8, score_first=score_first)
        for i in range(10):  # drafts kept whole or not at all: no falloff along a draft (``CostModel.falloff``)
            policy.observe(batch=1, verify_s=ONE, drafted=0, accepted=0, draft_s=0.0)
            policy.observe(batch=4, verify_s=FOUR, drafted=3, accepted=3 * (i % 2), draft_s=3 * DRAFT)
        for _ in range(6):
            policy.observe_shadow(hits, 16)
        return policy.shadow_interval

    assert scored(True, 10) == SHADOW_START  # 10 of 16: 0.63
    assert scored(False, 10) > SHADOW_START
    assert scored(True, 1) == SHADOW_MAX


@pytest.mark.parametrize(("scoring_s", "plain_s"), [(0.0006, 0.0033), (0.0021, 0.0042), (0.02, 0.0042)])
def test_scorings_cost_at_most_their_share_of_the_plain_passes(scoring_s: float, plain_s: float) -> None:
    """A head close to paying is scored every SHADOW_START plain steps while a scoring is cheap next to a pass
    (quiet, on the hybrid bench model: 0.6 ms against 3.3 ms); where it is dear (one thread beside a CPU-bound
    process: 2.1 ms against 4.2 ms) the interval grows until the scorings cost at most SCORING_SHARE of the plain
    passes they come between — and no more than that, nor past SHADOW_MAX. The head's acceptance and costs are
    the same in every case: only the scoring's price moves the interval.

    Breaking it (``_scoring_floor`` returning SHADOW_START): under load the head was scored every 4 plain steps,
    9 % of its 24-token replies' time (bench_mtp_steps.py --burner)."""
    policy = AutoDraftLength(k_max=8, score_first=True)
    for i in range(10):
        policy.observe(batch=1, verify_s=plain_s, drafted=0, accepted=0, draft_s=0.0)
        policy.observe(batch=4, verify_s=plain_s * FOUR / ONE, drafted=3, accepted=3 * (i % 2), draft_s=3 * DRAFT)
    for _ in range(6):
        policy.observe_shadow(10, 16, seconds=scoring_s)
    interval = policy.shadow_interval
    share = scoring_s / (interval * plain_s)
    assert interval <= SHADOW_MAX
    if scoring_s / plain_s <= SCORING_SHARE * SHADOW_START:
        assert interval == SHADOW_START
    elif interval < SHADOW_MAX:
        assert share <= SCORING_SHARE < scoring_s / ((interval - 1) * plain_s)  # the least interval that holds it
    else:
        assert share > SCORING_SHARE


def test_a_scored_first_cold_start_drafts_only_what_could_pay() -> None:
    """``score_first``: no draft before the head was scored; scored 0 of 4 it stays plain (no cost measured: the
    prior line's ratio alone decides, with drafting taken as free); scored 4 of 4 it drafts k_start."""
    for hits, expect in ((0, 0), (4, 4)):
        policy = AutoDraftLength(k_max=8, score_first=True)
        policy.start_reply()
        assert policy.choose() == 0
        for _ in range(4):
            policy.observe(batch=1, verify_s=ONE, drafted=0, accepted=0, draft_s=0.0)
        assert policy.choose() == 0 and policy.wants_shadow
        policy.observe_shadow(hits, 4)
        assert policy.choose() == expect


# One thread beside a CPU-bound process (bench_mtp_steps.py --burner, the hybrid 8 x 768 target): a one-token pass
# 4.2 ms, every batch of 2 to 5 tokens 10.5-13 ms — only a long draft kept nearly whole can pay.
BUSY_ONE, BUSY_THREE = 0.0042, 0.0110


def _busy_policy(batch: int, batch_s: float, draft_s: float, accepted: int) -> AutoDraftLength:
    """An MTP policy that timed 15 plain passes and 5 drafts of ``batch - 1`` tokens (``accepted`` kept each)."""
    policy = AutoDraftLength(k_max=16, score_first=True, k_start=2)
    for _ in range(15):
        policy.observe(batch=1, verify_s=BUSY_ONE, drafted=0, accepted=0, draft_s=0.0)
    for _ in range(5):
        policy.observe(batch=batch, verify_s=batch_s, drafted=batch - 1, accepted=accepted,
                       draft_s=(batch - 1) * draft_s)
    return policy


def test_the_warm_up_ends_with_the_reply_of_the_first_draft() -> None:
    """A policy that drafted in one reply (3 drafts of 2, accepted 0.7 of the time) and whose costs say no depth
    pays at its acceptance: within that reply it is still warming up (the shortest draft that could pay if kept
    whole, 3 on these costs — not 2, which could not even then); the next reply does not warm up again: plain.

    Breaking it (the warm-up open until WARMUP_STEPS drafts, whatever the replies): the next reply drafted 3."""
    policy = _busy_policy(3, BUSY_THREE, 0.001, accepted=1)
    policy.model.restart_acceptance(7, 10, prior=0.0)
    assert (policy.model.best_k() or 0) == 0
    assert policy.choose() == 3
    policy.start_reply()
    policy.observe(batch=1, verify_s=BUSY_ONE, drafted=0, accepted=0, draft_s=0.0)  # the reply's untimed first step
    policy.model.restart_acceptance(7, 10, prior=0.0)
    assert policy.choose() == 0


def test_batch_costs_that_keep_a_head_plain_are_kept_while_the_load_holds() -> None:
    """The busy CPU's costs (a batch of 3 at 2.6x one token) keep a head scored at 0.5 plain. Every batched size
    goes unmeasured for STALE_AFTER plain steps and more: while one token's cost stays where it was, they are kept
    (nothing drafted in 400 plain steps); once it moves by LOAD_MOVED (the load ended), or after STALE_LONGEST
    steps in any case, they are forgotten and read off the prior line again, to be re-measured.

    Breaking it (stale after STALE_AFTER whatever the load, as before): the line through one token's cost alone
    read a batch of 3 at 1.5x one token, and the head drafted again after STALE_AFTER plain steps, at a loss."""
    policy = _busy_policy(3, BUSY_THREE, 0.001, accepted=1)
    policy.start_reply()  # (a later reply: no warm-up)
    drafted = 0
    for step in range(400):
        k = policy.choose()
        drafted += k
        policy.observe(batch=k + 1, verify_s=BUSY_ONE if k == 0 else BUSY_THREE, drafted=k, accepted=0,
                       draft_s=0.001 * k)
        if k == 0 and step % policy.shadow_interval == 0:
            policy.observe_shadow(2, 4)
    assert drafted == 0
    m = policy.model
    assert m.verify_cost(3) == pytest.approx(BUSY_THREE)
    # A reload keeps them too: the snapshot carries one token's cost when each size was timed.
    restored = AutoDraftLength.restore(json.loads(json.dumps(policy.snapshot())))
    assert restored.model.verify_cost(3) == pytest.approx(BUSY_THREE)
    for _ in range(STALE_LONGEST - 400):
        m.observe(batch=1, verify_s=BUSY_ONE, drafted=0, accepted=0, draft_s=0.0)
    assert m.verify_cost(3) == pytest.approx(BUSY_THREE)
    m.observe(batch=1, verify_s=BUSY_ONE, drafted=0, accepted=0, draft_s=0.0)
    assert m.verify_cost(3) < 0.6 * BUSY_THREE  # forgotten after STALE_LONGEST

    quieted = _busy_policy(3, BUSY_THREE, 0.001, accepted=1).model
    for _ in range(STALE_AFTER + 1):
        quieted.observe(batch=1, verify_s=BUSY_ONE, drafted=0, accepted=0, draft_s=0.0)
    assert quieted.verify_cost(3) == pytest.approx(BUSY_THREE)
    for _ in range(WINDOW):  # the load ends: one token's cost falls by more than LOAD_MOVED
        quieted.observe(batch=1, verify_s=BUSY_ONE / (1.1 * LOAD_MOVED), drafted=0, accepted=0, draft_s=0.0)
    assert quieted.verify_cost(3) < 0.6 * BUSY_THREE
