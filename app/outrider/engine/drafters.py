"""Draft sources behind one interface: a draft model, prompt lookup, or none (plain decoding).

A drafter proposes up to ``k`` tokens that continue ``committed`` (the prompt plus every token accepted so far).
At temperature > 0 it also returns, for each proposed token, the distribution q it was drawn from — the
verifier needs q for the exact acceptance rule. A deterministic drafter (prompt lookup) proposes with q a point
mass, for which the same rule stays exact.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from outrider.engine.draft import EMPTY_DRAFT, Draft
from outrider.engine.grammar import BoolArray, GrammarMask
from outrider.engine.llama.backend import FloatArray, LoadedModel, ModelContext
from outrider.engine.params import LookupSettings, SamplingParams
from outrider.engine.sampling import (
    SparseDist,
    distribution,
    draft_token,
    greedy_token,
    top_probability,
)

SHADOW_WINDOW = 16  # a draft model's guesses scored per shadow scoring (the most recent ones)


class Drafter(Protocol):
    """What the speculative loop needs from a drafter."""

    kind: str

    def prefill(self, prompt: Sequence[int], *, reuse: bool = True) -> int:
        """Prepare for a new generation from ``prompt``; returns how many tokens had to be evaluated.

        ``reuse`` False: keep nothing from earlier generations — every context the drafter owns evaluates
        ``prompt`` afresh, in one pass split the same way each time. A seeded request asks for it: on a CPU
        llama.cpp's flash attention rounds a pass of 64+ rows (tiled) differently from fewer rows, so a cached
        prefix plus a short new part is not the prompt evaluated at once; what a draft proposes (its q, which the
        rejection sampler's accept/residual draws read) would then depend on the requests before (docs/metrics.md,
        "Samplers")."""
        ...

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float,
        draft_min: int = 0,
    ) -> Draft:
        """Up to ``k`` tokens continuing ``committed``; stop early when confidence falls below ``p_min``.

        Exactness contract (temperature > 0): whether position i is drafted may depend on the committed tokens and
        on the draft tokens *before* i, never on the token drawn at i; once drafting starts it goes on to at least
        ``draft_min`` tokens (k permitting), so a draft is never thrown away because of the tokens it drew.
        """
        ...

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        """Score the drafter on target tokens ``committed[start:]`` emitted by plain steps (nothing proposed):
        returns (agreements, trials) of its greedy guess against what the target chose, for automatic k."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class PromptScoredDrafter(Protocol):
    """A drafter that automatic k can score on the prompt itself, and put to rest while it cannot pay (an MTP
    head: its guesses at the prompt's positions cost only its output head, the target's hidden states for them
    exist anyway, and following the target costs a copy of each pass's hidden states).

    The decoder asks the target for its logits at the last ``prompt_rows`` positions of the prompt's prefill and
    hands their greedy tokens to ``prefill_scored`` instead of calling ``prefill``."""

    prompt_rows: int
    follow_s: float  # seconds spent following the target's passes so far (what waking costs a plain step)
    # The latest shadow scoring's guesses (``observe``; ``prefill_scored`` leaves it empty): the drafter's confidence
    # in each (the top-10 softmax of its logits) and whether it was right; what automatic depth's confidence gate
    # learns from.
    scored_guesses: list[tuple[float, bool]]

    def prefill_scored(self, prompt: Sequence[int], target_guesses: Sequence[int], *,
                       reuse: bool = True) -> tuple[int, int]:
        """``prefill`` (``reuse`` as there), and score the drafter at the prompt's positions
        ``len(prompt) - 1 - len(target_guesses)`` .. ``len(prompt) - 2`` against ``target_guesses`` (the target's
        greedy token after each): (hits, trials)."""

    def rest(self, resting: bool) -> None:
        """Stop (``True``) or resume following the target's passes; a resting drafter is not asked to draft."""
        ...

    def time_draft_token(self, token: int, repeats: int) -> list[float]:
        """Seconds per drafted token, timed ``repeats`` times before any reply, the drafter left as loaded."""
        ...


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix (C-speed list comparison in the usual all-equal case)."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class NoDraft:
    """Plain decoding: never proposes anything (the baseline)."""

    kind = "none"

    def prefill(self, prompt: Sequence[int], *, reuse: bool = True) -> int:
        return 0

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float,
        draft_min: int = 0,
    ) -> Draft:
        return EMPTY_DRAFT

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        return 0, 0

    def close(self) -> None:
        pass


class ModelDraft:
    """A separate draft model with its own context, kept in sync with the committed tokens.

    Invariant: ``self.cached`` lists exactly the committed tokens whose keys/values are in the draft's KV cache
    (target ids, in position order). ``n_vocab`` is the target's vocabulary size: a draft vocabulary may be up to
    128 tokens longer (compat.py), and those extra ids are cut from its logits so it never proposes a token the
    target does not have. It may also be up to 128 tokens *shorter*: a target id the draft lacks (llama_decode
    fails on it) is fed to the draft as a substitute it has (``feedable``), so the draft's context stays one
    token per position and drafting goes on; verification keeps the output exact whatever the draft guesses.
    """

    kind = "model"

    def __init__(self, context: ModelContext, n_vocab: int | None = None, target: LoadedModel | None = None) -> None:
        self.context = context
        self.cached: list[int] = []
        self.n_vocab = min(n_vocab or context.n_vocab, context.n_vocab)
        self._synced = 0  # tokens the latest ``_sync`` evaluated
        self._own_vocab = context.n_vocab
        self._target = target
        self._substitutes: dict[int, int] = {}

    def feedable(self, tokens: Sequence[int]) -> list[int]:
        """``tokens`` with every id the draft's vocabulary lacks replaced by its substitute (``substitute``)."""
        own = self._own_vocab
        if not tokens or max(tokens) < own:
            return list(tokens)
        return [t if t < own else self.substitute(t) for t in tokens]

    def substitute(self, token: int) -> int:
        """A draft id standing for target id ``token`` the draft lacks: the draft's own id for the same token
        text (a special token the draft has at another id), else the first id of the token's rendered text as
        the draft tokenizes it, else 0. Cached per id."""
        found = self._substitutes.get(token)
        if found is not None:
            return found
        draft_model = self.context.model
        choice = 0
        if self._target is not None:
            same = draft_model.tokenize(self._target.token_text(token), add_special=False, parse_special=True)
            rendered = draft_model.tokenize(self._target.piece(token).decode("utf-8", errors="replace"),
                                            add_special=False, parse_special=False)
            choice = next((ids[0] for ids in ([same] if len(same) == 1 else []) + [rendered]
                           if ids and 0 <= ids[0] < self._own_vocab), 0)
        self._substitutes[token] = choice
        return choice

    def _logits(self, i: int) -> FloatArray:
        return self.context.logits_row(i)[: self.n_vocab]

    def _sync(self, committed: Sequence[int], *, score_from: int | None = None,
              abortable: bool = False) -> tuple[int, int]:
        """Make the cache hold ``committed`` with logits for the next position (reuses the common prefix).

        With ``score_from``, also compare the draft's greedy guess for each of ``committed[score_from:]`` with the
        token actually there; returns (agreements, trials)."""
        keep = min(common_prefix_length(self.cached, committed), len(committed) - 1)
        if score_from is not None and score_from > 0:
            if self.context.is_recurrent:
                # Re-evaluating the token before score_from would take a recurrent state back past its
                # checkpoint (a full re-evaluation): score from the next token on instead.
                score_from += 1
            # The guess for committed[score_from] is the output at position score_from - 1: re-evaluate that one
            # token even when it is cached (it is after the previous scoring), so the batch yields its logits.
            keep = min(keep, score_from - 1)
        self.context.truncate(keep)
        keep = self.context.n_past  # a recurrent draft may land earlier, at its checkpoint (ModelContext.truncate)
        del self.cached[keep:]
        new = committed[keep:]
        self._synced = len(new)
        hits = trials = 0
        if score_from is not None and keep < score_from < len(committed) and len(new) <= self.context.n_batch:
            # Output j of this batch predicts committed[keep + j + 1]. Only the last SHADOW_WINDOW guesses are
            # scored: each scored position costs the draft's output head (a vocabulary-sized product), which for a
            # small draft costs more than its layers; the KV of every new token is needed anyway.
            first = max(score_from - keep - 1, len(new) - 1 - SHADOW_WINDOW)
            self.context.decode(self.feedable(new), logits=len(new) - first)
            for j in range(first, len(new) - 1):
                trials += 1
                hits += int(greedy_token(self._logits(j)) == committed[keep + j + 1])
        else:
            self.context.decode(self.feedable(new), logits="last", abortable=abortable)
        self.cached.extend(new)
        return hits, trials

    def prefill(self, prompt: Sequence[int], *, reuse: bool = True) -> int:
        if not reuse:  # afresh (Drafter.prefill): the draft's KV for the prompt must not depend on earlier requests
            self.context.clear()
            self.cached.clear()
        before = len(prompt) - min(common_prefix_length(self.cached, prompt), len(prompt) - 1)
        self._sync(prompt, abortable=True)
        self.context.synchronize()
        return before

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        return self._sync(committed, score_from=start)

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float,
        draft_min: int = 0, grammar: GrammarMask | None = None,
    ) -> Draft:
        """As ``Drafter.propose``; with ``grammar`` (structured output) each draft token is chosen from the
        grammar-masked distribution (its state walked on a clone), so the draft never proposes a forbidden token."""
        room = self.context.n_ctx - len(committed) - 1
        k = min(k, room)
        if k <= 0:
            return EMPTY_DRAFT
        t0 = time.perf_counter()
        self._sync(committed)
        synced = self._synced
        if self.context.is_recurrent:
            # Drafts are one-token decodes, which a recurrent state cannot step back through: keep the state at
            # the committed tokens, for the rollback of the drafts the target rejects.
            self.context.checkpoint()
        sync_s = time.perf_counter() - t0
        tokens: list[int] = []
        dists: list[SparseDist] | None = None if sampling.greedy else []
        # Below draft_min, p-min does not stop a draft that has started (see Drafter.propose).
        must = min(max(draft_min, 1), k)
        walker = grammar.clone() if grammar is not None else None
        while True:
            logits = self._logits(-1) if walker is None else walker.mask(self._logits(-1))
            if sampling.greedy:
                if p_min > 0 and not 0 < len(tokens) < must and top_probability(logits) < p_min:
                    break
                token = greedy_token(logits)
            else:
                # Decide from q before drawing from it: stopping must not depend on the token drawn here.
                q = distribution(logits, sampling)
                if p_min > 0 and not 0 < len(tokens) < must and float(q.probs.max()) < p_min:
                    break
                # The request's sampler's proposal, keyed by absolute position (its noise is the target's there).
                token = draft_token(q, sampling, len(committed) + len(tokens))
                assert dists is not None
                dists.append(q)
            tokens.append(token)
            if walker is not None:
                if not np.isfinite(logits[token]):  # the grammar allows nothing more (complete, EOG forbidden)
                    tokens.pop()
                    if dists:
                        dists.pop()
                    break
                walker.accept(token)
            if len(tokens) >= k:
                break
            self.context.decode([token], logits="last")
            self.cached.append(token)
        if walker is not None:
            walker.close()
        return Draft(tokens, dists, sync_s, synced)

    def proposal_dists(self, prefix: Sequence[int], tokens: Sequence[int], sampling: SamplingParams,
                       allowed: Sequence[BoolArray] | None = None) -> list[SparseDist] | None:
        """q at each position of ``tokens`` continuing ``prefix`` (``outrider verify``'s draft-direction test);
        None when they do not fit one batch. ``allowed``: the grammar's allowed tokens per position (structured
        output: q is then the masked distribution ``propose(grammar=…)`` draws from)."""
        def masked_row(logits: FloatArray, i: int) -> FloatArray:  # as grammar.masked_row (no import cycle)
            if allowed is None:
                return logits
            n = min(allowed[i].shape[0], logits.shape[0])
            out = np.full(logits.shape[0], -np.inf, dtype=np.float32)
            out[:n] = np.where(allowed[i][:n], logits[:n], -np.inf)
            return out

        if not tokens or len(tokens) > self.context.n_batch or len(prefix) + len(tokens) > self.context.n_ctx:
            return None
        self._sync(prefix)
        dists = [distribution(masked_row(self._logits(-1), 0), sampling)]
        if len(tokens) > 1:
            self.context.decode(list(tokens[:-1]), logits="all")
            self.cached.extend(tokens[:-1])
            dists += [distribution(masked_row(self._logits(i), i + 1), sampling)
                      for i in range(len(tokens) - 1)]
        return dists

    def close(self) -> None:
        self.context.close()


class PromptLookupDraft:
    """N-gram search over the prompt and the output so far; proposes what followed the latest match.

    An incremental index maps each n-gram to the position right after its latest occurrence, so a step costs
    O(ngram_max) dictionary look-ups however long the conversation is.
    """

    kind = "lookup"

    def __init__(self, settings: LookupSettings = LookupSettings()) -> None:
        self.settings = settings
        self._indexed: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}

    def _update_index(self, committed: Sequence[int]) -> None:
        start = common_prefix_length(self._indexed, committed)
        if start < len(self._indexed):  # history changed (new conversation): rebuild
            self._indexed, self._index, start = [], {}, 0
        self._indexed.extend(committed[start:])
        # Index the n-grams ending just before each position e whose continuation committed[e] exists.
        for e in range(max(start, 1), len(committed)):
            for n in range(self.settings.ngram_min, self.settings.ngram_max + 1):
                if e - n >= 0:
                    self._index[tuple(committed[e - n : e])] = e

    def prefill(self, prompt: Sequence[int], *, reuse: bool = True) -> int:
        if not reuse:  # the index is a function of the committed tokens anyway; afresh, nothing else can leak in
            self._indexed, self._index = [], {}
        self._update_index(prompt)
        return 0

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float,
        draft_min: int = 0,
    ) -> Draft:
        if k <= 0:
            return EMPTY_DRAFT
        self._update_index(committed)
        for n in range(self.settings.ngram_max, self.settings.ngram_min - 1, -1):
            if len(committed) < n:
                continue
            e = self._index.get(tuple(committed[-n:]))
            if e is not None:
                tokens = list(committed[e : e + k])
                dists = None if sampling.greedy else [SparseDist.point(t) for t in tokens]
                return Draft(tokens, dists)
        return EMPTY_DRAFT

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        """Would the lookup have guessed each of ``committed[start:]``? A few dictionary look-ups per token: the
        index is brought up to ``start`` once and grown one position at a time (not re-checked against every
        prefix, which made a switched-off lookup's scoring quadratic in the conversation's length)."""
        first = max(start, 1)
        self._update_index(committed[:first])
        lo, hi = self.settings.ngram_min, self.settings.ngram_max
        hits = trials = 0
        for i in range(first, len(committed)):
            # The guess from the index of committed[:i]: the n-grams ending at i, their latest continuation < i.
            for n in range(min(hi, i), lo - 1, -1):
                e = self._index.get(tuple(committed[i - n : i]))
                if e is not None:
                    trials += 1
                    hits += int(committed[e] == committed[i])
                    break
            for n in range(lo, min(hi, i) + 1):  # what _update_index adds for position i
                self._index[tuple(committed[i - n : i])] = i
        self._indexed.extend(committed[len(self._indexed) :])
        return hits, trials

    def proposals(self, prefix: Sequence[int], tokens: Sequence[int]) -> list[int | None]:
        """The token this lookup would propose first at each position of ``tokens`` continuing ``prefix`` (None:
        no match there): its point-mass q, for ``outrider verify``'s draft-direction test."""
        return [self._first_guess([*prefix, *tokens[:j]]) for j in range(len(tokens))]

    def _first_guess(self, prefix: Sequence[int]) -> int | None:
        self._update_index(prefix)
        for n in range(self.settings.ngram_max, self.settings.ngram_min - 1, -1):
            if len(prefix) >= n:
                e = self._index.get(tuple(prefix[-n:]))
                if e is not None and e < len(prefix):
                    return prefix[e]
        return None

    def close(self) -> None:
        pass
