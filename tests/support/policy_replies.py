"""A reply as the decoder runs it, simulated for automatic depth's unit tests: the policy chooses each k, a draft
is kept up to its first rejection drawn from per-position chances, every ``shadow_interval`` plain steps the head
is scored on 4 guesses (unless it rests). The costs are the test's own functions, so what the reply cost and saved
is tallied here, independently of the policy's own bookkeeping."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from outrider.engine.autodraft import AutoDraftLength


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
        policy.observe(batch=1, verify_s=cost(1), drafted=0, accepted=0, draft_s=0.0, follow_s=costs.follow_s)
        seconds += cost(1)
        saved -= costs.follow_s
        emitted += 1
        since_scoring += 1
        if since_scoring >= policy.shadow_interval and not policy.should_rest():
            hits = sum(rng.random() < kept[0] for _ in range(4))
            policy.observe_shadow(hits, 4, seconds=costs.scoring_s or None)
            seconds += costs.scoring_s
            saved -= costs.scoring_s
            since_scoring = 0
    return SimulatedReply(seconds, drafted, saved)
