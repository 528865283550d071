"""``outrider ask "message"``: one turn through the engine, stored in the same history as the app.

Order of writes (docs/history.md): the user's message is committed before generation starts; the streamed
reply is checkpointed at least once a second and finished with its statistics; a crash or an interrupt leaves
it ``interrupted`` with the text streamed so far.

Nothing is stored until everything that can be checked was: the text is UTF-8, the options (``--max-tokens`` …)
are valid, the model files exist and the pair has loaded. A new conversation, its system prompt and the question
are then committed in one transaction, so a full disk leaves no empty conversation ("disk full: …", exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from outrider.commands.base import EXIT_RUNTIME, CliError, print_json
from outrider.commands.generate import (
    EngineLike,
    _add_model_options,
    _text_request,
    format_summary,
    is_done,
    open_engine,
)


def register(sub: Any) -> None:
    p = sub.add_parser("ask", help="send one message and store both sides in the history")
    p.add_argument("message")
    p.add_argument("--conversation", type=int, help="continue this conversation (default: a new one)")
    p.add_argument("--system", help="system prompt for a new conversation")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--json", action="store_true")
    _add_model_options(p)
    p.set_defaults(func=cmd_ask, stop=[])


def _history_messages(conversation: Any) -> list[Any]:
    from outrider.engine.params import ChatMessage
    from outrider.history import Message, MessageStatus

    out = []
    for m in conversation.messages:
        if not isinstance(m, Message) or not m.text:
            continue
        if m.role.value == "assistant" and m.status not in (MessageStatus.COMPLETE, MessageStatus.INTERRUPTED):
            continue
        out.append(ChatMessage(m.role.value, m.text))
    return out


def _stored_first_turn(store: Any, args: argparse.Namespace) -> int:
    """Commit the question (and, for a new conversation, the conversation and system prompt) in one transaction.

    Returns the conversation id. A full disk stores nothing: no empty conversation is left behind.
    """
    from outrider.history import DiskFullError

    try:
        if args.conversation is None:
            conversation_id, _ = store.start_conversation(
                args.message.strip()[:60], args.message, system=args.system or None
            )
            return int(conversation_id)
        store.add_user_message(args.conversation, args.message)
        return int(args.conversation)
    except DiskFullError as exc:
        raise CliError(
            f"disk full: your message was not stored in {exc.path}; free some space and ask again", EXIT_RUNTIME
        ) from None


def cmd_ask(args: argparse.Namespace) -> int:
    from outrider.commands.chats import check_text, open_history, store_error
    from outrider.commands.generate import _pair_spec
    from outrider.history import (
        ConversationNotFoundError,
        DiskFullError,
        MessageStatus,
        RecordUnreadableError,
        ReplyCheckpointer,
        ReplyStats,
        StoreError,
    )

    # Everything that can be checked is checked before the history is touched: a bad option never leaves an
    # empty conversation behind.
    check_text(args.message, "the message")
    check_text(args.system, "the system prompt (--system)")
    if not args.message.strip():
        raise CliError("the message is empty")
    _text_request(args, chat=args.message)  # --max-tokens, sampling and draft options
    _pair_spec(args)  # the model files exist
    store = open_history()
    engine: EngineLike | None = None
    with store:
        try:
            if args.conversation is not None:
                try:
                    store.get_conversation(args.conversation)
                except ConversationNotFoundError:
                    raise CliError(f"no conversation with id {args.conversation}") from None
                except RecordUnreadableError as exc:
                    raise CliError(str(exc), EXIT_RUNTIME) from None
            engine = open_engine(args)  # a model that does not load leaves nothing behind either
            conversation_id = _stored_first_turn(store, args)  # committed before generation starts
            try:
                messages = _history_messages(store.get_conversation(conversation_id))
                request = _text_request(args, history=messages)
                reply_id = store.begin_reply(conversation_id)
            except DiskFullError:
                raise CliError(
                    f"disk full: the reply cannot be stored; your message is kept in conversation {conversation_id}",
                    EXIT_RUNTIME,
                ) from None
            checkpointer = ReplyCheckpointer(store, reply_id)
            text = ""
            try:
                for event in engine.run(request):
                    if is_done(event):
                        s = event.stats
                        stats = ReplyStats(
                            pair_id=None, draft_mode=s.draft_mode, k=args.draft_max,
                            temperature=args.temperature, generated=s.generated, drafted=s.drafted,
                            accepted=s.accepted, acceptance_rate=s.acceptance_rate, tokens_per_s=s.decode_tps,
                            speedup=s.speedup, speedup_error=s.speedup_error, stop_reason=event.stop_reason,
                        )
                        checkpointer.finish(text, MessageStatus.COMPLETE, stats)
                        if args.json:
                            print_json({"event": "done", "conversation": conversation_id, "message": reply_id,
                                        "stop_reason": event.stop_reason, "stats": s.to_dict()})
                        else:
                            sys.stdout.write("\n")
                            sys.stderr.write(format_summary(s.to_dict(), event.stop_reason) + "\n")
                            sys.stderr.write(f"-- stored in conversation {conversation_id}\n")
                        continue
                    text += event.text
                    checkpointer.update(text)
                    if args.json:
                        print_json({"event": "step", "tokens": event.tokens, "text": event.text,
                                    "drafted": event.drafted})
                    else:
                        sys.stdout.write(event.text)
                        sys.stdout.flush()
            except (KeyboardInterrupt, CliError):
                checkpointer.finish(text, MessageStatus.INTERRUPTED)  # the partial reply is kept, interrupted
                raise
            except StoreError as exc:  # the disk filled up while the reply was being stored
                with contextlib.suppress(StoreError):
                    checkpointer.finish(text, MessageStatus.INTERRUPTED)
                if isinstance(exc, DiskFullError):
                    raise CliError(
                        f"disk full: the reply could not be stored completely; your message is kept in "
                        f"conversation {conversation_id}",
                        EXIT_RUNTIME,
                    ) from None
                raise store_error(exc) from None
        except StoreError as exc:
            raise store_error(exc) from None
        finally:
            if engine is not None:
                engine.close()
    return 0
