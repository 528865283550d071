"""One chat turn in the history, the same for the app and ``outrider ask`` (no Qt, no engine process).

A turn is written in the order docs/history.md requires:

1. ``ChatTurns.ask``: the user's message is committed before generation starts — for a new conversation the
   conversation, its system prompt and the message in ONE transaction (a full disk leaves no empty
   conversation); in an open one a new message, or an edited one (the messages after it dropped).
2. ``ChatTurns.begin_reply``: the conversation as the engine sees it (``engine_history``) and an empty
   streaming assistant message to checkpoint into (``ReplyCheckpointer``).
3. The reply ends as a ``ReplyEnd`` (status, final text, ``ReplyStats``) built by ``reply_finished`` (the
   engine's ``DoneEvent``), ``reply_crashed`` (the engine died: the longest text known is kept),
   ``reply_failed`` (an engine error) or ``reply_interrupted`` (the user stopped it); ``ReplyEnd.write`` commits
   it through the checkpointer. Where each write runs (the GUI's store thread, the CLI's own) is the caller's
   business.

How a reply ended (``EndReason``) is stored in its statistics' ``stop_reason``; ``end_reason`` reads it back, and
rows written before end reasons existed (an ``interrupted`` reply with no reason) read as ``INTERRUPTED``: cause
unknown. A reply cut at the token limit can be continued: ``ChatTurns.continue_reply`` reopens it and gives the
engine the conversation with the reply's text as the start of its answer (``TextRequest.continue_reply``).
Stored text never ends in a broken character (``whole_text``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from outrider.engine.params import ChatMessage
from outrider.history.checkpoint import ReplyCheckpointer
from outrider.history.models import Message, MessageStatus, ReplyStats, Role
from outrider.history.provenance import decode_runs
from outrider.history.reply_tokens import decode_tokens, with_tokens
from outrider.history.store import HistoryStore

TITLE_CHARS = 60
UNTITLED = "New chat"


def conversation_title(text: str) -> str:
    """A new conversation's title: the start of the first message's first line."""
    lines = text.strip()[:TITLE_CHARS].splitlines()
    return (lines[0] if lines else "") or UNTITLED


def engine_history(messages: Sequence[Any]) -> tuple[ChatMessage, ...]:
    """The conversation as the engine sees it: unreadable records, empty messages and assistant replies that
    are neither complete nor interrupted (failed, still streaming) are left out."""
    out = []
    for m in messages:
        if not isinstance(m, Message) or not m.text:
            continue
        if m.role is Role.ASSISTANT and m.status not in (MessageStatus.COMPLETE, MessageStatus.INTERRUPTED):
            continue
        out.append(ChatMessage(m.role.value, m.text))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class AskedTurn:
    """The user's message, committed. ``conversation_id`` is new when the turn started a conversation."""

    conversation_id: int
    user_message_id: int


@dataclasses.dataclass(frozen=True)
class BegunReply:
    """The streaming assistant message (``reply_id``) and what the engine is to answer (``history``)."""

    reply_id: int
    history: tuple[ChatMessage, ...]


@dataclasses.dataclass(frozen=True)
class Turn:
    """A whole turn started: the question committed, the reply begun.

    ``continued``: the text the reply already had when it is a continuation (``ChatTurns.continue_reply``; the
    last of ``history`` is then that reply and the engine continues it), else ""; ``continued_runs``: that text's
    provenance runs as stored with it (``provenance.py``), or None when it has none; ``continued_tokens``: its
    token ids as stored with it (``reply_tokens.py``; ``TextRequest.continue_tokens``), or None.
    """

    conversation_id: int
    user_message_id: int
    reply_id: int
    history: tuple[ChatMessage, ...]
    continued: str = ""
    continued_runs: tuple[tuple[str, str | None], ...] | None = None
    continued_tokens: tuple[int, ...] | None = None


class ChatTurns:
    """Starts chat turns in a ``HistoryStore`` (thread-safe: the GUI calls it on its store thread).

    Raises what the store raises (``DiskFullError``, ``ConversationNotFoundError``, ``StoreError``…).
    """

    def __init__(self, store: HistoryStore) -> None:
        self.store = store

    def ask(self, text: str, *, conversation_id: int | None = None, system: str | None = None,
            pair_id: str | None = None, edit_id: int | None = None) -> AskedTurn:
        """Commit the user's message ``text``.

        Without ``conversation_id`` a new conversation (titled from ``text``, with ``system`` as its system
        prompt when given, remembering ``pair_id``) is created with the message in one transaction. With
        ``edit_id`` that message of the conversation takes ``text`` and the messages after it are dropped.
        """
        if conversation_id is None:
            if edit_id is not None:
                raise ValueError("editing a message needs its conversation")
            cid, user_id = self.store.start_conversation(conversation_title(text), text, system=system or None,
                                                         pair_id=pair_id or None)
            return AskedTurn(int(cid), int(user_id))
        if edit_id is not None:
            self.store.edit_message(edit_id, text, drop_following=True)
            return AskedTurn(conversation_id, edit_id)
        return AskedTurn(conversation_id, int(self.store.add_user_message(conversation_id, text)))

    def begin_reply(self, conversation_id: int) -> BegunReply:
        """The conversation so far as the engine's input, and a new streaming assistant message after it."""
        history = engine_history(self.store.get_conversation(conversation_id).messages)
        return BegunReply(int(self.store.begin_reply(conversation_id)), history)

    def start(self, text: str, *, conversation_id: int | None = None, system: str | None = None,
              pair_id: str | None = None, edit_id: int | None = None) -> Turn:
        """``ask`` then ``begin_reply``."""
        asked = self.ask(text, conversation_id=conversation_id, system=system, pair_id=pair_id, edit_id=edit_id)
        begun = self.begin_reply(asked.conversation_id)
        return Turn(asked.conversation_id, asked.user_message_id, begun.reply_id, begun.history)

    def continue_reply(self, conversation_id: int, reply_id: int) -> Turn:
        """Reopen the finished reply ``reply_id`` (the conversation's last message) to continue it.

        The history ends with that reply's text as an assistant message: send it with
        ``TextRequest(continue_reply=True)``; the reply's final text is ``Turn.continued`` + what the engine adds.

        Raises:
            ValueError: it is not the conversation's last reply, or it is still streaming.
            MessageNotFoundError, ConversationNotFoundError: it does not exist.
        """
        messages = self.store.get_conversation(conversation_id).messages
        if not any(isinstance(m, Message) and m.id == reply_id for m in messages):
            raise ValueError("that reply is not in this conversation")
        stored = next(m for m in messages if isinstance(m, Message) and m.id == reply_id)
        text = self.store.reopen_reply(reply_id)
        users = [m.id for m in messages if isinstance(m, Message) and m.role is Role.USER and m.id < reply_id]
        history = (*engine_history([m for m in messages if m.id != reply_id]), ChatMessage("assistant", text))
        runs = decode_runs(text, stored.stats)
        return Turn(conversation_id, users[-1] if users else 0, reply_id, history, continued=text,
                    continued_runs=tuple(runs) if runs is not None else None,
                    continued_tokens=decode_tokens(text, stored.stats))

    def checkpointer(self, reply_id: int) -> ReplyCheckpointer:
        """Rate-limited checkpoints of the streaming reply ``reply_id`` (and its final write)."""
        return ReplyCheckpointer(self.store, reply_id)


# -- how a reply ends -------------------------------------------------------------------------------------------
class EndReason(StrEnum):
    """How a reply ended, stored in ``ReplyStats.stop_reason`` (the engine's three reasons keep their names)."""

    COMPLETE = "stop"  # the model ended its reply (end of turn or a stop string)
    LENGTH = "length"  # cut at the token limit (or the context was full): it can be continued
    STOPPED = "cancelled"  # the user stopped it
    CRASHED = "crashed"  # the engine process died while writing it
    FAILED = "error"  # the engine reported an error
    STREAMING = "streaming"  # still being written
    INTERRUPTED = "interrupted"  # cut short for a reason not recorded (a row from before end reasons, an app crash)


_RECORDED = frozenset(str(r) for r in EndReason) - {EndReason.STREAMING, EndReason.INTERRUPTED}


def end_reason(status: MessageStatus | str, stats: ReplyStats | None) -> EndReason:
    """How a stored reply ended, from its status and statistics (older rows included: see the module doc)."""
    status = MessageStatus(status)
    if status is MessageStatus.STREAMING:
        return EndReason.STREAMING
    recorded = stats.stop_reason if stats is not None else None
    if recorded in _RECORDED:
        reason = EndReason(recorded)
        if (status is MessageStatus.COMPLETE) == (reason in (EndReason.COMPLETE, EndReason.LENGTH)):
            return reason
    if status is MessageStatus.COMPLETE:
        return EndReason.COMPLETE
    return EndReason.FAILED if status is MessageStatus.ERROR else EndReason.INTERRUPTED


def whole_text(text: str) -> str:
    """``text`` without a broken character at its end (the U+FFFD a reply cut inside a multi-byte character
    leaves), so stored text never ends in one."""
    return text.rstrip("\ufffd")


def reply_stats(stats: Any, stop_reason: str, *, pair_id: str | None = None,
                temperature: float | None = None) -> ReplyStats:
    """The statistics stored with a reply, from the engine's ``GenerationStats`` (``DoneEvent.stats``).

    ``pair_id`` and ``temperature`` describe the request (the caller knows them). ``k_mean`` is the mean draft
    length the engine used (two decimals), not the setting; ``speedup`` and its interval ``speedup_low``/
    ``speedup_high`` are the engine's in-reply measurement, stored as reported (docs/metrics.md).
    """
    k_mean = stats.k_mean
    return ReplyStats(
        pair_id=pair_id or None, draft_mode=stats.draft_mode,
        k_mean=round(float(k_mean), 2) if k_mean is not None else None,
        temperature=temperature, generated=stats.generated, drafted=stats.drafted, accepted=stats.accepted,
        acceptance_rate=stats.acceptance_rate, token_acceptance=stats.token_acceptance,
        tokens_per_pass=stats.tokens_per_pass, decode_tps=stats.decode_tps,
        speedup=stats.speedup, speedup_low=stats.speedup_low, speedup_high=stats.speedup_high,
        stop_reason=stop_reason,
    )


@dataclasses.dataclass(frozen=True)
class ReplyEnd:
    """How a reply is finished in the history: its status, final text and statistics (only ``stop_reason``
    without a ``DoneEvent``)."""

    status: MessageStatus
    text: str
    stats: ReplyStats | None = None

    @property
    def reason(self) -> EndReason:
        return end_reason(self.status, self.stats)

    def with_tokens(self, tokens: Sequence[int]) -> ReplyEnd:
        """This end carrying the reply's token ids when it can be continued (it did not end by itself), so that
        Continue resumes it as generated after a restart too (``reply_tokens.py``)."""
        continuable = self.reason is not EndReason.COMPLETE
        return dataclasses.replace(self, stats=with_tokens(self.stats, self.text, tokens, continuable=continuable))

    def write(self, checkpointer: ReplyCheckpointer) -> None:
        """Commit it (always written, whatever the checkpoint interval)."""
        checkpointer.finish(self.text, self.status, self.stats)


def _reason_only(reason: EndReason) -> ReplyStats:
    return ReplyStats(stop_reason=str(reason))


def reply_finished(text: str, stop_reason: str, stats: ReplyStats) -> ReplyEnd:
    """The engine finished the reply: complete (``stop``, or ``length``: cut at the token limit), or
    interrupted when it was cancelled (the user stopped it)."""
    status = MessageStatus.INTERRUPTED if stop_reason == EndReason.STOPPED else MessageStatus.COMPLETE
    return ReplyEnd(status, whole_text(text), stats)


def reply_interrupted(text: str, reason: EndReason = EndReason.STOPPED) -> ReplyEnd:
    """Cut short before the engine finished — by default stopped by the user (Esc before the first token,
    Ctrl-C) — with the text so far."""
    return ReplyEnd(MessageStatus.INTERRUPTED, whole_text(text), _reason_only(reason))


def reply_crashed(streamed: str, partial: str | None = None) -> ReplyEnd:
    """The engine process died: interrupted, with the longer of the text streamed here and the ``partial``
    text the engine client saw (it may have received steps not delivered yet)."""
    partial = partial or streamed
    text = partial if len(partial) >= len(streamed) else streamed
    return ReplyEnd(MessageStatus.INTERRUPTED, whole_text(text), _reason_only(EndReason.CRASHED))


def reply_failed(streamed: str) -> ReplyEnd:
    """The engine reported an error: an error when nothing was written, else interrupted with the text."""
    return ReplyEnd(MessageStatus.ERROR if not streamed else MessageStatus.INTERRUPTED, whole_text(streamed),
                    _reason_only(EndReason.FAILED))
