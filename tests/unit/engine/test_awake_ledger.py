"""What keeping an MTP head awake saved (``AwakeLedger``), and the policy's sleep that follows from it.

Costs are shaped like bench_mtp.py's generated 8 x 768 targets on a CPU (seconds), as in test_autodraft_falloff.py:
on one thread beside a CPU-bound process a one-token pass takes 3.6 ms, a batch of 2 9.9 ms and +0.94 ms a token
after that; quiet on two threads 3.3 ms, 5.9 ms and +0.45 ms.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from outrider.engine.autodraft import SLEEP_LONGEST, SLEEP_MAX, AutoDraftLength
from outrider.engine.awake_ledger import (
    CONSISTENT_REPLIES,
    LEDGER_HALF_LIFE,
    LEDGER_MIN_TOKENS,
    RECENT_REPLIES,
    AwakeLedger,
)
from support.policy_replies import HeadCosts, simulate_reply


def quiet(n: int) -> float:
    return 0.0033 if n == 1 else 0.0059 + 0.00045 * (n - 2)


def loaded(n: int) -> float:
    return 0.0036 if n == 1 else 0.0099 + 0.00094 * (n - 2)


FOLLOW_S = 0.1e-3  # an awake head's copy of a one-token pass's hidden state (bench_mtp_steps.py: 0.08-0.10 ms)
SCORING_S = 1.2e-3  # a scoring of 4 guesses on one thread
PROMPT_S = 2e-3  # the head's work on a prompt
HYBRID = (0.72, 0.76, 0.82, 0.82, 0.82, 0.82, 0.82, 0.82)  # the hybrid's head: kept, given every guess before
AGREEING = (0.97,) * 8


def awake_reply(policy: AutoDraftLength, tokens: int, kept: tuple[float, ...], cost: Callable[[int], float],
                c_draft: float, rng: random.Random) -> float:
    """One awake reply of ``tokens`` tokens as the decoder runs it (the policy chooses each k; a draft is kept up
    to its first rejection drawn from ``kept``; every ``shadow_interval`` plain steps a scoring), with the step
    costs above. Returns the seconds it saved against plain decoding with the head asleep, tallied here from
    the simulated costs (a reference independent of the ledger)."""
    costs = HeadCosts(cost, c_draft, follow_s=FOLLOW_S, scoring_s=SCORING_S, prompt_s=PROMPT_S)
    return simulate_reply(policy, tokens, kept, costs, rng).saved


def warmed(cost: Callable[[int], float], c_draft: float) -> AutoDraftLength:
    """An MTP head's policy whose costs are measured (a few plain passes and drafts of 1-3)."""
    policy = AutoDraftLength(k_max=8, score_first=True, k_start=2)
    policy.start_reply()
    for k in (1, 2, 3, 1, 2, 3):
        policy.observe(batch=1, verify_s=cost(1), drafted=0, accepted=0, draft_s=0.0, follow_s=FOLLOW_S)
        policy.observe(batch=k + 1, verify_s=cost(k + 1), drafted=k, accepted=k, draft_s=c_draft * k,
                       follow_s=FOLLOW_S)
    policy.ledger = AwakeLedger()  # what is tallied below starts here
    return policy


def test_the_ledger_by_hand() -> None:
    ledger = AwakeLedger()
    ledger.step(tokens=1, bare_pass_s=3.5e-3, cost_s=3.6e-3)
    ledger.step(tokens=3, bare_pass_s=3.5e-3, cost_s=9.0e-3)
    ledger.charge(0.5e-3)
    assert ledger.totals() == pytest.approx((-0.1e-3 + 1.5e-3 - 0.5e-3, 14e-3, 4))
    ledger.close_reply()
    assert (ledger.saved_s, ledger.plain_s, ledger.tokens) == pytest.approx((0.9e-3, 14e-3, 4))
    # A reply of LEDGER_HALF_LIFE tokens weighs the replies before it by half.
    ledger.step(tokens=LEDGER_HALF_LIFE, bare_pass_s=1e-3, cost_s=LEDGER_HALF_LIFE * 1e-3)
    assert ledger.totals() == pytest.approx((0.45e-3, 7e-3 + LEDGER_HALF_LIFE * 1e-3, 2 + LEDGER_HALF_LIFE))
    ledger.close_reply()
    ledger.close_reply()  # an empty reply (asleep, or nothing timed) changes nothing
    assert ledger.tokens == pytest.approx(2 + LEDGER_HALF_LIFE)
    assert not AwakeLedger().waking_does_not_pay()  # no evidence: no verdict


def _ledger_of(shares: list[float], tokens: int = 24) -> AwakeLedger:
    """A ledger of replies of ``tokens`` tokens, each saving ``share`` of its plain-equivalent time."""
    ledger = AwakeLedger()
    for share in shares:
        ledger.step(tokens=tokens, bare_pass_s=1e-3, cost_s=tokens * 1e-3 * (1 - share))
        ledger.close_reply()
    return ledger


def test_replies_that_agree_decide_before_the_tokens_are_in_and_replies_that_disagree_do_not() -> None:
    """Fewer than LEDGER_MIN_TOKENS awake tokens: CONSISTENT_REPLIES replies that each lost alike put the head to
    sleep; the same with one that saved, or losses too unlike to agree, or too few replies, leave it awake (the
    verdict then waits for the tokens). Only the latest RECENT_REPLIES count, and the open reply counts with them."""
    losses = [-0.06, -0.08, -0.05, -0.07, -0.04, -0.06, -0.05, -0.08][:CONSISTENT_REPLIES]
    assert _ledger_of(losses).waking_does_not_pay()
    assert not _ledger_of(losses[1:]).waking_does_not_pay()  # too few
    assert not _ledger_of([*losses[:-2], 0.30, losses[-1]]).waking_does_not_pay()  # one saved: a prompt it drafts well
    unlike = [-0.01] * (CONSISTENT_REPLIES - 1) + [-0.60]  # the mean is not 2 errors below 0
    assert not _ledger_of(unlike).waking_does_not_pay()
    assert not _ledger_of([0.30] + [-0.05] * (RECENT_REPLIES - 1)).waking_does_not_pay()
    assert _ledger_of([0.30] + [-0.05] * RECENT_REPLIES).waking_does_not_pay()  # the saving one left the window
    open_reply = _ledger_of(losses[1:])
    open_reply.step(tokens=24, bare_pass_s=1e-3, cost_s=24 * 1e-3 * 1.05)
    assert open_reply.waking_does_not_pay()
    assert _ledger_of(losses[:2], tokens=LEDGER_MIN_TOKENS).waking_does_not_pay()  # and the tokens decide alone
    assert not _ledger_of([-0.06, 0.08, 0.10], tokens=LEDGER_MIN_TOKENS).waking_does_not_pay()


def test_an_awake_replys_savings_match_a_tally_of_its_steps() -> None:
    """The ledger against the simulation's own tally of the same steps (saved = tokens at a bare plain pass minus
    what each step, scoring and the prompt cost). A reply of 40 tokens: the ledger reads verify costs from the
    cost model, which reads a batch size left unmeasured for STALE_AFTER steps off the line through the others.

    Breaking it (a plain step not charged its copy of the hidden states): off by 0.1 ms a plain step."""
    policy = warmed(loaded, 0.00085)
    reference = awake_reply(policy, 40, HYBRID, loaded, 0.00085, random.Random(3))
    saved, plain, tokens = policy.ledger.totals()
    assert tokens == 40
    assert plain == pytest.approx(40 * (loaded(1) - FOLLOW_S))
    assert saved == pytest.approx(reference, abs=1e-6)


def test_under_load_a_head_that_saves_nothing_sleeps_once_the_evidence_is_in() -> None:
    """The hybrid's head under load: not even HOPELESS_ACCEPTANCE is out of reach (a draft of 8 kept 0.95 would
    pay), so only what its awake replies saved can put it to sleep. Replies of 24 tokens, each of which loses: it
    sleeps once CONSISTENT_REPLIES of them are in, before LEDGER_MIN_TOKENS awake tokens.

    Breaking it (``waking_does_not_pay`` always False): it never sleeps and the last assertion fails; with the
    verdict left to LEDGER_MIN_TOKENS (``_consistently_losing`` always False), it is still awake then."""
    policy = warmed(loaded, 0.00085)
    assert not policy.sleeps_through_next_reply()
    rng = random.Random(5)
    for reply in range(1, CONSISTENT_REPLIES + 1):
        assert awake_reply(policy, 24, HYBRID, loaded, 0.00085, rng) < 0
        if reply < CONSISTENT_REPLIES:
            assert not policy.sleeps_through_next_reply()
    assert policy.ledger.totals()[2] < LEDGER_MIN_TOKENS
    snapshot = json.loads(json.dumps(policy.snapshot()))  # a reload keeps the latest replies
    assert policy.sleeps_through_next_reply()
    assert AutoDraftLength.restore(snapshot).sleeps_through_next_reply()
    with pytest.raises(ValueError, match="awake_recent"):
        AutoDraftLength.restore({**snapshot, "awake_recent": [[-0.001, 0.0]]})
    policy.start_reply()
    assert policy.should_rest() and policy.choose() == 0


def test_a_head_that_never_drafted_sleeps_on_its_ledger_too() -> None:
    """A fresh head given the busy CPU's costs at load (``seed_costs``): its first draft would not pay, so its
    replies never draft — they follow the target and score the head, and lose that. With no draft timed in a reply
    it still sleeps once CONSISTENT_REPLIES such replies are in (the hopeless test reads the costs timed at load).

    Breaking it (``sleeps_through_next_reply`` asking for a draft timed in a reply before any verdict, as before):
    it stayed awake, at 5-7 % of every 24-token reply under load (bench_mtp.py "hybrid agreeing")."""
    policy = AutoDraftLength(k_max=8, score_first=True, k_start=2)
    policy.seed_costs({n: [loaded(n)] * 3 for n in (1, 2, 3, 5)}, [0.00085] * 3)
    rng = random.Random(13)
    costs = HeadCosts(loaded, 0.00085, follow_s=FOLLOW_S, scoring_s=SCORING_S, prompt_s=PROMPT_S)
    for _ in range(CONSISTENT_REPLIES):
        assert not policy.sleeps_through_next_reply()
        simulated = simulate_reply(policy, 24, HYBRID, costs, rng, prompt_score=(8, 16))
        assert simulated.drafted == 0 and simulated.saved < 0
    assert policy.sleeps_through_next_reply()


def test_a_head_that_pays_stays_awake() -> None:
    """Quiet costs, a head kept 0.97 at every position: its replies save, and it never sleeps."""
    policy = warmed(quiet, 0.0004)
    rng = random.Random(7)
    for tokens in (24, 192) * 4:
        assert awake_reply(policy, tokens, AGREEING, quiet, 0.0004, rng) > 0
        assert not policy.sleeps_through_next_reply()
    saved, plain, _ = policy.ledger.totals()
    assert saved > 0.2 * plain


def asleep_reply(policy: AutoDraftLength, tokens: int, cost: float) -> None:
    policy.start_reply()
    for _ in range(tokens):
        assert policy.choose() == 0
        policy.observe(batch=1, verify_s=cost, drafted=0, accepted=0, draft_s=0.0)


def test_each_re_check_that_finds_it_should_sleep_on_doubles_the_sleep_and_a_moved_load_wakes_it() -> None:
    """Asleep for SLEEP_MAX plain steps, then one reply awake; when that re-check still finds the head should
    sleep, the next sleep is twice as long (up to SLEEP_LONGEST). A plain pass whose cost moved by a quarter since
    the head fell asleep wakes it at once; the re-check after that does not double the sleep."""
    policy = warmed(loaded, 0.00085)
    rng = random.Random(11)
    while policy.ledger.totals()[2] < LEDGER_MIN_TOKENS:
        awake_reply(policy, 192, HYBRID, loaded, 0.00085, rng)
    for sleep in (SLEEP_MAX, 2 * SLEEP_MAX, 4 * SLEEP_MAX):
        slept = 0
        while policy.sleeps_through_next_reply():
            asleep_reply(policy, 64, loaded(1))
            slept += 64
        assert slept == sleep
        restored = AutoDraftLength.restore(policy.snapshot())
        assert restored._sleep_for == policy._sleep_for and restored.ledger.totals() == policy.ledger.totals()
        awake_reply(policy, 24, HYBRID, loaded, 0.00085, rng)  # the re-check
    assert policy.sleeps_through_next_reply() and policy._sleep_for == 8 * SLEEP_MAX <= SLEEP_LONGEST
    asleep_reply(policy, 64, loaded(1) / 2)  # the load ended: a plain pass costs half
    assert not policy.sleeps_through_next_reply()
    awake_reply(policy, 24, HYBRID, loaded, 0.00085, rng)
    policy.sleeps_through_next_reply()
    assert policy._sleep_for == 8 * SLEEP_MAX


@pytest.mark.parametrize(("field", "value", "words"), [
    ("awake_plain", -1.0, "awake_plain must be a number from 0.0"),
    ("sleep_for", 3, f"sleep_for must be a whole number from {SLEEP_MAX}"),
    ("follow_single", [0.0], "follow_single must be a list"),
])
def test_a_snapshot_with_a_bad_ledger_is_refused_by_name(field: str, value: object, words: str) -> None:
    snapshot = warmed(loaded, 0.00085).snapshot()
    snapshot[field] = value
    with pytest.raises(ValueError, match=words):
        AutoDraftLength.restore(snapshot)


def test_a_reply_put_to_rest_counts_its_plain_time_without_recomputing_the_costs() -> None:
    """A fresh head scored 1 of 16 on its prompt (the "dense low" head) under load rests at once: its reply's steps
    save nothing, and the ledger counts their plain time as the simulation tallies it, while the cost model's
    estimates are not recomputed at each resting step (a new one-token timing moves the lower median: recomputed,
    they were 70 % of what automatic depth cost such a reply, 1.5 ms of 90 on a busy CPU).

    Breaking it (a resting step reading one token's cost afresh, as before): 17 recomputations in 24 steps."""
    policy = AutoDraftLength(k_max=8, score_first=True, k_start=2)
    policy.seed_costs({n: [loaded(n)] * 3 for n in (1, 2, 3, 5)}, [0.00085] * 3)
    recomputed = 0
    estimates = policy.model._estimates

    def counted() -> list[float | None]:
        nonlocal recomputed
        recomputed += policy.model._estimates_cache is None
        return estimates()

    policy.model._estimates = counted  # type: ignore[method-assign]
    costs = HeadCosts(loaded, 0.00085, follow_s=FOLLOW_S, scoring_s=SCORING_S, prompt_s=PROMPT_S)
    simulated = simulate_reply(policy, 24, (0.05,) * 8, costs, random.Random(2), prompt_score=(1, 16))
    assert simulated.drafted == 0 and policy.should_rest()
    saved, plain, tokens = policy.ledger.totals()
    assert tokens == 24
    assert plain == pytest.approx(24 * (loaded(1) - FOLLOW_S), rel=0.05)
    assert saved == pytest.approx(simulated.saved, abs=1e-6)
    assert recomputed <= 3
