"""The conversation flow: one chat's turns from the user's message to the stored reply (no Qt, no engine process).

``ConversationFlow`` turns intents (send, edit and resend, regenerate, continue, stop) into history writes and an
engine request, and the engine's events (steps, the end, a crash, an error) into the reply's text, its
checkpoints and its end, in the order docs/history.md requires:

1. The user's message is committed before the engine starts (``ChatTurns.ask``; a new conversation with its
   system prompt in one transaction), then the reply's streaming row is made (``ChatTurns.begin_reply``).
2. Each batch of steps goes into the one ``ReplyText``; a checkpoint of the text so far follows whenever
   ``CheckpointCadence`` says it is due (asked on every batch and every ``tick``).
3. The reply ends exactly once, as ``history/turns.py`` builds it: finished (the engine's ``DoneEvent``, with
   its statistics), stopped, crashed or failed with the text so far, with its provenance runs (``with_runs``).
   A stop before the engine started (the question still being written) ends it at once, with no text.

It reaches the outside only through three interfaces, so that the GUI and the terminal run the same flow:
``TurnStore`` (where writes run: the GUI's store thread, or at once), ``ReplyEngine`` (start and cancel a reply;
its events come back through ``on_steps``/``on_done``/``on_crashed``/``on_failed``/``on_cut_short``) and
``FlowListener`` (what whoever shows the chat hears). All calls come from one thread (the GUI's, or the
command's); the store's answers too (``TurnStore.submit`` delivers them there).

Intents that cannot run say why as a ``Refusal``; turns that cannot be written as a ``TurnError`` with the stage
that failed. The words for either are the front end's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, Protocol

from outrider.conversation.cadence import CHECKPOINT_INTERVAL_S, CheckpointCadence
from outrider.conversation.meter import ReplyMeter
from outrider.conversation.reply_text import ReplyText
from outrider.engine.events import DoneEvent, StepBatch
from outrider.engine.params import ChatMessage, TextRequest
from outrider.history.checkpoint import ReplyCheckpointer
from outrider.history.models import Conversation, Message, MessageStatus, ReplyStats, Role, UnreadableRecord
from outrider.history.provenance import with_runs
from outrider.history.store import HistoryStore
from outrider.history.turns import (
    ChatTurns,
    EndReason,
    ReplyEnd,
    Turn,
    reply_crashed,
    reply_failed,
    reply_finished,
    reply_interrupted,
    reply_stats,
)

StoredMessage = Message | UnreadableRecord


class TurnStore(Protocol):
    """Where the flow reads and writes the history (``QtStoreBridge`` in the GUI, ``DirectStore`` in a command).

    ``submit`` runs ``fn(store)`` wherever writes run and calls ``on_done(result)`` — or ``on_error(exc)`` when
    ``fn`` raised — on the flow's thread; ``notify``: the conversation list changed. ``checkpoint`` commits a
    streaming reply's text if it changed; ``finish`` its end (always).
    """

    def conversation(self, conversation_id: int) -> Conversation: ...

    def submit(self, fn: Callable[[HistoryStore], Any], on_done: Callable[[Any], None] | None = None,
               *, notify: bool = False, on_error: Callable[[Exception], None] | None = None) -> None: ...

    def checkpoint(self, checkpointer: ReplyCheckpointer, text: str) -> None: ...

    def finish(self, checkpointer: ReplyCheckpointer, text: str, status: MessageStatus,
               stats: ReplyStats | None, on_done: Callable[[Any], None] | None = None) -> None: ...


class ReplyEngine(Protocol):
    """Starts and cancels replies (``QtEngineBridge``; a command's own loop). ``generate`` returns at once: the
    reply's events come back to the flow's ``on_*`` methods. ``cancel`` ends the running reply within one step
    (its ``DoneEvent`` then says ``cancelled``)."""

    def generate(self, request: TextRequest) -> None: ...

    def cancel(self) -> None: ...


class FlowListener:
    """What the flow tells whoever shows the conversation; every method does nothing unless overridden."""

    def conversation_shown(self, conversation_id: int | None, messages: Sequence[StoredMessage]) -> None:
        """Show these messages as the conversation (opened, or what an edit-and-resend keeps of it)."""

    def conversation_committed(self, conversation_id: int) -> None:
        """The open conversation is now ``conversation_id`` (a turn created it)."""

    def user_message_added(self, text: str) -> None:
        """Show the user's message now (it is being committed)."""

    def user_message_stored(self, message_id: int) -> None:
        """The user's message is committed with this id."""

    def reply_started(self, reply: ReplyText) -> None:
        """A reply begins; its text grows in ``reply``."""

    def reply_continued(self, reply: ReplyText) -> None:
        """The last reply streams on; ``reply`` starts with its text."""

    def steps_received(self, batch: StepBatch) -> None:
        """Steps arrived; they are in the ``ReplyText`` already."""

    def reply_ended(self, end: ReplyEnd, reply_id: int | None, done: DoneEvent | None) -> None:
        """The reply ended as ``end`` says (committed, or being committed); ``done`` when the engine finished it;
        ``reply_id`` None when it ended before its row existed."""

    def turn_failed(self, error: TurnError, text: str) -> None:
        """A turn could not be written; ``text`` is the user's message (not stored when ``error.stage`` is
        ``QUESTION``: give it back)."""

    def busy_changed(self, busy: bool) -> None:
        """A reply is being produced (from the intent until its end)."""


class Refusal(StrEnum):
    """Why an intent did not run."""

    EMPTY = "empty"  # nothing to send
    BUSY = "busy"  # a reply is being written
    NOT_READY = "not_ready"  # no engine to answer (no pair loaded, loading, stopped)
    NO_CONVERSATION = "no_conversation"  # edit, regenerate or continue without an open conversation
    NO_QUESTION = "no_question"  # regenerate in a conversation without a user message


class TurnStage(StrEnum):
    """Where a turn could not be written."""

    QUESTION = "question"  # the user's message (nothing of the turn is stored)
    REPLY = "reply"  # the reply's row (the user's message is stored, in ``TurnError.conversation_id``)
    CONTINUE = "continue"  # reopening the reply to continue (nothing changed)


class TurnError(Exception):
    """A turn could not be written: at which stage, why (``cause``: the store's error, or ``ValueError`` for a
    reply that cannot be continued), and the conversation that holds what was written (None when nothing)."""

    def __init__(self, stage: TurnStage, cause: Exception, conversation_id: int | None = None) -> None:
        super().__init__(f"{stage}: {cause}")
        self.stage = stage
        self.cause = cause
        self.conversation_id = conversation_id


@dataclasses.dataclass(frozen=True)
class TurnPlan:
    """What a turn needs besides the user's text.

    ``request(history, continuing)``: the engine request that answers ``history`` (``continuing``: its last
    message is the reply to continue), built when the turn's writes are done. ``system``: a new conversation's
    system prompt; ``pair_id``: the pair that answers (stored with a new conversation and with the reply).
    """

    request: Callable[[tuple[ChatMessage, ...], bool], TextRequest]
    system: str | None = None
    pair_id: str | None = None


@dataclasses.dataclass(frozen=True)
class _Begun:
    turn: Turn
    checkpointer: ReplyCheckpointer


class ConversationFlow:
    """One conversation's turns (see the module docstring).

    ``meter``: fed the reply's statistics when given (the GUI's charts). ``ready()``: whether an engine can
    answer now. ``clock``/``interval_s``: the checkpoint cadence's (monotonic seconds).

    Attributes:
        conversation_id: the open conversation (None until a turn of a new one is committed).
        reply: the ``ReplyText`` of the reply streaming, or of the last one.
        request: the engine request of the current (or last) reply; None before one was made.
        last_done: the ``DoneEvent`` of the last reply the engine finished (None while one streams).
        last_end: how the last reply ended (``ReplyEnd``; None while one streams).
        last_plain_tps: plain decoding's tokens/s the engine measured in the last reply that measured it.
    """

    def __init__(self, store: TurnStore, engine: ReplyEngine, listener: FlowListener | None = None, *,
                 meter: ReplyMeter | None = None, ready: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic, interval_s: float = CHECKPOINT_INTERVAL_S) -> None:
        self._store = store
        self._engine = engine
        self._listener = listener if listener is not None else FlowListener()
        self._meter = meter
        self._ready = ready
        self._cadence = CheckpointCadence(interval_s, clock)
        self.conversation_id: int | None = None
        self.reply = ReplyText()
        self.request: TextRequest | None = None
        self.last_done: DoneEvent | None = None
        self.last_end: ReplyEnd | None = None
        self.last_plain_tps: float | None = None
        self._streaming = False
        self._generating = False
        self._stop_requested = False
        self._continuing = False
        self._plan: TurnPlan | None = None
        self._reply_id: int | None = None
        self._checkpointer: ReplyCheckpointer | None = None
        self._turn = 0  # turns begun: tells the store's answer for an ended turn from one for the current turn
        self._ended_before_row: dict[int, ReplyEnd] = {}  # turn -> its end, written once its row exists

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def streaming(self) -> bool:
        """A reply is under way: from the intent (its writes may still be running) until its end."""
        return self._streaming

    @property
    def generating(self) -> bool:
        """The engine has been asked for the reply under way."""
        return self._generating

    @property
    def reply_id(self) -> int | None:
        """The stored row of the reply under way (None until it exists), or of the last one."""
        return self._reply_id

    def can_start(self, text: str) -> Refusal | None:
        if not text:
            return Refusal.EMPTY
        if self._streaming:
            return Refusal.BUSY
        if not self._ready():
            return Refusal.NOT_READY
        return None

    # -- intents ----------------------------------------------------------------------------------------------
    def open(self, conversation_id: int | None) -> Refusal | None:
        """Open a stored conversation (or a new, empty one with None). Raises ``ConversationNotFoundError``."""
        if self._streaming:
            return Refusal.BUSY
        messages = self._store.conversation(conversation_id).messages if conversation_id is not None else []
        self.conversation_id = conversation_id
        if self._meter is not None:
            self._meter.reset_conversation()
            if messages:
                self._meter.load_conversation(messages)
        self._listener.conversation_shown(conversation_id, messages)
        return None

    def send(self, text: str, plan: TurnPlan) -> Refusal | None:
        """Send ``text`` (stripped) as the next user message of the open conversation, or of a new one."""
        text = text.strip()
        refusal = self.can_start(text)
        if refusal is not None:
            return refusal
        self._listener.user_message_added(text)
        self._start(text, None, plan)
        return None

    def edit_resend(self, message_id: int, text: str, plan: TurnPlan) -> Refusal | None:
        """Replace the user message ``message_id`` with ``text``, drop what followed it, and answer it again."""
        text = text.strip()
        refusal = self.can_start(text)
        if refusal is not None:
            return refusal
        cid = self.conversation_id
        if cid is None:
            return Refusal.NO_CONVERSATION
        kept: list[StoredMessage] = []
        for m in self._store.conversation(cid).messages:
            if m.id == message_id and isinstance(m, Message):
                kept.append(dataclasses.replace(m, text=text))
                break
            kept.append(m)
        if self._meter is not None:
            self._meter.load_conversation(kept)  # the conversation chart loses the replies the resend removes
        self._listener.conversation_shown(cid, kept)
        self._start(text, message_id, plan)
        return None

    def regenerate(self, plan: TurnPlan) -> Refusal | None:
        """Answer the conversation's last user message again (what followed it is dropped)."""
        if self.conversation_id is None:
            return Refusal.NO_CONVERSATION
        messages = self._store.conversation(self.conversation_id).messages
        users = [m for m in messages if isinstance(m, Message) and m.role is Role.USER]
        if not users:
            return Refusal.NO_QUESTION
        return self.edit_resend(users[-1].id, users[-1].text, plan)

    def continue_reply(self, message_id: int, plan: TurnPlan) -> Refusal | None:
        """Continue the reply ``message_id`` (the last one, cut at the token limit) where it stopped: the engine
        gets the conversation with that reply's text as the start of its answer; the new text is appended to the
        same message."""
        cid = self.conversation_id
        if cid is None:
            return Refusal.NO_CONVERSATION
        refusal = self.can_start("continue")
        if refusal is not None:
            return refusal
        turn_no = self._begin(plan, continuing=True)

        def work(store: HistoryStore) -> _Begun:
            turns = ChatTurns(store)
            try:
                turn = turns.continue_reply(cid, message_id)
            except Exception as exc:
                raise TurnError(TurnStage.CONTINUE, exc, cid) from exc
            return _Begun(turn, turns.checkpointer(turn.reply_id))

        self._store.submit(work, lambda begun: self._on_turn_begun(turn_no, begun), notify=True,
                           on_error=self._failure_handler(turn_no, ""))
        return None

    def stop(self) -> None:
        """Stop the reply: the engine cuts it within one step; before the engine started (the question still
        being stored) it ends at once as stopped, with no text."""
        if not self._streaming:
            return
        self._stop_requested = True
        if self._generating:
            self._engine.cancel()

    # -- the engine's events ----------------------------------------------------------------------------------
    def on_steps(self, batch: StepBatch) -> None:
        if not self._streaming:
            return
        self.reply.add_steps(batch.steps)
        if self._meter is not None:
            self._meter.add(batch.stats, batch.k)
        self._listener.steps_received(batch)
        self._checkpoint_if_due()

    def tick(self) -> None:
        """A timer's tick while the reply streams: the checkpoint of text that stopped arriving."""
        if self._streaming:
            self._checkpoint_if_due()

    def on_done(self, done: DoneEvent) -> None:
        """The engine finished the reply (``done.stop_reason``: stop, length, or cancelled when stopped)."""
        if not self._streaming:
            return
        self.last_done = done
        plan, request = self._plan, self.request
        stats = reply_stats(done.stats, done.stop_reason, pair_id=plan.pair_id if plan else None,
                            temperature=request.sampling.temperature if request else None)
        text = self.reply.text if self._continuing else done.text  # a continuation's DoneEvent has the new part
        self._end(reply_finished(text, done.stop_reason, stats), done)

    def on_crashed(self, partial: str | None = None) -> None:
        """The engine died during the reply; ``partial``: text it sent that may not have arrived here."""
        if self._streaming:
            self._end(reply_crashed(self.reply.text, partial), None)

    def on_failed(self) -> None:
        """The engine reported an error for the reply."""
        if self._streaming:
            self._end(reply_failed(self.reply.text), None)

    def on_cut_short(self, reason: EndReason = EndReason.STOPPED) -> None:
        """The reply ended without an end from the engine (Ctrl-C, the history failing under it): interrupted,
        with the text so far."""
        if self._streaming:
            self._end(reply_interrupted(self.reply.text, reason), None)

    # -- the turn ---------------------------------------------------------------------------------------------
    def _begin(self, plan: TurnPlan, *, continuing: bool) -> int:
        """A reply is under way from now; returns its turn's number."""
        self._turn += 1
        self._streaming = True
        self._generating = False
        self._stop_requested = False
        self._continuing = continuing
        self._plan = plan
        self.reply = ReplyText()
        self.request = None
        self._reply_id = None
        self._checkpointer = None
        self.last_done = None
        self.last_end = None
        if self._meter is not None:
            self._meter.begin_reply(continuing=continuing)
        self._listener.busy_changed(True)
        return self._turn

    def _start(self, text: str, edit_id: int | None, plan: TurnPlan) -> None:
        turn_no = self._begin(plan, continuing=False)
        self._listener.reply_started(self.reply)
        cid = self.conversation_id

        def work(store: HistoryStore) -> _Begun:  # where writes run: the question is committed before generating
            turns = ChatTurns(store)
            try:
                asked = turns.ask(text, conversation_id=cid, system=plan.system, pair_id=plan.pair_id,
                                  edit_id=edit_id)
            except Exception as exc:
                raise TurnError(TurnStage.QUESTION, exc, cid) from exc
            try:
                begun = turns.begin_reply(asked.conversation_id)
            except Exception as exc:
                raise TurnError(TurnStage.REPLY, exc, asked.conversation_id) from exc
            turn = Turn(asked.conversation_id, asked.user_message_id, begun.reply_id, begun.history)
            return _Begun(turn, turns.checkpointer(begun.reply_id))

        self._store.submit(work, lambda begun: self._on_turn_begun(turn_no, begun), notify=True,
                           on_error=self._failure_handler(turn_no, text))

    def _failure_handler(self, turn_no: int, text: str) -> Callable[[Exception], None]:
        def failed(exc: Exception) -> None:
            error = exc if isinstance(exc, TurnError) else TurnError(TurnStage.QUESTION, exc, self.conversation_id)
            if error.stage is TurnStage.REPLY and error.conversation_id is not None:
                self._commit_conversation(error.conversation_id)  # the question is stored there
            if turn_no == self._turn and self._streaming:
                self._end(reply_failed(""), None)  # no reply: the chat is free again
            self._ended_before_row.pop(turn_no, None)  # there is no row to write it to
            self._listener.turn_failed(error, text)

        return failed

    def _commit_conversation(self, conversation_id: int) -> None:
        if self.conversation_id != conversation_id:
            self.conversation_id = conversation_id
            self._listener.conversation_committed(conversation_id)

    def _on_turn_begun(self, turn_no: int, begun: _Begun) -> None:
        turn = begun.turn
        if turn_no == self._turn:  # (an older turn's conversation is not the one open now)
            self._commit_conversation(turn.conversation_id)
        early = self._ended_before_row.pop(turn_no, None)
        if early is not None or turn_no != self._turn:  # it ended (a crash) while its row was being made
            end = early if early is not None else reply_failed("")
            self._store.finish(begun.checkpointer, end.text, end.status, end.stats)  # the row says how
            return
        self._reply_id = turn.reply_id
        self._checkpointer = begun.checkpointer
        if self._continuing:
            self.reply = ReplyText(turn.continued, turn.continued_runs, turn.continued_tokens)
            self._listener.reply_continued(self.reply)
        elif turn.user_message_id:
            self._listener.user_message_stored(turn.user_message_id)
        self._cadence.restart(len(self.reply.pieces))
        if self._stop_requested:
            self._end(reply_interrupted(self.reply.text), None)
            return
        assert self._plan is not None
        request = self._plan.request(turn.history, self._continuing)
        if self._continuing:  # resumed from the ids it was generated as, when they were stored with it
            request = dataclasses.replace(request, continue_tokens=turn.continued_tokens)
        self.request = request
        self._generating = True
        self._engine.generate(self.request)

    def _checkpoint_if_due(self) -> None:
        if self._checkpointer is not None and self._cadence.due(len(self.reply.pieces)):
            self._store.checkpoint(self._checkpointer, self.reply.text)

    def _end(self, end: ReplyEnd, done: DoneEvent | None) -> None:
        """Finish the reply as ``end`` says (statistics from ``done``, the engine's last event), once."""
        self._streaming = False
        self._generating = False
        if done is not None and done.stats.plain_tps is not None:
            self.last_plain_tps = done.stats.plain_tps
        if self._meter is not None:
            self._meter.finish_reply(done.stats if done is not None else None)
        # The colours go with the reply (reopened, after a restart, exported, continued): its runs as streamed.
        end = dataclasses.replace(end, stats=with_runs(end.stats, end.text, self.reply.pieces))
        end = end.with_tokens(self.reply.whole_tokens)  # Continue resumes from them, after a restart too
        self.last_end = end
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            self._store.finish(checkpointer, end.text, end.status, end.stats)
        else:
            self._ended_before_row[self._turn] = end
        self._listener.reply_ended(end, self._reply_id, done)
        self._listener.busy_changed(False)
