"""Automatic depth's tests. For the unit tests, a reply as the decoder runs it, simulated: the policy chooses each
k, a draft is kept up to its first rejection drawn from per-position chances, every ``shadow_interval`` plain steps
the head is scored on 4 guesses (unless it rests: then it no longer follows the target either). The costs are the
test's own functions, so what the reply cost and saved is tallied here, independently of the policy's own
bookkeeping. For the integration tests whose point is a decision, not this machine's timings, fixed load-time costs
(``set_pass_costs``)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from outrider.engine.autodraft import AutoDraftLength
from outrider.engine.pass_costs import PASS_REPEATS, PASS_SIZES
from outrider.engine.speculative import SpeculativeDecoder


@dataclasses.dataclass(frozen=True)
class HeadCosts:
    """Seconds: ``cost(n)`` a target pass of n tokens (an awake head's copy included), ``c_draft`` per drafted
    token, ``follow_s`` the copy of a one-token pass's hidden state, ``scoring_s`` a scoring, ``prompt_s`` the
    head's work on the prompt."""

    cost: Callable[[int], float]
    c_draft: float
    follow_s: float = 0.0
    scoring_s: float = 0.0
    prompt_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class SimulatedReply:
    seconds: float  # the reply's decoding: its passes, drafts and scorings
    drafted: int  # tokens drafted
    saved: float  # seconds saved against plain decoding with the head asleep (its prompt work charged too)


def simulate_reply(policy: AutoDraftLength, tokens: int, kept: tuple[float, ...], costs: HeadCosts,
                   rng: random.Random, prompt_score: tuple[int, int] = (9, 16)) -> SimulatedReply:
    """One reply of ``tokens`` tokens, the head scored ``prompt_score`` (hits, trials) on its prompt; ``kept[i]``
    is the chance that draft position i is kept, given every one before it was."""
    policy.start_reply()
    policy.observe_prompt(*prompt_score, seconds=costs.prompt_s)
    cost = costs.cost
    bare = cost(1) - costs.follow_s
    seconds, saved = 0.0, -costs.prompt_s
    emitted = drafted = since_scoring = 0
    while emitted < tokens:
        k = min(policy.choose(), tokens - emitted - 1)
        if k > 0:
            n = 0
            while n < k and rng.random() < kept[n]:
                n += 1
            step = cost(k + 1) + costs.c_draft * k
            policy.observe(batch=k + 1, verify_s=cost(k + 1), drafted=k, accepted=n, draft_s=costs.c_draft * k,
                           follow_s=costs.follow_s)
            seconds += step
            saved += (n + 1) * bare - step
            emitted += n + 1
            drafted += k
            continue
        # As the decoder does: a head put to rest (``should_rest``) stops following the target for the reply.
        follow_s = 0.0 if policy.should_rest() else costs.follow_s
        policy.observe(batch=1, verify_s=bare + follow_s, drafted=0, accepted=0, draft_s=0.0, follow_s=follow_s)
        seconds += bare + follow_s
        saved -= follow_s
        emitted += 1
        since_scoring += 1
        if since_scoring >= policy.shadow_interval and not policy.should_rest():
            hits = sum(rng.random() < kept[0] for _ in range(4))
            policy.observe_shadow(hits, 4, seconds=costs.scoring_s or None)
            seconds += costs.scoring_s
            saved -= costs.scoring_s
            since_scoring = 0
    return SimulatedReply(seconds, drafted, saved)


def set_pass_costs(decoder: SpeculativeDecoder, load: float = 1.0) -> None:
    """Replace the batched passes' and the drafted token's costs ``decoder``'s load timed
    (``SpeculativeDecoder.time_passes``) with fixed multiples of its one-token pass, shaped like bench_mtp.py's
    quiet CPU (a pass of 2 tokens 1.79x one of 1, each token after +0.14x; a drafted token 0.15x), so that a test
    of what automatic depth decides from a head's scores does not depend on the machine's load: timed on a busy
    machine, the tiny test target's first draft came and went. The one-token pass stays as timed (times ``load``),
    for the replies' own timings to be measured against. On these a head scored 16 of 16 drafts at its first
    step; one scored 3 of 16 does not. ``load``: the passes as timed on a machine that many times as busy as the
    replies find it (0.5: a load came after the timing and doubled every pass)."""
    single = load * min(decoder.pass_costs[1])
    decoder.pass_costs = {n: [single * (1.0 if n == 1 else 1.79 + 0.14 * (n - 2))] * PASS_REPEATS
                          for n in PASS_SIZES}
    decoder.draft_token_costs = [0.15 * single] * PASS_REPEATS
