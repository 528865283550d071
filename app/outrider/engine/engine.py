"""The engine: a loaded target (+ draft model or prompt lookup), chat formatting and generation.

This is what the worker process (and ``--in-process`` CLI runs) drive. One generation at a time. The speed-up
against plain decoding is measured inside each reply (``stats.PlainRateMeter``), not calibrated at load.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from outrider.engine import mtp_files
from outrider.engine.chain_draft import ChainDraft
from outrider.engine.chat import ChatFormatter, Segment, TrimCancelled, fit_conversation
from outrider.engine.compat import check_facts, rollback_report
from outrider.engine.drafters import Drafter, ModelDraft, NoDraft, PromptLookupDraft
from outrider.engine.errors import (
    ContextOverflowError,
    EngineError,
    FimUnsupported,
    IncompatiblePairError,
    TemplateError,
)
from outrider.engine.events import DoneEvent, LoadedPair, StepEvent
from outrider.engine.grammar import GrammarMask
from outrider.engine.history_draft import HistoryLookupDraft
from outrider.engine.history_index import HistoryIndex, index_dir_for, tokenizer_fingerprint
from outrider.engine.learned_draft import LearnedDraftError, LearnedDraftLengths, pair_key
from outrider.engine.llama.backend import LoadedModel, ModelContext
from outrider.engine.llama.gguf_header import GGUFHeaderError, read_header
from outrider.engine.llama.mtp_context import MtpContext, n_nextn_layers
from outrider.engine.llama.runtime import Backend
from outrider.engine.llama.text import clean_text
from outrider.engine.memory_layout import MemoryLayout, layout, layout_from_header
from outrider.engine.mtp import MtpDraft
from outrider.engine.params import (
    ChatMessage,
    DraftParams,
    GrammarSpec,
    LookupSettings,
    PairSpec,
    SamplingParams,
    TextRequest,
)
from outrider.engine.speculative import (
    STOP_CANCELLED,
    STOP_LENGTH,
    GenerationRequest,
    SpeculativeDecoder,
    TokenScore,
)
from outrider.engine.speedup import settle_passes
from outrider.engine.stats import GenerationStats
from outrider.engine.threads import OtherLoadMeter, ThreadGovernor, choose_threads, usable_cpus

CONTINUABLE = (STOP_LENGTH, STOP_CANCELLED)
"""Stop reasons after which a reply's tokens are exactly its text (a stop string's tokens are not in the text)."""

log = logging.getLogger(__name__)

LoadStageCallback = Callable[[str, str], None]
"""``on_load_stage(stage, path)``: called just before a model file is handed to llama.cpp (``target``, ``draft``)."""


@dataclasses.dataclass(frozen=True)
class _LastReply:
    """The token ids of the latest reply, for Continue: re-tokenising the reply's text can split it differently
    from how the model generated it (a word emitted as two pieces is read back as one), and the continuation then
    differs from the reply the model would have written uninterrupted. ``head`` is the prompt up to the reply
    (conversation + generation prompt); ``tokens`` are the reply's ids so far, ``text`` their text."""

    head: tuple[int, ...]
    tokens: tuple[int, ...]
    text: str


class Engine:
    """Owns the llama.cpp objects of one loaded pair. Not thread-safe except ``cancel``."""

    def __init__(self, backend: Backend | None = None, *, on_load_stage: LoadStageCallback | None = None,
                 load_meter: OtherLoadMeter | None = None,
                 thread_wait: Callable[[], float | None] | None = None) -> None:
        """``on_load_stage(stage, path)`` is told which file each load is about to hand to llama.cpp (the engine
        process reports it, so a crash inside llama.cpp can be blamed on the right file). ``load_meter`` measures
        the other processes' load for automatic threads, ``thread_wait`` this process's threads' seconds spent
        waiting for a CPU (``threads.own_wait_seconds``; both injectable for tests, engine/threads.py)."""
        self.backend = backend or Backend()
        self.on_load_stage = on_load_stage
        self._target: LoadedModel | None = None
        self._draft_model: LoadedModel | None = None
        self._decoder: SpeculativeDecoder | None = None
        self._plain: SpeculativeDecoder | None = None
        self._formatter: ChatFormatter | None = None
        self._cancel = threading.Event()
        self._generating = threading.Lock()
        self.spec: PairSpec | None = None
        self.info: LoadedPair | None = None
        self._auto_threads = False  # the pair was loaded with threads 0: the engine chooses (engine/threads.py)
        self._load_meter = load_meter or OtherLoadMeter()
        self._thread_wait = thread_wait
        self._governor: ThreadGovernor | None = None  # automatic threads: re-chosen between a reply's passes too
        self._last_reply: _LastReply | None = None
        self._pending_reply: _LastReply | None = None  # head (and text continued) of the reply being generated
        self._learned: tuple[LearnedDraftLengths, str] | None = None  # the file and this pair's key in it

    # -- loading --------------------------------------------------------------------------------------------
    def load(self, spec: PairSpec) -> LoadedPair:
        """Load ``spec`` (unloading any previous pair first, so memory is freed before the new load)."""
        self.unload()
        notes: list[str] = []
        requested = spec
        self._auto_threads = spec.context.threads == 0
        if self._auto_threads:  # chosen from the CPUs free now, re-chosen before each reply (``_retune_threads``)
            threads = choose_threads(usable_cpus(), self._load_meter.probe())
            self._governor = (ThreadGovernor(usable_cpus(), self._load_meter) if self._thread_wait is None
                              else ThreadGovernor(usable_cpus(), self._load_meter, wait=self._thread_wait))
            spec = dataclasses.replace(spec, context=dataclasses.replace(spec.context, threads=threads))
        if spec.mtp:
            _refuse_mtp_problem(lambda: mtp_files.check_target_file(spec.target))
        self._announce("target", spec.target)
        target = LoadedModel(self.backend, spec.target, spec.target_settings, load_mtp=spec.mtp)
        try:
            context = ModelContext(target, spec.context)
        except BaseException:
            target.close()
            raise
        drafter: Drafter = NoDraft()
        draft_model: LoadedModel | None = None
        try:
            if spec.draft:
                self._announce("draft", spec.draft)
                draft_model = LoadedModel(self.backend, spec.draft, spec.draft_settings)
                check_facts(target.vocab_facts(), draft_model.vocab_facts()).raise_if_incompatible()
                # A hybrid draft rolls back through a checkpoint (its drafts are one-token decodes): no snapshots.
                draft_context = ModelContext(draft_model, dataclasses.replace(spec.context), rollback_tokens=0)
                drafter = ModelDraft(draft_context, target.n_vocab, target)
            elif spec.lookup:
                drafter = PromptLookupDraft(spec.lookup_settings)
            elif spec.mtp or spec.mtp_head:
                drafter, draft_model = self._mtp_drafter(spec, target, context)
            if spec.lookup_history is not None:
                drafter = _history_chain(target, Path(spec.lookup_history), spec.lookup_settings, drafter, notes)
        except BaseException:
            context.close()
            target.close()
            if draft_model is not None:
                draft_model.close()
            raise
        if target.is_recurrent and context.rollback_limit == 0 and drafter.kind != "none":
            # llama.cpp keeps no recurrent-state snapshots for this architecture (it clamped n_rs_seq to 0).
            rule = rollback_report(target.facts.architecture)
            notes.append(rule.reason if not rule.ok else
                         "this model's recurrent state cannot be rolled back: running without a draft")
            drafter.close()
            drafter = NoDraft()
        self._target, self._draft_model = target, draft_model
        self._decoder = SpeculativeDecoder(target, context, drafter)
        self._plain = SpeculativeDecoder(target, context, NoDraft())
        self._plain.cached = self._decoder.cached  # one context, one cache mirror
        # How many one-token passes after a pass of another size cost more than plain decoding does (the first
        # rebuilds llama.cpp's graph; on CUDA the second captures it as a CUDA graph): the speed-up's plain runs
        # and automatic k's plain cost leave them out.
        offloaded = self.backend.info.gpu_offload and spec.target_settings.gpu_layers != 0
        self._decoder.settle = self._plain.settle = settle_passes(self.backend.info.name, offloaded)
        self._formatter = _chat_formatter(target, notes)
        self._recall_draft_length(requested, drafter, notes)
        if drafter.kind == "mtp" and self._decoder.auto_policy is None:
            # An MTP head's first draft is judged before it has timed a pass of its own: on this machine's costs,
            # timed now (engine/pass_costs.py), not on assumed ones. A policy recalled from the last load has its
            # replies' own costs, and the timing (up to PASS_BUDGET_S and a read-in pass) would only lengthen
            # every reload; a fresh policy made later (another k_max) starts from the prior costs then.
            self._decoder.time_passes()
        self.spec = requested  # as asked (threads 0 stays "automatic")
        n_ctx = context.n_ctx
        target_layout = _layout(target)
        self.info = LoadedPair(
            target=target.facts,
            draft=draft_model.facts if draft_model else None,
            draft_mode=drafter.kind,
            n_ctx=n_ctx,
            backend=self.backend.info.name,
            gpu_offload=self.backend.info.gpu_offload,
            chat_template=self._formatter.source,
            target_kv_bytes=_target_kv_bytes(target, target_layout, n_ctx),
            draft_kv_bytes=_draft_kv_bytes(drafter, draft_model, target, n_ctx),
            notes=tuple(notes),
            threads=context.n_threads,
            target_recurrent_bytes=_target_recurrent_bytes(context, target_layout),
            draft_recurrent_bytes=_draft_recurrent_bytes(drafter),
        )
        return self.info

    def _recall_draft_length(self, spec: PairSpec, drafter: Drafter, notes: list[str]) -> None:
        """With ``spec.learned_draft``: start automatic draft length from what it learned about this pair at its
        last load (engine/learned_draft.py), and keep the file to save to after each reply. A chain's members
        learn per reply (nothing kept); a file that cannot be used is a note, and the load goes on cold."""
        self._learned = None
        if not spec.learned_draft or drafter.kind == "none" or isinstance(drafter, ChainDraft):
            return
        assert self._decoder is not None
        store = LearnedDraftLengths(Path(spec.learned_draft))
        key = pair_key(spec, self.backend.info.name)
        self._learned = (store, key)
        try:
            policy = store.recall(key)
        except LearnedDraftError as exc:
            notes.append(f"what automatic draft length learned about this pair could not be read: {exc}; "
                         "it learns again from this reply")
            return
        if policy is not None and policy.score_first == (drafter.kind == "mtp"):
            self._decoder.auto_policy = policy

    def _remember_draft_length(self, decoder: SpeculativeDecoder, request: GenerationRequest) -> None:
        """After a reply with automatic draft length: save what it learned (a failed save is logged and costs
        only the learning; the reply is not touched)."""
        if self._learned is None or decoder is not self._decoder or request.draft.k is not None:
            return
        policy = decoder.auto_policy
        if policy is None:
            return
        store, key = self._learned
        try:
            store.remember(key, policy)
        except OSError as exc:
            log.warning("could not save the learned draft length to %s: %s", store.path, exc)

    def _retune_threads(self) -> None:
        """With automatic threads, re-choose the count from what other processes used since the last request
        (kept when that interval was too short to say): a load that came or went since the pair was loaded."""
        if not self._auto_threads or self._decoder is None:
            return
        busy = self._load_meter.busy_since_last()
        if busy is None:
            return
        threads = choose_threads(usable_cpus(), busy)
        for ctx in self._contexts():
            if ctx.n_threads != threads:
                ctx.set_threads(threads)

    def _mtp_drafter(self, spec: PairSpec, target: LoadedModel,
                     context: ModelContext) -> tuple[MtpDraft, LoadedModel | None]:
        """The MTP drafter on the target's own heads (``spec.mtp``) or on a head file (``spec.mtp_head``, loaded
        here and returned so it is freed with the pair)."""
        head: LoadedModel | None = None
        source = target
        if spec.mtp_head:
            head_path = spec.mtp_head
            _refuse_mtp_problem(lambda: mtp_files.check_head_file(spec.target, head_path))
            self._announce("draft", head_path)
            head = LoadedModel(self.backend, head_path, spec.draft_settings, load_mtp=True)
            source = head
        try:
            if n_nextn_layers(source) == 0:
                raise IncompatiblePairError("no_mtp_layers", f"{Path(source.path).name} has no MTP layers")
            return MtpDraft(context, MtpContext(source, spec.context), target.n_vocab), head
        except BaseException:
            if head is not None:
                head.close()
            raise

    def _announce(self, stage: str, path: object) -> None:
        if self.on_load_stage is not None:
            self.on_load_stage(stage, str(path))

    def unload(self) -> None:
        """Free both models and contexts (GPU memory included)."""
        if self._decoder is not None:
            self._decoder.drafter.close()
            self._decoder.context.close()
        for model in (self._draft_model, self._target):
            if model is not None:
                model.close()
        self._target = self._draft_model = None
        self._decoder = self._plain = None
        self._formatter = None
        self._last_reply = self._pending_reply = None
        self._learned = None
        self.info = None
        self.spec = None

    close = unload

    # -- text -----------------------------------------------------------------------------------------------
    @property
    def target(self) -> LoadedModel:
        if self._target is None:
            raise EngineError("no model is loaded")
        return self._target

    def _decoder_or_raise(self) -> SpeculativeDecoder:
        if self._decoder is None:
            raise EngineError("no model is loaded")
        return self._decoder

    def tokenize_infill(self, prefix: str, suffix: str) -> list[int]:
        """Fill-in-the-middle: ``[BOS] FIM_PRE prefix FIM_SUF suffix FIM_MID`` (the prefix-suffix-middle order
        llama-server uses), with the FIM tokens the GGUF declares; ``FimUnsupported`` when it declares none."""
        import llama_cpp.llama_cpp as ll

        target = self.target
        vocab = target.vocab
        pre, suf, mid = ll.llama_vocab_fim_pre(vocab), ll.llama_vocab_fim_suf(vocab), ll.llama_vocab_fim_mid(vocab)
        if min(pre, suf, mid) < 0:
            raise FimUnsupported("this model declares no fill-in-the-middle tokens (tokenizer.ggml.fim_pre_token_id "
                                 "and the like), so a suffix cannot be used")
        head = [target.bos_id] if target.add_bos and target.bos_id >= 0 else []
        text = target.tokenize
        return [*head, pre, *text(prefix, add_special=False, parse_special=False), suf,
                *text(suffix, add_special=False, parse_special=False), mid]

    def tokenize_prompt(self, text: str) -> list[int]:
        """Raw text, tokenised with the model's BOS rule (``--prompt``)."""
        return self.target.tokenize(text, add_special=True, parse_special=False)

    def tokenize_chat(self, messages: Sequence[ChatMessage], *, reserve: int = 0,
                      continue_reply: bool = False, trim: bool = True, tools: str | None = None,
                      continue_tokens: Sequence[int] | None = None) -> list[int]:
        """A conversation through the chat template, leaving ``reserve`` tokens of the context for the reply.

        ``trim``: the oldest turns are dropped until it fits (``fit_conversation``: about log2(turns) renders,
        cancellable with ``cancel``); without it a conversation that does not fit raises ``ContextOverflowError``
        (the server's default: a client must know its conversation was not read whole).
        ``continue_reply``: the last message is an assistant reply to continue: the prompt is the conversation
        before it with the generation prompt, then that reply's text (no end of turn): its token ids as generated
        when known — the last reply of this process (``_LastReply``), or ``continue_tokens`` (stored with the
        reply) when they spell its text in this model — else the text tokenised. Message text is never read as
        control tokens (``_chat_tokens``).
        """
        if self._formatter is None:
            raise EngineError("no model is loaded")
        prefix = ""
        if continue_reply:
            if not messages or messages[-1].role != "assistant":
                raise EngineError("continuing a reply needs the reply as the last chat message")
            messages, prefix = messages[:-1], messages[-1].content
        special: dict[str, bool] = {}
        messages, listed = self._formatter.with_tools(messages, tools)

        def tokens_of(msgs: Sequence[ChatMessage]) -> list[int]:
            return self._chat_tokens(msgs, prefix, special, listed)

        n_ctx = self._decoder_or_raise().context.n_ctx
        reserved = max(0, min(reserve, n_ctx // 2))
        budget = max(1, n_ctx - reserved)
        if trim:
            fitted = fit_conversation(messages, lambda m: len(tokens_of(m)), budget, self._cancel.is_set,
                                      reserved=reserved)
        else:
            fitted = list(messages)
            n = len(tokens_of(fitted))
            if n > budget:
                raise ContextOverflowError(n, n_ctx, reserved=reserved)
        if not continue_reply:
            tokens = tokens_of(fitted)
            self._pending_reply = _LastReply(tuple(tokens), (), "")
            return tokens
        head = self._chat_tokens(fitted, "", special, listed)
        last = self._last_reply
        if last is not None and last.head == tuple(head) and last.text == prefix:
            tokens = [*head, *last.tokens]  # the reply as the model generated it (see ``_LastReply``)
        elif continue_tokens and self._spell(continue_tokens, prefix):
            tokens = [*head, *continue_tokens]  # as generated, stored with the reply (after a restart)
        else:
            tokens = tokens_of(fitted)  # another process wrote it, or it was edited: its text is all there is
        self._pending_reply = _LastReply(tuple(head), tuple(tokens[len(head):]), prefix)
        return tokens

    def _spell(self, tokens: Sequence[int], text: str) -> bool:
        """Whether ``tokens`` are ids of the loaded target (a stored reply may be of another model) whose pieces
        make exactly ``text``."""
        target = self.target
        if any(not 0 <= t < target.n_vocab for t in tokens):
            return False
        return b"".join(target.piece(t) for t in tokens).decode("utf-8", errors="replace") == text

    def _chat_tokens(self, messages: Sequence[ChatMessage], prefix: str, special: dict[str, bool],
                     tools: list[Any] | None = None) -> list[int]:
        """The template's markup tokenised with its control tokens, the messages' text (and ``prefix``, a reply
        being continued) as plain text: ``<|im_start|>`` typed in a message is 7 tokens of text, not the marker.

        A conversation whose texts hold no control-token text (``special`` caches the check per text) is one
        string tokenised with special-token parsing on — exactly as before, and with the same merges across
        the markup/text boundaries. Otherwise the texts that do are tokenised on their own with parsing off
        (``ChatFormatter.segments``); a template that rewrites message text then cannot be split: refused."""
        formatter = self._formatter
        if formatter is None:
            raise EngineError("no model is loaded")
        target = self.target

        def has_special(text: str) -> bool:
            if text not in special:
                special[text] = bool(text) and (target.tokenize(text, add_special=False, parse_special=True)
                                                != target.tokenize(text, add_special=False, parse_special=False))
            return special[text]

        if not any(has_special(clean_text(m.content)) for m in messages) and not has_special(clean_text(prefix)):
            return target.tokenize(formatter.render(messages, tools=tools) + prefix, add_special=False,
                                   parse_special=True)
        parts = formatter.segments(messages, tools=tools)
        if parts is None:
            raise TemplateError("a message contains the text of one of the model's control tokens, and this "
                                "model's chat template rewrites message text, so it cannot be kept as plain text")
        if prefix:
            parts.append(Segment(clean_text(prefix), True))
        tokens: list[int] = []
        run = ""
        for part in parts:
            if part.content and has_special(part.text):
                if run:
                    tokens += target.tokenize(run, add_special=False, parse_special=True)
                    run = ""
                tokens += target.tokenize(part.text, add_special=False, parse_special=False)
            else:
                run += part.text
        if run:
            tokens += target.tokenize(run, add_special=False, parse_special=True)
        return tokens

    def take_chat_notes(self) -> list[str]:
        """Notes about the chat template since the last call (e.g. the model's own was replaced by the built-in
        one because it broke a time or size limit on this conversation)."""
        return self._formatter.take_notes() if self._formatter is not None else []

    # -- generation -----------------------------------------------------------------------------------------
    def generate(
        self,
        prompt_tokens: Sequence[int],
        *,
        max_tokens: int = 512,
        sampling: SamplingParams = SamplingParams(),
        draft: DraftParams = DraftParams(),
        stop: Sequence[str] = (),
        plain: bool = False,
        ignore_eos: bool = False,
        grammar: GrammarSpec | None = None,
        top_logprobs: int | None = None,
    ) -> Iterator[StepEvent | DoneEvent]:
        """Stream one reply. ``plain=True`` ignores the drafter (the baseline). One generation at a time.
        ``grammar``: the reply follows it exactly (``GrammarError`` here, at once, when it cannot be used).

        Not a generator itself: the request starts when this is called — a cancel arriving after the call, even
        before the first event is asked for, stops this request (and only this one).
        """
        decoder = self._decoder_or_raise()
        if plain and self._plain is not None:
            decoder = self._plain
        if self._generating.locked():
            raise EngineError("a generation is already running")
        mask = GrammarMask.of(self.target, grammar) if grammar is not None else None
        request = GenerationRequest(list(prompt_tokens), max_tokens, sampling, draft, tuple(stop), ignore_eos,
                                    grammar=mask, top_logprobs=top_logprobs)
        # The only place a cancel is forgotten: when a request starts.
        self._cancel.clear()
        for ctx in self._contexts():
            ctx.clear_abort()
        self._retune_threads()
        return self._stream(decoder, request)

    def _stream(self, decoder: SpeculativeDecoder, request: GenerationRequest) -> Iterator[StepEvent | DoneEvent]:
        if not self._generating.acquire(blocking=False):
            raise EngineError("a generation is already running")
        pending, self._pending_reply = self._pending_reply, None
        if pending is not None and [*pending.head, *pending.tokens] != list(request.prompt_tokens):
            pending = None  # tokenised for another request
        self._last_reply = None
        reply: list[int] = []
        governor = self._governor if self._auto_threads else None
        if governor is not None:
            governor.start_reply()
        try:
            for event in decoder.generate(request, self._cancel):
                if isinstance(event, StepEvent):
                    reply.extend(event.tokens)
                    if governor is not None:
                        self._govern_threads(governor, decoder)
                else:
                    event.stats.threads = decoder.context.n_threads  # the count it ended with (it may have moved)
                if isinstance(event, DoneEvent) and pending is not None and event.stop_reason in CONTINUABLE:
                    self._last_reply = _LastReply(pending.head, (*pending.tokens, *reply), pending.text + event.text)
                if isinstance(event, DoneEvent):  # before it is handed on: a caller may stop reading at it
                    self._remember_draft_length(decoder, request)
                yield event
        finally:
            self._generating.release()
            if request.grammar is not None:
                request.grammar.close()

    def _govern_threads(self, governor: ThreadGovernor, decoder: SpeculativeDecoder) -> None:
        """Between two passes of ``decoder``'s reply: the thread count ``governor`` chooses, on every context
        (looked up only on a change: this runs after every step); the passes that led to a step down are told to
        the reply's speed-up estimate."""
        current = decoder.context.n_threads
        threads = governor.after_pass(current)
        if threads != current:
            decoder.note_contended(governor.contended_passes)
            for ctx in self._contexts():
                ctx.set_threads(threads)

    def run(self, request: TextRequest) -> Iterator[StepEvent | DoneEvent]:
        """Tokenise ``request`` (chat template or raw prompt) and stream the reply. A cancel while a long
        conversation is being trimmed ends the reply ``cancelled`` before anything is generated."""
        if request.messages is not None:
            reserve = min(request.max_tokens, 256)
            self._cancel.clear()  # a request starts here: an old cancel must not stop its trimming
            try:
                tokens = self.tokenize_chat(request.messages, reserve=reserve, continue_reply=request.continue_reply,
                                            trim=request.trim, tools=request.tools,
                                            continue_tokens=request.continue_tokens)
            except TrimCancelled:
                return iter([DoneEvent(STOP_CANCELLED, GenerationStats(), "")])
        elif request.suffix is not None:
            assert request.prompt is not None
            tokens = self.tokenize_infill(request.prompt, request.suffix)
        else:
            assert request.prompt is not None
            tokens = self.tokenize_prompt(request.prompt)
        return self.generate(
            tokens,
            max_tokens=request.max_tokens,
            sampling=request.sampling,
            draft=request.draft,
            stop=request.stop,
            plain=request.plain,
            grammar=request.grammar,
            top_logprobs=request.top_logprobs,
            ignore_eos=request.ignore_eos,
        )

    def score(self, request: TextRequest, tokens: Sequence[int]) -> list[TokenScore]:
        """For each of ``tokens`` continuing ``request``'s prompt (tokenised as ``run`` would): (mass ranked before
        it, its probability, the top probability) in the target's distribution at its position with the request's
        filters (``SpeculativeDecoder.score``), masked by ``request.grammar`` when it has one. Not while a generation
        runs."""
        if request.messages is not None:
            prompt = self.tokenize_chat(request.messages, reserve=min(request.max_tokens, 256),
                                        continue_reply=request.continue_reply)
            self._pending_reply = None
        else:
            assert request.prompt is not None
            prompt = self.tokenize_prompt(request.prompt)
        if not self._generating.acquire(blocking=False):
            raise EngineError("a generation is already running")
        mask = None
        try:
            mask = GrammarMask.of(self.target, request.grammar) if request.grammar is not None else None
            return self._decoder_or_raise().score(prompt, [int(t) for t in tokens], request.sampling, grammar=mask)
        finally:
            if mask is not None:
                mask.close()
            self._generating.release()

    def cancel(self) -> None:
        """Stop the running generation within one step (or abort prompt evaluation). Thread-safe."""
        self._cancel.set()
        for ctx in self._contexts():
            ctx.request_abort()

    def _contexts(self) -> list[ModelContext | MtpContext]:
        """The target's context and the draft model's, if any."""
        decoder = self._decoder
        if decoder is None:
            return []
        drafter = _model_member(decoder.drafter)
        draft_ctx = getattr(drafter, "context", None)
        if isinstance(drafter, MtpDraft):
            draft_ctx = drafter.mtp
        return [decoder.context] + ([draft_ctx] if isinstance(draft_ctx, ModelContext | MtpContext) else [])


def _refuse_mtp_problem(check: Callable[[], mtp_files.MtpFileProblem | None]) -> None:
    """Raise the header-only MTP problem of a file as IncompatiblePairError (an unreadable file is left to the
    model load, which explains it)."""
    try:
        problem = check()
    except GGUFHeaderError:
        return
    if problem is not None:
        raise IncompatiblePairError(problem.rule, problem.reason)


def _layout(model: LoadedModel) -> MemoryLayout:
    """The exact memory layout of a loaded model (memory_layout.py), from its file's GGUF header: llama.cpp's own
    metadata strings leave out arrays, and a hybrid's per-layer head counts are one. Its scalars where the file
    cannot be read again."""
    arch = model.facts.architecture
    try:
        return layout_from_header(read_header(model.path, keep_arrays=False))
    except (GGUFHeaderError, OSError):
        return layout(arch, lambda suffix: model.meta(f"{arch}.{suffix}"))


def _target_kv_bytes(target: LoadedModel, shape: MemoryLayout, n_ctx: int) -> int:
    """The target context's KV cache: its attention layers only (a hybrid's recurrent layers and its NextN layers
    have none), exactly as llama.cpp allocates it; the all-layers estimate where the rules are not known."""
    return shape.kv_bytes(n_ctx) if shape.exact else target.kv_bytes_per_token() * n_ctx


def _target_recurrent_bytes(context: ModelContext, shape: MemoryLayout) -> int:
    """The target's recurrent state and its ``n_rs_seq`` snapshots, computed exactly where the rules are known,
    else what llama.cpp logged (to 0.01 MiB)."""
    return shape.recurrent_bytes(context.n_rs_seq) if shape.exact else context.recurrent_bytes


def _draft_kv_bytes(drafter: Drafter, draft_model: LoadedModel | None, target: LoadedModel, n_ctx: int) -> int:
    """KV bytes of the drafter's context: a draft model's, or the MTP context's (its NextN blocks only, each a
    full-attention layer, at the MTP context's own padded length)."""
    drafter = _model_member(drafter)
    if isinstance(drafter, MtpDraft):
        source = drafter.mtp.model
        shape = _layout(source)
        if shape.exact:
            return shape.mtp_kv_bytes(drafter.mtp.n_ctx)
        per_layer = target.kv_bytes_per_token() // max(1, target.facts.n_layer)
        return per_layer * n_nextn_layers(source) * n_ctx
    if draft_model is None:
        return 0
    shape = _layout(draft_model)
    return shape.kv_bytes(n_ctx) if shape.exact else draft_model.kv_bytes_per_token() * n_ctx


def _model_member(drafter: Drafter) -> Drafter:
    """The drafter with a context of its own: a chain's draft model or MTP member (the drafter itself if it is no
    chain; a chain of lookups only gives its last member, which has none)."""
    if isinstance(drafter, ChainDraft):
        return drafter.members[-1].drafter
    return drafter


def _history_chain(target: LoadedModel, history_db: Path, lookup: LookupSettings, drafter: Drafter,
                   notes: list[str]) -> ChainDraft:
    """History lookup, prompt lookup, then ``drafter`` if it is a model (chain_draft.py). The index is the one
    kept with ``history_db`` for this target's tokenizer (history_index.py); a missing or unreadable one is
    rebuilt from the history, and a history that cannot be read leaves history lookup with what the index holds."""
    facts = target.vocab_facts()
    path = index_dir_for(history_db) / f"{tokenizer_fingerprint(facts.vocab_type, facts.token_texts)}.npz"
    index = HistoryIndex.open(path)
    history = HistoryLookupDraft(
        index, history_db, lambda text: target.tokenize(text, add_special=False, parse_special=False))
    history.prefill([])
    if history.last_error is not None:
        notes.append(f"history lookup: {history.last_error}")
    members: list[Drafter] = [history, PromptLookupDraft(lookup)]
    if drafter.kind not in ("none", "lookup"):
        members.append(drafter)
    return ChainDraft(members)


# The conversation a model's template is tried on at load: a template must render it safely, and with the user's
# words in it (one that drops them would send the model an empty prompt on every turn).
_SAMPLE_SYSTEM = "Answer briefly."
_SAMPLE_USER = "What is the capital of France?"


def _draft_recurrent_bytes(drafter: Drafter) -> int:
    """A draft model's recurrent states: its own, and the checkpoint it keeps while drafting (hybrid drafts)."""
    context = getattr(drafter, "context", None)
    if not isinstance(context, ModelContext):
        return 0
    return context.recurrent_bytes + (context.recurrent_state_bytes if context.is_recurrent else 0)


def _chat_formatter(target: LoadedModel, notes: list[str]) -> ChatFormatter:
    """The model's own template when it renders a sample conversation safely, else a built-in one (noted)."""
    chatml_marker = target.tokenize("<|im_start|>", add_special=False, parse_special=True)
    bos = target.token_text(target.bos_id) if target.bos_id >= 0 else ""
    eos = target.token_text(target.eos_id) if target.eos_id >= 0 else ""
    chatml = len(chatml_marker) == 1 and target.token_text(chatml_marker[0]) == "<|im_start|>"
    template = target.chat_template()
    if template is not None and not template.strip():
        notes.append("the model's chat template is empty (it would leave the conversation out of the prompt) "
                     "— using the built-in template")
    elif template:
        try:
            formatter = ChatFormatter(template, bos_token=bos, eos_token=eos, has_chatml_tokens=chatml)
            sample = formatter.render([ChatMessage("system", _SAMPLE_SYSTEM), ChatMessage("user", _SAMPLE_USER)])
            if _SAMPLE_USER not in sample:
                raise TemplateError("the model's chat template leaves the user's message out of the prompt")
            return formatter
        except TemplateError as exc:
            notes.append(f"{exc} — using the built-in template")
    return ChatFormatter(None, bos_token=bos, eos_token=eos, has_chatml_tokens=chatml)
