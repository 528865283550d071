"""The chat's Qt side: one conversation's flow (``outrider.conversation.flow``) behind signals, and the pair.

The flow itself — send, edit and resend, regenerate, continue, stop, every way a reply ends, the checkpoint
cadence — is ``ConversationFlow``, the same as ``outrider ask`` runs (no Qt, tested alone). This adapter gives it
the Qt bridges (the store thread, the engine thread), forwards the engine bridge's signals to it, ticks it with a
timer while a reply streams (``TICK_MS``: the checkpoint of text that stopped arriving), re-emits what it hears as
signals and turns its refusals and failures into words. It also loads pairs (``load_pair``) and remembers the
conversation open last in the settings (reopened at start: ``restore_last_conversation``).

The reply's text has one owner: the flow's ``ReplyText``; the chat view shows the same object (``reply_started``).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from outrider.conversation.cadence import TICK_S
from outrider.conversation.flow import (
    ConversationFlow,
    FlowListener,
    Refusal,
    StoredMessage,
    TurnError,
    TurnPlan,
    TurnStage,
)
from outrider.conversation.meter import ReplyMeter
from outrider.conversation.reply_text import ReplyText
from outrider.engine.events import DoneEvent, LoadedPair, StepBatch
from outrider.engine.params import ChatMessage, TextRequest
from outrider.history import ConversationNotFoundError, Message, Role, decode_runs
from outrider.history.turns import ReplyEnd, end_reason
from outrider.paths import learned_draft_file
from outrider.ui.bridges.engine_bridge import QtEngineBridge, describe_error
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.picker.choice import PairChoice
from outrider.ui.settings import QtSettings
from outrider.ui.widgets.chat_items import MessageItem

TICK_MS = round(TICK_S * 1000)


class NoticeScope(StrEnum):
    """What a notice belongs to; it goes away with it (a notice never outlives what it is about)."""

    APP = "app"  # stays until another notice replaces it
    PAIR = "pair"  # the loaded pair: gone when a pair loads, fails or the engine stops
    CHAT = "chat"  # the open conversation: gone when another one is opened
    REPLY = "reply"  # the next reply: gone when a reply starts


def items_of(messages: Sequence[StoredMessage]) -> list[MessageItem]:
    items = []
    for m in messages:
        if isinstance(m, Message):
            end = str(end_reason(m.status, m.stats)) if m.role is Role.ASSISTANT else ""
            runs = decode_runs(m.text, m.stats) if m.role is Role.ASSISTANT else None
            items.append(MessageItem(m.role.value, m.text, m.status.value, m.id, end=end, runs=runs))
        else:
            items.append(MessageItem("system", f"(message {m.id} {m.label})"))
    return items


class ChatController(QObject):
    """Signals:
        conversation_opened(object, list): conversation id (or None for a new one) and its ``MessageItem``s.
        user_message_added(str): show the user's message now (before it is committed).
        user_message_stored(int): that message is committed, with this id (Edit & resend can refer to it).
        message_not_stored(str): that message could not be committed (disk full…): its text, to give back.
        reply_started(ReplyText): a reply began streaming; its text grows in this ``ReplyText``.
        reply_continued(ReplyText): the last reply streams on (Continue); the ``ReplyText`` starts with its text.
        steps_received(StepBatch): streamed steps (forwarded from the engine bridge), already in the ``ReplyText``.
        reply_grew(): the streaming ``ReplyText`` has new text.
        reply_ended(str, str, object): status (complete / interrupted / error), final text, message id;
            ``last_end.reason`` says how it ended.
        engine_changed(object): new engine state (``LoadedPair`` or None), ``engine_status`` has the details.
        notice(str): a one-line message for the user (errors included).
        crashed(str): the engine died; the text is the reason.
        load_failed(str): a pair could not be loaded; the text is the reason.
        busy_changed(bool): a reply is being produced.

    Attributes:
        flow: the ``ConversationFlow`` this adapts (its state is read through the properties below).
        conversation_id: the open conversation (None until the first message of a new one is committed).
        loaded: the ``LoadedPair`` of the loaded pair (None when none).
        choice: the ``PairChoice`` loaded or being loaded.
        last_done: the ``DoneEvent`` of the last finished reply.
        last_end: the ``ReplyEnd`` of the last reply (status, text, ``reason``).
        last_plain_tps: plain-decoding tokens/s the engine measured in the last finished reply of the loaded
            pair (None until one measured it; cleared when a pair is loaded).
    """

    conversation_opened = Signal(object, list)
    user_message_added = Signal(str)
    user_message_stored = Signal(int)
    message_not_stored = Signal(str)
    reply_started = Signal(object)
    reply_continued = Signal(object)
    steps_received = Signal(object)
    reply_grew = Signal()
    reply_ended = Signal(str, str, object)
    engine_changed = Signal(object)
    notice = Signal(str, str)  # text, what it belongs to (``NoticeScope``): it goes when that does
    crashed = Signal(str)
    load_failed = Signal(str)
    busy_changed = Signal(bool)

    def __init__(self, bridge: QtEngineBridge, store: QtStoreBridge, settings: QtSettings, meter: ReplyMeter,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.store = store
        self.settings = settings
        self.meter = meter
        self.loaded: LoadedPair | None = None
        self.choice: PairChoice | None = None
        self.loading = False
        self.engine_stopped: str | None = None  # why the engine process died, until the next load
        self.max_tokens_override: int | None = None
        self.flow = ConversationFlow(store, bridge, _Signals(self), meter=meter, ready=lambda: self.ready)
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._on_tick_timer_timeout)

        bridge.loaded.connect(self._on_bridge_loaded)
        bridge.load_failed.connect(self._on_bridge_load_failed)
        bridge.step_received.connect(self._on_bridge_step_received)
        bridge.generation_finished.connect(self._on_bridge_generation_finished)
        bridge.crashed.connect(self._on_bridge_crashed)
        bridge.error.connect(self._on_bridge_error)
        store.error.connect(lambda exc: self.notice.emit(f"History: {exc}", NoticeScope.APP))

    # -- state --------------------------------------------------------------------------------------------------
    @property
    def conversation_id(self) -> int | None:
        return self.flow.conversation_id

    @property
    def streaming(self) -> bool:
        return self.flow.streaming

    @property
    def last_done(self) -> DoneEvent | None:
        return self.flow.last_done

    @property
    def last_end(self) -> ReplyEnd | None:
        return self.flow.last_end

    @property
    def last_plain_tps(self) -> float | None:
        """Plain decoding's tokens/s the engine measured in the last finished reply of the loaded pair (None
        until one measured it; cleared when a pair is loaded)."""
        return self.flow.last_plain_tps

    @property
    def ready(self) -> bool:
        return self.loaded is not None and not self.loading

    def engine_status(self) -> dict[str, Any]:
        info = self.loaded
        backend = self.bridge.client.backend or {}
        status: dict[str, Any] = {"backend": backend.get("name") or (info.backend if info else "–"),
                                  "gpu_offload": bool(backend.get("gpu_offload")), "state": "not loaded"}
        if self.loading:
            status["state"] = "loading…"
        if info is not None:
            mem = info.target.size_bytes + (info.draft.size_bytes if info.draft else 0)
            mem += info.target_kv_bytes + info.draft_kv_bytes
            status.update(state="ready", target=Path(info.target.path).name,
                          draft=Path(info.draft.path).name if info.draft else None, draft_mode=info.draft_mode,
                          memory_bytes=mem, n_ctx=info.n_ctx, notes=list(info.notes),
                          gpu_layers=(info.target.gpu_layers_offloaded,
                                      info.draft.gpu_layers_offloaded if info.draft else 0))
        return status

    # -- engine -------------------------------------------------------------------------------------------------
    def load_pair(self, choice: PairChoice, *, automatic: bool = False) -> None:
        """Load a pair with the current settings. ``automatic`` (start-up): refuse a model that crashed before."""
        self.flow.stop()
        self.choice = choice
        self.loading = True
        self.engine_stopped = None
        self.loaded = None
        self.flow.last_plain_tps = None
        s = self.settings.value
        spec = s.pair_spec(str(choice.target), str(choice.draft) if choice.draft else None, choice.lookup,
                           choice.mtp, history=str(self.store.store.db_path),
                           learned=str(learned_draft_file()))
        self.engine_changed.emit(None)
        self.bridge.load(spec, refuse_unsafe=automatic)

    def reload(self) -> None:
        if self.choice is not None:
            self.load_pair(self.choice)

    @Slot(object)
    def _on_bridge_loaded(self, info: LoadedPair) -> None:
        self.loading = False
        self.loaded = info
        self.engine_changed.emit(info)
        for note in info.notes:
            self.notice.emit(note, NoticeScope.PAIR)

    @Slot(object)
    def _on_bridge_load_failed(self, exc: Exception) -> None:
        self.loading = False
        self.loaded = None
        self.engine_changed.emit(None)
        self.load_failed.emit(describe_error(exc))

    # The bridge's and the timer's signals reach the flow through the controller's own slots: a connection to a
    # plain method would outlive the controller and call into a deleted object.
    @Slot(object)
    def _on_bridge_step_received(self, batch: StepBatch) -> None:
        self.flow.on_steps(batch)

    @Slot(object)
    def _on_bridge_generation_finished(self, done: DoneEvent) -> None:
        self.flow.on_done(done)

    @Slot()
    def _on_tick_timer_timeout(self) -> None:
        self.flow.tick()

    @Slot(object)
    def _on_bridge_crashed(self, exc: Exception) -> None:
        self.engine_stopped = describe_error(exc)
        self.loaded = None
        self.engine_changed.emit(None)
        self.flow.on_crashed()
        self.crashed.emit(describe_error(exc))

    @Slot(object)
    def _on_bridge_error(self, exc: Exception) -> None:
        self.flow.on_failed()
        self.notice.emit(describe_error(exc), NoticeScope.REPLY)

    # -- conversation -------------------------------------------------------------------------------------------
    def open_conversation(self, conversation_id: int | None) -> None:
        try:
            refusal = self.flow.open(conversation_id)
        except ConversationNotFoundError:
            self.notice.emit("That conversation no longer exists.", NoticeScope.CHAT)
            return
        if refusal is Refusal.BUSY:
            self.notice.emit("Stop the reply before switching conversations.", NoticeScope.REPLY)

    def restore_last_conversation(self) -> bool:
        """Reopen the conversation that was open when the app was last used (quietly nothing when it is gone)."""
        cid = self.settings.value.last_conversation_id
        if cid <= 0 or self.streaming:
            return False
        try:
            self.store.conversation(cid)
        except ConversationNotFoundError:
            self._remember(None)
            return False
        self.open_conversation(cid)
        return self.conversation_id == cid

    def _remember(self, conversation_id: int | None) -> None:
        if self.settings.value.last_conversation_id != (conversation_id or 0):
            self.settings.set(last_conversation_id=conversation_id or 0)

    def send(self, text: str) -> bool:
        return self._said(self.flow.send(text, self._plan()))

    def edit_resend(self, message_id: int, text: str) -> bool:
        return self._said(self.flow.edit_resend(message_id, text, self._plan()))

    def regenerate(self) -> bool:
        return self._said(self.flow.regenerate(self._plan()))

    def continue_reply(self, message_id: int) -> bool:
        """Continue the reply ``message_id`` (the last one, cut at the token limit) where it stopped; the new text
        is appended to the same message."""
        return self._said(self.flow.continue_reply(message_id, self._plan()))

    def stop(self) -> None:
        """Stop the reply: the engine cuts it within one step; before the engine started (the question still
        being stored) it ends at once as stopped, with no text."""
        self.flow.stop()

    def _plan(self) -> TurnPlan:
        """The turn as the settings say now; the request is built when the turn's writes are done."""
        def request(history: tuple[ChatMessage, ...], continuing: bool) -> TextRequest:
            s = self.settings.value
            return TextRequest(messages=history, max_tokens=self.max_tokens_override or s.max_tokens,
                               sampling=s.sampling(), draft=s.draft_params(), continue_reply=continuing)

        system = self.settings.value.system_prompt.strip() or None
        return TurnPlan(request, system=system, pair_id=self.choice.pair_id if self.choice else None)

    def _said(self, refusal: Refusal | None) -> bool:
        """Whether the intent runs; the reason it does not, in words (nothing for empty text)."""
        if refusal is Refusal.BUSY:
            self.notice.emit("A reply is still being written (Esc stops it).", NoticeScope.REPLY)
        elif refusal is Refusal.NOT_READY:
            self.notice.emit(self._not_ready_text(), NoticeScope.PAIR)
        return refusal is None

    def _not_ready_text(self) -> str:
        """Why nothing can be sent now, and what to do about it."""
        if self.loading:
            return "The model is still loading…"
        if self.engine_stopped is not None:
            return f"The engine stopped ({self.engine_stopped}): press Reload to start it again."
        if self.choice is not None:
            return "The pair could not be loaded: choose another (Models > Choose pair…)."
        return "No model is loaded yet: choose a pair (Models > Choose pair…)."


class _Signals(FlowListener):
    """What the flow says, as the controller's signals (and the timer that ticks it while a reply streams)."""

    def __init__(self, controller: ChatController) -> None:
        self.s = controller

    def conversation_shown(self, conversation_id: int | None, messages: Sequence[StoredMessage]) -> None:
        self.s._remember(conversation_id)
        self.s.conversation_opened.emit(conversation_id, items_of(messages))

    def conversation_committed(self, conversation_id: int) -> None:
        self.s._remember(conversation_id)

    def user_message_added(self, text: str) -> None:
        self.s.user_message_added.emit(text)

    def user_message_stored(self, message_id: int) -> None:
        self.s.user_message_stored.emit(message_id)

    def reply_started(self, reply: ReplyText) -> None:
        self.s.reply_started.emit(reply)

    def reply_continued(self, reply: ReplyText) -> None:
        self.s.reply_continued.emit(reply)

    def steps_received(self, batch: StepBatch) -> None:
        self.s.steps_received.emit(batch)
        self.s.reply_grew.emit()

    def reply_ended(self, end: ReplyEnd, reply_id: int | None, done: DoneEvent | None) -> None:
        self.s.reply_ended.emit(str(end.status), end.text, reply_id)

    def turn_failed(self, error: TurnError, text: str) -> None:
        what = {TurnStage.QUESTION: "Your message could not be stored",
                TurnStage.REPLY: "Your message is stored, but its reply could not be",
                TurnStage.CONTINUE: "Cannot continue that reply"}[error.stage]
        self.s.notice.emit(f"{what}: {error.cause}", NoticeScope.CHAT)
        if error.stage is TurnStage.QUESTION:
            self.s.message_not_stored.emit(text)  # nothing typed is lost

    def busy_changed(self, busy: bool) -> None:
        if busy:
            self.s._timer.start()
        else:
            self.s._timer.stop()
        self.s.busy_changed.emit(busy)
