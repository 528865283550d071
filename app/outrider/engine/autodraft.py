"""Automatic draft length: choose k each step to maximise expected tokens per second.

Cost model (the one in docs/metrics.md, with costs *measured* live):

    tokens per step      E(k) = (1 - a^(k+1)) / (1 - a)        (a = per-token acceptance, i.i.d. assumption)
    seconds per step     T(k) = k * c_draft + c_verify(k + 1)  (c_verify(n): one target pass over n tokens)
    plain decoding       E(0) = 1, T(0) = c_verify(1)

k* = argmax E(k) / T(k) over 0..k_max. ``c_verify`` is measured per batch size, because it is not flat: on a
2-core CPU verifying 5 tokens costs ~2x one decode, on a GPU nearly the same as one. Unmeasured batch sizes are
read off a least-squares line through the measured batched sizes (2 tokens or more: one token takes another,
cheaper path, ``_batch_line``), with one batched size only a prior slope of 25% of c_verify(1) per extra token
(at most the chord from c_verify(1)) until a second is seen. ``a`` is the maximum-likelihood estimate for a
geometric run — accepted / (accepted + rejections) — over an exponentially decaying window.

Robust costs: every cost (per batch size, and per drafted token) is the lower median of its last ``WINDOW``
timings, never an average. A pass the machine stalled (a 441 ms pass among 10 ms ones was seen; under a steady
CPU-bound background process one pass in several is stalled) moves no estimate until stalls are the majority of
its recent timings, and then they are the machine's real cost. Of two timings the lower counts, so one stall
can neither make drafting look free (a stalled plain pass) nor verification look expensive (a stalled batch);
a size measured fewer than ``MIN_SAMPLES`` times is pulled toward the line through the other sizes, so that
no single timing decides alone. A probe is judged by the model after its timing is added, not by that timing.

Learning while plain: when plain decoding is chosen, the decoder keeps scoring the drafter on the target's own
tokens (``observe_shadow``: would the draft's greedy guess have matched?), so acceptance is not frozen at the
value that made speculation stop. Speculation is also probed again after an interval, with a draft long enough
to pay if acceptance has come back; a probe that pays resets the interval, one that does not doubles it. A probe
is skipped while even a somewhat higher acceptance than the measured one would not pay (``PROBE_MARGIN``): a draft
the shadow scoring finds useless costs only the scoring (a batched draft pass every 8 to 128 plain tokens).

Costs: ``draft_s`` passed to ``observe`` must be the cost of drafting itself: the decoder leaves out a draft
model's catch-up on tokens emitted by plain steps (after a plain streak it evaluates them all at once, and that
time divided by one drafted token inflated the per-token draft cost 30-44x). Plain decoding itself is timed by
the decoder's interleaved plain steps (``stats.PlainRateMeter``), which also feed ``c_verify(1)`` here. While
plain decoding goes on scoring the drafter, a plain step costs c_verify(1) and a share of the scoring's time: that
is what drafting is weighed against in ``choose`` (``_plain_step_cost``).
"""

from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from outrider.engine.awake_ledger import RECENT_REPLIES, AwakeLedger
from outrider.engine.confidence_gate import GATE_BANDS, ConfidenceGate

DECAY = 0.9  # weight of the past in the acceptance window (about a 10-step memory)
WINDOW = 15  # timings kept per cost: its estimate is their lower median (a lasting change shows in ~8 steps)
MIN_SAMPLES = 3  # a batch size timed fewer times is checked against, and blended with, the line through the others
OUTLIER_RATIO = 2.0  # such a timing above this multiple of what the line expects is a stall, left out
PRIOR_SLOPE = 0.25  # extra verify cost per extra token, as a fraction of c_verify(1), until measured
PROBE_START, PROBE_MAX = 16, 256  # plain steps between speculation probes while plain decoding is chosen
PROBE_ACCEPTANCE = 0.8  # a probe drafts the k that would be best at this acceptance: long enough to pay
PROBE_MARGIN = 0.2  # probe only while acceptance this much above the measured one would make drafting pay
WARMUP_STEPS = 8  # speculative steps before a promising pair may be judged not worth drafting
WARMUP_ACCEPTANCE = 0.65  # ... "promising": acceptance so far at least this (at 0.5, a low-acceptance pair
# that never pays was kept drafting k = 4 for its whole warm-up: 6-10% below plain on its first reply)
STALE_AFTER = 64  # observations after which a batch size's measured cost is forgotten (batch 1 is kept fresh)
STALE_LONGEST = 8 * STALE_AFTER  # ... but while no batched size is fresh, one is kept up to this many observations
# unless one token's cost has moved by LOAD_MOVED since it was timed (``CostModel._fresh_sizes``)
PRIOR_REJECTIONS = 1.0  # a pseudo-count of rejections at a cold start, fading with the window (DECAY per step)
GROWTH = 2  # k may at most double the longest draft whose verify cost has been measured (not extrapolated)
REST_MARGIN = 0.4  # ... and not even this much more acceptance would pay: conclusive on 16 guesses (at 0.2, a head
# scored 8 of 16 on its prompt rested on the recorded CPU costs; bench_mtp.py's hybrid head scores 8-10 of 16 on its
# prompts and is accepted 0.8 at depth 1 on its replies)
PROMPT_TRIALS = 8  # guesses scored on a prompt that restart a reply's acceptance from the prompt (observe_prompt)
PROMPT_PRIOR_TRIALS = 4.0  # ... a first reply's approved prompt score, weighed as this many guesses in its acceptance
# (fading with the window): without it one rejected first draft read acceptance 0 and sent a head that pays to plain
# decoding for a third of a 24-token reply (bench_mtp_replay.py: the hybrid's cold replies 0.89-0.94x the best depth
# on its real guesses, 0.94-0.97x with 4; dense agreeing 0.95-0.96x -> 0.98-0.99x; 2 helped less, 6-8 no more)
PROMPT_BIAS_KEEP = 0.5  # weight of the past in the prompt-to-reply offset (``PromptCalibration``): about 2 replies
PROMPT_BIAS_LIMIT = 0.5  # bound on that offset (acceptance): a prompt scored 0.5 reads at most 1
REST_TRIALS = 16  # guesses scored in a reply (its prompt's included) before a useless MTP head is put to rest
# (16: one prompt's scoring, ``PromptScoredDrafter.prompt_rows``; at 24 the noise head followed the target for the
# first 8 tokens of every reply, and automatic depth ran at 0.96x plain on 64-token replies)
SHADOW_START, SHADOW_MAX = 4, 128  # plain steps between scorings of the drafter while plain decoding is chosen
# (4 at first: a cold start that turned plain after an unlucky first few drafts comes back after 4 plain steps,
# not 8; a useless draft pays one more small scoring pass before the interval has doubled to 128)
SCORING_SHARE = 0.05  # ... and at least so many that the scorings cost at most this share of the plain passes'
# time (``_scoring_floor``): an MTP head's scoring costs a batched pass of its own, which on a busy CPU (one thread
# beside a CPU-bound process, bench_mtp_steps.py --burner) cost 1.8-2.3 ms against a 4.2 ms plain pass, and scored
# every 4 plain steps it cost the hybrid's 24-token replies 9 % while drafting never paid; quiet, 0.5-0.7 ms
# against 3.3 ms, the floor is SHADOW_START itself


HOPELESS_ACCEPTANCE = 0.95  # ... an MTP head that would not pay even accepted this often sleeps through replies
SLEEP_MAX = PROBE_MAX  # plain steps slept through, reply after reply, before one reply is awake to re-check
SLEEP_LONGEST = 8 * SLEEP_MAX  # ... doubled at each re-check that finds the head should sleep on, up to this
LOAD_MOVED = 1.25  # a plain pass's cost moved by this factor (either way) since the head fell asleep: wake to re-check
# (``sleeps_through_next_reply``: on a GPU, a head scored on the prompt and following the target changed the
# target's graph twice a reply, each change costing two uncaptured passes: 0.66-0.81x plain on 24-token replies)


FALLOFF_DECAY = 0.97  # weight of the past in the per-position counts of drafted tokens (about 30 drafts: how a
# drafter's guesses fall off along a draft belongs to the drafter, not to the text, and needs more drafts to show)
FALLOFF_PRIOR = 2.0  # pseudo-count pulling a position's acceptance towards the position before it (a few drafts
# that reached position 6 do not decide it alone)
REACHED_ENOUGH = 1.0  # decayed drafts that must have reached a position before a draft may go one past it
# (``CostModel.weighed_depth``)


K_START = 4  # a cold start's first draft (a draft model; an MTP head: MTP_K_START, raised by its prompt's score)
SNAPSHOT_VERSION = 1  # of ``AutoDraftLength.snapshot``: a snapshot of another version is not restored
MTP_K_START = 2  # an MTP head's first draft at a cold start, at least: a NextN head is trained to guess one token
# ahead, and its chained guesses fall off (bench_mtp.py: the hybrid head accepted 0.82 / 0.79 / 0.69 at depth 1 / 2
# / 3). A first draft of 4 cost the hybrid's 24-token cold replies 7 ms of ~110 (bench_mtp_steps.py: 0.87x the best
# fixed depth at 4, 0.92x at 2); the dense head, scored higher on its prompts, lost as much at 2 (1.00x at 4, 0.95-
# 0.98x at 2): an approved prompt's score raises it (``observe_prompt``), up to FIRST_DRAFT_MAX
FIRST_DRAFT_MAX = K_START  # ... the longest such first draft: a draft model's


def expected_tokens_per_pass(a: float, k: int) -> float:
    """E(k) = (1 - a^(k+1)) / (1 - a): expected tokens a target pass yields with k drafted (a in [0, 1])."""
    if k <= 0:
        return 1.0
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def prior_best_k(a: float, k_max: int) -> int:
    """The best k at acceptance ``a`` before any pass was timed: drafting free, verifying n tokens costs
    1 + PRIOR_SLOPE * (n - 1) one-token passes (the cost model's own prior slope). Used only to decide whether
    a drafter scored on the prompt should draft at a reply's first step (0: it should not); at 0.08 (a useless
    head) 0, at 0.9 the longest k."""
    best, best_rate = 0, 1.0
    for k in range(1, k_max + 1):
        rate = expected_tokens_per_pass(a, k) / (1.0 + PRIOR_SLOPE * k)
        if rate >= best_rate:
            best, best_rate = k, rate
    return best


def expected_rate(a: float, k: int, draft_cost: float, verify_cost: float) -> float:
    """E(k) / T(k) with T(k) = k · c_draft + c_verify(k + 1): expected tokens per unit of time with draft length k
    at per-token acceptance a, ``draft_cost`` = c_draft (per drafted token) and ``verify_cost`` = c_verify(k + 1).

    With both costs in seconds it is tokens per second (``CostModel.rate``); in units of one plain pass
    c_verify(1) it is the expected speed-up over plain decoding (the panel's "you are here" chart)."""
    return expected_tokens_per_pass(a, k) / (k * draft_cost + verify_cost)


class _Timings:
    """The last WINDOW timings of one cost (seconds); ``value`` is their lower median (None before any), ``count``
    how many there are (a field, not a property: the cost model reads it for every batch size at each of its
    recomputations, 1.7 million reads in a replay of 2300 replies, a fifth of the policy's time)."""

    def __init__(self) -> None:
        self._samples: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._value: float | None = None
        self.count = 0

    def add(self, x: float) -> None:
        self._samples.append(x)
        self._value = None
        self.count = len(self._samples)

    @property
    def samples(self) -> tuple[float, ...]:
        return tuple(self._samples)

    @property
    def value(self) -> float | None:
        """The lower median: of an even number the lower middle one, so one stall among two timings is ignored
        (stalls only ever add time to a pass)."""
        if self._value is None and self._samples:
            self._value = statistics.median_low(self._samples)
        return self._value


def _count(timings: _Timings | None) -> int:
    """How many timings an estimate rests on (0: none)."""
    return timings.count if timings is not None else 0


def _batch_line(rows: list[tuple[float, float, float]]) -> tuple[float, float] | None:
    """The line of ``_fit`` for batches of 2 or more: fitted through those sizes alone, one token's cost kept apart.

    A one-token pass takes another path than a batch (on a CPU a matrix-vector product against a matrix-matrix
    one; on a hybrid target also the recurrent layers' one-token kernel against the chunked one), so the first
    extra token costs far more than each one after it. Measured on the generated 8 x 768 ``qwen35`` + NextN
    target (bench_mtp.py, quiet): 3.9 ms for 1 token, 7.5 ms for 2, 8.3 ms for 4, 14.5 ms for 9. A line through
    the sizes 1 and 2 read 14.7 ms for a batch of 4 and kept automatic depth at 0 where depth 3 paid 1.1x.
    With one batched size only: the prior slope through it, never steeper than the chord from one token."""
    batched = [r for r in rows if r[0] >= 2]
    if len(batched) >= 2:
        return _fit(batched)
    single = next((c for n, c, _ in rows if n == 1), None)
    if len(batched) == 1 and single is not None:
        n0, c0, _ = batched[0]
        slope = max(0.0, min(PRIOR_SLOPE * single, (c0 - single) / (n0 - 1)))
        return c0 - slope * n0, slope
    return _fit(rows)


def _at(line: tuple[float, float], n: int) -> float:
    """The line's cost at batch size n (positive)."""
    return max(line[0] + line[1] * n, 1e-9)


def _fit(rows: list[tuple[float, float, float]]) -> tuple[float, float] | None:
    """(intercept, slope >= 0) of cost against batch size through (size, cost, weight) rows, weighted least
    squares (a size timed once bends the line least); with one size, the prior slope through it."""
    if not rows:
        return None
    if len(rows) == 1:
        i0, c0, _ = rows[0]
        base = c0 / (1 + PRIOR_SLOPE * (i0 - 1))
        return base * (1 - PRIOR_SLOPE), base * PRIOR_SLOPE
    total = sum(w for _, _, w in rows)
    mx = sum(w * x for x, _, w in rows) / total
    my = sum(w * y for _, y, w in rows) / total
    sxx = sum(w * (x - mx) ** 2 for x, _, w in rows)
    sxy = sum(w * (x - mx) * (y - my) for x, y, w in rows)
    slope = max(sxy / sxx, 0.0) if sxx > 0 else 0.0
    return my - slope * mx, slope


def _share(hits: float, trials: float) -> float:
    """hits / trials with half a hit and half a miss added: 0.5 with no trials, never exactly 0 or 1."""
    return (hits + 0.5) / (trials + 1.0)


class PromptCalibration:
    """How far a drafter's score on its prompts sits from its acceptance on the replies that follow.

    A head is scored on a prompt against the target's own guesses there; on text the target did not write (the
    user's) the two agree less often than on the target's reply, where its next token is the one it chose and the
    head's guess is easier. By how much belongs to the pair: measured on the generated 8 x 768 ``qwen35`` hybrid
    + NextN target (bench_mtp.py, "hybrid agreeing"), 8-10 of 16 prompt guesses right (0.5-0.63) against 0.79-0.82
    accepted at depth 1-2 in the replies; on the dense ``glm4moe`` one, 11-14 of 16 against 0.55-0.84. Taken as it
    stood, the hybrid's prompt score started every reply at 0.5-0.6 acceptance (depth 1 or plain where depth 2
    paid: 0.84x the best fixed depth on 24-token replies). ``offset`` is the mean (decaying, PROMPT_BIAS_KEEP per
    reply) of acceptance(reply) - score(prompt) over the replies with enough of both (PROMPT_TRIALS guesses), each
    between 0 and PROMPT_BIAS_LIMIT; None until one was seen.

    Only upwards: a reply's acceptance counts chained drafts (a head's second and third tokens follow its own
    guesses: the dense head is accepted 0.91 / 0.85 / 0.79 at depth 1 / 2 / 3), so a head that agrees with the
    target on the prompt as well as on the reply still reads below its prompt, and corrected down by that its
    24-token replies started at depth 1-2 where 3 paid: 0.95x the best fixed depth in two runs, 1.00x with the
    offset kept at 0 or above (bench_mtp.py). Where a reply goes worse than its prompt said, its own drafts show
    it within a few steps. A difference, not one of log-odds: a head right 0 of 48 times after a prompt scored 2 of
    16 reads -2.8 in log-odds against +0.5 at most the other way."""

    def __init__(self) -> None:
        self.offset: float | None = None
        self._prompt: float | None = None  # this reply's prompt score (``_share``)
        self._hits = 0.0  # this reply's guesses: accepted draft tokens and right shadow guesses
        self._misses = 0.0  # ... rejections (one a draft, as the acceptance estimate counts them) and wrong guesses

    def prompt(self, hits: int, trials: int) -> None:
        """The reply's prompt was scored: ``hits`` of ``trials`` (PROMPT_TRIALS or more) guesses right."""
        self._prompt = _share(hits, trials)

    def reply(self, hits: float, misses: float) -> None:
        """Guesses of the reply itself: ``hits`` right, ``misses`` wrong (a rejected draft counts one)."""
        self._hits += hits
        self._misses += misses

    def close_reply(self) -> None:
        """The reply ended: fold its offset in if it had a scored prompt and PROMPT_TRIALS guesses of its own."""
        if self._prompt is not None and self._hits + self._misses >= PROMPT_TRIALS:
            seen = _share(self._hits, self._hits + self._misses) - self._prompt
            seen = max(0.0, min(PROMPT_BIAS_LIMIT, seen))
            past = seen if self.offset is None else self.offset
            self.offset = PROMPT_BIAS_KEEP * past + (1 - PROMPT_BIAS_KEEP) * seen
        self._prompt = None
        self._hits = self._misses = 0.0

    def calibrated(self, hits: int, trials: int) -> float | None:
        """The acceptance a prompt scored ``hits`` of ``trials`` predicts for its reply (None before an offset)."""
        if self.offset is None:
            return None
        return min(1.0, max(0.0, _share(hits, trials) + self.offset))


class CostModel:
    """Live estimates of acceptance and of draft and verify costs (seconds)."""

    def __init__(self, k_max: int, *, falloff: bool = False) -> None:
        """``falloff``: expected tokens weigh each draft position by ``falloff`` (an MTP head); else one acceptance
        for every position, as for a draft model, whose cold starts on generated families read 0.93-0.97x the best
        fixed k with the falloff against 1.01-1.05x without (bench_autok_cold.py "hidden", alternated twice)."""
        self.k_max = k_max
        self.weighs_positions = falloff
        self.verify = [_Timings() for _ in range(k_max + 2)]  # index = batch size n
        # One-token passes timed too soon after a pass of another size (``observe``'s ``settled``): what plain
        # decoding costs only while no settled one-token pass was timed (a policy that always drafts sees few).
        self.unsettled_single = _Timings()
        # Passes timed before any reply (``seed``): a batch size's stand-in until the replies time that size.
        self.at_load = [_Timings() for _ in range(k_max + 2)]
        self._timed_cache: list[int] | None = None  # ``timed_batch_sizes``, until a size is timed for the first time
        # Per batch size, ``_with_load``'s shift and timings, until either side or the shift moves.
        self._merged: dict[int, tuple[float, _Timings]] = {}
        self._observations = 0
        self._stamp = [0] * (k_max + 2)  # observation count when each batch size was last measured
        # One token's cost (lower median) when each batch size was last measured (``_fresh``); None where no
        # one-token pass had been timed then.
        self._single_at: list[float | None] = [None] * (k_max + 2)
        self.draft_per_token = _Timings()
        # Seconds per whole draft, per length drafted (index k): ``draft_line``.
        self.draft_by_length = [_Timings() for _ in range(k_max + 1)]
        self._draft_line_cache: tuple[tuple[float, float] | None] | None = None  # (line,) until a draft is timed
        self.scoring = _Timings()  # seconds per scoring of the drafter on plain steps (``observe_shadow``)
        self._accepted = 0.0
        self._rejections = 0.0
        self._prior = PRIOR_REJECTIONS  # a pseudo-rejection that fades with the window (see ``acceptance``)
        # Decayed counts per draft position i (1-based, index i): drafts that reached it (every position before
        # it accepted) and drafts whose guess there was accepted (``falloff``).
        self._reached = [0.0] * (k_max + 1)
        self._kept = [0.0] * (k_max + 1)
        self._deepest = 0  # the deepest position any draft reached (beyond it every count is 0)
        self._weighed_depth = k_max  # ``weighed_depth``, recounted with the per-position counts
        self._falloff_cache: list[float] | None = None
        self._line_cache: tuple[tuple[float, float] | None] | None = None  # (line,) once computed
        self._estimates_cache: list[float | None] | None = None
        self._fresh_cache: list[_Timings | None] | None = None
        self._costs_cache: list[float] | None = None

    def observe(self, *, batch: int, verify_s: float, drafted: int, accepted: int, draft_s: float,
                timed: bool = True, settled: bool = True, ages: bool = True) -> None:
        """One step; with ``timed`` False its acceptance counts but not its timings (a reply's first step); with
        ``settled`` False a one-token pass's timing is kept apart (``unsettled_single``); with ``ages`` False it
        does not count towards other sizes' timings going stale (a reply slept through: bounded by SLEEP_LONGEST).

        The verify-cost caches are kept when the step changes no estimate: its batch size was fresh and timed
        MIN_SAMPLES times or more, its lower median and count are unchanged, and no other size went stale — as on
        most steps while k is 0. Each member of a chain keeps a model, and recomputing them every step was most
        of what a switched-off drafter cost (bench_lookup_step_cost.py)."""
        self._observations += int(ages)
        same = False
        if timed and batch == 1 and not settled:
            self.unsettled_single.add(verify_s)
            self._stamp[1] = self._observations
            same = self.verify[1].count > 0  # kept apart behind settled timings: no estimate moved
        elif timed and 1 <= batch < len(self.verify):
            timings = self.verify[batch]
            # (a window not yet full grows: its count moves, and the estimates with it; its lower median unread)
            full = timings.count == WINDOW
            before = (self._fresh(batch) is not None, timings.value) if full else None
            timings.add(verify_s)
            if timings.count == 1:
                self._timed_cache = None
            self._merged.pop(batch, None)
            self._stamp[batch] = self._observations
            if batch > 1:
                self._single_at[batch] = self._single_now()
            same = full and before == (True, timings.value) and timings.count >= MIN_SAMPLES
        if not (same and self._none_turned_stale()):
            self._line_cache = None
            self._estimates_cache = None
            self._fresh_cache = None
            self._costs_cache = None
        if drafted > 0:
            if timed:
                self.draft_per_token.add(draft_s / drafted)
                self.draft_by_length[min(drafted, self.k_max)].add(draft_s)
                self._draft_line_cache = None
            if self.weighs_positions:
                self._count_positions(drafted, accepted)
            self._accepted = DECAY * self._accepted + accepted
            self._rejections = DECAY * self._rejections + (1 if accepted < drafted else 0)
            self._prior *= DECAY

    def seed(self, batch: int, seconds: float) -> None:
        """A pass of ``batch`` tokens timed before any reply (``pass_costs.time_target_passes``). It counts among
        the size's timings until the replies have timed the size MIN_SAMPLES times themselves, and ages as a
        reply's timing does (a batched size goes stale STALE_AFTER observations on). Kept apart, not in the
        window: timed in an empty context, without a step's sampling and rollback, they can run under a reply's
        own, and in the window they would hold its lower median down for WINDOW timings."""
        if 1 <= batch < len(self.at_load):
            self.at_load[batch].add(seconds)
            self._timed_cache = None
            self._merged.pop(batch, None)
            self._stamp[batch] = self._observations
            if batch > 1:
                self._single_at[batch] = self._single_now()
            self._line_cache = self._estimates_cache = self._costs_cache = self._fresh_cache = None

    def _count_positions(self, drafted: int, accepted: int) -> None:
        """One draft of ``drafted`` tokens whose first ``accepted`` were kept, into the per-position counts."""
        drafted = min(drafted, self.k_max)
        for i in range(1, self._deepest + 1):  # (beyond the deepest position reached, every count is 0)
            self._reached[i] *= FALLOFF_DECAY
            self._kept[i] *= FALLOFF_DECAY
        self._deepest = max(self._deepest, min(accepted + 1, drafted))
        for i in range(1, min(accepted + 1, drafted) + 1):
            self._reached[i] += 1.0
        for i in range(1, min(accepted, drafted) + 1):
            self._kept[i] += 1.0
        self._falloff_cache = None
        self._count_weighed_depth()

    def _count_weighed_depth(self) -> None:
        """``weighed_depth`` from the per-position counts as they are now."""
        reached = max((i for i in range(1, self._deepest + 1) if self._reached[i] >= REACHED_ENOUGH), default=1)
        self._weighed_depth = min(self.k_max, reached + 1) if self._reached[1] > 0 else self.k_max

    @property
    def weighed_depth(self) -> int:
        """The longest draft to make now (``AutoDraftLength.choose`` bounds ``best_k`` by it): one past the deepest
        position that REACHED_ENOUGH recent drafts reached (every guess before it kept), where draft positions are
        weighed (``falloff``) and a draft was counted; else k_max. A draft grows one position at a time as its
        drafts reach it.

        Beyond the positions drafts reached, ``falloff`` can only extrapolate, and the acceptance of a short
        window lifted by a run of kept drafts priced long drafts on no evidence: the generated hybrid's head,
        whose guesses come in runs, drafted 4 to 14 in a tenth of its warm replies' steps (replayed,
        bench_mtp_replay.py) and kept 0.60 of what it drafted against depth 2's 0.70. What a depth could yield
        (would a probe, a warm-up or waking pay) still weighs every depth: under load only a long draft may pay,
        and bounded there too, the hybrid's head under load was put to rest before its replies could show
        whether one did."""
        return self._weighed_depth

    def falloff(self) -> list[float]:
        """Per draft position i (index i, 1..k_max; index 0 unused): the factor the acceptance is multiplied by
        there, from the drafts so far. A drafter's later guesses are often worse than its first — an MTP head chains
        its own hidden states, not the target's (bench_mtp.py: the dense head was accepted 0.91, 0.85, 0.80 at depth
        1, 2, 3) — and the acceptance as one number per token made long drafts look as safe as short ones: under
        load, where only long drafts could pay, the dense head's warm replies drafted up to 9 and kept 0.54 of them.

        A position's acceptance is its drafts kept over drafts that reached it, pulled towards the position before
        it by FALLOFF_PRIOR pseudo-counts (a position no draft reached inherits it); the factors are those over
        position 1's, at most 1 (a draft is never made longer by this), then divided by their mean over the
        positions drafts reached — the one-number acceptance was measured over those same positions. All 1 before
        any draft."""
        if self._falloff_cache is not None:
            return self._falloff_cache
        factors = [1.0] * (self.k_max + 1)
        if self._reached[1] > 0:
            previous = self._kept[1] / self._reached[1]
            first = previous
            # (positions no draft reached inherit the deepest reached one's factor, and weigh nothing in the mean)
            deepest = self._deepest
            for i in range(2, deepest + 1):
                previous = (self._kept[i] + FALLOFF_PRIOR * previous) / (self._reached[i] + FALLOFF_PRIOR)
                factors[i] = min(1.0, previous / first) if first > 0 else 1.0
            factors[deepest + 1:] = [factors[deepest]] * (self.k_max - deepest)
            reached = sum(self._reached[1:deepest + 1])
            mean = sum(f * n for f, n in zip(factors[1:deepest + 1], self._reached[1:deepest + 1], strict=True))
            mean /= reached
            factors = [1.0] + [f / mean for f in factors[1:]]
        self._falloff_cache = factors
        return factors

    def _none_turned_stale(self) -> bool:
        """No batch size's timings went stale at this observation (``_fresh``: STALE_AFTER or STALE_LONGEST
        observations old; a size never timed, or batch 1, that matches counts too: that only costs a
        recomputation). One token's cost moving is a change of its estimate, which recomputes anyway."""
        return (self._observations - STALE_AFTER - 1 not in self._stamp
                and self._observations - STALE_LONGEST - 1 not in self._stamp)

    def _single_now(self) -> float | None:
        """One token's cost from its timings now (their lower median), None before any was timed."""
        timings = self._fresh(1)
        return timings.value if timings is not None else None

    def _load_moved_since(self, n: int) -> bool:
        """Whether one token's cost moved by LOAD_MOVED (either way) since a batch of n was last timed (True
        where either is unknown)."""
        then, now = self._single_at[n], self._single_now()
        return then is None or now is None or not then / LOAD_MOVED <= now <= then * LOAD_MOVED

    def observe_shadow(self, hits: int, trials: int) -> None:
        """The drafter scored on target tokens while plain: ``hits`` of ``trials`` guesses were right."""
        if trials > 0:
            self._accepted = DECAY * self._accepted + hits
            self._rejections = DECAY * self._rejections + (trials - hits)
            self._prior *= DECAY

    def restart_acceptance(self, hits: float, trials: float, prior: float = PRIOR_REJECTIONS) -> None:
        """Forget the acceptance learned so far and start again from ``hits`` of ``trials`` scored guesses (with a
        cold start's pseudo-rejection, ``prior``); the costs are kept (they belong to the pair and the machine)."""
        self._accepted = float(hits)
        self._rejections = float(trials - hits)
        self._prior = prior

    @property
    def acceptance(self) -> float | None:
        """accepted / (accepted + rejections) over the decaying window, plus a pseudo-rejection that fades with
        the same window: a cold start's one fully accepted draft of 4 reads 0.8, not 1.0 (which makes the longest
        k look best), while a settled estimate is left as measured; an acceptance of 0 is never lifted."""
        total = self._accepted + self._rejections
        if total <= 0:
            return None
        return self._accepted / (total + self._prior)

    @property
    def measured_acceptance(self) -> float | None:
        """accepted / (accepted + rejections) over the decaying window, without the cold-start pseudo-rejection."""
        total = self._accepted + self._rejections
        return self._accepted / total if total > 0 else None

    def verify_cost(self, n: int) -> float | None:
        """Estimated seconds for a target pass over n tokens (None before any measurement).

        Never below the cost of one token for n > 1: a longer batch does not cost less, and noise that made it
        look cheaper would make drafting "pay" even at acceptance 0."""
        exact = self._estimate(n)
        if exact is None:
            line = self._verify_line()
            if line is None:
                return None
            exact = _at(line, n)
        if n > 1:
            single = self.verify_cost(1)
            if single is not None:
                return max(exact, single)
        return exact

    def _fresh(self, n: int, *, kept: bool = False) -> _Timings | None:
        """The timings of a batch of n, unless last measured more than STALE_AFTER observations ago: a pass timed
        during a burst of machine load must not keep k at 0 for the rest of the session (a stale size is
        re-estimated from the fresh ones, and re-measured when k comes back to it). Batch 1 is kept fresh.
        ``kept``: stale only after STALE_LONGEST, or after STALE_AFTER if one token's cost moved by LOAD_MOVED
        since (``_load_moved_since``): what ``_estimates`` reads while no batched size is fresh."""
        if n >= len(self.verify):
            return None
        timings = self.verify[n]
        if timings.count < MIN_SAMPLES and self.at_load[n].count:
            timings = self._with_load(n)  # timed at load, until the replies have timed the size enough (``seed``)
        if n == 1 and timings.count == 0 and self.unsettled_single.count > 0:
            return self.unsettled_single
        if timings.count == 0:
            return None
        age = self._observations - self._stamp[n]
        if n > 1 and age > STALE_AFTER and (not kept or age > STALE_LONGEST or self._load_moved_since(n)):
            return None
        return timings

    def _with_load(self, n: int) -> _Timings:
        """The timings of a batch of n at load, moved by ``_load_shift``, and in the replies, together (kept until a
        timing of n is added or the shift moves: rebuilt at every recomputation of the estimates, they were most
        of a cold policy's time per step)."""
        shift = self._load_shift() if n > 1 else 0.0
        cached = self._merged.get(n)
        if cached is not None and cached[0] == shift:
            return cached[1]
        both = _Timings()
        for x in (*(t + shift for t in self.at_load[n].samples), *self.verify[n].samples):
            both.add(x)
        self._merged[n] = (shift, both)
        return both

    def _load_shift(self) -> float:
        """Seconds to add to a batched pass timed at load so that it stands for the same pass now: what a one-token
        pass costs in the replies (their lower median, once timed MIN_SAMPLES times) over what it cost at load; 0
        before. The machine's load moves every pass's cost, and a batch timed at load read against a one-token
        pass timed in a reply under another load was a different machine's: a load that came after the timing
        (another process started once the pair was loaded) made the replies' one-token pass cost what a batch of
        2 to 5 had at load, so every batch looked no dearer than one token and a head kept 5-9 % of the time
        drafted at its probes (test_mtp.py's noise head, at passes timed 0.6-0.7x the replies' own; simulated at
        2x in test_pass_costs.py); a load that went away made batches look dear. Added, not scaled: contention adds
        about the same time to a pass of any size (bench_mtp.py, passes timed at load in a busier moment: one token
        5.0-5.2 ms against the replies' 3.6-3.8, batches by about as much), and it holds a batch above one token's
        cost by what it cost above it at load."""
        replies, at_load = self.verify[1], self.at_load[1]
        if replies.count < MIN_SAMPLES or replies.value is None or at_load.value is None:
            return 0.0
        return replies.value - at_load.value

    def timed_batch_sizes(self) -> list[int]:
        """The batch sizes of 2 or more timed at all, at load or in a reply, fresh or not (ascending): most of the
        k_max + 1 sizes never are, and the estimates, recomputed after most timed steps, skip them."""
        if self._timed_cache is None:
            self._timed_cache = [n for n in range(2, len(self.verify)) if self.verify[n].count or self.at_load[n].count]
        return self._timed_cache

    def _fresh_sizes(self) -> list[_Timings | None]:
        """Per batch size (index n), its fresh timings (``_fresh``), computed once per observation with the
        estimates. While no batched size is fresh, those STALE_LONGEST allows (``kept``): left out, every batch was
        read off the line through one token's cost alone, at the prior slope's 1.25-2x one token — on a busy CPU,
        where a batch of 2 to 5 tokens costs 3x one, a policy kept plain there for STALE_AFTER steps then drafted 2
        at a loss again, every STALE_AFTER steps (bench_mtp.py "hybrid agreeing" under load: a draft of 2 rejected
        costs about three plain passes). Once a batched size is fresh again, the line through the fresh ones reads
        the stale (kept longer while drafting, stalled timings held k at 3 where 8 pays on a machine whose passes
        stall at random: test_autodraft.py's steady-load simulation)."""
        if self._fresh_cache is None:
            timed = self.timed_batch_sizes()
            fresh: list[_Timings | None] = [None] * len(self.verify)
            fresh[1] = self._fresh(1)
            for i in timed:
                fresh[i] = self._fresh(i)
            if all(fresh[i] is None for i in timed):
                for i in timed:
                    fresh[i] = self._fresh(i, kept=True)
            self._fresh_cache = fresh
        return self._fresh_cache

    def _estimate(self, n: int) -> float | None:
        """The cost of a batch of n from its own timings (None if it has no fresh ones); see ``_estimates``."""
        if n >= len(self.verify):
            return None
        return self._estimates()[n]

    def _estimates(self) -> list[float | None]:
        """Per batch size (index n), its cost from its own timings, computed once per observation (``choose``
        asks for every k each step: this keeps a step at tens of microseconds).

        Timed MIN_SAMPLES times or more: their lower median. Fewer: at most the cost of any larger size timed that
        often, and checked against the line through those sizes (once there are two): a timing
        above OUTLIER_RATIO times what the line expects is a stall and left out, and what remains is blended with
        the line, so one timing never decides alone. (Simulated: the one plain pass of a reply's first step
        stalled to 6x, and the floor at one token's cost made every batch look as cheap as one token: k 8 where
        3 is best.)"""
        if self._estimates_cache is not None:
            return self._estimates_cache
        fresh = self._fresh_sizes()
        settled = [(float(i), t.value, float(t.count)) for i, t in enumerate(fresh)
                   if i >= 1 and t is not None and t.value is not None and t.count >= MIN_SAMPLES]
        line = _batch_line(settled) if len(settled) >= 2 else None
        estimates: list[float | None] = [None] * len(self.verify)
        for n in (1, *self.timed_batch_sizes()):  # (a size never timed has no fresh timings)
            timings = fresh[n]
            if timings is None or timings.value is None:
                continue
            value = timings.value
            if timings.count >= MIN_SAMPLES:
                estimates[n] = value
                continue
            # A smaller batch never costs more than a larger one timed often enough (stalls only add time).
            value = min([value] + [c for size, c, _ in settled if size >= n])
            if line is not None:
                expected = _at(line, n)
                kept = [x for x in timings.samples if x <= OUTLIER_RATIO * expected]
                if not kept:
                    value = expected
                else:
                    value = min(value, statistics.median_low(kept))
                    value = (len(kept) * value + (MIN_SAMPLES - len(kept)) * expected) / MIN_SAMPLES
            estimates[n] = value
        self._estimates_cache = estimates
        return estimates

    def _verify_line(self) -> tuple[float, float] | None:
        """(intercept, slope) of verify cost against batch size, fitted to every measured size's estimate
        (weighted by its number of timings); cached until the next observation."""
        if self._line_cache is None:
            estimates, fresh = self._estimates(), self._fresh_sizes()
            rows = [(float(n), c, float(_count(fresh[n]))) for n, c in enumerate(estimates) if c is not None]
            self._line_cache = (_batch_line(rows),)
        return self._line_cache[0]

    def longest_measured_k(self) -> int:
        """The longest draft length whose verify pass (k + 1 tokens) has a fresh measurement in a reply; 0 if none.
        Passes timed at load (``seed``) do not count: a draft grows from the drafts it made (GROWTH), and counted,
        a warm-up on the hybrid's head drafted 8 at its fourth draft under load, from a size 5 timed at load."""
        return max((n - 1 for n in self.timed_batch_sizes()
                    if self.verify[n].count and self._fresh(n) is not None), default=0)

    def rate(self, k: int, acceptance: float | None = None) -> float | None:
        """Expected tokens per second with draft length k (None while a needed estimate is missing); with
        ``acceptance`` given, at that acceptance instead of the measured one. Every position is weighed alike,
        without ``falloff``: asked at acceptance 1 (``_depth_that_could_pay``), it is the most a depth could
        yield; the depth to draft is ``best_k``'s, which weighs the positions."""
        c_v = self.verify_cost(k + 1)
        if c_v is None:
            return None
        if k == 0:
            return 1.0 / c_v
        a = self.acceptance if acceptance is None else acceptance
        drafting = self.draft_cost(k)
        if a is None or drafting is None:
            return None
        return expected_tokens_per_pass(a, k) / (drafting + c_v)

    def draft_cost(self, k: int) -> float | None:
        """Seconds a draft of k tokens costs (None before any draft was timed): ``draft_pricing``'s."""
        pricing = self.draft_pricing()
        return None if pricing is None else pricing[0] + pricing[1] * k

    def draft_pricing(self, per_token: float | None = None) -> tuple[float, float] | None:
        """(seconds per draft, seconds per drafted token) as every price of a draft reads them: ``per_token``
        given, (0, it); else ``draft_line`` once there is one, else (0, the lower median per drafted token);
        None before any draft was timed."""
        if per_token is not None:
            return 0.0, per_token
        line = self.draft_line()
        if line is not None:
            return line
        c_d = self.draft_per_token.value
        return None if c_d is None else (0.0, c_d)

    def draft_line(self) -> tuple[float, float] | None:
        """(seconds per draft, seconds per drafted token): the line through the lower medians of whole drafts per
        length, weighted by their timings, once two lengths were timed MIN_SAMPLES times each; None before, or
        where the line falls (a longer draft cannot cost less) or starts below 0.

        A draft is not k times one token: an MTP head's catch-up on the last pass's cells is one batched pass
        whatever k is, then each token after the first one chained guess (a draft model's likewise: a catch-up,
        then a pass per token). Measured live on the 8 x 768 hybrid + NextN: 1.4 ms for a draft of 1, 2.1 for 2,
        3.1 for 4, 3.7 for 6 — per token 1.4 down to 0.6. One cost per token read from drafts of 2 (1.05 ms) made a
        draft of 6 look 1.7x its price, and read from drafts of 5 and 6 made a draft of 1 look half its price;
        with the line, warm replies on the dense head ran 1.12-1.14x the best fixed depth against 0.97-1.06x
        (bench_mtp.py's "dense agreeing", 24 tokens, the two interleaved in one process; replayed,
        bench_mtp_replay.py: 0.99 and 1.04x against 0.95 and 0.99x, quiet and busy). The hybrid's head, whose
        guesses come in runs that one acceptance per position prices by their mean, drafts deeper with it and
        replays about 1 % lower (0.97 and 0.95x); live the two could not be told apart quiet."""
        if self._draft_line_cache is None:
            rows = [(float(k), t.value, float(t.count)) for k, t in enumerate(self.draft_by_length)
                    if t.count >= MIN_SAMPLES and t.value is not None]
            line = _fit(rows) if len(rows) >= 2 else None
            self._draft_line_cache = (line if line is not None and line[0] >= 0 and line[1] > 0 else None,)
        return self._draft_line_cache[0]

    def best_k(self, acceptance: float | None = None, draft_cost: float | None = None,
               plain_cost: float | None = None, longest: int | None = None) -> int | None:
        """argmax over k of ``rate(k)`` (ties to the larger k); None until every rate can be estimated.

        Called every step: the verify costs are computed once per observation (``_verify_costs``) and E(k) is
        accumulated as E(k-1) + a^k, so a call costs a few microseconds, not k_max full ``rate`` evaluations.
        ``draft_cost`` (seconds per drafted token) replaces the measured pricing (``draft_pricing``; 0: a lower
        bound before any draft);
        ``plain_cost`` (seconds per plain step, at least a one-token pass) replaces plain decoding's (k = 0);
        ``longest`` bounds k below k_max (``weighed_depth``, for the draft to make now)."""
        # Acceptance and draft cost first: a member of a chain that never drafted (a lookup on free prose) asks
        # every step, and the verify costs are recomputed whenever a timing moved their lower medians.
        a = self.acceptance if acceptance is None else acceptance
        pricing = self.draft_pricing(draft_cost)
        if a is None or pricing is None:
            return None
        costs = self._verify_costs()
        if costs is None:
            return None
        fixed, per_token = pricing
        best_rate, best = 1.0 / (costs[0] if plain_cost is None else max(plain_cost, costs[0])), 0
        expected, a_power = 1.0, 1.0
        falloff = self.falloff()
        for k in range(1, (self.k_max if longest is None else min(longest, self.k_max)) + 1):
            a_power *= min(1.0, a * falloff[k])
            expected += a_power
            rate = expected / (fixed + k * per_token + costs[k])
            if rate >= best_rate:
                best_rate, best = rate, k
        return best

    def first_break_even(self, k: int, draft_cost: float | None = None) -> float | None:
        """The share of first draft tokens kept below which a draft of ``k``, once its first token is known, is
        not worth finishing and verifying (``ConfidenceGate``); None while a cost or the acceptance is unknown.

        Finishing costs the k - 1 tokens still to draft and a pass of k + 1 (``draft_cost`` per drafted token; by
        default the measured one, ``draft_line``'s per token once there is one: the catch-up was paid for the
        first) and yields the target's own token plus, if the first is kept (share q), the first and the later
        ones kept after it (per position the acceptance and its falloff, as ``best_k`` weighs them); dropping it
        costs a one-token pass for one token. Finishing pays when
        (1 + q (1 + later)) / finishing cost >= 1 / c_verify(1): q* = (finishing cost / c_verify(1) - 1) / (1 +
        later). The first token's drafting is spent either way and left out."""
        single, verify = self.verify_cost(1), self.verify_cost(k + 1)
        pricing = self.draft_pricing(draft_cost)
        a = self.acceptance
        if single is None or verify is None or pricing is None or a is None or k < 1:
            return None
        c_d = pricing[1]
        falloff = self.falloff()
        later, run = 0.0, 1.0
        for i in range(2, min(k, self.k_max) + 1):
            run *= min(1.0, a * falloff[i])
            later += run
        return (((k - 1) * c_d + verify) / single - 1.0) / (1.0 + later)

    def _verify_costs(self) -> list[float] | None:
        """[c_verify(1), ..., c_verify(k_max + 1)], cached until the next observation (None before any)."""
        if self._costs_cache is None:  # verify_cost(n) for every n in one pass
            line = self._verify_line()
            if line is None:
                return None
            estimates = self._estimates()[1 : self.k_max + 2]
            costs = [c if c is not None else _at(line, n) for n, c in enumerate(estimates, start=1)]
            single = costs[0]
            self._costs_cache = [single] + [max(c, single) for c in costs[1:]]
        return self._costs_cache


class AutoDraftLength:
    """Chooses k for each step (``choose``) and learns from each step's timings (``observe``) and from the
    drafter's score on plain steps (``observe_shadow``). ``snapshot`` / ``restore`` carry what it learned across
    loads of the same pair (engine/learned_draft.py)."""

    def __init__(self, k_max: int = 16, k_start: int = K_START, *, score_first: bool = False,
                 probe_margin: float = PROBE_MARGIN, falloff: bool | None = None) -> None:
        """``score_first``: for a drafter whose scoring costs about what its catch-up costs anyway (an MTP head: the
        cells it scores are fed before its first draft in any case), a cold start decodes plainly until the
        drafter has been scored on the target's own tokens, and drafts only if that acceptance could pay.
        ``probe_margin``: how much better than its scored acceptance a drafter must be able to do for a probe
        to be worth its price (``_probe_could_pay``); 0 for a drafter whose scoring is its exact acceptance
        (chain_draft.py: prompt lookup). ``falloff``: whether the cost model weighs draft positions
        (``CostModel.falloff``); by default as ``score_first`` (an MTP head)."""
        self.model = CostModel(k_max, falloff=score_first if falloff is None else falloff)
        self.score_first = score_first
        self.probe_margin = probe_margin
        self.k_max = k_max
        self.k_start = min(k_start, k_max)
        self._plain_streak = 0
        self._probe_interval = PROBE_START
        self._probing = False
        self._speculative_steps = 0
        # The warm-up (``choose``) belongs to a cold start: it ends with the first reply that drafted. Left open
        # while few steps had drafted, a warm policy on a busy CPU went on drafting 2-3 tokens accepted 0.7 of the
        # time through its later 24-token replies' "warm-up" (0.80x plain there), its costs long timed.
        self._warming_up = True
        self.last_choice = self.k_start
        # Scoring a draft model costs a batched draft pass: while its guesses would not pay, score less often.
        self.shadow_interval = SHADOW_START
        self._untimed = False  # the next observation is a reply's first step (``start_reply``)
        self._scored_in_reply = 0  # shadow-scored guesses since ``start_reply`` (the prompt's included)
        self._resting = False  # ``should_rest`` said so in this reply
        self._rest_single: float | None = None  # one token's cost when this reply rested (``_account_awake``)
        self.calibration = PromptCalibration()  # prompt score against reply acceptance (``score_first`` only)
        self._prompt_approved = False  # this reply's prompt score could pay, with no calibration to read it by
        self._first_k = self.k_start  # k while a cost is unmeasured: k_start, or what an approved prompt says
        self._judged_by_prompt = False  # this reply's acceptance is still its prompt's calibrated score alone
        self._prior_only = False  # this reply's acceptance is still its approved prompt's prior alone (a first reply)
        # One-token passes after a pass of another size before one costs what plain decoding costs (the decoder sets
        # it: 1 on a CPU, 2 on a CUDA back-end, ``speedup.settle_passes``; see ``observe``), and the plain passes in
        # a row so far.
        self.settle = 1
        self._plain_run = 0
        self._asleep = False  # the next reply sleeps through (``sleeps_through_next_reply``)
        self._sleeping = False  # this reply does
        self._slept = 0  # plain steps slept through since the last reply awake
        self._sleep_for = SLEEP_MAX  # plain steps to sleep through before a reply re-checks
        self._rechecking = False  # this reply is awake to re-check a head that slept
        self._asleep_pass_s: float | None = None  # a plain pass's cost when the head fell asleep
        self.ledger = AwakeLedger()  # what waking the head saved (``score_first`` only)
        self.follow_single = _Timings()  # seconds a one-token pass spends on following (``observe``'s follow_s)
        self._draft_token_at_load: float | None = None  # seconds per drafted token, timed at load (``seed_costs``)
        # What the head's confidence in its first token says about its draft (``score_first`` only: an MTP head).
        self.gate: ConfidenceGate | None = ConfidenceGate() if score_first else None

    def choose(self) -> int:
        if self._resting:
            self._plain_streak += 1
            self.last_choice = 0
            return 0
        m = self.model
        if self._prior_only:  # a first reply's prompt approved the head, and nothing since: its first draft
            self.last_choice = self._first_k
            return self._first_k
        best = m.best_k(plain_cost=self._plain_step_cost(), longest=m.weighed_depth)
        if best is None:  # acceptance or a cost not measured yet: draft, to measure them
            k = self._first_k if not self.score_first or self._first_draft_could_pay() else 0
        elif best > 0:
            k = min(best, max(self.k_start, GROWTH * m.longest_measured_k()))
            if self._judged_by_prompt:
                k = min(k, FIRST_DRAFT_MAX)  # a bet on 16 guesses of text the target did not write: see below
            self._plain_streak = 0
        elif (self._warming_up and self._speculative_steps < WARMUP_STEPS
              and (m.measured_acceptance or 0.0) >= WARMUP_ACCEPTANCE and (warm_up := self._warm_up_k()) > 0):
            # A cold start judges costs from one or two timed passes; while the draft is being accepted, keep
            # drafting until a few more are averaged in rather than let one noisy pass send k to 0 — unless not
            # even every token accepted would pay: on a GPU a head accepted 0.75 whose drafts cost 1.8x plain per
            # token drafted through its whole warm-up (bench_mtp_steps.py --cuda). Judged after MIN_SAMPLES drafts,
            # when one stalled pass no longer decides (judged from the first, the warm-up of a pair that pays under
            # a CPU-bound load was cut short: test_autodraft.py's simulation, 0.88x the best k against 0.93x).
            # Only in the reply of the policy's first draft (``_warming_up``): a later one has its costs timed.
            k = warm_up
        else:
            k = 0
            self._plain_streak += 1
            if self._plain_streak >= self._probe_interval and self._probe_could_pay():
                self._plain_streak = 0
                k = self._depth_that_could_pay(max(1, m.best_k(PROBE_ACCEPTANCE) or self.k_start))
                self._probing = k > 0
        self.last_choice = k
        return k

    def first_min(self, k: int) -> float | None:
        """The confidence in its first token under which this step's draft of ``k`` is dropped before it is
        finished and verified (the step is then plain), 0 for none yet: the gate's threshold at the break-even
        share of first tokens kept on the measured costs (``CostModel.first_break_even``; before the drafts' own
        cost was timed, the cost timed at load). None for a policy without a gate (not an MTP head's): the
        drafter need not read its confidence."""
        if self.gate is None:
            return None
        if k < 1:
            return 0.0
        m = self.model
        draft_cost = self._draft_token_at_load if m.draft_per_token.value is None else None
        break_even = m.first_break_even(k, draft_cost)
        return 0.0 if break_even is None else self.gate.threshold(break_even)

    def observe_first(self, confidence: float, kept: bool) -> None:
        """A draft's first token, of ``confidence``, was kept or not: verified, or — its draft dropped by
        ``first_min`` — compared with the token the plain step emitted."""
        if self.gate is not None:
            self.gate.observe(confidence, kept)

    def _plain_step_cost(self) -> float | None:
        """What a plain step costs while the drafter is scored on plain steps (seconds): a one-token pass and the
        scoring's time spread over the steps between scorings (``shadow_interval``); None before a scoring was
        timed. Plain decoding chosen here is plain decoding that goes on scoring the drafter, and that is what
        drafting is weighed against: an MTP head's scoring every 4 plain steps cost the hybrid's 8 x 768 target
        0.12-0.18 ms a plain step, 4-5 % of a 3.3 ms pass (bench_mtp_steps.py), and left out of plain decoding's
        cost it kept a head that pays 1.05x at depth 3 plain for most of its replies (0.84-0.92x the best depth).
        A drafter put to rest is not scored (``should_rest``: weighed on the pass alone)."""
        m = self.model
        single, scoring = m.verify_cost(1), m.scoring.value
        if single is None or scoring is None:
            return None
        return single + scoring / max(1, self.shadow_interval)

    def _first_draft_could_pay(self) -> bool:
        """Before any draft was timed (``score_first``): whether the drafter's scored acceptance would make
        drafting pay (``_pays_before_drafting``). False until it was scored at all. Measured on an MTP head
        accepted 5-9 % of the time (bench_mtp.py, "dense low"): the cold start's two drafts of 4 cost 3-13 % of a
        24-192-token reply; scored first, it does not draft."""
        a = self.model.acceptance
        if a is None:
            return self._prompt_approved
        return self._pays_before_drafting(a)

    def _pays_before_drafting(self, a: float) -> bool:
        """Whether some k pays at acceptance ``a`` before the drafter's own drafts were timed: on the measured
        verify costs, drafting at the cost timed at load (``seed_costs``; free where none was), or before any pass
        was timed on the prior costs (``prior_best_k``). Free on timed passes, a generated head fed noise (scored
        1 of 4) drafted 4 at its first reply: on a tiny target a pass of 5 tokens costs about one of 1, and a
        guess kept 0.2 of the time then pays if drafting costs nothing."""
        best = self.model.best_k(a, draft_cost=self._draft_token_at_load or 0.0)
        if best is None:
            best = prior_best_k(a, self.k_max)
        return best > 0

    def _probe_could_pay(self) -> bool:
        """A probe re-measures the costs of drafting; it is worth its price only if an acceptance a little
        better than the one measured (on speculative steps and by shadow scoring) would make drafting pay. An
        unrelated draft, scored at ~0 on the target's own tokens, is then never probed."""
        a = self.model.acceptance
        return a is None or (self.model.best_k(min(1.0, a + self.probe_margin)) or 0) > 0

    def _warm_up_k(self) -> int:
        """The draft of a warm-up step (``choose``): the depth that would be best at PROBE_ACCEPTANCE, at least 2
        (k_start where none would) — for the first MIN_SAMPLES drafts whatever it costs, after them only a depth
        that could pay (``_depth_that_could_pay``; 0: no warm-up)."""
        k = max(2, self.model.best_k(PROBE_ACCEPTANCE) or self.k_start)
        return k if self._speculative_steps < MIN_SAMPLES else self._depth_that_could_pay(k)

    def _depth_that_could_pay(self, k: int) -> int:
        """``k`` if a draft of k would pay with every drafted token accepted, on the measured costs (or while they
        are unmeasured); else the shortest depth that would, up to what k may grow to now (GROWTH times the
        longest measured); else 0. Where every batch costs about the same (a busy CPU: 11-13 ms for 2 to 5 tokens
        against 4.2 ms for one, bench_mtp_steps.py --burner) a draft of 4 could pay and one of 2 never can; the
        warm-ups and probes drafted 2, the depth PROBE_ACCEPTANCE's best fell back to."""
        m = self.model
        plain = m.rate(0)
        if plain is None:
            return k
        limit = min(self.k_max, max(self.k_start, GROWTH * m.longest_measured_k()))
        depths: list[int] = [k, *range(1, limit + 1)]
        for depth in depths:
            rate = m.rate(depth, acceptance=1.0)
            if rate is None or rate > plain:
                return depth
        return 0

    def seed_costs(self, timings: Mapping[int, Sequence[float]], draft_token: Sequence[float] = ()) -> None:
        """Start from costs timed before any reply, at load: ``timings``, seconds per target pass per batch size
        (``pass_costs.time_target_passes``), each size's stand-in until a reply times it (``CostModel.seed``);
        ``draft_token``, seconds per token the drafter drafts (``MtpDraft.time_draft_token``), which only the
        first reply's judgement of its prompt's score reads (``_score_could_pay``) — the cost model's own drafting
        cost is the drafts' (their catch-up included). The acceptance stays unknown until the drafter is scored.
        For a fresh policy only: a restored one has its replies' own."""
        for batch in sorted(timings):
            if 1 <= batch < len(self.model.verify):
                for seconds in timings[batch]:
                    self.model.seed(batch, seconds)
        self._draft_token_at_load = statistics.median_low(draft_token) if draft_token else None

    def start_reply(self) -> None:
        """A reply begins: its first step is the coldest of the reply (the first pass after the prompt, and a
        draft model's catch-up on it), so its timings must not stand for what a pass costs. Seen in
        bench_autok_cold.py: a family pair whose drafts pay 1.13x was sent to plain decoding for most of a
        96-token reply by that one step's timing."""
        self._untimed = True
        self._warming_up = self._warming_up and self._speculative_steps == 0
        self._plain_run = 0  # the prompt's passes came between: the next plain pass is not a settled one
        self._scored_in_reply = 0
        self.ledger.close_reply()
        self._resting = self._sleeping = self._asleep
        self._rest_single = None
        self._asleep = False
        self._prompt_approved = False
        self._first_k = self.k_start
        self._judged_by_prompt = False
        self._prior_only = False
        self.calibration.close_reply()

    def sleeps_through_next_reply(self) -> bool:
        """With ``score_first`` (an MTP head), asked before a reply's prompt is evaluated: whether the head should
        sleep through the whole reply — not scored on the prompt, not following the target, never drafting.
        It sleeps when the measured costs say no depth would pay even at HOPELESS_ACCEPTANCE (a head that costs
        about what the target does: tiny models on a GPU, where every pass is kernel launches), or when the
        replies it was awake for saved less than they cost (``AwakeLedger``: on a busy CPU the hybrid's head,
        awake, ran 0.84-0.86x plain on 24-token replies, paid for by 1-2 % on 192-token ones).

        Once ``_sleep_for`` plain steps were slept through, one reply is awake again, to re-check the costs and
        the head; each re-check that finds it should sleep on doubles that, from SLEEP_MAX to SLEEP_LONGEST (a
        re-check is an awake reply: 0.85x plain on a 24-token reply under load, and every third reply re-checked
        at SLEEP_MAX when 24- and 192-token replies alternate). A plain pass whose cost moved by LOAD_MOVED since
        the head fell asleep (a load that ended, other threads) re-checks at once. ``start_reply`` that follows
        puts the policy to rest for the reply."""
        m = self.model
        if not self.score_first or self._slept >= self._sleep_for or self._load_moved():
            self._rechecking = self._slept >= self._sleep_for  # (not a load that moved: nothing to back off from)
            self._slept = 0
            self._asleep_pass_s = None
            return False
        self._asleep = self._hopeless() or self.ledger.waking_does_not_pay()
        if self._asleep and self._rechecking:
            self._sleep_for = min(2 * self._sleep_for, SLEEP_LONGEST)
        elif not self._asleep:
            self._sleep_for = SLEEP_MAX
            self._slept = 0
        if self._asleep and self._asleep_pass_s is None:
            self._asleep_pass_s = m.verify_cost(1)
        self._rechecking = False
        return self._asleep

    def _hopeless(self) -> bool:
        """Whether no depth would pay even at HOPELESS_ACCEPTANCE, on the costs of drafts timed in a reply at some
        time, fresh or not, or else at load (``seed_costs``); False until one-token passes were timed in a reply.
        Stale sizes count: the awake replies that followed a draft may not have drafted (a busy CPU, where only
        long drafts could pay), and their sizes went stale while the ledger went on counting what waking cost. And
        the costs timed at load: a head whose replies never drafted at all (under load, its first draft judged not
        to pay) was held awake by this verdict, following the target and scored at 5-7 % of every 24-token reply,
        its ledger never asked."""
        m = self.model
        draft_cost = m.draft_per_token.value if m.draft_per_token.value is not None else self._draft_token_at_load
        timed = (m.verify[1].count >= MIN_SAMPLES and draft_cost is not None
                 and bool(m.timed_batch_sizes()))
        return timed and (m.best_k(HOPELESS_ACCEPTANCE, draft_cost=draft_cost) or 0) == 0

    def _load_moved(self) -> bool:
        """Whether a plain pass now costs LOAD_MOVED times more or less than when the head fell asleep."""
        then, now = self._asleep_pass_s, self.model.verify_cost(1)
        return then is not None and now is not None and not then / LOAD_MOVED <= now <= then * LOAD_MOVED

    def observe(self, *, batch: int, verify_s: float, drafted: int, accepted: int, draft_s: float,
                follow_s: float = 0.0) -> None:
        """One step: ``batch`` tokens verified in ``verify_s`` seconds, ``accepted`` of ``drafted`` kept, drafting
        took ``draft_s``; ``follow_s`` of the pass went on following the target (an awake MTP head's copy of the
        hidden states, inside ``verify_s``): what the ledger of waking charges a plain step (``AwakeLedger``)."""
        if self._sleeping:
            self._slept += 1
        elif self.score_first:
            self._account_awake(batch, drafted, accepted, draft_s, follow_s)
        if drafted > 0:
            self._speculative_steps += 1
            self._judged_by_prompt = False
            self._prior_only = False
            self.calibration.reply(accepted, 1.0 if accepted < drafted else 0.0)
        # On CUDA (settle 2) a one-token pass is plain decoding's cost only once two plain passes came right before
        # it: the two after a verify pass run uncaptured and capture the CUDA graph (+150 % and +125 % of a plain
        # pass), and taken as plain decoding's cost they made drafting look better than it was: a head that drafted
        # nearly always learned 2.4x the true cost and drafted at 0.56-0.63x plain (``speedup.settle_passes``). On
        # a CPU (settle 1) the one pass that rebuilds the graph costs 25-40 % more, and a policy that alternates
        # pays that: it is timed as before. Left out there too, automatic depth drafted less on the hybrid's 24-token
        # replies (mean depth 0.53-0.97 against 0.81-1.19) and read 0.84-0.94x the best depth against 0.92-0.95x
        # (bench_mtp.py, the two interleaved in one session, 2 runs each).
        plain = drafted == 0 and batch <= 1
        settled = not plain or self._plain_run >= (self.settle if self.settle > 1 else 0)
        self._plain_run = self._plain_run + 1 if plain else 0
        timed, self._untimed = not self._untimed, False
        self.model.observe(batch=batch, verify_s=verify_s, drafted=drafted, accepted=accepted, draft_s=draft_s,
                           timed=timed, settled=settled, ages=not self._sleeping)
        if self._probing:
            # Judged by the model with the probe's timing and acceptance averaged in, not by that one timing (a
            # stalled probe pass would double the interval; a lucky one reset it).
            self._probing = False
            paid = (self.model.best_k() or 0) > 0
            self._probe_interval = PROBE_START if paid else min(self._probe_interval * 2, PROBE_MAX)

    def _account_awake(self, batch: int, drafted: int, accepted: int, draft_s: float, follow_s: float) -> None:
        """A step of an awake reply into the ledger, on the cost model's lower medians (nothing before a one-token
        pass and this step's batch size were timed: a cold start's first steps)."""
        m = self.model
        if self._resting and drafted == 0 and draft_s == 0.0 and follow_s == 0.0:
            # A step of a reply put to rest (``should_rest``): the head neither follows nor drafts, so the step
            # saves nothing and adds only its plain time, at one token's cost as it stood when the reply rested.
            # Read afresh, that cost was recomputed from every batch size's window at each step (a new one-token
            # timing moves the lower median): 70 % of what automatic depth cost a reply whose head rested after its
            # prompt, 1.5 ms of a 24-token reply's 90 on a busy CPU (bench_mtp.py "auto cold").
            if self._rest_single is None:
                self._rest_single = m.verify_cost(1)
            single = self._rest_single
        else:
            single = m.verify_cost(1)
        if single is None:
            return
        if drafted == 0:
            if batch <= 1 and follow_s > 0:
                self.follow_single.add(follow_s)
            # (a draft dropped before verification, ``first_min``, or emptied by p-min: its drafting was spent)
            self.ledger.step(tokens=1, bare_pass_s=single - follow_s, cost_s=single + draft_s)
            return
        cost = m.verify_cost(batch)
        if cost is not None:
            bare = single - (self.follow_single.value or 0.0)
            self.ledger.step(tokens=accepted + 1, bare_pass_s=bare, cost_s=cost + draft_s)

    def observe_shadow(self, hits: int, trials: int, seconds: float | None = None) -> None:
        """The drafter scored while plain: ``hits`` of ``trials`` guesses right, in ``seconds`` (the scoring's own
        time, when the decoder timed it: ``_plain_step_cost``). Scored again after SHADOW_START plain steps
        (more where a scoring is dear next to a plain pass: ``_scoring_floor``) while its guesses would pay —
        with ``score_first`` (a scoring that feeds what the next draft needs anyway), while they would with
        PROBE_MARGIN more acceptance; else the interval doubles, up to SHADOW_MAX. Without the margin, an MTP
        head on a hybrid target scored at 0.6-0.7 (break-even about 0.8 there) was scored only every 128 tokens
        and missed the stretches later in a reply where it was right 95-100 % of the time (bench_mtp.py "hybrid
        agreeing": automatic depth plain for 95 % of its steps)."""
        self.model.observe_shadow(hits, trials)
        self._prior_only = self._prior_only and trials == 0
        if seconds is not None and seconds > 0:
            self.model.scoring.add(seconds)
            if self.score_first and not self._sleeping:
                self.ledger.charge(seconds)
        self.calibration.reply(hits, trials - hits)
        self._scored_in_reply += trials
        if trials > 0:
            rate = hits / trials + (PROBE_MARGIN if self.score_first else 0.0)
            # Costs not yet timed (a cold start turned plain by a rejected first draft): scored again soon, as
            # ``observe_prompt`` does. Read as "would not pay", a head scored 3 of 4 waited 8 plain steps for its
            # next scoring and drafted again only after 14 of a 24-token reply's tokens (bench_mtp.py, hybrid).
            best = self.model.best_k(min(1.0, rate))
            close = best is None or best > 0
            floor = self._scoring_floor()
            self.shadow_interval = floor if close else max(floor, min(self.shadow_interval * 2, SHADOW_MAX))

    def observe_prompt(self, hits: int, trials: int, seconds: float = 0.0) -> None:
        """The drafter scored on the reply's prompt (``PromptScoredDrafter``): ``hits`` of ``trials`` guesses right,
        in ``seconds`` of the head's own work on the prompt (charged to waking it: ``AwakeLedger``).

        With ``score_first`` and at least PROMPT_TRIALS of them, the score is read through what the replies
        before showed of it (``PromptCalibration``): once a reply has shown how its prompt's score stood to its
        own acceptance, a reply's acceptance starts from its prompt's score so corrected, and the scoring and probe
        intervals start again — how often a head agrees belongs to the text, and a warm policy carried the last
        reply's. Measured (bench_mtp.py "dense agreeing", 8 x 768, a policy carried across 64- and 192-token
        replies): the head accepted 0.84 on the 192-token replies and 0.55-0.67 on the 64-token ones, and carried
        over it drafted into them at 0.95x plain where a start judged by the prompt ran at 1.13x.

        Before any calibration (the first reply after a load) the score only decides whether to draft at all: if
        it could pay (``_score_could_pay``), the reply drafts at its first step and its depth follows its own drafts
        (a warm policy keeps what it carried), the score weighed into the reply's acceptance as PROMPT_PRIOR_TRIALS
        guesses (a fresh policy's: one with an acceptance of its own keeps it); if not, its acceptance starts from
        the score, and the head rests once that is conclusive (``should_rest``). Live, the prompt's weight could not
        be told apart (bench_mtp_steps.py, hybrid, 24 tokens, cold against depth 2: not taken 0.86-0.88x, weighed
        as 2-8 guesses 0.81-0.87x); replayed on the heads' real guesses with the timings held still
        (bench_mtp_replay.py, 8 prompts) a first reply whose first draft was rejected, its acceptance read from
        that draft alone, decoded plainly while the head was in step again (see PROMPT_PRIOR_TRIALS). And not
        counted towards resting: a first draft of 4 rejected whole read acceptance 0, and the prompt's 16 guesses
        made that conclusive though the reply went on at 0.8. Fewer trials (a prompt mostly cached): scored like a
        plain stretch."""
        if self.score_first and not self._sleeping and seconds > 0:
            self.ledger.charge(seconds)
        if not (self.score_first and trials >= PROMPT_TRIALS):
            self.observe_shadow(hits, trials)
            return
        self.calibration.prompt(hits, trials)
        self._probe_interval = PROBE_START
        calibrated = self.calibration.calibrated(hits, trials)
        if calibrated is not None:
            # Without the cold start's pseudo-rejection: the calibration already maps the score to what replies
            # were accepted at, and deflated once more (16 guesses: by 1/17) the hybrid's warm replies started at
            # ~0.78 where depth 2-3 pays from ~0.8, and drafted at depth 1 or not at all.
            self.model.restart_acceptance(calibrated * trials, trials, prior=0.0)
            self._scored_in_reply += trials
            # Its first draft is at most FIRST_DRAFT_MAX, as a cold start's is: a score near 1 (the dense head's
            # 16 of 16, with the offset a reply accepted 0.96 left) reads as certainty, and the warm policy's first
            # draft was 16 long on a prompt whose reply then went on at 0.34 — 2 tokens accepted, a fifth of a
            # 24-token reply's time (bench_mtp.py "dense agreeing": warm 0.93x the best depth, cold 1.00x). A
            # draft too short costs a step's share at most; the reply's own drafts grow it from there.
            self._judged_by_prompt = True
            judged = calibrated
        elif self._score_could_pay(hits / trials) and self._first_draft_pays(hits / trials):
            # Nor is it counted towards resting: the reply's own guesses decide that (``should_rest``). The first
            # draft is as long as the score says on the prior costs, from k_start (a prompt understates a head)
            # to FIRST_DRAFT_MAX (its chained guesses fall off).
            self._prompt_approved = True
            self._first_k = self._first_draft_length(hits / trials)
            judged = self.model.acceptance if self.model.acceptance is not None else hits / trials
            if self.model.acceptance is None:
                # A first reply: the score is its acceptance's prior, PROMPT_PRIOR_TRIALS guesses' worth, so that
                # its first drafts are judged with it, not alone (a first draft of 2 rejected read 0).
                self.model.restart_acceptance(PROMPT_PRIOR_TRIALS * hits / trials, PROMPT_PRIOR_TRIALS, prior=0.0)
                self._prior_only = True
        else:
            self.model.restart_acceptance(hits, trials)
            self._scored_in_reply += trials
            judged = hits / trials
        # Not yet timed: scored again soon (a cold start that turned plain after one rejected first draft waited
        # 8 plain steps for its next scoring, a third of a 24-token reply).
        best = self.model.best_k(min(1.0, judged + PROBE_MARGIN))
        floor = self._scoring_floor()
        self.shadow_interval = floor if best is None or best > 0 else min(2 * floor, SHADOW_MAX)

    def _first_draft_length(self, a: float) -> int:
        """A prompt-approved cold start's first draft at a raw score ``a``: as long as the score says on the prior
        costs, from k_start (a prompt understates a head) to FIRST_DRAFT_MAX (its chained guesses fall off)."""
        return min(max(self.k_start, prior_best_k(a, self.k_max)), FIRST_DRAFT_MAX, self.k_max)

    def _first_draft_pays(self, a: float) -> bool:
        """Whether the first draft a raw score ``a`` would make (``_first_draft_length``) pays by itself at an
        acceptance PROBE_MARGIN above the score, and at least PROBE_ACCEPTANCE (the first draft is the reply's probe
        of the head, judged as a probe is: the hybrid head's 8-10 of 16 stand for 0.8 kept in its replies, and
        judged at 0.7 a quiet cold start's first draft, which pays there, was now and then not made: 0.94 -> 0.91x
        the best depth), on the verify costs timed so far (at load: ``seed_costs``) and the drafting cost timed
        (at load before any draft); True where one is unknown (the prior decided, ``_score_could_pay``).

        ``_score_could_pay`` asks whether *some* depth pays, and on a busy CPU, where a batch of 2 to 5 tokens
        costs about 3x one (bench_mtp_steps.py --burner: 11-13 ms against 4.2 ms), only drafts of 5 or more do,
        at acceptances no NextN head keeps that far; the first draft, 2 to 4 long, was approved all the same and
        lost 3-5 ms of a 24-token reply's ~100 whenever it was made (the hybrid's head, at its cold starts)."""
        m = self.model
        k = self._first_draft_length(a)
        c_d = m.draft_per_token.value if m.draft_per_token.value is not None else self._draft_token_at_load
        single, verify = m.verify_cost(1), m.verify_cost(k + 1)
        if c_d is None or single is None or verify is None:
            return True
        return expected_rate(min(1.0, max(PROBE_ACCEPTANCE, a + PROBE_MARGIN)), k, c_d, verify) >= 1.0 / single

    def _score_could_pay(self, a: float) -> bool:
        """Whether drafting at acceptance ``a`` (a prompt's raw score) could pay: on the measured costs with
        PROBE_MARGIN more acceptance (drafting at the cost timed at load while the drafts' own is unmeasured), or
        before any pass is timed on the prior at ``a`` itself (as a cold start's first draft is judged,
        ``_first_draft_could_pay``). A head scored 1 of 16 (bench_mtp.py "dense low", 0.02-0.09 accepted) cannot,
        either way; the hybrid head's 8 of 16 can, on a quiet machine."""
        best = self.model.best_k(min(1.0, a + PROBE_MARGIN))
        if best is None:
            # No draft yet (a fresh policy given the costs timed at load, ``seed_costs``; None again where no pass
            # was timed): on those costs, with the margin. The prior is kinder than a busy CPU's costs and judged
            # the raw score; measured costs with the raw score turned down the hybrid head, whose 8-10 of 16 on its
            # prompts stand for 0.8 accepted in its replies, where depth 2-3 pays on a quiet machine.
            best = self.model.best_k(min(1.0, a + PROBE_MARGIN), draft_cost=self._draft_token_at_load or 0.0)
        return best > 0 if best is not None else self._pays_before_drafting(a)

    def _scoring_floor(self) -> int:
        """The fewest plain steps between two scorings: SHADOW_START, or more where a scoring costs more than
        SCORING_SHARE of that many plain passes (both measured: the scorings' lower median against c_verify(1)).
        Scoring is how a plain stretch learns that the drafter would pay again; its price must stay a small share
        of the plain decoding it watches, whatever the machine makes a scoring cost next to a pass. An MTP head's
        policy only (``score_first``), where it was measured: a draft model's scoring interval doubles while its
        guesses would not pay, and with the floor (and this change's other rules) the generated "hidden" family's
        cold starts read 0.94x the best fixed k against 0.95-0.97x before (bench_autok_cold.py, alternated twice)."""
        scoring, single = self.model.scoring.value, self.model.verify_cost(1)
        if not self.score_first or scoring is None or single is None or single <= 0:
            return SHADOW_START
        if self._warming_up and 0 < self._speculative_steps < WARMUP_STEPS:
            # The warm-up's first drafts were rejected and sent it plain: its acceptance rests on a handful of
            # guesses, and each scoring is worth more than its price until the reply has shown which way it goes
            # (a head scored as not close to paying still has its interval doubled: ``observe_shadow``). With the
            # floor (7-8 plain steps on the 8 x 768 hybrid, a scoring a third of a pass), a first reply whose first
            # two drafts were rejected decoded a third of its 24 tokens plainly while the head was right 3 times
            # in 4 (bench_mtp_replay.py, its costs per draft length and size change: under load 0.95x the best
            # fixed depth against 0.98x scored every SHADOW_START steps; quiet, dense and useless heads unchanged).
            return SHADOW_START
        return min(SHADOW_MAX, max(SHADOW_START, math.ceil(scoring / (SCORING_SHARE * single))))

    def restart(self, hits: float, trials: float) -> None:
        """A reply's acceptance from ``hits`` of ``trials`` guesses alone (none: a cold start, which with
        ``score_first`` decodes plainly until scored), scoring and probes from their first intervals: for a
        drafter whose acceptance belongs to the text and whose scoring is cheap (chain_draft.py: prompt lookup)."""
        self.model.restart_acceptance(hits, trials)
        self._scored_in_reply += round(trials)
        self.shadow_interval = self._scoring_floor()
        self._probe_interval = PROBE_START

    def should_rest(self) -> bool:
        """With ``score_first``: plain decoding is chosen, the drafter was scored on at least REST_TRIALS guesses
        of this reply (its prompt's included), and not even REST_MARGIN more acceptance would pay — the
        evidence is conclusive, so the drafter need not follow the target (no scoring, no probes) until the next
        reply, which scores it again on its prompt. Once True it stays so until ``start_reply``, and ``choose``
        then returns 0 without consulting the cost model (nothing it learns while resting can change that).
        Measured on an MTP head accepted 2-9 % of the time (bench_mtp_steps.py "dense low", 8 x 768): following
        the target cost 0.13-0.15 ms per step (the hidden-state copies), the scorings 0.26 ms per plain step and
        automatic depth's own calls 0.07 ms, of a 4-5 ms plain step: automatic depth ran at 0.90-0.93x plain
        while it drafted nothing."""
        if not self._resting:
            a = self.model.acceptance
            self._resting = (self.score_first and self.last_choice == 0 and self._scored_in_reply >= REST_TRIALS
                             and a is not None and (self.model.best_k(min(1.0, a + REST_MARGIN)) or 0) == 0)
        return self._resting

    @property
    def wants_shadow(self) -> bool:
        """True while plain decoding is chosen: the decoder should keep scoring the drafter."""
        return self.last_choice == 0

    def snapshot(self) -> dict[str, Any]:
        """What this policy learned, as plain JSON values: the costs' timings (per batch size, with their age in
        observations), the acceptance window, the prompt calibration, the confidence gate's counts (an MTP
        head's) and the probe and scoring intervals.
        ``restore`` of it chooses as this policy would from here on, given between two replies (the engine saves
        one after each): the last reply's guesses are kept for the calibration (they are folded into it when the
        next reply starts); what else belongs to a reply (its untimed first step, a head put to rest) the next
        reply starts anew."""
        m = self.model
        awake_saved, awake_plain, awake_tokens = self.ledger.totals()  # the last reply's steps closed into it
        return {
            "version": SNAPSHOT_VERSION,
            "k_max": self.k_max,
            "k_start": self.k_start,
            "score_first": self.score_first,
            "falloff": m.weighs_positions,
            "probe_margin": self.probe_margin,
            "observations": m._observations,
            "verify": {str(n): {"samples": list(t.samples), "stamp": m._stamp[n],
                                **({"single_at": m._single_at[n]} if m._single_at[n] is not None else {})}
                       for n, t in enumerate(m.verify) if t.count},
            "draft_per_token": list(m.draft_per_token.samples),
            "draft_by_length": {str(k): list(t.samples) for k, t in enumerate(m.draft_by_length) if t.count},
            "scoring": list(m.scoring.samples),
            "verify_unsettled": list(m.unsettled_single.samples),
            "accepted": m._accepted,
            "rejections": m._rejections,
            "prior": m._prior,
            "reached": m._reached[1:],
            "kept": m._kept[1:],
            "prompt_offset": self.calibration.offset,
            "reply_prompt": self.calibration._prompt,
            "reply_hits": self.calibration._hits,
            "reply_misses": self.calibration._misses,
            "speculative_steps": self._speculative_steps,
            "shadow_interval": self.shadow_interval,
            "probe_interval": self._probe_interval,
            "plain_streak": self._plain_streak,
            "last_choice": self.last_choice,
            "slept": self._slept,
            "sleep_for": self._sleep_for,
            "rechecking": self._rechecking,
            "asleep_pass": self._asleep_pass_s,
            "awake_saved": awake_saved,
            "awake_plain": awake_plain,
            "awake_tokens": awake_tokens,
            "awake_recent": [list(entry) for entry in self.ledger.latest()],
            "follow_single": list(self.follow_single.samples),
            **({"gate_reached": list(self.gate.reached), "gate_kept": list(self.gate.kept)}
               if self.gate is not None else {}),
        }

    @classmethod
    def restore(cls, snapshot: dict[str, Any]) -> AutoDraftLength:
        """The policy ``snapshot`` describes. ``ValueError`` naming the first field that is missing, of the wrong
        type or out of range (a file edited by hand, or written by another version): nothing half-restored."""
        s = _SnapshotReader(snapshot)
        if s.integer("version", 1, None) != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot version {snapshot['version']} is not {SNAPSHOT_VERSION}")
        k_max = s.integer("k_max", 1, None)
        score_first = s.flag("score_first")
        # (absent from a snapshot saved before draft positions were weighed: as an MTP head's policy is by default)
        falloff = s.flag("falloff") if "falloff" in snapshot else score_first
        policy = cls(k_max=k_max, k_start=s.integer("k_start", 1, k_max), score_first=score_first,
                     probe_margin=s.number("probe_margin", 0.0, 1.0), falloff=falloff)
        m = policy.model
        m._observations = s.integer("observations", 0, None)
        for batch, entry in s.sizes("verify", "batch size", len(m.verify) - 1).items():
            timings = _SnapshotReader(entry, f"verify.{batch}.")
            for x in timings.seconds("samples"):
                m.verify[batch].add(x)
            m._stamp[batch] = timings.integer("stamp", 0, m._observations)
            if isinstance(entry, dict) and "single_at" in entry:  # (absent before it was kept: ``_fresh``)
                m._single_at[batch] = timings.number("single_at", 0.0, None)
        for x in s.seconds("draft_per_token"):
            m.draft_per_token.add(x)
        if "draft_by_length" in snapshot:  # (absent from a snapshot saved before drafts were timed per length)
            lengths = _SnapshotReader(s.mapping("draft_by_length"), "draft_by_length.")
            for length in s.sizes("draft_by_length", "draft length", k_max):
                for x in lengths.seconds(str(length)):
                    m.draft_by_length[length].add(x)
        if "scoring" in snapshot:  # (absent from a snapshot saved before scorings were timed)
            for x in s.seconds("scoring"):
                m.scoring.add(x)
        if "verify_unsettled" in snapshot:  # (absent from a snapshot saved before it was kept apart)
            for x in s.seconds("verify_unsettled"):
                m.unsettled_single.add(x)
        m._accepted = s.number("accepted", 0.0, None)
        m._rejections = s.number("rejections", 0.0, None)
        m._prior = s.number("prior", 0.0, PRIOR_REJECTIONS)
        if "reached" in snapshot:  # (absent from a snapshot saved before drafts were counted per position)
            m._reached[1:] = s.counts("reached", k_max)
            m._kept[1:] = s.counts("kept", k_max)
            if any(kept > reached + 1e-9 for kept, reached in zip(m._kept, m._reached, strict=True)):
                raise ValueError("kept: more drafts kept at a position than reached it")
            m._deepest = max((i for i in range(1, k_max + 1) if m._reached[i] > 0 or m._kept[i] > 0), default=0)
            if m.weighs_positions:
                m._count_weighed_depth()
        offset = snapshot.get("prompt_offset")
        policy.calibration.offset = None if offset is None else s.number("prompt_offset", 0.0, PROMPT_BIAS_LIMIT)
        prompt = snapshot.get("reply_prompt")
        policy.calibration._prompt = None if prompt is None else s.number("reply_prompt", 0.0, 1.0)
        policy.calibration._hits = s.number("reply_hits", 0.0, None)
        policy.calibration._misses = s.number("reply_misses", 0.0, None)
        policy._speculative_steps = s.integer("speculative_steps", 0, None)
        policy.shadow_interval = s.integer("shadow_interval", 1, SHADOW_MAX)
        policy._probe_interval = s.integer("probe_interval", 1, PROBE_MAX)
        policy._plain_streak = s.integer("plain_streak", 0, None)
        policy.last_choice = s.integer("last_choice", 0, k_max)
        if "slept" in snapshot:  # (absent from a snapshot saved before heads slept through replies)
            policy._slept = s.integer("slept", 0, None)
        if "sleep_for" in snapshot:  # (absent from a snapshot saved before waking was weighed: AwakeLedger)
            policy._sleep_for = s.integer("sleep_for", SLEEP_MAX, SLEEP_LONGEST)
            policy._rechecking = s.flag("rechecking")
            asleep_pass = snapshot.get("asleep_pass")
            policy._asleep_pass_s = None if asleep_pass is None else s.number("asleep_pass", 0.0, None)
            ledger = policy.ledger
            ledger.saved_s = s.number("awake_saved", -math.inf, None)
            ledger.plain_s = s.number("awake_plain", 0.0, None)
            ledger.tokens = s.number("awake_tokens", 0.0, None)
            if "awake_recent" in snapshot:  # (absent before the latest replies were kept: AwakeLedger.recent)
                ledger.recent = s.replies("awake_recent")
            for x in s.seconds("follow_single"):
                policy.follow_single.add(x)
        if "gate_reached" in snapshot and policy.gate is not None:  # (absent before drafts were gated)
            policy.gate.restore(s.counts("gate_reached", GATE_BANDS), s.counts("gate_kept", GATE_BANDS))
        return policy


class _SnapshotReader:
    """Typed reads of a snapshot's fields, each a ``ValueError`` naming the field when it does not fit."""

    def __init__(self, data: object, prefix: str = "") -> None:
        if not isinstance(data, dict):
            raise ValueError(f"{prefix.rstrip('.') or 'snapshot'} is not a mapping")
        self.data: dict[str, Any] = data
        self.prefix = prefix

    def _get(self, name: str) -> Any:
        if name not in self.data:
            raise ValueError(f"{self.prefix}{name} is missing")
        return self.data[name]

    def integer(self, name: str, low: int, high: int | None) -> int:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            raise ValueError(f"{self.prefix}{name} must be a whole number from {low}"
                             f"{'' if high is None else f' to {high}'}, not {value!r}")
        return value

    def number(self, name: str, low: float, high: float | None) -> float:
        value = self._get(name)
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or value < low or (high is not None and value > high)):
            raise ValueError(f"{self.prefix}{name} must be a number from {low}"
                             f"{'' if high is None else f' to {high}'}, not {value!r}")
        return float(value)

    def flag(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise ValueError(f"{self.prefix}{name} must be true or false, not {value!r}")
        return value

    def mapping(self, name: str) -> dict[str, Any]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise ValueError(f"{self.prefix}{name} must be a mapping, not {value!r}")
        return value

    def sizes(self, name: str, what: str, high: int) -> dict[int, Any]:
        """A mapping keyed by whole numbers from 1 to ``high`` written as strings (JSON's keys), by number; the
        first other key refused, naming ``what`` it counts."""
        entries: dict[int, Any] = {}
        for key, entry in self.mapping(name).items():
            # (as ``snapshot`` writes them: "7", not "07" or a digit from another script)
            if not (isinstance(key, str) and key.isascii() and key.isdigit() and key == str(int(key))
                    and 1 <= int(key) <= high):
                raise ValueError(f"{self.prefix}{name}: {what} {key!r} is not between 1 and {high}")
            entries[int(key)] = entry
        return entries

    def counts(self, name: str, length: int) -> list[float]:
        """A list of ``length`` decayed counts, each a number of at least 0."""
        value = self._get(name)
        if not isinstance(value, list) or len(value) != length or not all(
                not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x >= 0
                for x in value):
            raise ValueError(f"{self.prefix}{name} must be a list of {length} counts of at least 0")
        return [float(x) for x in value]

    def replies(self, name: str) -> list[tuple[float, float]]:
        """A list of (saved seconds, plain-equivalent seconds > 0) pairs (``AwakeLedger.recent``)."""
        value = self._get(name)
        if not isinstance(value, list) or not all(
                isinstance(e, list) and len(e) == 2
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in e)
                and e[1] > 0 for e in value):
            raise ValueError(f"{self.prefix}{name} must be a list of [saved, plain > 0] pairs of seconds")
        return [(float(e[0]), float(e[1])) for e in value][-RECENT_REPLIES:]

    def seconds(self, name: str) -> list[float]:
        """A list of at most WINDOW timings, each a positive number of seconds."""
        value = self._get(name)
        if not isinstance(value, list) or len(value) > WINDOW or not all(
                not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0
                for x in value):
            raise ValueError(f"{self.prefix}{name} must be a list of at most {WINDOW} positive timings (seconds)")
        return [float(x) for x in value]
