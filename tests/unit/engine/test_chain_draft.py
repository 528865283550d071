"""Chained drafters (engine/chain_draft.py) with scripted members: who drafts which position, what each member
learns from a verification, and automatic k per member. Each docstring says what breaking the code looked like."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from outrider.engine import chain_draft
from outrider.engine.chain_draft import LONG_MATCH, ChainDraft
from outrider.engine.draft import EMPTY_DRAFT, Draft
from outrider.engine.drafters import PromptLookupDraft
from outrider.engine.params import SamplingParams
from outrider.engine.sampling import SparseDist

GREEDY = SamplingParams()
RNG = np.random.default_rng(0)


class _StoppedClock:
    """``time`` for chain_draft.py with a clock that never moves: drafting is timed at 0 s."""

    @staticmethod
    def perf_counter() -> float:
        return 0.0


@pytest.fixture(autouse=True)
def _drafting_is_free(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """These simulations count, so nothing in them may be timed: a member's drafting time is measured by the
    chain, and a few microseconds more or less under load moved automatic k's choice at a near tie (the prose reply
    of the conversation below drafted 44 or 49 tokens from run to run on the same replies)."""
    monkeypatch.setattr(chain_draft, "time", _StoppedClock)
    yield


class Scripted:
    """A drafter that proposes ``script`` (cut to k) and records what it was asked."""

    def __init__(self, kind: str, script: Sequence[int], *, q: bool = False) -> None:
        self.kind = kind
        self.script = list(script)
        self.q = q
        self.asked: list[tuple[list[int], int]] = []
        self.observed: list[int] = []
        self.reused: list[bool] = []  # ``reuse`` of each prefill

    def prefill(self, prompt: Sequence[int], *, reuse: bool = True) -> int:
        self.reused.append(reuse)
        return 0

    def propose(self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator,
                p_min: float, draft_min: int = 0) -> Draft:
        self.asked.append((list(committed), k))
        tokens = self.script[:k]
        if not tokens:
            return EMPTY_DRAFT
        dists = None
        if not sampling.greedy:
            dists = [SparseDist(np.array([t, t + 1]), np.array([0.5, 0.5])) if self.q else SparseDist.point(t)
                     for t in tokens]
        return Draft(tokens, dists)

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        self.observed.append(len(committed))
        return 0, len(committed) - start

    def close(self) -> None:
        pass


def test_the_model_fills_what_the_lookups_leave() -> None:
    """No history match: prompt lookup proposes 2; the model continues after them. (Asking the model with the
    committed tokens alone — not plus the lookup's — made it draft the same positions twice.)"""
    history, prompt, model = Scripted("history", []), Scripted("lookup", [7, 8]), Scripted("model", [9, 10, 11, 12])
    chain = ChainDraft([history, prompt, model])
    draft = chain.propose([1, 2, 3], 5, GREEDY, RNG, 0.0)
    assert draft.tokens == [7, 8, 9, 10, 11]
    assert draft.sources == ("lookup", "lookup", "model", "model", "model")
    assert model.asked == [([1, 2, 3, 7, 8], 3)]


class Matched(Scripted):
    """A history lookup stand-in that says how long its match was (``HistoryLookupDraft.match_length``)."""

    def __init__(self, script: Sequence[int], match_length: int) -> None:
        super().__init__("history", script)
        self.match_length = match_length


def test_which_lookup_proposal_is_taken() -> None:
    """A long history match wins; a short one that disagrees with prompt lookup loses to it (the conversation at
    hand); agreeing proposals give the longer. The model fills the rest after the one taken. (Taking history's proposal
    whenever it had one failed the second assert: [4, 5, 9, 9].)"""
    def run(history: Scripted) -> Draft:
        return ChainDraft([history, Scripted("lookup", [7, 8]), Scripted("model", [9, 9, 9])]).propose(
            [1], 4, GREEDY, RNG, 0.0)

    assert run(Matched([4, 5], 8)).sources == ("history", "history", "model", "model")
    assert run(Matched([4, 5], 5)).tokens == [7, 8, 9, 9]
    agreeing = run(Matched([7, 8, 3], 5))
    assert agreeing.tokens == [7, 8, 3, 9] and agreeing.sources[:3] == ("history",) * 3


def test_sampling_keeps_each_tokens_own_q() -> None:
    """At T > 0 a lookup token's q is a point mass and a model token's its own distribution. (Giving every
    token a point mass made the model's tokens look certain: the verifier's rule is then not exact.)"""
    history, model = Scripted("history", [4]), Scripted("model", [9, 9], q=True)
    draft = ChainDraft([history, model]).propose([1], 3, SamplingParams(temperature=1.0), RNG, 0.0)
    assert draft.dists is not None
    assert [d.probs.tolist() for d in draft.dists] == [[1.0], [0.5, 0.5], [0.5, 0.5]]


def test_settle_credits_each_member_with_the_tokens_the_target_examined() -> None:
    """History 2 then model 3, accepted 1: history examined 2 and had 1 kept, the model's tokens were never
    examined; accepted 3: the model's first was kept, its second rejected. (Counting the model's unreached tokens
    as rejected — ``examined`` without the ``accepted >= start`` test — read the model at 0.0 after the first.)"""
    chain = ChainDraft([Scripted("history", []), Scripted("model", [])])
    chain.set_automatic(8)
    history_policy, model_policy = chain.policy_of("history"), chain.policy_of("model")
    assert history_policy is not None and model_policy is not None
    draft = Draft([4, 5, 9, 9, 9], sources=("history", "history", "model", "model", "model"))
    chain.settle(draft, 1, batch=6, verify_s=0.01)
    assert history_policy.model.measured_acceptance == 0.5
    assert model_policy.model.measured_acceptance is None
    chain.settle(draft, 3, batch=6, verify_s=0.01)
    assert model_policy.model.measured_acceptance == 0.5


def test_automatic_k_switches_off_a_member_that_misses_and_scores_it_while_off() -> None:
    """A history member always rejected at its first token gets k = 0 while the model (always accepted) keeps
    drafting; the switched-off member is scored on the target's tokens. (Giving every member the whole k
    instead of its own automatic k, history kept drafting and wasting the model's positions.)"""
    history, model = Scripted("history", [4, 4, 4]), Scripted("model", [9, 9, 9, 9])
    chain = ChainDraft([history, model])
    chain.set_automatic(4)
    committed = [1, 2, 3]
    for _ in range(60):
        draft = chain.propose(committed, 4, GREEDY, RNG, 0.0)
        n_history = draft.sources.count("history")
        accepted = 0 if n_history else len(draft.tokens)
        # A pass costs more with more tokens: a wasted draft position is not free.
        chain.settle(draft, accepted, batch=len(draft.tokens) + 1, verify_s=0.010 + 0.002 * len(draft.tokens))
        committed = [*committed, *([9] * accepted), 5]
    last = chain.propose(committed, 4, GREEDY, RNG, 0.0)
    assert "history" not in last.sources and last.sources.count("model") >= 2
    assert history.observed, "the switched-off member was never scored"


def test_mtp_drafts_only_where_no_lookup_proposed() -> None:
    """MTP heads need the target's hidden state before each position they continue from: after a lookup's draft
    they are not asked; with no lookup proposal they draft the whole step. (Without ``FROM_COMMITTED_ONLY`` the
    MTP member was asked to continue the history's tokens.)"""
    history, mtp = Scripted("history", [4, 5]), Scripted("mtp", [9, 9, 9])
    draft = ChainDraft([history, Scripted("lookup", []), mtp]).propose([1], 5, GREEDY, RNG, 0.0)
    assert draft.tokens == [4, 5] and mtp.asked == []
    history.script = []
    draft = ChainDraft([history, Scripted("lookup", []), mtp]).propose([1], 5, GREEDY, RNG, 0.0)
    assert draft.tokens == [9, 9, 9] and draft.sources == ("mtp",) * 3 and mtp.asked == [([1], 5)]


def test_a_long_history_match_drafts_past_k_up_to_the_reach() -> None:
    """SuffixDecoding's adaptive length: a history match of LONG_MATCH tokens or more proposes its continuation
    past k, up to the decoder's ``reach`` (what one pass can verify), leaving the model no room; a shorter match,
    prompt lookup, and a call without a reach stay within k. (With history's request cut to k, as before, the
    first assert read 4 tokens: at k = 8 no drafter could pass 9 tokens per pass on a file edited again.)"""
    script = list(range(100, 120))
    model = Scripted("model", [9, 9, 9])
    draft = ChainDraft([Matched(script, LONG_MATCH), Scripted("lookup", [7] * 20), model]).propose(
        [1], 4, GREEDY, RNG, 0.0, reach=12)
    assert draft.tokens == script[:12] and draft.sources == ("history",) * 12 and model.asked == []
    short = ChainDraft([Matched(script, LONG_MATCH - 1), Scripted("lookup", [])]).propose(
        [1], 4, GREEDY, RNG, 0.0, reach=12)
    assert short.tokens == script[:4]
    lookup = ChainDraft([Matched([], 0), Scripted("lookup", [7] * 20)]).propose([1], 4, GREEDY, RNG, 0.0, reach=12)
    assert lookup.tokens == [7] * 4
    assert ChainDraft([Matched(script, LONG_MATCH)]).propose([1], 4, GREEDY, RNG, 0.0).tokens == script[:4]


def test_prefill_passes_afresh_to_every_member() -> None:
    """A seeded request's prefill (``reuse=False``) reaches each member, so a chain's draft model evaluates the
    prompt afresh too. (Forwarding only the prompt, the default ``reuse=True`` reached the members: failed.)"""
    members = [Scripted("history", []), Scripted("lookup", []), Scripted("model", [])]
    chain = ChainDraft(list(members))
    chain.prefill([1, 2, 3], reuse=False)
    chain.prefill([1, 2, 3])
    assert [m.reused for m in members] == [[False, True]] * 3


def _decode(chain: ChainDraft, target: Sequence[int], prompt: Sequence[int],
            drafted_at: list[int] | None = None) -> tuple[int, int, int]:
    """Greedy speculative decoding of one reply, ``target`` (the target's own tokens), after ``prompt`` with
    ``chain`` at automatic k (its ``k_max``; prefill, then ``set_automatic``, as the decoder does), a pass of n
    tokens costing 10 ms x (1 + 0.25 (n - 1)) (the cost model's prior slope, so a short draft pays from an
    acceptance of about 0.25 on). Returns (drafted, accepted, passes); ``drafted_at`` gets the
    reply positions where a draft was proposed."""
    committed = list(prompt)
    chain.prefill(committed)
    chain.set_automatic(chain.k_max)  # as the decoder starts each reply: after the prefill
    pos = drafted = accepted = passes = 0
    while pos < len(target):
        bound = len(target) - pos - 1
        draft = chain.propose(committed, min(16, bound), GREEDY, RNG, 0.0, reach=bound) if bound else EMPTY_DRAFT
        kept = next((i for i, t in enumerate(draft.tokens) if t != target[pos + i]), len(draft.tokens))
        if draft.tokens and drafted_at is not None:
            drafted_at.append(pos)
        batch = len(draft.tokens) + 1
        chain.settle(draft, kept, batch=batch, verify_s=0.010 * (1 + 0.25 * (batch - 1)))
        step = target[pos : pos + kept + 1]
        committed.extend(step)
        pos, drafted, accepted, passes = pos + len(step), drafted + len(draft.tokens), accepted + kept, passes + 1
    return drafted, accepted, passes


def _prose(seed: int, n: int) -> list[int]:
    """Free prose for prompt lookup: n tokens over 24 token ids, so its n-grams recur but what follows them is
    right about 1 time in 24."""
    return [int(t) for t in np.random.default_rng(seed).integers(100, 124, size=n)]


def _lookup_chain() -> ChainDraft:
    chain = ChainDraft([Scripted("history", []), PromptLookupDraft()])
    chain.set_automatic(16)
    return chain


def test_prompt_lookup_drafts_nothing_on_text_it_cannot_guess() -> None:
    """A cold chain on 1,000 tokens of prose: prompt lookup is scored before its first draft, and its score
    (about 0.05) would not pay, so it never drafts. (Breaking it, ``score_first`` off for prompt lookup: it drafted
    9 tokens at the cold start, 1 accepted; with the default probe margin of 0.2 back too, 27.)"""
    prose = _prose(7, 1_200)
    drafted, _, passes = _decode(_lookup_chain(), prose[200:], prose[:200])
    assert drafted == 0
    assert passes == 1_000


def test_a_switched_off_prompt_lookup_is_not_probed_on_prose() -> None:
    """After a reply that repeats a passage (prompt lookup drafting, every token kept) and one prose reply that
    switches it off, three more prose replies of 250 tokens: no probe, since the acceptance it is scored at on
    every token would not pay. (Breaking it, the default probe margin of 0.2 for prompt lookup: 3, 3 and 0
    tokens drafted in probes, all rejected.)"""
    rng = np.random.default_rng(8)
    passage = [int(t) for t in rng.integers(100, 1_000, size=40)]
    chain = _lookup_chain()
    assert _decode(chain, passage * 5, passage)[0] > 0
    prose = _prose(7, 1_200)
    _decode(chain, prose[200:450], prose[:200])
    for r in range(1, 4):
        chain.set_automatic(16)  # a new reply, as the decoder starts each
        drafted, _, _ = _decode(chain, prose[200 + 250 * r : 450 + 250 * r], prose[: 200 + 250 * r])
        assert drafted == 0, f"reply {r}"


def test_prompt_lookup_still_drafts_text_it_can_guess() -> None:
    """The same chain on text that repeats a 40-token passage (an answer quoting the prompt): its score pays,
    so prompt lookup drafts from the first reply on and more than half its tokens are kept — the policy that
    keeps quiet on prose is not one that never drafts. (Breaking it, no scoring of prompt lookup while it is
    off — ``_shadow`` skipped for it: with ``score_first`` it never drafted, 200 passes for 200 tokens.)"""
    rng = np.random.default_rng(8)
    passage = [int(t) for t in rng.integers(100, 1_000, size=40)]
    drafted, accepted, passes = _decode(_lookup_chain(), passage * 5, passage)
    assert drafted > 0 and accepted / drafted > 0.5
    assert 200 / passes > 2.0


def _conversation(turns: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[int, int, int, list[int]]]:
    """One conversation of (message, reply) turns through one chain: each reply's prompt is the conversation so
    far plus its message, as the app sends it. Per reply: (drafted, accepted, passes, positions drafted at)."""
    chain, text, out = _lookup_chain(), [], []
    for message, reply in turns:
        text = [*text, *message]
        where: list[int] = []
        out.append((*_decode(chain, reply, text, where), where))
        text = [*text, *reply]
    return out


def _passage(seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(100, 1_000, size=40)]


def test_a_prose_reply_after_a_copy_drafts_almost_nothing_and_the_next_copy_drafts_early() -> None:
    """User: a passage, reply: it five times (200 tokens, prompt lookup copying, every draft kept); user: 30
    tokens of prose, reply: 250 tokens of prose; user: another passage, reply: it five times. At each reply prompt
    lookup's carried acceptance (0.998 after the copy) restarts weighed as 2 guesses: the prose reply drafts 5
    tokens, none kept (its first two or three drafts, rejected, outweigh the 2 guesses; then it is scored on every
    plain stretch and stays off), and the copy after it drafts from its first scoring (token 5), in 23 passes.
    (Breaking it, the carried acceptance kept whole — no restart in ``set_automatic``: the prose reply drafted 104
    tokens, 1 kept, as its window of 107 accepted tokens faded by one rejected draft a step; the copy after it
    drafted first at token 33, its scoring interval of 128 tokens carried over from the prose reply, and took 72
    passes.)"""
    prose = _prose(7, 600)
    copy1, free, copy2 = _conversation([(_passage(1), _passage(1) * 5), (prose[:30], prose[30:280]),
                                        (_passage(2), _passage(2) * 5)])
    assert copy1[0] > 0 and copy1[2] < 25
    assert free[0] <= 8, f"the prose reply drafted {free[0]} tokens, {free[1]} kept"
    assert copy2[3] and copy2[3][0] <= 8, f"the copy drafted first at token {copy2[3][:1]}"
    assert copy2[2] <= 30


def test_a_copy_after_a_copy_still_drafts_from_its_first_step() -> None:
    """Two copies in a row: the carried acceptance, weighed as 2 guesses, starts the second copy drafting at token
    1 (at token 0 the lookup has no match), 16 passes (carried whole: 13); and a prose reply after a copy whose
    message is 3 tokens drafts 4 tokens, none kept (carried whole: 97, 4 kept). (Breaking it, the carried
    acceptance dropped — ``CARRIED_GUESSES`` 0, a cold start at every reply: the second copy drafted first at
    token 5, after a plain scoring interval, and took 19 passes.)"""
    first, second = _conversation([(_passage(1), _passage(1) * 5), (_passage(2), _passage(2) * 5)])
    assert first[0] > 0
    assert second[3][:1] == [1], f"the second copy drafted first at token {second[3][:1]}"
    assert second[2] <= 17
    prose = _prose(7, 600)
    _, free = _conversation([(_passage(1), _passage(1) * 5), (prose[:3], prose[30:280])])
    assert free[0] <= 8, f"the prose reply drafted {free[0]} tokens, {free[1]} kept"
