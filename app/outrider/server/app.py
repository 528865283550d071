"""The OpenAI-compatible HTTP API (Starlette routes in a FastAPI app; streaming with sse-starlette).

    GET  /health               {"status": "ok" | "no model"}   (no key needed)
    GET  /v1/models            the served pair as one model
    GET  /v1/models/{id}       that model, or 404 model_not_found
    POST /v1/chat/completions  chat messages through the model's chat template (as in the app)
    POST /v1/completions       raw text

Every reply is a ``Job`` of the shared ``EngineScheduler``: queued in arrival order, never interleaved with another
reply (the GUI's included). A client that disconnects — before its turn or mid-reply — cancels its job. A stream
starts (HTTP 200) once its reply has produced its first event, so a refused request (context overflow …) is still an
HTTP error, not a broken stream. Errors have OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import hmac
import math
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from outrider.engine.events import DoneEvent, ErrorKind, StepBatch
from outrider.engine.params import TextRequest
from outrider.engine.stats import GenerationStats
from outrider.server import DEFAULT_STREAM_INTERVAL_S, responses
from outrider.server.connections import ConnectionLimits
from outrider.server.guard import AccessPolicy, RequestGuard
from outrider.server.requests import ApiError, Defaults, ParsedRequest, chat_request, completion_request, parse_json
from outrider.server.scheduler import EngineScheduler, Job, JobEvent, JobFailed, QueueFull, SchedulerClosed
from outrider.server.tools import ToolCallStream, read_calls
from outrider.worker.errors import EngineCrashed, EngineNotRunning, EngineRequestError, WorkerError

DRAIN_S = 1.5  # Ctrl-C: open replies get this long to finish before they end with an error event (uvicorn cuts at 2)
DEFAULT_MAX_REQUEST_BYTES = 1 << 20  # 1 MiB of JSON: a long conversation fits, a runaway upload does not
DISCONNECT_POLL_S = 0.25  # how often a waiting non-streaming request checks whether its client is still there
SSE_PING_S = 15  # keep-alive comments while a stream waits between events


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """How the API answers. ``model_name()`` is the served model's id, None while no pair is loaded (503)."""

    model_name: Callable[[], str | None]
    api_key: str | None = dataclasses.field(default=None, repr=False)  # a secret: never in a repr, log or report
    defaults: Defaults = Defaults()
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    stream_interval_s: float = DEFAULT_STREAM_INTERVAL_S  # 0: one chunk per engine message
    access: AccessPolicy = AccessPolicy()  # Host names and cross-site origins served (guard.py)
    limits: ConnectionLimits = ConnectionLimits()  # connections, header/body/keep-alive deadlines


def create_app(scheduler: EngineScheduler, config: ServerConfig) -> FastAPI:
    """The ASGI app serving ``scheduler``'s engine."""
    app = FastAPI(title="Outrider", docs_url=None, redoc_url=None, openapi_url=None)
    api = _Api(scheduler, config)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        error = ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code=code)
        return JSONResponse(error.body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        error = ApiError(500, f"internal error: {type(exc).__name__}: {exc}", type_="server_error",
                         code="internal_error")
        return JSONResponse(error.body(), status_code=500)

    app.add_middleware(RequestGuard, policy=config.access)
    app.add_api_route("/health", api.health, methods=["GET"])
    for base in ("/v1", ""):  # a base URL without /v1 works too (as llama-server's)
        app.add_api_route(f"{base}/models", api.models, methods=["GET"])
        app.add_api_route(f"{base}/models/{{model_id:path}}", api.model, methods=["GET"])
        app.add_api_route(f"{base}/chat/completions", api.chat_completions, methods=["POST"])
        app.add_api_route(f"{base}/completions", api.completions, methods=["POST"])
    app.state.outrider_drain = api.drain  # runner.py calls it when the server stops
    return app


class ServerStopping(Exception):
    """The final event of a reply still running when the server stopped (after ``DRAIN_S``)."""

    def __init__(self) -> None:
        super().__init__("the server is shutting down; the reply was cut short")


def engine_error(error: BaseException, input_param: str | None = None) -> ApiError:
    """The HTTP answer to a reply the engine could not produce (typed errors become words here, at the edge).

    ``input_param``: the request field the engine's refusal of the input is about (``messages`` for a chat,
    ``prompt`` for a completion: ``ParsedRequest.input_param``); it becomes the error's ``param``."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, ServerStopping):
        return ApiError(503, str(error), type_="server_error", code="shutting_down")
    if isinstance(error, EngineRequestError):
        if error.kind in (ErrorKind.CONTEXT_OVERFLOW, ErrorKind.INPUT_TOO_LONG):
            return ApiError(400, context_message(error, input_param), param=input_param,
                            code="context_length_exceeded")
        if error.kind is ErrorKind.BAD_REQUEST and error.details.get("grammar"):
            return ApiError(400, error.message, param="response_format", code="invalid_value")
        if error.kind is ErrorKind.BAD_REQUEST and error.details.get("suffix"):
            return ApiError(400, error.message, param="suffix", code="unsupported_value")
        if error.kind in (ErrorKind.BAD_REQUEST, ErrorKind.TEMPLATE):
            return ApiError(400, error.message, param=input_param, code=error.kind.value)
        return ApiError(500, error.message, type_="server_error", code=error.kind.value)
    if isinstance(error, EngineNotRunning):
        return ApiError(503, "no model is loaded", type_="server_error", code="model_not_loaded")
    if isinstance(error, EngineCrashed):
        return ApiError(500, str(error), type_="server_error", code="engine_crashed")
    if isinstance(error, WorkerError):
        return ApiError(503, str(error), type_="server_error", code="engine_unavailable")
    return ApiError(503, str(error) or type(error).__name__, type_="server_error", code="engine_unavailable")


def context_message(error: EngineRequestError, input_param: str | None) -> str:
    """OpenAI's wording of a context overflow (clients such as litellm match it), with the numbers."""
    details = error.details
    n_ctx = details.get("n_ctx")
    what = "prompt" if input_param == "prompt" else "messages"
    if error.kind is ErrorKind.INPUT_TOO_LONG:
        size = f"{details.get('n_chars', '?'):,} characters, more than that many tokens can hold"
    else:
        reserved = details.get("reserved") or 0
        room = f" plus {reserved} kept for the reply" if reserved else ""
        size = f"{details.get('n_tokens', '?')} tokens{room}"
    trim = "" if what == "prompt" else " (or send \"trim_history\": true to drop the oldest turns)"
    return (f"This model's maximum context length is {n_ctx} tokens. However, your {what} resulted in {size}. "
            f"Please reduce the length of the {what}{trim}.")


class _Wake(enum.Enum):
    """What must wake a waiting ``_Reply.take``."""

    NOTHING = "nothing"  # not waiting: events are only buffered
    ANY = "any"  # waiting for any event
    FINAL = "final"  # pacing: only the final event ends the wait early


class _Reply:
    """One job's events, handed from the scheduler's thread to the server's event loop in batches.

    ``deliver`` (scheduler thread) appends to a buffer and wakes the loop only when ``take`` (event loop) waits for
    that event; ``take`` returns everything buffered. A consumer that waits sees each event at once; one that is
    busy, or pacing its chunks (``take(not_before=…)``), gets the steps together, with no loop wake-up per engine
    message — but the final event at once: pacing never delays the end of a reply.
    A whole (non-streamed) answer keeps only the final event: its steps need not cross threads at all.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, keep_steps: bool) -> None:
        self._loop = loop
        self._keep_steps = keep_steps
        self._lock = threading.Lock()
        self._pending: list[JobEvent] = []
        self._final_pending = False  # the final event (DoneEvent or JobFailed) is among _pending
        self._wake = _Wake.NOTHING
        self._ready = asyncio.Event()

    def deliver(self, event: JobEvent) -> None:
        final = not isinstance(event, StepBatch)
        if not final and not self._keep_steps:
            return
        with self._lock:
            self._pending.append(event)
            self._final_pending |= final
            wake = self._wake is _Wake.ANY or (final and self._wake is _Wake.FINAL)
            if wake:
                self._wake = _Wake.NOTHING
        if wake:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server is gone, nobody listens
                self._loop.call_soon_threadsafe(self._ready.set)

    async def take(self, not_before: float | None = None) -> list[JobEvent]:
        """Every event delivered since the last call (waits for at least one). With ``not_before`` (a time of the
        event loop's clock), steps are left to gather until then; the final event is returned at once."""
        while True:
            self._ready.clear()
            now = self._loop.time()
            deadline = not_before if not_before is not None and now < not_before else None
            with self._lock:
                if self._pending and (self._final_pending or deadline is None):
                    events, self._pending = self._pending, []
                    self._final_pending = False
                    self._wake = _Wake.NOTHING
                    return events
                self._wake = _Wake.ANY if deadline is None else _Wake.FINAL
            timer = None if deadline is None else self._loop.call_at(deadline, self._ready.set)
            try:
                await self._ready.wait()
            finally:
                if timer is not None:
                    timer.cancel()


@dataclasses.dataclass(frozen=True)
class _Ended:
    """A streamed choice's end: its last bytes (text and closing chunk, not sent yet) and its ``DoneEvent``."""

    tail: bytes
    done: DoneEvent


class _Api:
    def __init__(self, scheduler: EngineScheduler, config: ServerConfig) -> None:
        self.scheduler = scheduler
        self.config = config
        self._open: set[tuple[_Reply, Job]] = set()  # replies in flight (whole or streamed), for ``drain``

    async def drain(self, seconds: float = DRAIN_S) -> None:
        """The server is stopping: replies in flight get ``seconds`` to finish; each still running then is
        cancelled and ends with an error event and ``[DONE]`` (a stream) or a 503 ``shutting_down`` (a whole
        answer), so no client is left with a cut connection and no word why."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while self._open and loop.time() < end:
            await asyncio.sleep(0.05)
        for reply, job in list(self._open):
            job.cancel()
            reply.deliver(JobFailed(ServerStopping()))

    # -- routes -----------------------------------------------------------------------------------------------
    async def health(self) -> JSONResponse:
        loaded = self.config.model_name() is not None
        return JSONResponse({"status": "ok" if loaded else "no model", "waiting": self.scheduler.waiting},
                            status_code=200 if loaded else 503)

    async def models(self, request: Request) -> JSONResponse:
        self._authorise(request)
        name = self.config.model_name()
        data = [] if name is None else [{"id": name, "object": "model", "created": 0, "owned_by": "outrider"}]
        return JSONResponse({"object": "list", "data": data})

    async def model(self, request: Request, model_id: str) -> JSONResponse:
        self._authorise(request)
        name = self.config.model_name()
        if name is None or model_id != name:
            raise ApiError(404, f"the model {model_id!r} does not exist (this server serves "
                           f"{repr(name) if name else 'no model yet'})", param="model", code="model_not_found")
        return JSONResponse({"id": name, "object": "model", "created": 0, "owned_by": "outrider"})

    async def chat_completions(self, request: Request) -> Response:
        return await self._answer(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._answer(request, chat=False)

    # -- checks -----------------------------------------------------------------------------------------------
    def _authorise(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), key.encode()):
            why = "no API key given (Authorization: Bearer …)" if not header else "incorrect API key"
            raise ApiError(401, why, code="invalid_api_key")

    async def _body(self, request: Request) -> bytes:
        """The request's JSON body: ``application/json`` only (415: a ``text/plain`` body is what a web page can
        send without asking first), at most ``max_request_bytes`` (413), within ``body_timeout_s`` (408)."""
        kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind != "application/json":
            shown = f"Content-Type {kind!r}" if kind else "no Content-Type"
            raise ApiError(415, f"the request body must be JSON sent as Content-Type: application/json (got "
                           f"{shown})", code="unsupported_media_type")
        limit = self.config.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"the request is {int(declared):,} bytes; this server's limit is {limit:,}",
                           code="request_too_large")
        chunks: list[bytes] = []
        size = 0
        deadline = self.config.limits.body_timeout_s
        try:
            async with asyncio.timeout(deadline):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise ApiError(413, f"the request is over this server's limit of {limit:,} bytes",
                                       code="request_too_large")
                    chunks.append(chunk)
        except TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {deadline:g} s",
                           code="request_timeout") from None
        return b"".join(chunks)

    # -- answering --------------------------------------------------------------------------------------------
    async def _answer(self, request: Request, *, chat: bool) -> Response:
        """A chat (``chat``) or text completion: checked (key, body, fields), queued, answered whole or streamed.
        ``n`` > 1: the choices are generated one after another, each a job of its own (choice i's seed derived
        from the request's: ``ParsedRequest.choice_requests``)."""
        self._authorise(request)
        parse = chat_request if chat else completion_request
        parsed = parse(parse_json(await self._body(request)), self.config.defaults)
        name = self.config.model_name()
        if name is None:
            raise ApiError(503, "no model is loaded", type_="server_error", code="model_not_loaded")
        keep_steps = parsed.stream or parsed.text.top_logprobs is not None
        choices = parsed.choice_requests()
        shape = responses.ReplyShape(name, chat=chat)
        started = self._submit(choices[0], keep_steps)
        first = await self._first_events(request, started, keep_open=parsed.stream)
        if first is None:  # the client left while its request waited or ran
            return Response(status_code=499)
        if isinstance(first[0], JobFailed):
            raise engine_error(first[0].error, parsed.input_param)
        if parsed.stream:
            return EventSourceResponse(self._stream(first, started, shape, parsed, choices[1:]),
                                       ping=SSE_PING_S, sep="\n")
        bodies: list[dict[str, Any]] = []
        stats: list[GenerationStats] = []
        events: list[JobEvent] | None = first
        for index in range(len(choices)):
            if index > 0:
                started = self._submit(choices[index], keep_steps)
                events = await self._first_events(request, started, keep_open=False)
            if events is None:
                return Response(status_code=499)
            whole = await self._whole_choice(request, started, events, shape.for_choice(index), parsed)
            if whole is None:
                return Response(status_code=499)
            bodies.append(whole[0])
            stats.append(whole[1])
        return JSONResponse(shape.whole(bodies, stats))

    def _submit(self, text: TextRequest, keep_steps: bool) -> tuple[_Reply, Job]:
        """Queue one reply (429 ``queue_full``, 503 ``shutting_down``); it counts as open (``drain``) from here."""
        reply = _Reply(asyncio.get_running_loop(), keep_steps=keep_steps)
        try:
            job = self.scheduler.submit(text, reply.deliver)
        except QueueFull as exc:
            raise ApiError(429, str(exc), type_="server_error", code="queue_full") from None
        except SchedulerClosed as exc:
            raise ApiError(503, str(exc), type_="server_error", code="shutting_down") from None
        self._open.add((reply, job))
        return reply, job

    async def _first_events(self, request: Request, started: tuple[_Reply, Job], *,
                            keep_open: bool) -> list[JobEvent] | None:
        """The job's first events (None: the client left, the job is cancelled). The job stays open (``drain``)
        only when ``keep_open`` (a stream) and it has not failed."""
        reply, job = started
        try:
            first = await self._take_or_disconnect(request, reply, job)
        except BaseException:
            job.cancel()
            self._open.discard(started)
            raise
        if not keep_open or first is None or isinstance(first[0], JobFailed):
            self._open.discard(started)
        return first

    async def _whole_choice(self, request: Request, started: tuple[_Reply, Job], events: list[JobEvent],
                            shape: responses.ReplyShape,
                            parsed: ParsedRequest) -> tuple[dict[str, Any], GenerationStats] | None:
        """One choice of a whole answer, from its first events on (None: the client left)."""
        reply, job = started
        wants_logprobs = parsed.text.top_logprobs is not None
        while wants_logprobs and isinstance(events[-1], StepBatch):  # steps too: their log-probabilities
            more = await self._take_or_disconnect(request, reply, job)
            if more is None:
                return None
            events += more
        done = events[-1]  # a whole answer without logprobs receives its final event only
        if isinstance(done, JobFailed):
            raise engine_error(done.error, parsed.input_param)
        if not isinstance(done, DoneEvent):
            raise ApiError(500, "the reply ended without a result", type_="server_error", code="internal_error")
        if parsed.tools is not None:
            content, calls = read_calls(done.text, parsed.tools)
            return shape.choice(content, done.stop_reason, calls), done.stats
        entries = [lp for e in events if isinstance(e, StepBatch) for step in e.steps for lp in step.logprobs]
        return shape.choice(done.text, done.stop_reason, logprobs=entries if wants_logprobs else None), done.stats

    async def _take_or_disconnect(self, request: Request, reply: _Reply, job: Job) -> list[JobEvent] | None:
        """The job's next events; None (and the job cancelled) if the client disconnected meanwhile."""
        while True:
            try:
                return await asyncio.wait_for(reply.take(), DISCONNECT_POLL_S)
            except TimeoutError:
                if await request.is_disconnected():
                    job.cancel()
                    return None

    async def _stream(self, first: list[JobEvent], started: tuple[_Reply, Job], shape: responses.ReplyShape,
                      parsed: ParsedRequest, more: list[TextRequest]) -> AsyncIterator[bytes]:
        """SSE ``data:`` events: per choice its chunks (``index`` i) and a chunk with its ``finish_reason`` and
        ``timings``; the next choice's job is queued when one ends (``more``); then the usage chunk (asked for) and
        ``[DONE]``. A client that disconnects cancels this generator (sse-starlette), which cancels the job."""
        stats: list[GenerationStats] = []
        events = first
        try:
            for index in range(1 + len(more)):
                if index > 0:
                    try:
                        started = self._submit(more[index - 1], True)
                    except ApiError as exc:  # the queue filled, or the server stops, between two choices
                        yield responses.sse(exc.body())
                        return
                    events = await started[0].take()
                ended = None
                async for out in self._stream_choice(events, started, shape.for_choice(index), parsed):
                    if isinstance(out, _Ended):
                        ended = out
                    else:
                        yield out
                if ended is None:  # failed: the error event was the last thing sent
                    return
                stats.append(ended.done.stats)
                last = index == len(more)
                # the last choice's closing chunk, the usage chunk and [DONE] are one write
                yield ended.tail + (shape.end_events(stats, include_usage=parsed.include_usage) if last else b"")
        finally:
            self._open.discard(started)
            if started[1].result is None:  # left before the end (set before the final event is delivered)
                started[1].cancel()

    async def _stream_choice(self, first: list[JobEvent], started: tuple[_Reply, Job], shape: responses.ReplyShape,
                             parsed: ParsedRequest) -> AsyncIterator[bytes | _Ended]:
        """One choice's chunks, then ``_Ended`` (its last chunks, for the caller to send with what follows them),
        or an error event and nothing more (a failure: the stream ends there).

        Steps that arrived together, or within ``stream_interval_s`` of the previous write, go out as one chunk (the
        first text and the end at once); what one pass has to say is one write (the opening chunk with the first
        text, the last text with the closing chunk): each write costs a socket send here and a wake-up in the
        client."""
        reply = started[0]
        calls = ToolCallStream(parsed.tools) if parsed.tools is not None else None
        out = shape.opening()
        events = first
        loop = asyncio.get_running_loop()
        sent_at = -math.inf
        offset = 0  # characters sent so far (the legacy logprobs' text_offset)
        while True:
            text = "".join(e.text for e in events if isinstance(e, StepBatch))
            entries = [lp for e in events if isinstance(e, StepBatch) for step in e.steps for lp in step.logprobs]
            if calls is not None:  # text as content, calls as incremental tool_calls deltas (tools.py)
                pieces = shape.call_events(calls.feed(text)) if text else b""
                if pieces:
                    out += pieces
                    sent_at = loop.time()
            elif text or entries:
                out += shape.logprob_event(text, entries, offset) if entries else shape.text_event(text)
                offset += len(text)
                sent_at = loop.time()  # paced from the last text sent (the opening alone does not count)
            final = next((e for e in events if not isinstance(e, StepBatch)), None)
            if isinstance(final, DoneEvent):
                self._open.discard(started)
                stop_reason = final.stop_reason
                if calls is not None:
                    out += shape.call_events(calls.finish())
                    stop_reason = "tool_calls" if calls.calls else stop_reason
                yield _Ended(out + shape.finish_event(stop_reason, final.stats), final)
                return
            if isinstance(final, JobFailed):  # mid-reply: the status line is sent, so the error is an event
                error = responses.sse(engine_error(final.error, parsed.input_param).body())
                # a stopping server still ends the stream properly; an engine failure leaves it unfinished
                yield out + error + (responses.DONE_EVENT if isinstance(final.error, ServerStopping) else b"")
                return
            if out:
                yield out
                out = b""
            # text went out just now: the next steps join the next chunk (the end comes at once)
            events = await reply.take(not_before=sent_at + self.config.stream_interval_s)
