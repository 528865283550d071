"""``Generation``: one streaming reply from the engine process, as an iterator of ``StepBatch`` ... ``DoneEvent``
(``outrider.engine.events``). ``EngineClient.generate`` makes one; it holds the engine until exhausted or closed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Protocol

from outrider.engine.events import DoneEvent, ProtocolError, StepBatch, batch_from_wire, done_from_wire
from outrider.worker.errors import EngineCrashed, WorkerError, request_error

Event = StepBatch | DoneEvent


class RequestChannel(Protocol):
    """What a ``Generation`` needs of the client that started it: one request's messages, and its end.

    ``EngineClient`` gives each generation one (its own methods stay private); a generation knows nothing else of
    the client, so the two modules do not depend on each other.
    """

    def next_message(self, rid: int, timeout: float | None) -> dict[str, Any]:
        """The request's next message (a step batch, note, done or error); raises ``EngineCrashed``."""
        ...

    def protocol_violation(self, why: str) -> EngineCrashed:
        """The engine broke the protocol: it is stopped; the error to raise."""
        ...

    def release(self, rid: int) -> None:
        """The request ended: the engine is free for the next one."""
        ...

    def cancel_request(self, rid: int) -> None:
        """Ask the engine to stop the request."""
        ...


class Generation(Iterator[Event]):
    """One streaming reply: iterate for ``StepBatch`` ... ``DoneEvent`` (``outrider.engine.events``): each batch is
    one wire message, steps and the statistics after them. Close (or exhaust) it to free the engine.

    It keeps no copy of the text it streams: whoever iterates owns the reply text (the app's ``ChatController``
    keeps it in a ``ReplyText``, ``outrider ask`` in its own string); ``text`` is the ``DoneEvent``'s whole text once
    the reply ended, "" before. On a crash ``interrupted`` is set; the text streamed so far is what the consumer
    received (every batch this client read is yielded before the crash is raised).
    ``notes`` collects what the engine said about this reply (e.g. the model's chat template was replaced by the
    built-in one); they arrive before the first step.
    """

    def __init__(self, channel: RequestChannel, rid: int) -> None:
        self._client = channel
        self.id = rid
        self.done: DoneEvent | None = None
        self.interrupted = False
        self.notes: list[str] = []
        self._finished = False

    @property
    def text(self) -> str:
        return self.done.text if self.done is not None else ""

    @property
    def finished(self) -> bool:
        return self._finished

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> Event:
        if self._finished:
            raise StopIteration
        while True:
            try:
                msg = self._client.next_message(self.id, None)
            except EngineCrashed as exc:
                self._finish()
                self.interrupted = True
                raise exc from None
            except BaseException:
                self._finish()
                raise
            kind = msg["type"]
            if kind == "steps":
                try:
                    batch = batch_from_wire(msg)
                except ProtocolError as exc:
                    self._finish()
                    self.interrupted = True
                    raise self._client.protocol_violation(str(exc)) from None
                return batch
            elif kind == "note":
                self.notes.append(str(msg.get("text", "")))
            elif kind == "done":
                self.done = done_from_wire(msg)
                self._finish()
                return self.done
            elif kind == "error":
                self._finish()
                raise request_error(msg)

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._client.release(self.id)

    def cancel(self) -> None:
        """Ask the engine to stop this reply (within one speculative step); a DoneEvent('cancelled') follows, or
        ``EngineIgnoredCancel`` when the engine is blocked past the client's ``cancel_grace``."""
        if not self._finished:
            self._client.cancel_request(self.id)

    def close(self) -> None:
        """Cancel if still running and wait for the end, discarding events (errors and crashes included)."""
        if self._finished:
            return
        self.cancel()
        with contextlib.suppress(WorkerError):
            for _ in self:
                pass

    def __enter__(self) -> Generation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
