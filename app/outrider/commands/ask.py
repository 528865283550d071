"""``outrider ask "message"``: one turn through the engine, stored in the same history as the app.

Order of writes (docs/history.md): the user's message is committed before generation starts; the streamed
reply is checkpointed at least once a second and finished with its statistics; a crash or an interrupt leaves
it ``interrupted`` with the text streamed so far.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from outrider.commands.base import EXIT_RUNTIME, CliError, print_json
from outrider.commands.generate import _add_model_options, _text_request, format_summary, is_done, open_engine


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
    from outrider.store import Message, MessageStatus

    out = []
    for m in conversation.messages:
        if not isinstance(m, Message) or not m.text:
            continue
        if m.role.value == "assistant" and m.status not in (MessageStatus.COMPLETE, MessageStatus.INTERRUPTED):
            continue
        out.append(ChatMessage(m.role.value, m.text))
    return out


def cmd_ask(args: argparse.Namespace) -> int:
    from outrider.store import (
        ConversationNotFoundError,
        HistoryStore,
        MessageStatus,
        ReplyCheckpointer,
        ReplyStats,
        Role,
        StoreError,
    )

    if not args.message.strip():
        raise CliError("the message is empty")
    try:
        store = HistoryStore.open()
    except StoreError as exc:
        raise CliError(str(exc), EXIT_RUNTIME) from None
    with store:
        if args.conversation is None:
            conversation_id = store.create_conversation(args.message.strip()[:60])
            if args.system:
                store.add_message(conversation_id, Role.SYSTEM, args.system)
        else:
            conversation_id = args.conversation
            try:
                store.get_conversation(conversation_id)
            except ConversationNotFoundError:
                raise CliError(f"no conversation with id {conversation_id}") from None
        engine = open_engine(args)
        store.add_user_message(conversation_id, args.message)  # committed before generation starts
        messages = _history_messages(store.get_conversation(conversation_id))
        request = _text_request(args, history=messages)
        reply_id = store.begin_reply(conversation_id)
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
            checkpointer.finish(text, MessageStatus.INTERRUPTED)  # the partial reply is kept, marked interrupted
            raise
        finally:
            engine.close()
    return 0
