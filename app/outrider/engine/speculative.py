"""The speculative decoding loop: draft, verify in one target batch, keep the longest correct run.

One step, with ``committed`` = prompt + every token emitted so far and its last token not yet evaluated:

1. choose k (fixed, or ``AutoDraftLength``), let the drafter propose up to k tokens d1..dk;
2. evaluate [last committed, d1..dk] in ONE target batch with logits for every position;
3. temperature 0: accept the longest prefix of d equal to the target's argmax, then add the target's own next
   token — so the output is token-for-token what target-only greedy decoding gives;
   temperature > 0: the request's sampler (``sampling.verify_sampled``): Gumbel-max coupling (the output is the
   target's own seeded choice whatever was drafted) or speculative sampling's accept/residual rule; both exact in
   distribution, both drawing from noise keyed by (seed, position), so no draw depends on earlier steps;
4. roll the target's memory back to exactly the committed tokens (the drafter re-syncs itself next step); on a
   hybrid target the recurrent layers roll back through llama.cpp's per-token state snapshots, which bound k
   (``ModelContext.rollback_limit``), or, with no snapshots, through a checkpoint saved before the batch.

Invariant: ``self.cached`` lists exactly the tokens in the target's KV cache, in position order.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from outrider.engine.autodraft import K_START, MTP_K_START, AutoDraftLength
from outrider.engine.chain_draft import ChainDraft
from outrider.engine.draft import EMPTY_DRAFT, Draft
from outrider.engine.drafters import (
    Drafter,
    ModelDraft,
    PromptLookupDraft,
    PromptScoredDrafter,
    common_prefix_length,
)
from outrider.engine.errors import ContextOverflowError, DecodeError
from outrider.engine.events import TARGET, DoneEvent, StepEvent
from outrider.engine.grammar import BoolArray, GrammarMask, cut_draft, grammar_allowed, masked_row, verify_draft
from outrider.engine.llama.backend import LoadedModel, ModelContext
from outrider.engine.llama.text import IncrementalDetokenizer, StopStringFilter, token_logprobs
from outrider.engine.params import DraftParams, SamplingParams
from outrider.engine.pass_costs import PASS_REPEATS, time_target_passes
from outrider.engine.sampling import SparseDist, distribution, greedy_token, rank_mass, resolve_seed, verify_sampled
from outrider.engine.stats import GenerationStats, PlainRateMeter

STOP_EOG = "stop"  # end-of-generation token or a stop string
STOP_LENGTH = "length"  # max tokens reached or the context is full
STOP_CANCELLED = "cancelled"

PLAIN_PROBE_EVERY = 32  # steps: the longest run without a plain-decoding measurement once the early probes ran
TokenScore = tuple[float, float, float, float, float, float]
"""``SpeculativeDecoder.score``'s row: mass ranked before x, p(x), top p, then q(x), E_p[q], Var_p[q] (Var -1: none)."""

CATCH_UP_TOKENS = 2  # what a draft model evaluates to catch up after a speculative step (last accepted + new)
# The most query rows llama.cpp's CPU flash attention evaluates row by row; 64+ take its tiled path, which rounds
# differently. A seeded request's passes stay within it (see ``SpeculativeDecoder.generate``).
ROW_BY_ROW_ROWS = 63




@dataclasses.dataclass(frozen=True)
class GenerationRequest:
    prompt_tokens: Sequence[int]
    max_tokens: int = 512
    sampling: SamplingParams = SamplingParams()
    draft: DraftParams = DraftParams()
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # benchmarks only: keep going through end-of-generation tokens
    plain_probe_every: int = PLAIN_PROBE_EVERY  # 0: never force a plain step (no in-reply speed-up then)
    grammar: GrammarMask | None = None  # structured output: its state follows the emitted tokens (engine/grammar.py)
    top_logprobs: int | None = None  # each token's log-probability and this many alternatives (None: not computed)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max tokens must be >= 1, got {self.max_tokens}")


class DraftLengthPolicy(Protocol):
    def choose(self) -> int: ...

    def observe(self, *, batch: int, verify_s: float, drafted: int, accepted: int, draft_s: float,
                follow_s: float = 0.0) -> None: ...

    def observe_shadow(self, hits: int, trials: int, seconds: float | None = None) -> None: ...


class FixedDraftLength:
    def __init__(self, k: int) -> None:
        self.k = k

    def choose(self) -> int:
        return self.k

    def observe(self, *, batch: int, verify_s: float, drafted: int, accepted: int, draft_s: float,
                follow_s: float = 0.0) -> None:
        pass

    def observe_shadow(self, hits: int, trials: int, seconds: float | None = None) -> None:
        pass


class SpeculativeDecoder:
    """Runs generations for one target context and one drafter, reusing both caches across turns."""

    def __init__(self, model: LoadedModel, context: ModelContext, drafter: Drafter) -> None:
        self.model = model
        self.context = context
        self.drafter = drafter
        self.cached: list[int] = []
        # A recurrent/hybrid target rolls rejected tokens back through its recurrent-state snapshots, so a draft
        # may not be longer than they reach; with no snapshots (n_rs_seq 0) each verify saves a checkpoint first.
        self.rollback_limit = context.rollback_limit if model.is_recurrent else None
        self.checkpoint_rounds = model.is_recurrent and self.rollback_limit == 0
        # Automatic k keeps what it learned (costs per batch size, acceptance) from reply to reply: the costs
        # belong to the pair and the machine, and a cold start would re-probe at every turn of a chat.
        self.auto_policy: AutoDraftLength | None = None
        self._meter: PlainRateMeter | None = None  # the reply under way's (or the latest one's)
        # One-token passes after a pass of another size before one costs what plain decoding costs (1 on a CPU, 2 on
        # a CUDA back-end: ``speedup.settle_passes``), for the speed-up's plain runs and automatic k's plain cost.
        self.settle = 1
        # Seconds per target pass, per batch size, and per token an MTP head drafts, timed at load
        # (``time_passes``): a fresh automatic-depth policy starts from them. Empty where nothing was timed.
        self.pass_costs: dict[int, list[float]] = {}
        self.draft_token_costs: list[float] = []

    def time_passes(self) -> None:
        """Time the target's plain and verify passes on this machine now (``pass_costs.time_target_passes``), and
        a drafted token of an MTP head, for fresh automatic-depth policies to start from; the target's memory and
        the head's are left empty."""
        token = self.model.bos_id if 0 <= self.model.bos_id < self.model.n_vocab else 0
        self.pass_costs = time_target_passes(self.context, token, settle=self.settle,
                                             rollback_limit=self.rollback_limit)
        self.cached.clear()
        if isinstance(self.drafter, PromptScoredDrafter):
            self.draft_token_costs = self.drafter.time_draft_token(token, PASS_REPEATS)

    def note_contended(self, passes: int) -> None:
        """The reply's latest ``passes`` steps ran with the threads waiting for a CPU (the thread governor stepped
        down on that evidence, between two steps): the speed-up estimate values them as a stretch of their own."""
        if self._meter is not None and passes > 0:
            self._meter.mark_contended(passes)

    def reset(self) -> None:
        self.context.clear()
        self.cached.clear()

    def _prefill(self, prompt: Sequence[int], outputs: int = 0, *, reuse: bool = True) -> int:
        """Evaluate all but the last prompt token, keeping the longest cached prefix (none when ``reuse`` is
        False). Returns tokens reused.

        ``outputs``: logits for the last that many evaluated positions (``_prompt_guesses`` reads them)."""
        keep = min(common_prefix_length(self.cached, prompt), len(prompt) - 1) if reuse else 0
        self.context.truncate(keep)
        keep = self.context.n_past  # a recurrent memory may keep less (ModelContext.truncate)
        del self.cached[keep:]
        new = list(prompt[keep:-1])
        if new:
            self.context.decode(new, logits=outputs, abortable=True)
            self.cached.extend(new)
        return keep

    def _prompt_guesses(self, evaluated: int, outputs: int) -> list[int]:
        """The target's greedy tokens after the last positions ``_prefill`` evaluated with logits (the final
        chunk of ``evaluated`` tokens has them: at most ``outputs`` of it), in position order."""
        if evaluated <= 0 or outputs <= 0:
            return []
        final_chunk = evaluated - self.context.n_batch * ((evaluated - 1) // self.context.n_batch)
        m = min(outputs, final_chunk)
        return [greedy_token(self.context.logits_row(i)) for i in range(-m, 0)]

    def generate(
        self, request: GenerationRequest, cancel: threading.Event | None = None
    ) -> Iterator[StepEvent | DoneEvent]:
        """Yield a StepEvent per speculative step and a final DoneEvent. Cancel is honoured within a step."""
        t_request = time.perf_counter()
        prompt = list(request.prompt_tokens)
        n_ctx = self.context.n_ctx
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) >= n_ctx:
            raise ContextOverflowError(len(prompt), n_ctx)
        stats = GenerationStats(prompt_tokens=len(prompt), draft_mode=self.drafter.kind,
                                threads=self.context.n_threads)
        # An MTP head is scored on the prompt's own positions (the target's logits at its last few), so automatic
        # depth knows at the reply's first step whether to draft; it follows the target again (``rest``).
        scored = self.drafter if isinstance(self.drafter, PromptScoredDrafter) else None
        prompt_score = (0, 0)
        try:
            # A seeded request evaluates its prompt afresh, in the target and in every drafter context (a draft
            # model's, an MTP head's): on a CPU llama.cpp's flash attention rounds a micro-batch of 64+ rows
            # (tiled) differently from fewer (row by row), so a prefix built from a cached part plus a new one is
            # not the prefix evaluated at once, and the seeded text would depend on the requests before it — the
            # target's logits under any sampler, the draft's q too under the rejection sampler. Afresh, the same
            # prompt is always split the same way. It costs a seeded request its prompt cache; an unseeded one,
            # which promises nothing to repeat, keeps it (docs/metrics.md, "Samplers").
            reuse = request.sampling.seed is None
            # A head whose measured costs say it cannot pay sleeps through the reply (``sleeps_through_next_reply``):
            # not scored, not following the target, the target's passes those of plain decoding.
            asleep = (scored is not None and request.draft.k is None and self.auto_policy is not None
                      and self.auto_policy.k_max == request.draft.k_max
                      and self.auto_policy.sleeps_through_next_reply())
            if scored is not None:
                scored.rest(asleep)
            rows = scored.prompt_rows if scored is not None and request.draft.k is None and not asleep else 0
            follow_mark = scored.follow_s if scored is not None else 0.0
            stats.prompt_tokens_reused = self._prefill(prompt, rows, reuse=reuse)
            t_head = time.perf_counter()
            guesses = self._prompt_guesses(len(prompt) - 1 - stats.prompt_tokens_reused, rows)
            if scored is not None and guesses:
                prompt_score = scored.prefill_scored(prompt, guesses, reuse=reuse)
            elif not asleep:
                self.drafter.prefill(prompt, reuse=reuse)
            # What an awake head's prompt cost beyond the target's own prefill: its feeding and scoring, and the
            # copies of the prompt's hidden states (the ledger of waking it, ``AwakeLedger``).
            head_prompt_s = time.perf_counter() - t_head
            if scored is not None:
                head_prompt_s += scored.follow_s - follow_mark
            # On a GPU decode() returns before the work is done: wait, or prompt time leaks into the first step.
            self.context.synchronize()
        except DecodeError as exc:
            if exc.status == 2:  # aborted by cancel during prompt evaluation
                stats.prompt_s = time.perf_counter() - t_request
                yield DoneEvent(STOP_CANCELLED, stats, "")
                return
            raise
        stats.prompt_s = time.perf_counter() - t_request

        params = request.draft
        policy: DraftLengthPolicy
        auto = False
        # A chain of drafters chooses each member's k itself (chain_draft.py): the decoder only caps the total.
        chain = self.drafter if isinstance(self.drafter, ChainDraft) else None
        if chain is not None:
            chain.set_automatic(params.k_max if params.k is None else None)
        if self.drafter.kind == "none" or params.k == 0:
            policy = FixedDraftLength(0)
            if self.drafter.kind != "none":  # loaded but told not to draft: the reply's figures say "off"
                stats.draft_mode = "off"
        elif params.k is None and chain is not None:
            policy = FixedDraftLength(params.k_max)
        elif params.k is None:
            if self.auto_policy is None or self.auto_policy.k_max != params.k_max:
                # An MTP head's scoring feeds the cells its first draft needs anyway: score it before drafting.
                mtp = self.drafter.kind == "mtp"
                self.auto_policy = AutoDraftLength(k_max=params.k_max, score_first=mtp,
                                                   k_start=MTP_K_START if mtp else K_START)
                self.auto_policy.seed_costs(self.pass_costs, self.draft_token_costs)
            policy = self.auto_policy
            policy.settle = self.settle
            policy.start_reply()
            policy.observe_prompt(*prompt_score, seconds=head_prompt_s)
            auto = True
        else:
            policy = FixedDraftLength(params.k)
        probe_every = request.plain_probe_every if self.drafter.kind != "none" else 0
        # A draft of k tokens is verified in one batch of k + 1: more than n_batch would split the pass.
        k_cap = max(0, self.context.n_batch - 1)
        if self.rollback_limit:
            k_cap = min(k_cap, self.rollback_limit)
        # A seeded request's target passes are all 2 .. ROW_BY_ROW_ROWS rows, so every position it emits is computed
        # the same way whatever k was chosen, whether a step was plain, and however many threads ran it. On a CPU,
        # llama.cpp computes a one-row pass with other routines: its flash attention splits the keys of a cache of
        # 257+ cells across the threads (SmolLM2's logits then differ by up to 0.7 from the same position in a
        # batch, and with the thread count); F16/Q8_0/Q5_0 matrix products have a one-row kernel of their own; and
        # a pass of 64+ rows takes the tiled attention. So a seeded plain step evaluates one padding row after its
        # token (rolled back at once, like a rejected draft token; it costs a two-row pass, measured 1.7-1.9x a
        # one-row pass for SmolLM2 on a CPU: bench_seeded_passes.py), and a seeded draft is capped below the tiled
        # size. Unseeded requests promise nothing to repeat: unchanged. Nor greedy ones, which a seed does not
        # change (the in-app benchmark's are seeded): padded, their plain side would be slower than anyone's plain
        # decoding and the A/B would read high.
        pad_plain = request.sampling.seed is not None and request.sampling.temperature > 0
        if pad_plain:
            k_cap = min(k_cap, ROW_BY_ROW_ROWS - 1)
        # One concrete seed per reply: the draft and the target draw from the same keyed noise (an unseeded
        # reply gets a fresh one). ``rng`` is only for drafters with randomness of their own (exact either way).
        sampling = resolve_seed(request.sampling)
        rng = np.random.default_rng(sampling.seed)
        detok = IncrementalDetokenizer()
        stops = StopStringFilter(request.stop)
        # A seeded rejection-sampled reply repeats only with the same draft lengths at the same steps: no plain run
        # timed by the machine's load then (the coupled sampler and greedy decoding do not depend on k).
        schedule_only = request.sampling.seed is not None and sampling.sampler == "rejection" and (
            sampling.temperature > 0)
        meter = self._meter = PlainRateMeter(stats, load_probes=not schedule_only, settle=self.settle)
        committed = prompt
        grammar = request.grammar
        # a draft model samples from its grammar-masked distribution (others are cut: grammar.cut_draft)
        masked_draft = {"grammar": grammar} if grammar is not None and isinstance(self.drafter, ModelDraft) else {}
        shadow_from = len(committed)  # first position the drafter has not been scored on
        texts: list[str] = []
        stop_reason: str | None = None
        t_decode = time.perf_counter()

        while stop_reason is None:
            if cancel is not None and cancel.is_set():
                stop_reason = STOP_CANCELLED
                break
            if len(committed) >= n_ctx:
                stop_reason = STOP_LENGTH
                break
            t0 = time.perf_counter()
            # Plain decoding is measured in the reply itself: probes until the cost model has plain passes.
            forced_plain = meter.wants_plain_probe(probe_every)
            chosen = 0 if forced_plain else policy.choose()
            remaining = request.max_tokens - stats.generated
            # Every emitted token needs a context position: k drafted + 1 target token must fit.
            bound = max(0, min(remaining - 1, n_ctx - len(committed) - 1, k_cap))
            k = min(chosen, bound)
            if k < params.draft_min:
                k = 0
            draft = EMPTY_DRAFT
            drafting_s = 0.0  # the cost of drafting itself, without a draft model's catch-up (for auto k)
            consulted = k > 0  # the drafter ran in this step: its time is charged to speculation
            if k > 0:
                # A chain's history lookup may go past k on a long match, up to what one pass can verify.
                reach = {"reach": bound} if chain is not None else {}
                # An MTP head's draft is dropped where its confidence in its first token says it will not pay
                # (automatic depth's confidence gate, confidence_gate.py).
                first_min = self.auto_policy.first_min(k) if auto and self.auto_policy is not None else None
                gate = {"first_min": first_min} if first_min is not None else {}
                draft = self.drafter.propose(committed, k, sampling, rng, params.p_min, params.draft_min,
                                             **masked_draft, **reach, **gate)
                limit = bound if chain is not None else k
                if len(draft.tokens) > limit:
                    draft = dataclasses.replace(
                        draft, tokens=draft.tokens[:limit], dists=draft.dists[:limit] if draft.dists else None)
                if grammar is not None:
                    draft = cut_draft(draft, grammar, sampling)
                if len(draft.tokens) < max(params.draft_min, 1):
                    draft = dataclasses.replace(draft, tokens=[], dists=None)
                propose_s = time.perf_counter() - t0
                sync_share = min(1.0, CATCH_UP_TOKENS / draft.synced) if draft.synced else 1.0
                drafting_s = propose_s - draft.sync_s * (1.0 - sync_share)
                shadow_from = len(committed)
            elif scored is not None and auto and self.auto_policy is not None and self.auto_policy.should_rest():
                scored.rest(True)  # scored useless on enough of this reply: stop following the target
            elif self.auto_policy is not None and auto and (
                    len(committed) - shadow_from >= self.auto_policy.shadow_interval):
                consulted = True
                t_scoring = time.perf_counter()
                hits, trials = self.drafter.observe(committed, shadow_from)
                shadow_from = len(committed)
                policy.observe_shadow(hits, trials, seconds=time.perf_counter() - t_scoring)
                if scored is not None:  # each guess a draft's first token's situation, on the reply's own text
                    for confidence, hit in scored.scored_guesses:
                        self.auto_policy.observe_first(confidence, hit)
            t1 = time.perf_counter()
            batch = [committed[-1], *draft.tokens]
            padded = pad_plain and len(batch) == 1
            if padded:
                batch.append(committed[-1])  # the padding row: row 0 cannot see it (causal), rolled back below
            if self.checkpoint_rounds and len(batch) > 1:
                self.context.checkpoint()
            follow_mark = scored.follow_s if scored is not None else 0.0
            self.context.decode(batch, logits="all")
            self.cached.extend(batch)
            if grammar is not None:
                n_accepted, new_token = verify_draft(self.context.logits_row, draft, sampling, len(committed),
                                                     grammar)
            else:
                n_accepted, new_token = self._verify(draft, sampling, len(committed))
            # The target's part of a step ends when its memory holds just the kept tokens: a checkpoint round's
            # restore and replay of the accepted ones are what its rejected tokens cost, and automatic k, which
            # weighs verify time against the tokens a pass yields, must pay them.
            self._roll_back_to(len(committed) + n_accepted)
            t2 = time.perf_counter()
            if chain is not None:
                chain.settle(draft, n_accepted, batch=len(batch), verify_s=t2 - t1)
            sources = draft.sources[: len(draft.tokens)] or (self.drafter.kind,) * len(draft.tokens)

            emitted = [*draft.tokens[:n_accepted], new_token]
            if draft.first_confidence is not None and self.auto_policy is not None and auto:
                # Verified, the first token was kept or not; dropped, it would have been kept if the plain step
                # emitted the head's guess (the gate learns from the drafts it drops too).
                kept_first = n_accepted >= 1 if draft.tokens else emitted[0] == draft.first_guess
                self.auto_policy.observe_first(draft.first_confidence, kept_first)
            tokens: list[int] = []
            flags: list[bool] = []
            origins: list[str] = []
            pieces: list[str] = []
            logprobs: list[list[Any]] = []
            reached: int | None = None  # positions the output reached when a stop cuts the step short
            ended_on_eog = False
            for i, token in enumerate(emitted):
                if self.model.is_eog(token) and not request.ignore_eos:
                    stop_reason = STOP_EOG
                    reached = i + 1
                    ended_on_eog = True
                    break
                committed.append(token)
                if grammar is not None:
                    grammar.accept(token)
                if request.top_logprobs is not None:  # row i of this pass is the target's own view of token i
                    logprobs.append(token_logprobs(self.model, self.context.logits_row(i), token,
                                                   request.top_logprobs))
                tokens.append(token)
                flags.append(i < n_accepted)
                origins.append(sources[i] if i < n_accepted else TARGET)
                pieces.append(stops.feed(detok.feed(self.model.piece(token))))
                if stops.matched is not None:
                    stop_reason = STOP_EOG
                    reached = i + 1
                    break
                if stats.generated + len(tokens) >= request.max_tokens:
                    stop_reason = STOP_LENGTH
                    reached = i + 1
                    break

            n_drafted = len(draft.tokens)
            if n_drafted:  # its tokens' acceptance reaches automatic k through ``observe``: never scored again
                shadow_from = len(committed)
            stats.passes += 1
            stats.k_sum += n_drafted  # what the target verified: p-min may cut or empty the chosen k
            # When a stop cuts the step, draft positions beyond it were never used and do not count, so the final
            # step does not bias acceptance, and accepted == the provenance count (plus a drafted end token).
            stats.drafted += n_drafted if reached is None else min(n_drafted, reached)
            stats.accepted += n_accepted if reached is None else min(n_accepted, reached)
            if n_accepted < n_drafted and (reached is None or reached > n_accepted):
                stats.rejections += 1
            stats.count_drafters(sources[: n_drafted if reached is None else min(n_drafted, reached)],
                                 n_accepted if reached is None else min(n_accepted, reached))
            stats.generated += len(tokens)
            pass_tokens = len(tokens) + int(ended_on_eog)
            stats.pass_tokens += pass_tokens
            stats.draft_s += t1 - t0
            stats.verify_s += t2 - t1
            followed = scored.follow_s - follow_mark if scored is not None else 0.0  # the head's copies in the pass
            policy.observe(batch=len(batch), verify_s=t2 - t1, drafted=n_drafted, accepted=n_accepted,
                           draft_s=drafting_s, follow_s=followed)
            now = time.perf_counter()
            # The target's part of the step (the drafter's time taken out) feeds the cost model of the speed-up.
            # A padded plain step is this request's plain decoding (its plain reply pays the padding row too): the
            # speed-up of a seeded reply is against plain decoding of the same seeded request.
            meter.add_step(batch=len(batch) - padded, pass_tokens=pass_tokens, step_s=now - t0,
                           target_s=now - (t1 if consulted else t0), threads=self.context.n_threads)
            if stats.ttft_s is None and tokens:
                stats.ttft_s = now - t_request
            stats.decode_s = now - t_decode
            texts.extend(pieces)
            yield StepEvent(tokens, flags, pieces, k, stats, origins, logprobs)

        tail = stops.feed(detok.flush()) + stops.flush()
        if tail:
            texts.append(tail)
            yield StepEvent([], [], [tail], 0, stats)
        stats.decode_s = time.perf_counter() - t_decode
        meter.finish()
        yield DoneEvent(stop_reason, stats, "".join(texts))

    def _roll_back_to(self, keep: int) -> None:
        """Make the target's memory hold exactly ``cached[:keep]``: a recurrent memory restored to an earlier
        checkpoint re-evaluates the kept tokens after it (what a checkpoint-based rollback costs)."""
        self.context.truncate(keep)
        kept = self.context.n_past
        if kept < keep:
            self.context.decode(self.cached[kept:keep], logits="none")
        del self.cached[keep:]

    def score(self, prompt: Sequence[int], tokens: Sequence[int],
              sampling: SamplingParams, grammar: GrammarMask | None = None) -> list[TokenScore]:
        """The target's own view of ``tokens`` continuing ``prompt``: for each token, (mass of the tokens ranked
        before it, its probability, the likeliest token's probability) in the target's distribution at its
        position, with ``sampling``'s filters and temperature (``sampling.rank_mass``; greedy: temperature 1),
        then the drafter's direction: (q(x), E_p[q], Var_p[q]) where q is the draft's proposal distribution at the
        position (a draft model's, or the point mass of prompt lookup's proposal), or (0, 0, -1) where it has none.

        One plain evaluation of the sampled prefix, independent of how the tokens were generated: what
        ``outrider verify`` compares every sampled token with. Leaves the cache holding ``prompt`` minus its last
        token, as a generation would find it.

        ``grammar`` (its state at the start of ``tokens``, left unchanged): each distribution — the target's and
        the draft model's — is the grammar-masked one, the grammar walked along ``tokens`` (structured output's
        exactness is against this masked target). A token the grammar forbids has probability 0 there ("outside
        the support"); the positions after it keep the state before it.
        """
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) + len(tokens) > self.context.n_ctx:
            raise ContextOverflowError(len(prompt) + len(tokens), self.context.n_ctx)
        if sampling.greedy:
            sampling = dataclasses.replace(sampling, temperature=1.0)
        allowed = grammar_allowed(grammar, tokens) if grammar is not None else None
        self._prefill(prompt)
        sequence = [prompt[-1], *tokens[:-1]]
        dists: list[SparseDist] = []
        step = max(1, self.context.n_batch)
        try:
            for start in range(0, len(tokens), step):
                chunk = sequence[start : start + step]
                self.context.decode(chunk, logits="all")
                self.cached.extend(chunk)
                dists += [distribution(masked_row(self.context.logits_row(i), allowed, start + i), sampling)
                          for i in range(len(chunk))]
        finally:
            keep = len(prompt) - 1
            self.context.truncate(keep)
            del self.cached[self.context.n_past :]  # a recurrent memory may keep less (ModelContext.truncate)
        direction = self._draft_direction(prompt, tokens, dists, sampling, allowed)
        return [(*rank_mass(p, int(t)), *d) for p, t, d in zip(dists, tokens, direction, strict=True)]

    def _draft_direction(self, prompt: Sequence[int], tokens: Sequence[int], dists: Sequence[SparseDist],
                         sampling: SamplingParams,
                         allowed: Sequence[BoolArray] | None = None) -> list[tuple[float, float, float]]:
        """(q(x), E_p[q], Var_p[q]) per position for ``score``; (0, 0, -1) where the drafter proposes nothing."""
        none = (0.0, 0.0, -1.0)
        drafter = self.drafter
        if isinstance(drafter, PromptLookupDraft):
            out = []
            for p, token, guess in zip(dists, tokens, drafter.proposals(prompt, tokens), strict=True):
                if guess is None:
                    out.append(none)
                else:
                    pd = p.prob_of(guess)
                    out.append((float(token == guess), pd, pd * (1.0 - pd)))
            return out
        qs = drafter.proposal_dists(prompt, tokens, sampling, allowed) if isinstance(drafter, ModelDraft) else None
        if qs is None:
            return [none] * len(tokens)
        out = []
        for p, q, token in zip(dists, qs, tokens, strict=True):
            q_on_p = np.array([q.prob_of(int(t)) for t in p.ids])
            mean = float(np.dot(p.probs, q_on_p))
            out.append((q.prob_of(int(token)), mean, max(0.0, float(np.dot(p.probs, q_on_p**2)) - mean * mean)))
        return out

    def _verify(self, draft: Draft, sampling: SamplingParams, position: int) -> tuple[int, int]:
        """Compare the draft (its first token at absolute ``position``) with the target's logits (outputs
        0..len(draft)); return (accepted, next token)."""
        ctx = self.context
        if sampling.greedy:
            for i, token in enumerate(draft.tokens):
                choice = greedy_token(ctx.logits_row(i))
                if choice != token:
                    return i, choice
            return len(draft.tokens), greedy_token(ctx.logits_row(len(draft.tokens)))
        assert draft.dists is not None or not draft.tokens
        return verify_sampled(draft.tokens, lambda i: distribution(ctx.logits_row(i), sampling), draft.dists or [],
                              sampling, position)
