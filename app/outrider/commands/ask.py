"""``outrider ask "message"``: one turn through the engine, stored in the same history as the app.

The turn is the app's: ``ConversationFlow`` (``outrider.conversation``) over the history directly
(``DirectStore``), with the engine's loop run here. Order of writes (docs/history.md): the user's message is
committed before generation starts; the streamed reply is checkpointed at the flow's cadence (at least once a
second while text arrives) and finished with its statistics; a crash or an interrupt leaves it ``interrupted``
with the text streamed so far.

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
from outrider.conversation.flow import FlowListener, TurnError
from outrider.engine.events import DoneEvent, StepBatch

if TYPE_CHECKING:
    from outrider.conversation.flow import ConversationFlow
    from outrider.engine.params import TextRequest
    from outrider.history.turns import EndReason, ReplyEnd


def register(sub: Any) -> None:
    p = sub.add_parser("ask", help="send one message and store both sides in the history")
    p.add_argument("message")
    p.add_argument("--conversation", type=int, help="continue this conversation (default: a new one)")
    p.add_argument("--system", help="system prompt for a new conversation")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--json", action="store_true")
    add_model_options(p)
    p.set_defaults(func=cmd_ask, stop=[])


def cmd_ask(args: argparse.Namespace) -> int:
    from outrider.commands.chats import check_text, open_history, store_error
    from outrider.commands.engine_options import pair_spec
    from outrider.conversation.direct_store import DirectStore
    from outrider.conversation.flow import ConversationFlow, TurnPlan
    from outrider.history import ConversationNotFoundError, RecordUnreadableError, StoreError

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
            printer = _Printer(args.json, args.conversation)
            loop = _EngineLoop(engine)
            flow = ConversationFlow(DirectStore(store), loop, printer)
            if args.conversation is not None:
                flow.open(args.conversation)
            plan = TurnPlan(lambda history, _continuing: text_request(args, history=history), system=args.system)
            flow.send(args.message, plan)  # the question is committed before generation starts
            if printer.failure is not None:
                raise _turn_error(printer.failure) from None
            _stream(flow, loop)
        except StoreError as exc:
            raise store_error(exc) from None
        finally:
            if engine is not None:
                engine.close()
    return 0


class _EngineLoop:
    """The flow's engine in a command: ``generate`` keeps the request; ``_stream`` then runs the engine's loop in
    this thread (Ctrl-C, not ``cancel``, stops it)."""

    def __init__(self, engine: CommandEngine) -> None:
        self.engine = engine
        self.request: TextRequest | None = None

    def generate(self, request: TextRequest) -> None:
        self.request = request

    def cancel(self) -> None:
        """Nothing to do: a command's reply is stopped by Ctrl-C, which ends its loop."""


def _stream(flow: ConversationFlow, loop: _EngineLoop) -> None:
    """Run the engine's reply through the flow; a reply cut short is kept with how it ended."""
    from outrider.engine.stats import GenerationStats
    from outrider.history import DiskFullError, StoreError
    from outrider.history.turns import EndReason

    assert loop.request is not None
    conversation_id = flow.conversation_id
    try:
        for event in loop.engine.run(loop.request):
            if is_done(event):
                flow.on_done(event)
            else:  # one step (the engine's own statistics with it in process, none through the engine process)
                flow.on_steps(StepBatch((event,), event.stats if event.stats is not None else GenerationStats()))
    except (KeyboardInterrupt, CliError) as exc:  # the partial reply is kept, with how it ended
        flow.on_cut_short(_end_reason_of(exc))
        raise
    except StoreError as exc:  # the disk filled up while the reply was being stored
        with contextlib.suppress(StoreError):
            flow.on_cut_short(EndReason.FAILED)
        if isinstance(exc, DiskFullError):
            raise CliError(
                f"disk full: the reply could not be stored completely; your message is kept in "
                f"conversation {conversation_id}",
                EXIT_RUNTIME,
            ) from None
        raise


class _Printer(FlowListener):
    """What ``ask`` prints of the flow: each step's text (or a JSON line), then the summary; a turn that could not
    be written is kept for ``cmd_ask`` to raise."""

    def __init__(self, as_json: bool, conversation_id: int | None) -> None:
        self.as_json = as_json
        self.conversation_id = conversation_id  # the one asked for, or the one the turn creates
        self.failure: TurnError | None = None

    def conversation_committed(self, conversation_id: int) -> None:
        self.conversation_id = conversation_id

    def steps_received(self, batch: StepBatch) -> None:
        for step in batch.steps:
            if self.as_json:
                print_json({"event": "step", "tokens": step.tokens, "text": step.text, "drafted": step.drafted})
            else:
                sys.stdout.write(step.text)
                sys.stdout.flush()

    def reply_ended(self, end: ReplyEnd, reply_id: int | None, done: DoneEvent | None) -> None:
        if done is None:
            return  # cut short: the command's error says why
        s = done.stats
        if self.as_json:
            print_json({"event": "done", "conversation": self.conversation_id, "message": reply_id,
                        "stop_reason": done.stop_reason, "stats": s.to_dict()})
        else:
            sys.stdout.write("\n")
            sys.stderr.write(format_summary(s.to_dict(), done.stop_reason) + "\n")
            sys.stderr.write(f"-- stored in conversation {self.conversation_id}\n")

    def turn_failed(self, error: TurnError, text: str) -> None:
        self.failure = error


def _turn_error(error: TurnError) -> CliError:
    """A turn that could not be written, in words: a full disk names what was kept (exit 1)."""
    from outrider.commands.chats import store_error
    from outrider.conversation.flow import TurnStage
    from outrider.history import DiskFullError, StoreError

    cause = error.cause
    if isinstance(cause, DiskFullError):
        if error.stage is TurnStage.QUESTION:  # nothing was stored: no empty conversation is left behind
            return CliError(f"disk full: your message was not stored in {cause.path}; free some space and ask again",
                            EXIT_RUNTIME)
        return CliError(f"disk full: the reply cannot be stored; your message is kept in conversation "
                        f"{error.conversation_id}", EXIT_RUNTIME)
    if isinstance(cause, StoreError):
        return store_error(cause)
    return CliError(str(cause), EXIT_RUNTIME)


def _end_reason_of(exc: BaseException) -> EndReason:
    """How a reply cut short by ``exc`` ended: Ctrl-C stopped it, an engine crash (exit status 3) interrupted it,
    anything else failed it (``EndReason``, stored with the reply)."""
    from outrider.history.turns import EndReason

    if isinstance(exc, KeyboardInterrupt):
        return EndReason.STOPPED
    if isinstance(exc, CliError) and exc.exit_code == EXIT_ENGINE_CRASHED:
        return EndReason.CRASHED
    return EndReason.FAILED
