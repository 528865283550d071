"""MTP drafting: the target's own multi-token-prediction (NextN) block proposes the draft.

The NextN block sits on the target: at position p it reads the token at p and the target's hidden state at p - 1
and predicts the token at p + 1 — what the target's next pass will choose, one step ahead. It runs in its own
llama.cpp context (``llama/mtp_context.py``), on the target file itself (``--mtp``) or on a separate head file
(``--mtp-head``), and it is much cheaper than the target (one block against the whole trunk).

How the draft of depth k is made, with ``committed`` = c_0 .. c_{L-1} (c_{L-1} not yet evaluated by the target):

1. catch up: the MTP context's cells are (c_p, h_{p-1}) for p = 0 .. L-1, h being the target's hidden states,
   copied after every target decode (``ModelContext.after_decode``) and kept only until they are fed; the cell of
   c_{L-1} is evaluated with logits, giving d_1;
2. depth 2 .. k: the cell (d_{j-1}, the MTP's own hidden output of the previous cell) gives d_j;
3. the cells past c_{L-1} (the drafted ones) are removed again: they hold the MTP's guesses, not target states.

Nothing is fed while the decoder decodes plainly (k = 0): the hidden states wait, and are fed in one batch at the
next draft or shadow scoring, so depth 0 costs only the copies. Invariant: ``self.cells`` lists the tokens of the
MTP context's positions 0 .. len - 1, each fed with the target's hidden state of the position before.

Automatic depth (``PromptScoredDrafter``): at each prefill the target gives its logits at the prompt's last
``prompt_rows`` positions and the cells fed there get an output each, so the head is scored on the prompt itself
(cell p's guess against the target's own choice at p: what a depth-1 draft is verified against) before the reply's
first step — a cold start drafts at once where the head agrees, and a warm one judges the new text by its prompt.
A head scored useless on enough of a reply is put to rest (``rest``): the target stops outputting hidden states,
none is copied or scored, until the next reply's prefill wakes it.

What a draft costs (automatic depth charges it): step 1's catch-up over the tokens the last verify pass kept is
part of every draft — the drafted cells are removed, so each accepted token is fed again with the target's own
hidden state — and is charged in full. Only the catch-up over tokens that plain steps emitted since the last draft
is reported as ``Draft.sync_s`` / ``synced`` (the decoder leaves most of it out, as for a draft model's catch-up).
Reporting the whole catch-up there let a depth-3 draft whose tokens were all accepted charge half of its first MTP
pass (4 cells fed: the decoder's allowance is 2 tokens), so a long depth looked cheaper than it was.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from outrider.engine.draft import EMPTY_DRAFT, Draft
from outrider.engine.drafters import SHADOW_WINDOW, common_prefix_length
from outrider.engine.llama.backend import FloatArray, ModelContext
from outrider.engine.llama.mtp_context import MtpContext, expose_hidden_states, hidden_states
from outrider.engine.params import SamplingParams
from outrider.engine.sampling import SparseDist, distribution, draft_token, greedy_token, top_probability


class MtpDraft:
    """Drafts with an MTP context fed by the target context's hidden states (see the module doc)."""

    kind = "mtp"

    def __init__(self, target: ModelContext, mtp: MtpContext, n_vocab: int | None = None) -> None:
        self.target = target
        self.mtp = mtp
        self.n_embd = mtp.n_embd
        self.n_vocab = min(n_vocab or mtp.n_vocab, mtp.n_vocab)
        self.cells: list[int] = []
        # The target's hidden state per position, for positions the MTP context has not been fed yet.
        self._hidden: dict[int, FloatArray] = {}
        self._zero = np.zeros(self.n_embd, dtype=np.float32)
        # Target positions decoded by passes other than the verify pass of this drafter's latest draft (plain
        # steps, replays) since the cells were last brought up to date: the part of a catch-up a draft does not own.
        self._unowned = 0
        self._verify_pending = False  # a draft was proposed: the next target pass is its verify pass
        self.resting = False  # see ``rest``
        self.follow_s = 0.0  # seconds spent copying the target's hidden states, in all (``PromptScoredDrafter``)
        self.prompt_rows = SHADOW_WINDOW  # prompt positions scored at each prefill (``prefill_scored``)
        # The latest shadow scoring's guesses (``observe``): the head's confidence in each and whether it was right.
        # Each is the situation of a draft's first token (cell p fed the target's state at p - 1, guessing p + 1),
        # so automatic depth's confidence gate learns from them as from first draft tokens. The prompt's scorings
        # (``prefill_scored``) leave it empty: the gate does not learn from the prompt, the user's text, on which a
        # band is kept at another rate than on the target's own (docs/benchmarks.md, "The confidence gate"), so
        # their confidences (a softmax over the vocabulary per row) are not computed.
        self.scored_guesses: list[tuple[float, bool]] = []
        expose_hidden_states(target)
        target.after_decode = self._capture

    # -- the target's hidden states -----------------------------------------------------------------------
    def _capture(self, pos0: int, n: int) -> None:
        """Keep the target's hidden states of positions pos0 .. pos0 + n - 1 (overwriting older ones there)."""
        t0 = time.perf_counter()
        rows = hidden_states(self.target, n, self.n_embd)
        for j in range(n):
            self._hidden[pos0 + j] = rows[j]
        self.follow_s += time.perf_counter() - t0
        # A verify pass holds the last committed token and at least one draft token; a draft the decoder emptied
        # (draft-min, a grammar) leaves a one-token plain pass.
        if not (self._verify_pending and n >= 2):
            self._unowned += n
        self._verify_pending = False

    def _rows_for(self, first: int, end: int) -> FloatArray:
        """The hidden inputs of cells first .. end - 1: the target's states at first - 1 .. end - 2.

        A state can be missing only where the target kept a prefix the MTP context had cut (a conversation edited
        before the point the last reply reached): that cell gets zeros. It then only draws slightly worse drafts
        while it is in the attention window; what is emitted is verified by the target all the same."""
        out = np.zeros((end - first, self.n_embd), dtype=np.float32)
        for p in range(max(first, 1), end):  # nothing precedes the first token: zeros
            row = self._hidden.get(p - 1)
            if row is not None:
                out[p - first] = row
        return out

    def _forget_before(self, position: int) -> None:
        """Drop hidden states the context no longer needs: those of positions < ``position``."""
        for p in [p for p in self._hidden if p < position]:
            del self._hidden[p]

    def _feed(self, committed: Sequence[int], end: int, *, logits: bool, score_from: int | None = None,
              keep_at_most: int | None = None, expected: Sequence[int] | None = None,
              confidences: bool = False) -> tuple[int, int, int]:
        """Bring the cells to ``committed[:end]`` (reusing the common prefix, at most ``keep_at_most`` of it).

        With ``score_from``, the cells fed from there on get an output each and their greedy guesses are compared
        with the committed token that followed — or, with ``expected``, cell p's with ``expected[p - (end -
        len(expected))]`` (the target's own guesses for the last cells); with ``confidences`` too, each guess and the
        head's confidence in it are appended to ``scored_guesses``. Returns (evaluated, agreements, trials)."""
        keep = min(common_prefix_length(self.cells, committed[:end]), end)
        if keep_at_most is not None:
            keep = min(keep, keep_at_most)
        self.mtp.truncate(keep)
        del self.cells[keep:]
        if keep == end:
            return 0, 0, 0
        rows = self._rows_for(keep, end)
        new = list(committed[keep:end])
        hits = trials = 0
        if score_from is not None:
            # Cell p guesses committed[p + 1]: only the last SHADOW_WINDOW guesses are scored, each one costs
            # the vocabulary-sized output head.
            first = min(max(keep, score_from - 1, end - 1 - SHADOW_WINDOW), end)
            if first > keep:
                self.mtp.decode(new[: first - keep], rows[: first - keep], outputs=0)
            scored = end - first
            if scored:
                self.mtp.decode(new[first - keep :], rows[first - keep :], outputs=scored)
            for j in range(scored):
                if expected is not None:
                    i = first + j - (end - len(expected))
                    truth = expected[i] if 0 <= i < len(expected) else None
                else:
                    truth = committed[first + j + 1] if first + j + 1 < len(committed) else None
                if truth is not None:
                    row = self._logits(j)
                    hit = greedy_token(row) == truth
                    trials += 1
                    hits += int(hit)
                    if confidences:
                        self.scored_guesses.append((top_probability(row), hit))
        else:
            self.mtp.decode(new, rows, outputs=int(logits))
        self.cells.extend(new)
        # Cell end - 1 may be re-evaluated (for its logits) and cell end is next: keep the states they read.
        self._forget_before(end - 2)
        return len(new), hits, trials

    def _logits(self, i: int = -1) -> FloatArray:
        return self.mtp.logits(i)[: self.n_vocab]

    # -- Drafter ----------------------------------------------------------------------------------------
    def prefill(self, prompt: Sequence[int], *, reuse: bool = True) -> int:
        """Feed every prompt position whose hidden input is known (all but the last token's cell, which the
        first draft evaluates with logits). ``reuse`` False (a seeded request, ``Drafter.prefill``): no cell is
        kept — the cached ones were fed from an earlier evaluation of the target, whose hidden states may round
        differently from this one's (the target then evaluates the prompt afresh too, so every state is here)."""
        fed = self._feed(prompt, len(prompt) - 1, logits=False, keep_at_most=None if reuse else 0)[0]
        self._unowned = 0
        self._verify_pending = False
        return fed

    def prefill_scored(self, prompt: Sequence[int], target_guesses: Sequence[int], *,
                       reuse: bool = True) -> tuple[int, int]:
        """``prefill``, with the last ``len(target_guesses)`` cells it feeds given an output each and their guesses
        compared with the target's (``PromptScoredDrafter``): cell p reads the prompt's token p and the target's
        hidden state at p - 1, and guesses token p + 1 — what the target's logits at p chose. Exactly what a draft
        of depth 1 is verified against, so automatic depth knows before the reply's first step whether the head
        could pay (on the generated agreeing head: 14-16 of 16, the noise head 0-3 of 16)."""
        end = len(prompt) - 1
        m = min(len(target_guesses), end)
        self.scored_guesses = []
        if m <= 0:
            self.prefill(prompt, reuse=reuse)
            return 0, 0
        _, hits, trials = self._feed(prompt, end, logits=False, score_from=end - m + 1,
                                     keep_at_most=end - m if reuse else 0,
                                     expected=target_guesses[-m:])
        self._unowned = 0
        self._verify_pending = False
        return hits, trials

    def rest(self, resting: bool) -> None:
        """While resting, the target outputs no hidden states and none is copied (``PromptScoredDrafter``).

        Following the target costs every pass an extra output and a copy (measured on the 8 x 768 bench model: the
        copy alone 0.14 ms of a 5 ms one-token pass); automatic depth puts a head to rest for the rest of a reply
        once it has been scored useless on enough of it. The positions decoded meanwhile get zeros as their hidden
        input when the cells are next fed (``_rows_for``): slightly worse drafts while they are in the attention
        window, never a wrong output (every draft is verified)."""
        if resting == self.resting:
            return
        self.resting = resting
        expose_hidden_states(self.target, not resting)
        self.target.after_decode = None if resting else self._capture

    def time_draft_token(self, token: int, repeats: int) -> list[float]:
        """Seconds per drafted token, timed ``repeats`` times before any reply (``pass_costs``): a guess read and
        its cell fed with the head's own hidden state, as each token after a draft's first is made (step 2 of the
        module doc), after one untimed cell. The MTP context is left empty, as a load leaves it."""
        timed: list[float] = []
        try:
            self.mtp.clear()
            self.mtp.decode([token], self._zero[None, :])
            for _ in range(repeats):
                t0 = time.perf_counter()
                guess = greedy_token(self._logits())
                self.mtp.decode([guess], self.mtp.hidden()[None, :])
                timed.append(time.perf_counter() - t0)
        finally:
            self.mtp.clear()
            self.cells.clear()
        return timed

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        """Shadow scoring on plain steps: would the MTP block have guessed each of ``committed[start:]``?"""
        # Cell p's guess for committed[p + 1] is re-evaluated even when cached (it was fed without logits).
        self.scored_guesses = []
        _, hits, trials = self._feed(committed, len(committed) - 1, logits=False, score_from=max(start, 1),
                                     keep_at_most=max(0, start - 1), confidences=True)
        self._unowned = 0  # those tokens are fed now: the next draft's catch-up starts after them
        return hits, trials

    def propose(
        self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator, p_min: float,
        draft_min: int = 0, first_min: float | None = None,
    ) -> Draft:
        """A draft of at most ``k`` (the module doc). With ``first_min`` (automatic depth's confidence gate,
        ``confidence_gate.py``) the draft carries the head's greedy first guess and its confidence in it (the top-10
        softmax of its logits, ``sampling.top_probability``, at any temperature), and is dropped
        (no tokens) when that confidence is below ``first_min`` — decided from the head's distribution before any
        token is drawn, as p-min is, so the output stays exact."""
        end = len(committed)
        k = min(k, self.mtp.n_ctx - end - 1, self.target.n_ctx - end - 1)
        if k <= 0:
            return EMPTY_DRAFT
        self.rest(False)  # a draft while resting (the decoder does not ask for one): its catch-up reads zeros
        t0 = time.perf_counter()
        # The last committed token's cell is always evaluated here: its logits give the first draft token.
        fed = self._feed(committed, end, logits=True, keep_at_most=end - 1)[0]
        # Of the cells just fed, those of tokens plain steps emitted are the catch-up a draft does not own (the
        # module doc); the rest (the last verify pass's tokens) are the price of this draft. One batched pass:
        # its time is split in proportion to the cells.
        synced = min(fed, self._unowned)
        sync_s = (time.perf_counter() - t0) * synced / fed if fed else 0.0
        self._unowned = 0
        tokens: list[int] = []
        dists: list[SparseDist] | None = None if sampling.greedy else []
        must = min(max(draft_min, 1), k)  # below draft_min, p-min does not stop a draft that has started
        first: tuple[int, float] | None = None  # the head's first guess and its confidence (``first_min``)
        try:
            while True:
                logits = self._logits()
                # Decide from q before drawing from it: stopping must not depend on the token drawn here.
                q = None if sampling.greedy else distribution(logits, sampling)
                if first_min is not None and first is None:
                    # The head's own confidence (top-10 softmax of its logits) at any temperature: what its scorings
                    # read too (``scored_guesses``), so the gate learns one measure from both.
                    first = (greedy_token(logits), top_probability(logits))
                    if first[1] < first_min:
                        break
                if q is None:
                    if p_min > 0 and not 0 < len(tokens) < must and top_probability(logits) < p_min:
                        break
                    token = greedy_token(logits)
                else:
                    if p_min > 0 and not 0 < len(tokens) < must and float(q.probs.max()) < p_min:
                        break
                    # The request's sampler's proposal at this absolute position (coupled: the target's noise).
                    token = draft_token(q, sampling, end + len(tokens))
                    assert dists is not None
                    dists.append(q)
                tokens.append(token)
                if len(tokens) >= k:
                    break
                self.mtp.decode([token], self.mtp.hidden()[None, :])
        finally:
            # The drafted cells hold the MTP block's own states, not the target's: never keep them.
            self.mtp.truncate(end)
        self._verify_pending = bool(tokens)
        if first is None:
            return Draft(tokens, dists, sync_s, synced)
        return Draft(tokens, dists, sync_s, synced, first_guess=first[0], first_confidence=first[1])

    def close(self) -> None:
        if self.target.after_decode == self._capture:
            self.target.after_decode = None
        self.mtp.close()
