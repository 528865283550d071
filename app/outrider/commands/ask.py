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
from typing import TYPE_CHECKING, Any

from outrider.commands.base import EXIT_ENGINE_CRASHED, EXIT_RUNTIME, CliError, print_json
from outrider.commands.engine_options import CommandEngine, add_model_options, is_done, open_engine, text_request
from outrider.commands.generate import format_summary

if TYPE_CHECKING:
    from outrider.history.turns import EndReason


def register(sub: Any) -> None:
    p = sub.add_parser("ask", help="send one message and store both sides in the history")
    p.add_argument("message")
    p.add_argument("--conversation", type=int, help="continue this conversation (default: a new one)")
    p.add_argument("--system", help="system prompt for a new conversation")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--json", action="store_true")
    add_model_options(p)
    p.set_defaults(func=cmd_ask, stop=[])


def _stored_question(turns: Any, args: argparse.Namespace) -> int:
    """Commit the question (and, for a new conversation, the conversation and system prompt) in one transaction.

    Returns the conversation id. A full disk stores nothing: no empty conversation is left behind.
    """
    from outrider.history import DiskFullError

    try:
        return int(turns.ask(args.message, conversation_id=args.conversation, system=args.system).conversation_id)
    except DiskFullError as exc:
        raise CliError(
            f"disk full: your message was not stored in {exc.path}; free some space and ask again", EXIT_RUNTIME
        ) from None


def cmd_ask(args: argparse.Namespace) -> int:
    from outrider.commands.chats import check_text, open_history, store_error
    from outrider.commands.engine_options import pair_spec
    from outrider.history import (
        ConversationNotFoundError,
        DiskFullError,
        RecordUnreadableError,
        StoreError,
    )
    from outrider.history.turns import ChatTurns, reply_finished, reply_interrupted, reply_stats

    # Everything that can be checked is checked before the history is touched: a bad option never leaves an
    # empty conversation behind.
    check_text(args.message, "the message")
    check_text(args.system, "the system prompt (--system)")
    if not args.message.strip():
        raise CliError("the message is empty")
    text_request(args, chat=args.message)  # --max-tokens, sampling and draft options
    pair_spec(args)  # the model files exist
    store = open_history()
    engine: CommandEngine | None = None
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
            turns = ChatTurns(store)
            conversation_id = _stored_question(turns, args)  # committed before generation starts
            try:
                begun = turns.begin_reply(conversation_id)
            except DiskFullError:
                raise CliError(
                    f"disk full: the reply cannot be stored; your message is kept in conversation {conversation_id}",
                    EXIT_RUNTIME,
                ) from None
            request = text_request(args, history=begun.history)
            reply_id = begun.reply_id
            checkpointer = turns.checkpointer(reply_id)
            text = ""
            try:
                for event in engine.run(request):
                    if is_done(event):
                        s = event.stats
                        stats = reply_stats(s, event.stop_reason, temperature=args.temperature)
                        reply_finished(text, event.stop_reason, stats).write(checkpointer)
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
            except (KeyboardInterrupt, CliError) as exc:  # the partial reply is kept, with how it ended
                reply_interrupted(text, _end_reason_of(exc)).write(checkpointer)
                raise
            except StoreError as exc:  # the disk filled up while the reply was being stored
                with contextlib.suppress(StoreError):
                    reply_interrupted(text).write(checkpointer)
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


def _end_reason_of(exc: BaseException) -> EndReason:
    """How a reply cut short by ``exc`` ended: Ctrl-C stopped it, an engine crash (exit status 3) interrupted it,
    anything else failed it (``EndReason``, stored with the reply)."""
    from outrider.history.turns import EndReason

    if isinstance(exc, KeyboardInterrupt):
        return EndReason.STOPPED
    if isinstance(exc, CliError) and exc.exit_code == EXIT_ENGINE_CRASHED:
        return EndReason.CRASHED
    return EndReason.FAILED
