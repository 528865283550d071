"""Automatic depth with an MTP head scored on the prompt, and a head put to rest: on recorded costs.

The costs are bench_mtp_steps.py's quiet measurements of the generated 8 x 768 dense ``glm4moe`` + NextN target
(2 CPU threads): a one-token pass 4.3 ms, a verify pass of 2 / 3 / 4 tokens 8.0 / 9.0 / 10.0 ms, 0.7 ms per
drafted MTP token. On them the agreeing head (scored 15 of 16 on a prompt, 0.79-0.91 accepted at depth 1-3) pays
at depth 3 and more; the noise head (1 of 16, 0.02-0.07 accepted) never does.
"""

from __future__ import annotations

import pytest

from outrider.engine.autodraft import (
    FIRST_DRAFT_MAX,
    MTP_K_START,
    PROMPT_BIAS_LIMIT,
    REST_TRIALS,
    SCORING_SHARE,
    SHADOW_START,
    AutoDraftLength,
    PromptCalibration,
    prior_best_k,
)

ONE = 0.0043
BATCH = {2: 0.0080, 3: 0.0090, 4: 0.0100, 5: 0.0110}
DRAFT = 0.0007


def _timed_plain(policy: AutoDraftLength, n: int) -> None:
    for _ in range(n):
        policy.observe(batch=1, verify_s=ONE, drafted=0, accepted=0, draft_s=0.0)


def test_a_head_scored_on_the_prompt_drafts_at_the_first_step_only_if_it_could_pay() -> None:
    """A cold start, nothing timed yet: the head scored 15 of 16 on the prompt drafts k_start at the reply's first
    step; scored 1 of 16, it does not draft. Before, a cold start decoded 5 plain tokens (the first step, the
    plain-rate run, the scoring step) before its first draft: 0.88-0.92x the best fixed depth on 24-token replies.

    Breaking it (``_first_draft_could_pay`` back to drafting whenever no cost is timed, without
    ``prior_best_k``): the 1-of-16 head drafted 4 tokens at the first step (choose() == 4, expected 0)."""
    for hits, expect in ((15, 4), (1, 0)):
        policy = AutoDraftLength(k_max=8, score_first=True)
        policy.start_reply()
        policy.observe_shadow(hits, 16)
        assert policy.choose() == expect, (hits, expect)


def test_the_prior_decides_by_acceptance_alone() -> None:
    """Drafting free and a verify of n tokens at 1 + 0.25 (n - 1) passes: below a = 0.25 no draft pays a pass."""
    assert prior_best_k(0.0, 8) == 0
    assert prior_best_k(0.2, 8) == 0
    assert prior_best_k(0.3, 8) >= 1
    assert prior_best_k(0.9, 8) >= 4


def test_after_the_first_draft_the_recorded_costs_pick_a_long_depth() -> None:
    """The agreeing head's first reply: scored on the prompt, it drafts at once; with the recorded costs timed
    (plain runs, verify passes of 4-5 tokens accepted 0.8 of the time), automatic depth stays at depth 3 or more
    — the best fixed depth on this model — and never falls to plain."""
    policy = AutoDraftLength(k_max=8, score_first=True)
    policy.start_reply()
    policy.observe_shadow(15, 16)
    k = policy.choose()
    assert k == 4
    policy.observe(batch=5, verify_s=BATCH[5], drafted=4, accepted=4, draft_s=4 * DRAFT)  # untimed: first step
    _timed_plain(policy, 3)
    chosen = []
    for step in range(12):
        k = policy.choose()
        chosen.append(k)
        batch = min(k + 1, 5)
        accepted = k if step % 5 else k - 1
        policy.observe(batch=batch, verify_s=BATCH.get(batch, BATCH[5]), drafted=k, accepted=accepted,
                       draft_s=k * DRAFT)
    assert min(chosen) >= 3, chosen


def test_a_head_scored_useless_rests_until_the_next_reply() -> None:
    """The noise head: scored 1 of 8 on the prompt and 0 of 4 and 1 of 8 while plain, it rests once REST_TRIALS
    guesses were scored (``should_rest``), and ``choose`` then stays 0 without consulting the cost model; the
    next reply starts awake. A head scored 10 of 16 (0.63, close to paying on these costs) never rests: it must be
    watched for the stretches where it is right every time.

    Breaking it (the REST_MARGIN condition left out of ``should_rest``): the 10-of-16 head rested after 64
    scored guesses (``assert not close.should_rest()`` failed); with the prior left out as above, the noise head
    drafted at its first step (``choose() == 4``)."""
    policy = AutoDraftLength(k_max=8, score_first=True)
    policy.start_reply()
    policy.observe_prompt(1, 8)
    assert policy.choose() == 0
    _timed_plain(policy, 4)
    assert not policy.should_rest()  # 8 scored: not yet conclusive
    policy.observe_shadow(0, 4)
    policy.observe_shadow(1, 8)
    assert REST_TRIALS <= 8 + 4 + 8
    assert policy.choose() == 0
    assert policy.should_rest()
    policy.model.observe_shadow(16, 16)  # even news it cannot hear while resting would not wake it this reply
    assert policy.choose() == 0 and policy.should_rest()
    policy.start_reply()
    assert not policy.should_rest()

    close = AutoDraftLength(k_max=8, score_first=True)
    close.start_reply()
    _timed_plain(close, 6)
    for _ in range(4):
        close.observe(batch=4, verify_s=BATCH[4], drafted=3, accepted=1, draft_s=3 * DRAFT)
    for _ in range(4):
        close.observe_shadow(10, 16)
        close.choose()
    assert close.last_choice == 0
    assert not close.should_rest()

    # A head scored 8 of 16 on its prompt is not conclusively useless on these costs: it does not rest. (With
    # REST_MARGIN 0.2 it rested: ``assert not half.should_rest()`` failed.)
    half = AutoDraftLength(k_max=8, score_first=True)
    half.start_reply()
    _timed_plain(half, 6)
    for _ in range(4):
        half.observe(batch=4, verify_s=BATCH[4], drafted=3, accepted=1, draft_s=3 * DRAFT)
    half.start_reply()
    half.observe_prompt(8, 16)
    assert half.choose() == 0
    assert not half.should_rest()


def test_a_warm_policy_judges_a_new_reply_by_its_prompt() -> None:
    """Carried from a reply where the head was accepted 0.9 of the time, a policy scores the next prompt at 2 of
    16: automatic depth starts that reply plain (the acceptance restarts from the prompt's score), and a prompt
    scored 15 of 16 after a poor reply starts it drafting. The costs are kept.

    Breaking it (``observe_prompt`` folding the score into the decaying window like a plain stretch): after the
    poor stretch, the 15-of-16 prompt started plain (``choose() >= 3`` failed: 0); the 2-of-16 case alone does
    not catch it (16 trials at once outweigh the window there too)."""
    policy = AutoDraftLength(k_max=8, score_first=True)
    policy.start_reply()
    _timed_plain(policy, 4)
    for _ in range(12):
        policy.observe(batch=4, verify_s=BATCH[4], drafted=3, accepted=3, draft_s=3 * DRAFT)
    assert policy.choose() >= 3
    policy.start_reply()
    policy.observe_prompt(2, 16)
    assert policy.choose() == 0
    for _ in range(6):
        policy.observe_shadow(1, 8)  # the reply bears its prompt's score out (``PromptCalibration``: no offset)
    policy.start_reply()
    policy.observe_prompt(15, 16)
    assert policy.choose() >= 3


def test_a_draft_model_is_never_put_to_rest() -> None:
    """Resting is for a drafter whose scoring is cheap and whose following costs every pass (``score_first``)."""
    policy = AutoDraftLength(k_max=8)
    policy.start_reply()
    _timed_plain(policy, 6)
    for _ in range(4):
        policy.observe_shadow(0, 16)
    assert not policy.should_rest()


# The generated 8 x 768 ``qwen35`` hybrid + NextN target, recorded quietly with bench_mtp_steps.py ("hybrid agreeing",
# 2 CPU threads): a one-token pass 4.9 ms, a verify pass of 2 / 3 / 4 / 5 tokens 7.5 / 7.9 / 8.3 / 9.0 ms (a
# one-token pass takes another, cheaper path: ``_batch_line``), 0.8 ms per drafted MTP token. Its head agrees with
# the target on 8-10 of 16 prompt positions and is accepted 0.79-0.82 at depth 1-2 in the replies: on these costs
# 0.5 pays no depth, 0.8 pays depth 2 and more.
HYBRID_ONE = 0.0049
HYBRID_BATCH = {2: 0.0075, 3: 0.0079, 4: 0.0083, 5: 0.0090}
HYBRID_DRAFT = 0.0008


def _hybrid_costs_timed(policy: AutoDraftLength) -> None:
    for _ in range(4):
        policy.observe(batch=1, verify_s=HYBRID_ONE, drafted=0, accepted=0, draft_s=0.0)
    for batch, cost in HYBRID_BATCH.items():
        for _ in range(3):
            policy.observe(batch=batch, verify_s=cost, drafted=batch - 1, accepted=0,
                           draft_s=(batch - 1) * HYBRID_DRAFT)


def _hybrid_reply(policy: AutoDraftLength, steps: int = 10) -> None:
    """A reply where the head is accepted 0.8 per token: drafts of 2, one in five cut after the first token."""
    for step in range(steps):
        accepted = 1 if step % 5 == 4 else 2
        policy.observe(batch=3, verify_s=HYBRID_BATCH[3], drafted=2, accepted=accepted, draft_s=2 * HYBRID_DRAFT)


def test_prompt_calibration_is_the_mean_gap_between_prompt_and_reply() -> None:
    """By hand: a prompt scored 8 of 16 reads (8.5 / 17) = 0.5; a reply with 16 right guesses and 4 wrong,
    16.5 / 21 = 0.786: offset 0.286, and the next prompt scored 8 of 16 reads 0.786. A second reply 0.1 under its
    prompt counts as 0 (only upwards): offset 0.286 / 2. A reply with fewer than PROMPT_TRIALS guesses of its own,
    or without a scored prompt, changes nothing; an offset past PROMPT_BIAS_LIMIT is cut there.

    Breaking it (the gap let below 0): the second offset read 0.093, not 0.143."""
    cal = PromptCalibration()
    assert cal.calibrated(8, 16) is None
    cal.prompt(8, 16)
    cal.reply(16, 4)
    cal.close_reply()
    first = 16.5 / 21 - 8.5 / 17
    assert cal.offset is not None and abs(cal.offset - first) < 1e-12
    assert abs((cal.calibrated(8, 16) or 0.0) - 16.5 / 21) < 1e-12

    cal.prompt(14, 16)  # 14.5 / 17
    hits = 40 * (14.5 / 17 - 0.1) - 0.5  # of 39 guesses: (hits + 0.5) / 40 is 0.1 under the prompt's share
    cal.reply(hits, 39 - hits)
    cal.close_reply()
    assert abs(cal.offset - 0.5 * first) < 1e-9

    before = cal.offset
    cal.prompt(2, 16)
    cal.reply(1, 3)  # 4 guesses: too few
    cal.close_reply()
    cal.reply(40, 0)  # no scored prompt
    cal.close_reply()
    assert cal.offset == before

    far = PromptCalibration()
    far.prompt(0, 16)
    far.reply(60, 0)
    far.close_reply()
    assert far.offset == PROMPT_BIAS_LIMIT
    assert far.calibrated(16, 16) == 1.0


def _after_one_hybrid_reply(next_hits: int) -> AutoDraftLength:
    """A warm policy on the hybrid's recorded costs: one reply after a prompt scored 8 of 16, then the next reply's
    prompt scored ``next_hits`` of 16."""
    policy = AutoDraftLength(k_max=8, score_first=True)
    _hybrid_costs_timed(policy)
    policy.start_reply()
    policy.observe_prompt(8, 16)
    _hybrid_reply(policy)
    policy.start_reply()
    policy.observe_prompt(next_hits, 16)
    return policy


def test_a_hybrid_head_after_one_reply_reads_its_next_prompt_at_its_reply_acceptance() -> None:
    """On the hybrid's recorded costs, a warm policy whose head scored 8 of 16 on a prompt and was then accepted 0.8
    in the reply starts the next reply, scored 8 of 16 again, at depth 2 or more; with the score taken as it stood
    (0.5 on these costs pays nothing) it started plain — the hybrid's 24-token replies ran at 0.84x the best fixed
    depth (bench_mtp_steps.py), 0.95-0.98x read through the calibration.

    Breaking it (``observe_prompt`` restarting from the raw score even when calibrated): ``choose()`` returned 0
    (expected >= 2)."""
    policy = _after_one_hybrid_reply(8)
    assert policy.choose() >= 2
    assert not policy.should_rest()

    # The raw score on the same costs, for contrast: plain.
    raw = AutoDraftLength(k_max=8, score_first=True)
    _hybrid_costs_timed(raw)
    raw.model.restart_acceptance(8, 16)
    assert raw.model.best_k() == 0


# The same hybrid, captured with bench_mtp_replay.py (2 CPU threads, quiet), as its replies time them: a one-token
# pass 4.42 ms, a verify pass of 2 / 3 / 5 tokens 6.02 / 6.56 / 8.93 ms, 0.73 ms per drafted token, 1.46 ms a scoring.
REPLAY_ONE = 0.00442
REPLAY_AT_LOAD = {1: [REPLAY_ONE] * 3, 2: [0.00602] * 3, 3: [0.00656] * 3, 5: [0.00893] * 3}
REPLAY_DRAFT = 0.00073


def test_before_any_calibration_a_prompt_that_could_pay_drafts_and_does_not_count_towards_rest() -> None:
    """The first reply after a load (the passes timed at load, no calibration): the hybrid head scored 10 of 16
    drafts MTP_K_START at its first step. When that first draft is rejected whole, the head is neither put to rest
    (only its reply's own guesses count towards REST_TRIALS) nor left unscored for long (the next scoring in
    SHADOW_START plain steps); and the prompt's score stays in the reply's acceptance (PROMPT_PRIOR_TRIALS
    guesses' worth), so that the head scored 3 of 4 at that next scoring drafts again. The noise head scored 1 of
    16 still starts plain and rests at once.

    Replayed on this head's real guesses ("hello world ...", bench_mtp_replay.py): read from the rejected draft
    alone, the acceptance was 0.53 after that scoring and the reply decoded plainly for 7 more steps while the head
    was in step with the target (0.87x the best fixed depth on that prompt).

    Breaking it (the prompt's trials counted towards resting on this path too): ``should_rest()`` was True after
    the rejected first draft. Without the prompt's prior: ``choose()`` after the 3-of-4 scoring returned 0."""
    policy = AutoDraftLength(k_max=8, score_first=True, k_start=MTP_K_START)
    policy.seed_costs(REPLAY_AT_LOAD, [REPLAY_DRAFT] * 3)
    policy.start_reply()
    policy.observe_prompt(10, 16)
    assert policy.choose() == MTP_K_START
    policy.observe(batch=3, verify_s=REPLAY_AT_LOAD[3][0], drafted=2, accepted=0, draft_s=2 * REPLAY_DRAFT)
    for _ in range(3):  # the plain-rate probes
        policy.observe(batch=1, verify_s=REPLAY_ONE, drafted=0, accepted=0, draft_s=0.0)
    assert policy.choose() == 0
    assert not policy.should_rest()
    assert policy.shadow_interval == SHADOW_START
    policy.observe(batch=1, verify_s=REPLAY_ONE, drafted=0, accepted=0, draft_s=0.0)
    policy.observe_shadow(3, 4)
    assert policy.choose() > 0

    noise = AutoDraftLength(k_max=8, score_first=True)
    noise.start_reply()
    noise.observe_prompt(1, 16)
    assert noise.choose() == 0
    assert noise.should_rest()


REPLAY_SCORING = 0.00146  # seconds a scoring of the hybrid's head on 4 plain steps takes


def _plain_then_scored(policy: AutoDraftLength, hits: int) -> None:
    for _ in range(policy.shadow_interval):
        policy.observe(batch=1, verify_s=REPLAY_ONE, drafted=0, accepted=0, draft_s=0.0)
    policy.observe_shadow(hits, 4, seconds=REPLAY_SCORING)


def test_a_warm_up_turned_plain_by_rejected_drafts_scores_the_head_every_shadow_start_steps() -> None:
    """The hybrid's first reply after a load ("hello world ...", as bench_mtp.py ran it live): its first two
    drafts rejected whole, it decodes plainly. On these costs a scoring (1.46 ms) is a third of a pass, and the
    scoring floor would wait 7 plain steps between scorings; in this warm-up the head is scored every SHADOW_START
    steps instead (its acceptance rests on a handful of guesses). A later reply, the warm-up over, keeps the floor.

    Breaking it (the floor in the warm-up too): the first reply's interval was 7, expected 4."""
    floor = -(-REPLAY_SCORING // (SCORING_SHARE * REPLAY_ONE))
    assert floor > SHADOW_START  # (the case this is about: a scoring dear next to a pass)
    policy = AutoDraftLength(k_max=8, score_first=True, k_start=MTP_K_START)
    policy.seed_costs(REPLAY_AT_LOAD, [REPLAY_DRAFT] * 3)
    policy.start_reply()
    policy.observe_prompt(10, 16)
    k = policy.choose()
    policy.observe(batch=k + 1, verify_s=REPLAY_AT_LOAD[k + 1][0], drafted=k, accepted=0, draft_s=k * REPLAY_DRAFT)
    _plain_then_scored(policy, 3)
    k = policy.choose()
    assert k > 0
    policy.observe(batch=k + 1, verify_s=REPLAY_AT_LOAD[k + 1][0], drafted=k, accepted=0, draft_s=0.0021)
    _plain_then_scored(policy, 3)
    assert policy.shadow_interval == SHADOW_START
    policy.start_reply()  # the next reply: the warm-up ended with the reply that drafted
    policy.observe_prompt(10, 16)
    _plain_then_scored(policy, 3)
    assert policy.shadow_interval == floor


def test_a_cold_first_draft_is_as_long_as_the_prompts_score_says_within_bounds() -> None:
    """An MTP policy (k_start MTP_K_START) at a cold start, the prompt approved: the first draft is the prior's
    best k at the prompt's score, at least MTP_K_START and at most FIRST_DRAFT_MAX. Measured (bench_mtp_steps.py,
    24-token cold replies): the hybrid head (8-10 of 16) drafts 2 — at 4 it ran at 0.87x the best fixed depth —
    and the dense head (12-14 of 16) 3-4 — at 2 it ran at 0.95-0.98x.

    Breaking it (the first draft back to k_start whatever the score): 12 of 16 drafted 2, expected 3."""
    for hits, expect in ((8, MTP_K_START), (10, 2), (12, 3), (13, FIRST_DRAFT_MAX), (15, FIRST_DRAFT_MAX)):
        policy = AutoDraftLength(k_max=8, score_first=True, k_start=MTP_K_START)
        policy.start_reply()
        policy.observe_prompt(hits, 16)
        assert policy.choose() == expect, (hits, expect)
        policy.observe(batch=expect + 1, verify_s=BATCH[expect + 1], drafted=expect, accepted=expect,
                       draft_s=expect * DRAFT)
        policy.start_reply()  # the next reply's first draft is its own prompt's: k_start again before one
        assert policy._first_k == MTP_K_START


def test_a_head_scored_well_before_any_cost_is_timed_is_scored_again_soon() -> None:
    """A cold start whose first draft was rejected decodes plainly; the head's next scoring (3 of 4) comes before
    any batched pass was timed, so whether it would pay is unknown: it is scored again after SHADOW_START plain
    steps, not twice that (as ``observe_prompt`` keeps it). A head scored 0 of 4 on timed costs still waits longer.

    Breaking it (an unknown verdict read as "would not pay", as before): the interval was 8, expected 4."""
    policy = AutoDraftLength(k_max=8, score_first=True, k_start=MTP_K_START)
    policy.start_reply()
    policy.observe_prompt(9, 16)
    assert policy.choose() == 2
    policy.observe(batch=3, verify_s=BATCH[3], drafted=2, accepted=0, draft_s=2 * DRAFT)  # untimed first step
    _timed_plain(policy, 3)
    assert policy.model.best_k() is None
    policy.observe_shadow(3, 4)
    assert policy.shadow_interval == SHADOW_START
    timed = AutoDraftLength(k_max=8, score_first=True)
    _timed_plain(timed, 3)
    for _ in range(3):
        timed.observe(batch=3, verify_s=BATCH[3], drafted=2, accepted=0, draft_s=2 * DRAFT)
    timed.observe_shadow(0, 4)
    assert timed.shadow_interval == 2 * SHADOW_START


def test_a_calibrated_prompt_score_is_the_replys_starting_acceptance_undeflated() -> None:
    """Read through the calibration, a prompt's score is what replies after such prompts were accepted at: the
    reply starts at exactly that, without the cold start's pseudo-rejection on top (16 guesses: 1/17 lower, which
    started the hybrid's warm 24-token replies near 0.78 where depth 2-3 pays from about 0.8; bench_mtp.py, the two
    in one session: mean depth 1.51-2.03 against 0.89-1.58, 0.97-1.01x the best depth against 0.93-1.00x)."""
    policy = _after_one_hybrid_reply(10)
    calibrated = policy.calibration.calibrated(10, 16)
    assert calibrated is not None
    assert policy.model.acceptance == pytest.approx(calibrated)


def test_a_warm_replys_first_draft_is_no_longer_than_a_cold_starts() -> None:
    """The dense head's recorded costs, k_max 16: a reply where the head was accepted whole on drafts of 8 after a
    prompt scored 12 of 16 leaves a calibration offset; the next prompt scored 16 of 16 then reads 1.0 — certainty,
    on which the longest draft the measured costs allow is best. Its first draft is FIRST_DRAFT_MAX nonetheless (a
    bet on 16 guesses of text the target did not write: bench_mtp.py "dense agreeing", a warm first draft of 16
    accepted 2 tokens on a prompt whose reply went on at 0.34, 0.93x the best depth on 24-token replies); once
    that draft is accepted whole, the reply's own drafts may grow past it.

    Breaking it (no cap on the first draft after a calibrated prompt): ``choose()`` returned 16."""
    policy = AutoDraftLength(k_max=16, score_first=True)
    _timed_plain(policy, 4)
    for batch, cost in BATCH.items():
        for _ in range(3):
            policy.observe(batch=batch, verify_s=cost, drafted=batch - 1, accepted=batch - 1,
                           draft_s=(batch - 1) * DRAFT)
    policy.start_reply()
    policy.observe_prompt(12, 16)
    for _ in range(12):
        policy.observe(batch=9, verify_s=0.014, drafted=8, accepted=8, draft_s=8 * DRAFT)
    policy.start_reply()
    policy.observe_prompt(16, 16)
    assert policy.model.acceptance == 1.0  # the calibrated score: the uncapped best draft is the longest allowed
    assert policy.model.best_k() == 16
    assert policy.choose() == FIRST_DRAFT_MAX
    policy.observe(batch=FIRST_DRAFT_MAX + 1, verify_s=BATCH[5], drafted=FIRST_DRAFT_MAX,
                   accepted=FIRST_DRAFT_MAX, draft_s=FIRST_DRAFT_MAX * DRAFT)
    assert policy.choose() > FIRST_DRAFT_MAX


# Costs timed at load (``pass_costs``) on the hybrid 8 x 768 bench target, rounded: one thread beside a CPU-bound
# process (bench_mtp.py --burner; timed there 4.1-4.2 ms for one token, 11.0-13.4 ms for 2, 3 and 5, 0.5 ms per
# drafted token), where a batch of 2 to 5 tokens costs about what any other does, and quiet on two threads.
BUSY_AT_LOAD = {1: [0.0042, 0.0041, 0.0043], 2: [0.0105, 0.0106, 0.0104], 3: [0.0110, 0.0111, 0.0109],
                5: [0.0115, 0.0116, 0.0114]}
QUIET_AT_LOAD = {1: [0.0044, 0.0045, 0.0043], 2: [0.0073, 0.0077, 0.0080], 3: [0.0081, 0.0083, 0.0082],
                 5: [0.0094, 0.0094, 0.0095]}


@pytest.mark.parametrize(("at_load", "draft_s", "expect"), [(BUSY_AT_LOAD, 0.0005, 0),
                                                           (QUIET_AT_LOAD, 0.00045, MTP_K_START)])
def test_a_cold_first_draft_is_made_only_if_a_draft_of_its_length_pays(at_load: dict[int, list[float]],
                                                                        draft_s: float, expect: int) -> None:
    """The first reply after a load, the hybrid head scored 10 of 16 on its prompt: on the costs timed at load on a
    busy CPU some depth would pay with the margin (a long draft, every batch costing about the same), but the
    first draft, MTP_K_START long, does not (a pass of 3 costs 2.6 plain passes): no draft at the first step.
    Quiet, the same first draft pays and is made.

    Breaking it (``_first_draft_pays`` always True): the busy cold start drafted 2 at its first step — measured
    there, 3-5 ms lost of a 24-token reply's ~100 whenever it was made (bench_mtp_steps.py --burner)."""
    policy = AutoDraftLength(k_max=16, score_first=True, k_start=MTP_K_START)
    policy.seed_costs(at_load, [draft_s] * 3)
    policy.start_reply()
    assert policy._score_could_pay(10 / 16)  # some depth would: the first draft's own length decides
    policy.observe_prompt(10, 16)
    assert policy.choose() == expect
