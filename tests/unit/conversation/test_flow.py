"""The conversation flow without Qt (``conversation/flow.py``): a real history, a fake engine, a fake clock.

What the GUI's chat and ``outrider ask`` both rely on: the question is committed before the engine is asked, the
reply is checkpointed at the cadence (on batches and on ticks) and ended exactly once however it ends, a stop
before the engine started ends it at once, and a turn that cannot be written says at which stage. ``QueuedStore``
holds the writes until the test runs them, as the GUI's store thread answers later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from outrider.conversation.direct_store import DirectStore
from outrider.conversation.flow import (
    ConversationFlow,
    FlowListener,
    Refusal,
    TurnError,
    TurnPlan,
    TurnStage,
)
from outrider.conversation.meter import ReplyMeter
from outrider.conversation.reply_text import ReplyText
from outrider.engine.events import DoneEvent, StepBatch, StepEvent
from outrider.engine.params import ChatMessage, TextRequest
from outrider.engine.stats import GenerationStats
from outrider.history import DiskFullError, HistoryStore, Message, MessageStatus, Role, decode_runs
from outrider.history.checkpoint import ReplyCheckpointer
from outrider.history.turns import EndReason, ReplyEnd, end_reason


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingStore(DirectStore):
    """The history at once, with every checkpoint written kept as (time, text)."""

    def __init__(self, store: HistoryStore, clock: Clock) -> None:
        super().__init__(store)
        self.clock = clock
        self.checkpoints: list[tuple[float, str]] = []

    def checkpoint(self, checkpointer: ReplyCheckpointer, text: str) -> None:
        super().checkpoint(checkpointer, text)
        self.checkpoints.append((self.clock.now, text))


class QueuedStore(RecordingStore):
    """Turn writes wait for ``run()``: the store thread's answer comes after the intent returned."""

    def __init__(self, store: HistoryStore, clock: Clock) -> None:
        super().__init__(store, clock)
        self.jobs: list[Callable[[], None]] = []

    def submit(self, fn: Callable[[HistoryStore], Any], on_done: Callable[[Any], None] | None = None,
               *, notify: bool = False, on_error: Callable[[Exception], None] | None = None) -> None:
        self.jobs.append(lambda: DirectStore.submit(self, fn, on_done, notify=notify, on_error=on_error))

    def run(self) -> None:
        while self.jobs:
            self.jobs.pop(0)()


class FakeEngine:
    """Keeps each request with the conversation as stored when the engine was asked."""

    def __init__(self, store: HistoryStore) -> None:
        self.store = store
        self.requests: list[TextRequest] = []
        self.stored_when_asked: list[list[tuple[str, str, str]]] = []
        self.cancels = 0

    def generate(self, request: TextRequest) -> None:
        self.requests.append(request)
        summaries = self.store.list_conversations()
        self.stored_when_asked.append([(m.role.value, m.text, m.status.value)
                                       for c in summaries
                                       for m in self.store.get_conversation(c.id).messages
                                       if isinstance(m, Message) and m.role is not Role.SYSTEM])

    def cancel(self) -> None:
        self.cancels += 1


class Recorder(FlowListener):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.ends: list[tuple[ReplyEnd, int | None, DoneEvent | None]] = []
        self.failures: list[tuple[TurnError, str]] = []

    def user_message_added(self, text: str) -> None:
        self.events.append(("added", text))

    def user_message_stored(self, message_id: int) -> None:
        self.events.append(("stored", message_id))

    def reply_started(self, reply: ReplyText) -> None:
        self.events.append(("started",))

    def reply_continued(self, reply: ReplyText) -> None:
        self.events.append(("continued", reply.text))

    def conversation_committed(self, conversation_id: int) -> None:
        self.events.append(("conversation", conversation_id))

    def conversation_shown(self, conversation_id: int | None, messages: Any) -> None:
        self.events.append(("shown", conversation_id, [m.text for m in messages]))

    def reply_ended(self, end: ReplyEnd, reply_id: int | None, done: DoneEvent | None) -> None:
        self.ends.append((end, reply_id, done))
        self.events.append(("ended", str(end.status)))

    def turn_failed(self, error: TurnError, text: str) -> None:
        self.failures.append((error, text))

    def busy_changed(self, busy: bool) -> None:
        self.events.append(("busy", busy))


def _request(history: tuple[ChatMessage, ...], continuing: bool) -> TextRequest:
    return TextRequest(messages=history, max_tokens=32, continue_reply=continuing)


PLAN = TurnPlan(_request, system="Be brief.", pair_id="t+d")


def _steps(*pieces: str, drafted: bool = False, generated: int = 0) -> StepBatch:
    n = len(pieces)
    step = StepEvent([7] * n, [drafted] * n, list(pieces), 2 if drafted else 0, None,
                     ["lookup" if drafted else "target"] * n)
    return StepBatch((step,), GenerationStats(generated=generated or n, draft_mode="lookup"))


def _done(text: str, stop: str = "stop", generated: int = 3) -> DoneEvent:
    stats = GenerationStats(generated=generated, drafted=2, accepted=1, passes=2, pass_tokens=3, decode_s=0.5,
                            draft_mode="lookup")
    return DoneEvent(stop, stats, text)


class Chat:
    def __init__(self, history: HistoryStore, store: RecordingStore, clock: Clock, ready: list[bool]) -> None:
        self.history, self.store, self.clock = history, store, clock
        self.engine = FakeEngine(history)
        self.listener = Recorder()
        self.meter = ReplyMeter(clock)
        self.flow = ConversationFlow(store, self.engine, self.listener, meter=self.meter,
                                     ready=lambda: ready[0], clock=clock)

    def stored(self) -> list[Message]:
        assert self.flow.conversation_id is not None
        return [m for m in self.history.get_conversation(self.flow.conversation_id).messages
                if isinstance(m, Message) and m.role is not Role.SYSTEM]


@pytest.fixture
def history(tmp_path: Path) -> Iterator[HistoryStore]:
    with HistoryStore.open(tmp_path) as store:
        yield store


@pytest.fixture
def ready() -> list[bool]:
    return [True]


@pytest.fixture
def chat(history: HistoryStore, ready: list[bool]) -> Chat:
    clock = Clock()
    return Chat(history, RecordingStore(history, clock), clock, ready)


@pytest.fixture
def queued(history: HistoryStore, ready: list[bool]) -> Chat:
    clock = Clock()
    return Chat(history, QueuedStore(history, clock), clock, ready)


def test_the_question_is_committed_before_the_engine_starts_and_the_reply_ends_with_its_statistics(
        chat: Chat) -> None:
    """Breaking it: the engine asked before ``ChatTurns.ask`` (in ``_start``) saw no stored question."""
    assert chat.flow.send("  Hello there \n", PLAN) is None
    assert chat.engine.stored_when_asked == [[("user", "Hello there", "complete"), ("assistant", "", "streaming")]]
    request = chat.engine.requests[0]
    assert [(m.role, m.content) for m in request.messages or ()] == [("system", "Be brief."),
                                                                      ("user", "Hello there")]
    chat.flow.on_steps(_steps("Hi", drafted=True))
    chat.flow.on_steps(_steps(" you"))
    chat.flow.on_done(_done("Hi you"))
    user, reply = chat.stored()
    assert (reply.text, reply.status) == ("Hi you", MessageStatus.COMPLETE)
    assert reply.stats is not None and reply.stats.generated == 3 and reply.stats.pair_id == "t+d"
    assert end_reason(reply.status, reply.stats) is EndReason.COMPLETE
    assert decode_runs(reply.text, reply.stats) == [("Hi", "lookup"), (" you", "target")]  # the colours stored
    assert chat.listener.events[:4] == [("added", "Hello there"), ("busy", True), ("started",),
                                        ("conversation", chat.flow.conversation_id)]
    assert ("stored", user.id) in chat.listener.events
    assert chat.listener.events[-2:] == [("ended", "complete"), ("busy", False)]
    assert not chat.flow.streaming and chat.meter.replies == 1


def test_checkpoints_follow_the_cadence_on_batches_and_on_ticks(chat: Chat) -> None:
    """Batches every 0.25 s for 3 s, one more at 3.25 s, then silence with a tick every 0.25 s. Breaking it:
    without the check on batches (ticks only) nothing was stored while the batches came; without the ticks the
    text of the batch at 3.25 s was stored only at the end."""
    chat.flow.send("Write", PLAN)
    for i in range(1, 13):
        chat.clock.now = i * 0.25
        chat.flow.on_steps(_steps(f"w{i} "))
        assert len(chat.flow.reply.text) - len(chat.stored()[-1].text) <= 4 * len("w10 ")  # ≤ 1 s behind
    chat.clock.now = 3.25
    chat.flow.on_steps(_steps("last"))  # 0.25 s after the commit at 3.0: not yet
    assert [t for t, _ in chat.store.checkpoints] == [1.0, 2.0, 3.0]
    assert chat.stored()[-1].text == "".join(f"w{i} " for i in range(1, 13))
    for tick in range(14, 18):  # 3.5 … 4.25
        chat.clock.now = tick * 0.25
        chat.flow.tick()
    assert [t for t, _ in chat.store.checkpoints] == [1.0, 2.0, 3.0, 4.0]  # the tick at 4.0 took the last text
    assert chat.stored()[-1].text.endswith("last") and chat.stored()[-1].status is MessageStatus.STREAMING
    chat.clock.now = 4.5
    chat.flow.on_done(_done(chat.flow.reply.text))  # the end is always written, whatever the interval
    assert chat.stored()[-1].status is MessageStatus.COMPLETE and len(chat.store.checkpoints) == 4
    chat.clock.now = 9.0
    chat.flow.tick()  # no reply: no write
    assert len(chat.store.checkpoints) == 4


def test_a_stop_before_the_question_is_stored_ends_the_reply_as_stopped_without_the_engine(queued: Chat) -> None:
    """Breaking it: ``_on_turn_begun`` without the stop check started the engine (a request appeared)."""
    assert queued.flow.send("Quick question", PLAN) is None
    queued.flow.stop()
    assert queued.flow.streaming and queued.engine.cancels == 0  # nothing to cancel yet
    queued.store.run()  # the store thread answers
    assert not queued.engine.requests and not queued.flow.streaming
    (end, reply_id, done), = queued.listener.ends
    assert end.reason is EndReason.STOPPED and reply_id is not None and done is None
    _user, reply = queued.stored()
    assert reply.status is MessageStatus.INTERRUPTED and end_reason(reply.status, reply.stats) is EndReason.STOPPED


def test_a_stop_while_generating_cancels_and_the_engine_s_end_says_stopped(chat: Chat) -> None:
    chat.flow.send("Go on", PLAN)
    chat.flow.on_steps(_steps("Some"))
    chat.flow.stop()
    assert chat.engine.cancels == 1
    chat.flow.on_done(_done("Some", stop="cancelled"))
    reply = chat.stored()[-1]
    assert (reply.text, reply.status) == ("Some", MessageStatus.INTERRUPTED)
    assert end_reason(reply.status, reply.stats) is EndReason.STOPPED


def test_an_engine_crash_keeps_the_text_and_an_error_before_any_text_is_an_error(chat: Chat) -> None:
    chat.flow.send("One", PLAN)
    chat.flow.on_steps(_steps("Partial"))
    chat.flow.on_crashed(partial="Partial answer")  # the client saw more than arrived here
    reply = chat.stored()[-1]
    assert (reply.text, reply.status) == ("Partial answer", MessageStatus.INTERRUPTED)
    assert end_reason(reply.status, reply.stats) is EndReason.CRASHED
    chat.flow.send("Two", PLAN)
    chat.flow.on_failed()
    reply = chat.stored()[-1]
    assert (reply.text, reply.status) == ("", MessageStatus.ERROR)
    chat.flow.on_crashed()  # a second end of the same reply changes nothing
    assert chat.stored()[-1].status is MessageStatus.ERROR and len(chat.listener.ends) == 2


def test_an_engine_crash_while_the_reply_s_row_is_made_is_written_to_that_row(queued: Chat) -> None:
    """Breaking it: the store's late answer started the engine for a reply that had already ended."""
    queued.flow.send("Hello", PLAN)
    queued.flow.on_crashed()
    assert not queued.flow.streaming and queued.listener.ends[0][1] is None  # ended before its row existed
    queued.store.run()
    assert not queued.engine.requests
    reply = queued.stored()[-1]
    assert reply.status is MessageStatus.INTERRUPTED and end_reason(reply.status, reply.stats) is EndReason.CRASHED


def test_edit_and_resend_drops_what_followed_and_regenerate_answers_the_last_question(chat: Chat) -> None:
    chat.flow.send("First", PLAN)
    chat.flow.on_done(_done("Answer one"))
    first_id = chat.stored()[0].id
    chat.flow.send("Second", PLAN)
    chat.flow.on_done(_done("Answer two"))
    assert chat.flow.edit_resend(first_id, "First, edited", PLAN) is None
    assert ("shown", chat.flow.conversation_id, ["Be brief.", "First, edited"]) in chat.listener.events
    assert chat.meter.replies == 0  # the chart lost the replies the resend removed
    history = chat.engine.requests[-1].messages or ()
    assert [m.content for m in history] == ["Be brief.", "First, edited"]
    chat.flow.on_done(_done("Answer again"))
    assert [m.text for m in chat.stored()] == ["First, edited", "Answer again"]
    assert chat.flow.regenerate(PLAN) is None
    chat.flow.on_done(_done("Answer anew"))
    assert [m.text for m in chat.stored()] == ["First, edited", "Answer anew"]


def test_continue_appends_to_the_same_reply_and_keeps_its_colours(chat: Chat) -> None:
    chat.flow.send("Tell me", PLAN)
    chat.flow.on_steps(_steps("The quick", drafted=True))
    chat.flow.on_done(_done("The quick", stop="length"))
    reply_id = chat.stored()[-1].id
    assert chat.flow.continue_reply(reply_id, PLAN) is None
    request = chat.engine.requests[-1]
    assert request.continue_reply and request.messages and request.messages[-1] == ChatMessage("assistant",
                                                                                              "The quick")
    assert ("continued", "The quick") in chat.listener.events
    assert request.continue_tokens == (7,)  # resumed from the ids it was generated as, stored with the reply
    chat.flow.on_steps(_steps(" fox"))
    chat.flow.on_done(_done(" fox"))  # a continuation's DoneEvent holds only the new part
    (_user, reply) = chat.stored()
    assert (reply.id, reply.text, reply.status) == (reply_id, "The quick fox", MessageStatus.COMPLETE)
    assert decode_runs(reply.text, reply.stats) == [("The quick", "lookup"), (" fox", "target")]


def test_a_question_that_cannot_be_stored_is_given_back_and_nothing_is_left(chat: Chat,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_: Any, **__: Any) -> Any:
        raise DiskFullError(Path("history.sqlite3"))

    monkeypatch.setattr(chat.history, "start_conversation", full)
    assert chat.flow.send("Important thought", PLAN) is None  # it ran: the failure comes from the store
    (error, text), = chat.listener.failures
    assert error.stage is TurnStage.QUESTION and isinstance(error.cause, DiskFullError) and text == "Important thought"
    assert not chat.flow.streaming and not chat.engine.requests and chat.flow.conversation_id is None
    assert chat.listener.ends[0][0].status is MessageStatus.ERROR
    assert chat.history.list_conversations() == []


def test_a_reply_row_that_cannot_be_made_keeps_the_question_in_its_conversation(
        chat: Chat, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_: Any, **__: Any) -> Any:
        raise DiskFullError(Path("history.sqlite3"))

    monkeypatch.setattr(chat.history, "begin_reply", full)
    chat.flow.send("Kept question", PLAN)
    (error, _text), = chat.listener.failures
    assert error.stage is TurnStage.REPLY and error.conversation_id is not None
    assert chat.flow.conversation_id == error.conversation_id  # the next message goes to the same conversation
    assert [m.text for m in chat.stored()] == ["Kept question"] and not chat.flow.streaming


def test_intents_that_cannot_run_say_why(chat: Chat, ready: list[bool]) -> None:
    assert chat.flow.send("   ", PLAN) is Refusal.EMPTY
    assert chat.flow.regenerate(PLAN) is Refusal.NO_CONVERSATION
    assert chat.flow.continue_reply(1, PLAN) is Refusal.NO_CONVERSATION
    ready[0] = False
    assert chat.flow.send("Hello", PLAN) is Refusal.NOT_READY
    ready[0] = True
    chat.flow.send("Hello", PLAN)
    assert chat.flow.send("Again", PLAN) is Refusal.BUSY
    assert chat.flow.open(None) is Refusal.BUSY
    assert chat.flow.edit_resend(1, "x", PLAN) is Refusal.BUSY
    chat.flow.on_done(_done("Hi"))
    cid = chat.flow.conversation_id
    assert chat.flow.open(None) is None and chat.flow.conversation_id is None
    assert chat.flow.regenerate(PLAN) is Refusal.NO_CONVERSATION
    assert cid is not None
    empty = chat.history.create_conversation("empty")
    assert chat.flow.open(empty) is None and chat.flow.regenerate(PLAN) is Refusal.NO_QUESTION
    assert len(chat.engine.requests) == 1


def test_opening_a_conversation_shows_it_and_charts_its_replies(chat: Chat) -> None:
    chat.flow.send("Hello", PLAN)
    chat.flow.on_done(_done("Hi"))
    cid = chat.flow.conversation_id
    chat.flow.open(None)
    assert chat.meter.replies == 0
    chat.flow.open(cid)
    assert chat.listener.events[-1] == ("shown", cid, ["Be brief.", "Hello", "Hi"])
    assert chat.meter.replies == 1 and chat.meter.conversation_series
    roles = [m.role for m in chat.stored()]
    assert roles == [Role.USER, Role.ASSISTANT]
