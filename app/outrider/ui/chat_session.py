"""The chat controller: one conversation, one engine, one store; no widgets.

It turns user intents (send, edit-and-resend, regenerate, stop, load a pair) into engine requests and store
writes, in the order docs/history.md requires: the user's message is committed before generation starts, the
streamed reply is checkpointed at least once a second by a timer, and the reply is finished with its
statistics — or marked ``interrupted`` with the text so far when the engine crashes or the user stops it, with
how it ended (``EndReason``: stopped, cut at the token limit, the engine stopped) so the chat can say so.

The reply's text has one owner: the ``ReplyText`` made for it here, appended to from each ``StepBatch``; the chat
view shows the same object (``reply_started``), the checkpoints and the crash path read it. The conversation
open last is remembered in the settings and reopened at start (``restore_last_conversation``).
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from outrider.engine.events import DoneEvent, LoadedPair, StepBatch
from outrider.engine.params import TextRequest
from outrider.history import (
    ConversationNotFoundError,
    HistoryStore,
    Message,
    ReplyCheckpointer,
    Role,
    decode_runs,
    with_runs,
)
from outrider.history.turns import (
    ChatTurns,
    ReplyEnd,
    Turn,
    end_reason,
    reply_crashed,
    reply_failed,
    reply_finished,
    reply_interrupted,
    reply_stats,
)
from outrider.ui.bridges.engine_bridge import QtEngineBridge, describe_error
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.picker.choice import PairChoice
from outrider.ui.settings import QtSettings
from outrider.ui.widgets.chat_items import MessageItem, ReplyText
from outrider.ui.widgets.live_stats import ReplyMeter

CHECKPOINT_MS = 1000


class NoticeScope(StrEnum):
    """What a notice belongs to; it goes away with it (a notice never outlives what it is about)."""

    APP = "app"  # stays until another notice replaces it
    PAIR = "pair"  # the loaded pair: gone when a pair loads, fails or the engine stops
    CHAT = "chat"  # the open conversation: gone when another one is opened
    REPLY = "reply"  # the next reply: gone when a reply starts


def items_of(messages: list[Any]) -> list[MessageItem]:
    items = []
    for m in messages:
        if isinstance(m, Message):
            end = str(end_reason(m.status, m.stats)) if m.role is Role.ASSISTANT else ""
            runs = decode_runs(m.text, m.stats) if m.role is Role.ASSISTANT else None
            items.append(MessageItem(m.role.value, m.text, m.status.value, m.id, end=end, runs=runs))
        else:
            items.append(MessageItem("system", f"(message {m.id} {m.label})"))
    return items


class ChatSession(QObject):
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
        self.conversation_id: int | None = None
        self.loaded: LoadedPair | None = None
        self.choice: PairChoice | None = None
        self.loading = False
        self.engine_stopped: str | None = None  # why the engine process died, until the next load
        self.last_done: DoneEvent | None = None
        self.last_end: ReplyEnd | None = None
        self.last_plain_tps: float | None = None
        self.max_tokens_override: int | None = None
        self._streaming = False
        self._generating = False
        self._stop_requested = False
        self._reply = ReplyText()  # the streaming reply's text: its one owner
        self._continuing = False  # the reply streaming is a continuation (its start is in _reply)
        self._reply_id: int | None = None
        self._checkpointer: ReplyCheckpointer | None = None
        self._request: TextRequest | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(CHECKPOINT_MS)
        self._timer.timeout.connect(self._on_checkpoint_timer_timeout)

        bridge.loaded.connect(self._on_bridge_loaded)
        bridge.load_failed.connect(self._on_bridge_load_failed)
        bridge.step_received.connect(self._on_bridge_step_received)
        bridge.generation_finished.connect(self._on_bridge_generation_finished)
        bridge.crashed.connect(self._on_bridge_crashed)
        bridge.error.connect(self._on_bridge_error)
        store.error.connect(lambda exc: self.notice.emit(f"History: {exc}", NoticeScope.APP))

    # -- state --------------------------------------------------------------------------------------------------
    @property
    def streaming(self) -> bool:
        return self._streaming

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
        if self._streaming:
            self.bridge.cancel()
        self.choice = choice
        self.loading = True
        self.engine_stopped = None
        self.loaded = None
        self.last_plain_tps = None
        s = self.settings.value
        spec = s.pair_spec(str(choice.target), str(choice.draft) if choice.draft else None, choice.lookup,
                           choice.mtp, history=str(self.store.store.db_path))
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

    # -- conversation -------------------------------------------------------------------------------------------
    def open_conversation(self, conversation_id: int | None) -> None:
        if self._streaming:
            self.notice.emit("Stop the reply before switching conversations.", NoticeScope.REPLY)
            return
        self.meter.reset_conversation()
        if conversation_id is None:
            self.conversation_id = None
            self._remember(None)
            self.conversation_opened.emit(None, [])
            return
        try:
            conv = self.store.conversation(conversation_id)
        except ConversationNotFoundError:
            self.notice.emit("That conversation no longer exists.", NoticeScope.CHAT)
            return
        self.conversation_id = conversation_id
        self._remember(conversation_id)
        self.meter.load_conversation(conv.messages)
        self.conversation_opened.emit(conversation_id, items_of(conv.messages))

    def restore_last_conversation(self) -> bool:
        """Reopen the conversation that was open when the app was last used (quietly nothing when it is gone)."""
        cid = self.settings.value.last_conversation_id
        if cid <= 0 or self._streaming:
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
        text = text.strip()
        if not self._can_start(text):
            return False
        self.user_message_added.emit(text)
        self._start(text, None)
        return True

    def edit_resend(self, message_id: int, text: str) -> bool:
        text = text.strip()
        if not self._can_start(text) or self.conversation_id is None:
            return False
        conv = self.store.conversation(self.conversation_id)
        kept: list[Any] = []
        for m in conv.messages:
            if m.id == message_id and isinstance(m, Message):
                kept.append(dataclasses.replace(m, text=text))
                break
            kept.append(m)
        self.meter.load_conversation(kept)  # the conversation chart loses the replies the resend removes
        self.conversation_opened.emit(self.conversation_id, items_of(kept))
        self._start(text, message_id)
        return True

    def regenerate(self) -> bool:
        if self.conversation_id is None:
            return False
        conv = self.store.conversation(self.conversation_id)
        users = [m for m in conv.messages if isinstance(m, Message) and m.role is Role.USER]
        if not users:
            return False
        return self.edit_resend(users[-1].id, users[-1].text)

    def continue_reply(self, message_id: int) -> bool:
        """Continue the reply ``message_id`` (the last one, cut at the token limit) where it stopped: the engine
        gets the conversation with that reply's text as the start of its answer; the new text is appended to the
        same message."""
        cid = self.conversation_id
        if cid is None or not self._can_start("continue"):
            return False
        self._begin(continuing=True)

        def work(store: HistoryStore) -> Turn:
            return ChatTurns(store).continue_reply(cid, message_id)

        self.store.submit(work, self._on_store_reply_begun, notify=True,
                          on_error=lambda exc: self._on_store_turn_failed("Cannot continue that reply", exc))
        return True

    def stop(self) -> None:
        """Stop the reply: the engine cuts it within one step; before the engine started (the question still
        being stored) it ends at once as stopped, with no text."""
        if not self._streaming:
            return
        self._stop_requested = True
        if self._generating:
            self.bridge.cancel()

    def _can_start(self, text: str) -> bool:
        if not text:
            return False
        if self._streaming:
            self.notice.emit("A reply is still being written (Esc stops it).", NoticeScope.REPLY)
            return False
        if not self.ready:
            self.notice.emit(self._not_ready_text(), NoticeScope.PAIR)
            return False
        return True

    def _not_ready_text(self) -> str:
        """Why nothing can be sent now, and what to do about it."""
        if self.loading:
            return "The model is still loading…"
        if self.engine_stopped is not None:
            return f"The engine stopped ({self.engine_stopped}): press Reload to start it again."
        if self.choice is not None:
            return "The pair could not be loaded: choose another (Models > Choose pair…)."
        return "No model is loaded yet: choose a pair (Models > Choose pair…)."

    def _begin(self, *, continuing: bool) -> None:
        self._streaming = True
        self._generating = False
        self._stop_requested = False
        self._continuing = continuing
        self._reply = ReplyText()
        self._reply_id = None
        self._checkpointer = None
        self.last_done = None
        self.last_end = None
        self.meter.begin_reply(continuing=continuing)
        self.busy_changed.emit(True)

    def _start(self, text: str, edit_id: int | None) -> None:
        self._begin(continuing=False)
        self.reply_started.emit(self._reply)
        s = self.settings.value
        cid = self.conversation_id

        pair_id = self.choice.pair_id if self.choice else None

        def work(store: HistoryStore) -> Turn:  # the store thread: the question is committed before generating
            return ChatTurns(store).start(text, conversation_id=cid, system=s.system_prompt.strip() or None,
                                          pair_id=pair_id, edit_id=edit_id)

        def not_stored(exc: Exception) -> None:
            self._on_store_turn_failed("Your message could not be stored", exc)
            self.message_not_stored.emit(text)

        self.store.submit(work, self._on_store_reply_begun, notify=True, on_error=not_stored)

    def _on_store_turn_failed(self, what: str, exc: Exception) -> None:
        """The turn could not be written (disk full, conversation gone): no reply; the chat is free again."""
        if self._streaming and self._checkpointer is None:
            self._end(reply_failed(""), None)
        self.notice.emit(f"{what}: {exc}", NoticeScope.CHAT)

    def _on_store_reply_begun(self, turn: Turn) -> None:
        history = turn.history
        if self.conversation_id != turn.conversation_id:
            self._remember(turn.conversation_id)
        self.conversation_id = turn.conversation_id
        self._reply_id = turn.reply_id
        self._checkpointer = ReplyCheckpointer(self.store.store, turn.reply_id)
        if self._continuing:
            self._reply = ReplyText(turn.continued, turn.continued_runs, turn.continued_tokens)
            self.reply_continued.emit(self._reply)
        elif turn.user_message_id:
            self.user_message_stored.emit(turn.user_message_id)
        if self._stop_requested:
            self._end(reply_interrupted(self._reply.text), None)
            return
        s = self.settings.value
        request = TextRequest(messages=history, max_tokens=self.max_tokens_override or s.max_tokens,
                              sampling=s.sampling(), draft=s.draft_params(), continue_reply=self._continuing,
                              continue_tokens=turn.continued_tokens if self._continuing else None)
        self._request = request
        self._generating = True
        self._timer.start()
        self.bridge.generate(request)

    @Slot(object)
    def _on_bridge_step_received(self, batch: StepBatch) -> None:
        if not self._streaming:
            return
        self._reply.add_steps(batch.steps)
        self.meter.add(batch.stats, batch.k)
        self.steps_received.emit(batch)
        self.reply_grew.emit()

    @Slot()
    def _on_checkpoint_timer_timeout(self) -> None:
        if self._checkpointer is not None and self._streaming:
            self.store.checkpoint(self._checkpointer, self._reply.text)

    @Slot(object)
    def _on_bridge_generation_finished(self, done: DoneEvent) -> None:
        if not self._streaming:
            return
        self.last_done = done
        s = self.settings.value
        stats = reply_stats(done.stats, done.stop_reason, pair_id=self.choice.pair_id if self.choice else None,
                            temperature=s.temperature)
        text = self._reply.text if self._continuing else done.text  # a continuation's DoneEvent has the new part
        self._end(reply_finished(text, done.stop_reason, stats), done)

    @Slot(object)
    def _on_bridge_crashed(self, exc: Exception) -> None:
        self.engine_stopped = describe_error(exc)
        self.loaded = None
        self.engine_changed.emit(None)
        if self._streaming:
            self._end(reply_crashed(self._reply.text), None)
        self.crashed.emit(describe_error(exc))

    @Slot(object)
    def _on_bridge_error(self, exc: Exception) -> None:
        if self._streaming:
            self._end(reply_failed(self._reply.text), None)
        self.notice.emit(describe_error(exc), NoticeScope.REPLY)

    def _end(self, end: ReplyEnd, done: DoneEvent | None) -> None:
        """Finish the reply in the history as ``end`` says (statistics from ``done``, the engine's last event)."""
        self._timer.stop()
        self._streaming = False
        self._generating = False
        if done is not None:
            if done.stats.plain_tps is not None:
                self.last_plain_tps = done.stats.plain_tps
            self.meter.finish_reply(done.stats)
        else:
            self.meter.finish_reply(None)
        reply_id = self._reply_id
        # The colours go with the reply (reopened, after a restart, exported, continued): its runs as streamed.
        end = dataclasses.replace(end, stats=with_runs(end.stats, end.text, self._reply.pieces))
        end = end.with_tokens(self._reply.whole_tokens)  # Continue resumes from them, after a restart too
        if self._checkpointer is not None:
            self.store.finish(self._checkpointer, end.text, end.status, end.stats)
        self._checkpointer = None
        self.last_end = end
        self.reply_ended.emit(str(end.status), end.text, reply_id)
        self.busy_changed.emit(False)

