"""The engine: a loaded target (+ draft model or prompt lookup), chat formatting and generation.

This is what the worker process (and ``--in-process`` CLI runs) drive. One generation at a time. The speed-up
against plain decoding is measured inside each reply (``stats.PlainRateMeter``), not calibrated at load.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence

from outrider.engine.chat import ChatFormatter, fit_conversation
from outrider.engine.compat import check_facts, rollback_report
from outrider.engine.drafters import DraftSource, ModelDraft, NoDraft, PromptLookupDraft
from outrider.engine.errors import EngineError, TemplateError
from outrider.engine.events import DoneEvent, LoadedPair, StepEvent
from outrider.engine.llama.backend import LoadedModel, ModelContext
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ChatMessage, DraftParams, PairSpec, SamplingParams, TextRequest
from outrider.engine.speculative import STOP_CANCELLED, STOP_LENGTH, GenerationRequest, SpeculativeDecoder

CONTINUABLE = (STOP_LENGTH, STOP_CANCELLED)
"""Stop reasons after which a reply's tokens are exactly its text (a stop string's tokens are not in the text)."""

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

    def __init__(self, backend: Backend | None = None, *, on_load_stage: LoadStageCallback | None = None) -> None:
        """``on_load_stage(stage, path)`` is told which file each load is about to hand to llama.cpp (the engine
        process reports it, so a crash inside llama.cpp can be blamed on the right file)."""
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
        self._last_reply: _LastReply | None = None
        self._pending_reply: _LastReply | None = None  # head (and text continued) of the reply being generated

    # -- loading --------------------------------------------------------------------------------------------
    def load(self, spec: PairSpec) -> LoadedPair:
        """Load ``spec`` (unloading any previous pair first, so memory is freed before the new load)."""
        self.unload()
        notes: list[str] = []
        self._announce("target", spec.target)
        target = LoadedModel(self.backend, spec.target, spec.target_settings)
        try:
            context = ModelContext(target, spec.context)
        except BaseException:
            target.close()
            raise
        drafter: DraftSource = NoDraft()
        draft_model: LoadedModel | None = None
        try:
            if spec.draft:
                self._announce("draft", spec.draft)
                draft_model = LoadedModel(self.backend, spec.draft, spec.draft_settings)
                check_facts(target.vocab_facts(), draft_model.vocab_facts()).raise_if_incompatible()
                # A hybrid draft rolls back through a checkpoint (its drafts are one-token decodes): no snapshots.
                draft_context = ModelContext(draft_model, dataclasses.replace(spec.context), rollback_tokens=0)
                drafter = ModelDraft(draft_context, target.n_vocab)
            elif spec.lookup:
                drafter = PromptLookupDraft(spec.lookup_settings)
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
        self._formatter = _chat_formatter(target, notes)
        self.spec = spec
        n_ctx = context.n_ctx
        self.info = LoadedPair(
            target=target.facts,
            draft=draft_model.facts if draft_model else None,
            draft_mode=drafter.kind,
            n_ctx=n_ctx,
            backend=self.backend.info.name,
            gpu_offload=self.backend.info.gpu_offload,
            chat_template=self._formatter.source,
            target_kv_bytes=target.kv_bytes_per_token() * n_ctx,
            draft_kv_bytes=draft_model.kv_bytes_per_token() * n_ctx if draft_model else 0,
            notes=tuple(notes),
        )
        return self.info

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

    def tokenize_prompt(self, text: str) -> list[int]:
        """Raw text, tokenised with the model's BOS rule (``--prompt``)."""
        return self.target.tokenize(text, add_special=True, parse_special=False)

    def tokenize_chat(self, messages: Sequence[ChatMessage], *, reserve: int = 0,
                      continue_reply: bool = False) -> list[int]:
        """A conversation through the chat template; oldest turns are dropped to leave ``reserve`` tokens.

        ``continue_reply``: the last message is an assistant reply to continue: the prompt is the conversation
        before it with the generation prompt, then that reply's text (no end of turn).
        """
        formatter = self._formatter
        if formatter is None:
            raise EngineError("no model is loaded")
        target = self.target
        prefix = ""
        if continue_reply:
            if not messages or messages[-1].role != "assistant":
                raise EngineError("continuing a reply needs the reply as the last chat message")
            messages, prefix = messages[:-1], messages[-1].content

        def tokens_of(msgs: Sequence[ChatMessage]) -> list[int]:
            return target.tokenize(formatter.render(msgs) + prefix, add_special=False, parse_special=True)

        n_ctx = self._decoder_or_raise().context.n_ctx
        budget = max(1, n_ctx - max(0, min(reserve, n_ctx // 2)))
        fitted = fit_conversation(messages, lambda m: len(tokens_of(m)), budget)
        if not continue_reply:
            tokens = tokens_of(fitted)
            self._pending_reply = _LastReply(tuple(tokens), (), "")
            return tokens
        head = target.tokenize(formatter.render(fitted), add_special=False, parse_special=True)
        last = self._last_reply
        if last is not None and last.head == tuple(head) and last.text == prefix:
            tokens = [*head, *last.tokens]  # the reply as the model generated it (see ``_LastReply``)
        else:
            tokens = tokens_of(fitted)  # another process wrote it, or it was edited: its text is all there is
        self._pending_reply = _LastReply(tuple(head), tuple(tokens[len(head):]), prefix)
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
    ) -> Iterator[StepEvent | DoneEvent]:
        """Stream one reply. ``plain=True`` ignores the drafter (the baseline). One generation at a time.

        Not a generator itself: the request starts when this is called — a cancel arriving after the call, even
        before the first event is asked for, stops this request (and only this one).
        """
        decoder = self._decoder_or_raise()
        if plain and self._plain is not None:
            decoder = self._plain
        request = GenerationRequest(list(prompt_tokens), max_tokens, sampling, draft, tuple(stop), ignore_eos)
        if self._generating.locked():
            raise EngineError("a generation is already running")
        # The only place a cancel is forgotten: when a request starts.
        self._cancel.clear()
        for ctx in self._contexts():
            ctx.clear_abort()
        return self._stream(decoder, request)

    def _stream(self, decoder: SpeculativeDecoder, request: GenerationRequest) -> Iterator[StepEvent | DoneEvent]:
        if not self._generating.acquire(blocking=False):
            raise EngineError("a generation is already running")
        pending, self._pending_reply = self._pending_reply, None
        if pending is not None and [*pending.head, *pending.tokens] != list(request.prompt_tokens):
            pending = None  # tokenised for another request
        self._last_reply = None
        reply: list[int] = []
        try:
            for event in decoder.generate(request, self._cancel):
                if isinstance(event, StepEvent):
                    reply.extend(event.tokens)
                elif pending is not None and event.stop_reason in CONTINUABLE:
                    self._last_reply = _LastReply(pending.head, (*pending.tokens, *reply), pending.text + event.text)
                yield event
        finally:
            self._generating.release()

    def run(self, request: TextRequest) -> Iterator[StepEvent | DoneEvent]:
        """Tokenise ``request`` (chat template or raw prompt) and stream the reply."""
        if request.messages is not None:
            reserve = min(request.max_tokens, 256)
            tokens = self.tokenize_chat(request.messages, reserve=reserve, continue_reply=request.continue_reply)
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
        )

    def cancel(self) -> None:
        """Stop the running generation within one step (or abort prompt evaluation). Thread-safe."""
        self._cancel.set()
        for ctx in self._contexts():
            ctx.request_abort()

    def _contexts(self) -> list[ModelContext]:
        """The target's context and the draft model's, if any."""
        decoder = self._decoder
        if decoder is None:
            return []
        draft_ctx = getattr(decoder.drafter, "context", None)
        return [decoder.context] + ([draft_ctx] if isinstance(draft_ctx, ModelContext) else [])


def _chat_formatter(target: LoadedModel, notes: list[str]) -> ChatFormatter:
    """The model's own template when it renders a sample conversation safely, else a built-in one (noted)."""
    chatml_marker = target.tokenize("<|im_start|>", add_special=False, parse_special=True)
    bos = target.token_text(target.bos_id) if target.bos_id >= 0 else ""
    eos = target.token_text(target.eos_id) if target.eos_id >= 0 else ""
    chatml = len(chatml_marker) == 1 and target.token_text(chatml_marker[0]) == "<|im_start|>"
    template = target.chat_template()
    if template:
        try:
            formatter = ChatFormatter(template, bos_token=bos, eos_token=eos, has_chatml_tokens=chatml)
            formatter.render([ChatMessage("system", "s"), ChatMessage("user", "u")])
            return formatter
        except TemplateError as exc:
            notes.append(f"{exc} — using the built-in template")
    return ChatFormatter(None, bos_token=bos, eos_token=eos, has_chatml_tokens=chatml)
