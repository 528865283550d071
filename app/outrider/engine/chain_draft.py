"""Chained drafters: the draftless ones first (they cost nothing), a draft model after, each with its own k.

``ChainDraft(members)`` holds lookups (history lookup, prompt lookup: ``LOOKUP_KINDS``) and at most one model-like
drafter (a draft model, MTP) after them. One step: the first lookup that has a proposal gives its tokens (the
others are skipped: a later lookup would only repeat a shorter match); when it has none, or a shorter one than the
step allows, the model drafter continues from the committed tokens plus the lookup's draft and fills the rest.

A long history match drafts past k (SuffixDecoding's adaptive length): k is the length of a guess whose quality
is unknown, but a match of ``LONG_MATCH`` tokens or more of earlier text predicts its continuation far beyond it
(a file edited again, a repeated tool call), and the history lookup's own rule (confidence and match length,
history_draft.py) already bounds how far. So when its match is that long it may propose up to the decoder's
``reach`` (what one pass can verify: context, reply length, batch) and at most ``HISTORY_REACH``. Measured on
bench_history_lookup.py (replayed on SmolLM2's plain replies, k = 8): with the history's draft cut to k, the
second and third edit of a file read 6.96 and 8.00 tokens per pass, 1.13x and 1.10x prompt lookup's, the ceiling
of k + 1 = 9 in sight; drafting past k, 13.3 and 26.7.

Automatic k per drafter: with automatic k (``set_automatic``) each member has its own ``AutoDraftLength``: the
draft length it may propose is chosen each step from *its* measured acceptance and cost (a lookup drafts for
free, so it pays from a low acceptance on; a draft model costs its passes). After each verification ``settle``
tells each member how many of its tokens the target examined and accepted: tokens after a rejection in an earlier
member's part were never examined and say nothing about it. A member whose k is 0 is scored on the target's own
tokens every ``shadow_interval`` tokens (``Drafter.observe``), so it comes back when it would pay again — on
free prose a history lookup that keeps missing is switched off this way and costs only its scoring.

Prompt lookup on free prose: its scoring is exact (``_policy``), so it drafts neither at a cold start nor in a
probe unless the acceptance it was scored at would pay. Measured on bench_history_lookup.py's prose turns
(SmolLM2-135M, 160-token replies): with the default policy it drafted 4 tokens twice at the engine's first reply
(a cold start) and was then probed once every 128-256 tokens at a scored acceptance of 0.08-0.15 (a 3-token
draft, "could pay" at 0.2 more acceptance under the prior verify-cost slope), each probe a batch of 4 rejected,
about one pass lost; now nothing is drafted on those turns.

Prompt lookup at a reply's start: how often it guesses right belongs to the text, not to the pair, and a copy it
drafted well (a reply repeating a passage: acceptance near 1 over a window of a hundred accepted tokens) left it
drafting into the next reply long after that reply turned out to be free prose, since a rejected draft counts as
one rejection a step. So ``set_automatic`` restarts its acceptance at each reply from the carried one weighed as
``CARRIED_GUESSES`` guesses (``AutoDraftLength.restart``): too little to outweigh a reply's first rejected drafts
or its first scoring, enough that a copy after a copy still drafts at its first step; its scoring and probe
intervals start again (a prose reply had grown them to 128 tokens and more). Simulated (test_chain_draft.py: one
conversation, 200-token copies of a 40-token passage, 250-token prose replies): the prose reply after a copy
drafted 104 tokens (1 kept) before, now 5 (none kept); the copy after that prose reply drafted first at token 33
before, in 72 passes, now at token 5, in 23; a copy right after a copy drafts at its first step with a proposal
both ways, in 13 passes before, 16 now. Scoring it instead on the prompt's new tokens (as an MTP head is,
autodraft.py ``observe_prompt``) was tried and measured worse on SmolLM2's own replies: a message quoting a
paragraph to repeat is new text, its guesses there mostly wrong, and the copy reply after it took 35 passes for
58 tokens, where a cold start took 21.

Exactness: which member drafts position i, and how far, depends on the committed tokens and on the draft tokens
before i only (a lookup's draft is a function of what it is given; a model member is asked for its part after the
lookup's is fixed), so the verifier's rule stays exact with each token's own q (a point mass for a lookup token).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from outrider.engine.autodraft import AutoDraftLength
from outrider.engine.draft import EMPTY_DRAFT, Draft
from outrider.engine.drafters import Drafter
from outrider.engine.params import SamplingParams
from outrider.engine.sampling import SparseDist

LOOKUP_KINDS = ("history", "lookup")  # drafters without a model: alternatives to each other, tried in order
# Drafters that can only continue committed tokens: MTP heads read the target's hidden state of the position
# before, and a lookup's draft tokens have none until the target has verified them. They draft a step only when no
# lookup proposed anything; a draft model continues after a lookup's tokens.
FROM_COMMITTED_ONLY = ("mtp",)
CATCH_UP_TOKENS = 2  # speculative.CATCH_UP_TOKENS (that module imports this one)
# A history match at least this long wins over prompt lookup's proposal (its match is 1-3 tokens); a shorter one
# that disagrees with prompt lookup loses to it. Measured on bench_history_lookup.py: with history always first,
# its 4-7 token matches in unrelated chats cost a copying task up to a quarter of its tokens per pass.
LONG_MATCH = 8
HISTORY_REACH = 64  # tokens a long history match may draft in one step, past k (SuffixDecoding's tree depth)
# At a reply's start prompt lookup's acceptance carried from the replies before weighs as this many guesses (see the
# module docstring). Simulated (test_chain_draft.py): a copy right after a copy took 16 passes at 2, 17 at 1, 19 at 0
# (a cold start each reply: it drafted first after one scoring interval), 15 at 8, 13 carried whole; the prose reply
# after a copy drafted 5 tokens at 2 (none kept), 2 at 1, 0 at 0, 19 at 8, 104 carried whole (1 kept).
CARRIED_GUESSES = 2.0


@dataclasses.dataclass
class _Member:
    drafter: Drafter
    policy: AutoDraftLength | None = None
    draft_s: float = 0.0  # this step's drafting time (a draft model's catch-up on plain-step tokens left out)
    shadow_from: int = 0  # the first committed position this member has not been scored on
    cap: int = 0  # this step's k for this member


class ChainDraft:
    """Several drafters as one ``Drafter`` (see the module docstring). ``kind`` names them in order."""

    def __init__(self, members: Sequence[Drafter]) -> None:
        if not members:
            raise ValueError("a chain needs at least one drafter")
        self.members = [_Member(m) for m in members]
        self.kind = "+".join(m.kind for m in members)
        self.k_max: int | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(m.drafter.kind for m in self.members)

    def set_automatic(self, k_max: int | None) -> None:
        """Automatic k per member up to ``k_max`` (None: every member may use the whole k the decoder gives).
        Each member's policy is kept from reply to reply (its costs belong to the pair and the machine)."""
        self.k_max = k_max
        for m in self.members:
            if k_max is not None and (m.policy is None or m.policy.k_max != k_max):
                m.policy = _policy(m.drafter.kind, k_max)
            if m.policy is not None:
                m.policy.start_reply()  # a member's first timing of a reply is its coldest
                carried = m.policy.model.measured_acceptance
                if k_max is not None and m.drafter.kind == "lookup" and carried is not None:
                    # Its acceptance belongs to the text: what the replies before left weighs as a few guesses
                    # (see the module docstring), and it is scored again soon (its scoring is cheap).
                    m.policy.restart(CARRIED_GUESSES * carried, CARRIED_GUESSES)

    def policy_of(self, kind: str) -> AutoDraftLength | None:
        """The automatic-k policy of the member of this kind (None without automatic k)."""
        return next((m.policy for m in self.members if m.drafter.kind == kind), None)

    def prefill(self, prompt: Sequence[int], *, reuse: bool = True) -> int:
        for m in self.members:
            m.shadow_from = len(prompt)
        return sum(m.drafter.prefill(prompt, reuse=reuse) for m in self.members)

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float,
        draft_min: int = 0, reach: int = 0,
    ) -> Draft:
        """As ``Drafter.propose``; ``reach`` is the most tokens the decoder can verify this step (context,
        reply length, batch): a history match of ``LONG_MATCH`` tokens or more drafts its confident continuation
        up to it, past ``k`` (see the module docstring)."""
        automatic = self.k_max is not None
        for m in self.members:
            m.draft_s = 0.0
            m.cap = k if m.policy is None or not automatic else min(k, m.policy.choose())
            if m.cap == 0 and m.policy is not None and automatic:
                self._shadow(m, committed)
        tokens: list[int] = []
        dists: list[SparseDist] | None = None if sampling.greedy else []
        sources: list[str] = []
        sync_s, synced = 0.0, 0
        proposals = [(m, part) for m in self.members if m.drafter.kind in LOOKUP_KINDS and m.cap > 0
                     if (part := self._lookup(m, committed, min(k, m.cap), reach, sampling, rng, p_min,
                                              draft_min)).tokens]
        chosen = _pick(proposals)
        parts = [chosen] if chosen is not None else []
        for m in self.members:
            room = min(k - sum(len(p.tokens) for _, p in parts), m.cap)
            if m.drafter.kind in LOOKUP_KINDS or room <= 0 or (parts and m.drafter.kind in FROM_COMMITTED_ONLY):
                continue
            context = committed if not parts else [*committed, *parts[0][1].tokens]
            part = self._ask(m, context, room, sampling, rng, p_min, max(0, draft_min - len(context) + len(committed)))
            if part.tokens:
                parts.append((m, part))
        for m, part in parts:
            m.shadow_from = len(committed)
            tokens.extend(part.tokens)
            sources.extend([m.drafter.kind] * len(part.tokens))
            if dists is not None:
                dists.extend(part.dists if part.dists else [SparseDist.point(t) for t in part.tokens])
        for _, part in [*proposals, *parts[1 if chosen is not None else 0:]]:  # every proposal asked for, once
            sync_s, synced = sync_s + part.sync_s, synced + part.synced
        if not tokens:
            return dataclasses.replace(EMPTY_DRAFT, sync_s=sync_s, synced=synced) if synced or sync_s else EMPTY_DRAFT
        return Draft(tokens, dists, sync_s, synced, tuple(sources))

    def _lookup(self, m: _Member, committed: Sequence[int], room: int, reach: int, sampling: SamplingParams,
                rng: np.random.Generator, p_min: float, draft_min: int) -> Draft:
        """A lookup member's proposal: at most ``room`` tokens, or up to ``reach`` (at most ``HISTORY_REACH``)
        when it is the history's and its match is at least ``LONG_MATCH`` tokens long."""
        longest = max(room, min(reach, HISTORY_REACH)) if m.drafter.kind == "history" else room
        part = self._ask(m, committed, longest, sampling, rng, p_min, draft_min)
        if len(part.tokens) > room and getattr(m.drafter, "match_length", 0) < LONG_MATCH:
            part = dataclasses.replace(part, tokens=part.tokens[:room],
                                       dists=part.dists[:room] if part.dists else None)
        return part

    def _ask(self, m: _Member, context: Sequence[int], room: int, sampling: SamplingParams,
             rng: np.random.Generator, p_min: float, draft_min: int) -> Draft:
        """One member's proposal (at most ``room`` tokens), its drafting time noted in ``m.draft_s``."""
        t0 = time.perf_counter()
        part = m.drafter.propose(context, room, sampling, rng, p_min, draft_min)
        # As the decoder does for a single drafter: a model's catch-up on tokens of plain steps is no cost of
        # drafting (only CATCH_UP_TOKENS of it are).
        catch_up = min(1.0, CATCH_UP_TOKENS / part.synced) if part.synced else 1.0
        m.draft_s += time.perf_counter() - t0 - part.sync_s * (1.0 - catch_up)
        if len(part.tokens) > room:
            part = dataclasses.replace(part, tokens=part.tokens[:room], dists=part.dists[:room] if part.dists else None)
        return part

    def _shadow(self, m: _Member, committed: Sequence[int]) -> None:
        """Score a switched-off member on the target's tokens since it was last scored (see the module docstring)."""
        assert m.policy is not None
        if len(committed) - m.shadow_from >= m.policy.shadow_interval:
            hits, trials = m.drafter.observe(committed, m.shadow_from)
            m.shadow_from = len(committed)
            m.policy.observe_shadow(hits, trials)

    def settle(self, draft: Draft, accepted: int, *, batch: int, verify_s: float) -> None:
        """After the target verified ``draft`` (``accepted`` of its tokens kept) in one pass of ``batch`` tokens
        taking ``verify_s`` seconds: each member's policy learns its own part (see the module docstring)."""
        if self.k_max is None:
            return
        sources = draft.sources or (self.kind,) * len(draft.tokens)
        for m in self.members:
            if m.policy is None:
                continue
            where = [i for i, s in enumerate(sources) if s == m.drafter.kind]
            start = where[0] if where else 0
            examined = len(where) if where and accepted >= start else 0
            kept = max(0, min(accepted - start, examined))
            m.policy.observe(batch=batch, verify_s=verify_s, drafted=examined, accepted=kept, draft_s=m.draft_s)

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        """The members' scores summed (the decoder scores a chain only when it chooses k itself)."""
        hits = trials = 0
        for m in self.members:
            h, t = m.drafter.observe(committed, start)
            hits, trials = hits + h, trials + t
        return hits, trials

    def close(self) -> None:
        for m in self.members:
            m.drafter.close()


def _policy(kind: str, k_max: int) -> AutoDraftLength:
    """A member's automatic k. Prompt lookup's scoring on plain steps is its exact acceptance (each of the
    target's tokens checked against the guess the lookup would have drafted there, every token, for the price of
    a few dictionary look-ups), so it is scored before its first draft and probed only when that acceptance
    itself would pay (see the module docstring; the history's scoring is a sample, without its re-synchronised
    source, and keeps the default margin). One acceptance for every draft position (``CostModel.falloff`` is for
    an MTP head's chained guesses: a lookup's later guesses are as good as its first once it has matched)."""
    if kind == "lookup":
        return AutoDraftLength(k_max=k_max, score_first=True, probe_margin=0.0, falloff=False)
    return AutoDraftLength(k_max=k_max)


def _pick(proposals: list[tuple[_Member, Draft]]) -> tuple[_Member, Draft] | None:
    """The lookup proposal to take when several lookups propose (see the module docstring): a history match of
    at least ``LONG_MATCH`` tokens; else, if all agree on the first token, the longest; else the last lookup's
    (prompt lookup: the conversation at hand is the likelier source than an earlier chat's short match)."""
    if not proposals:
        return None
    for m, part in proposals:
        if getattr(m.drafter, "match_length", 0) >= LONG_MATCH:
            return m, part
    if len({part.tokens[0] for _, part in proposals}) == 1:
        return max(proposals, key=lambda mp: len(mp[1].tokens))
    return proposals[-1]
