"""Response bodies in OpenAI's shape, with the speculative statistics in llama-server's ``timings`` convention.

``timings`` (every response, and the last chunk of a stream) carries llama-server's fields — ``prompt_n``,
``prompt_ms``, ``prompt_per_token_ms``, ``prompt_per_second``, ``predicted_n``, ``predicted_ms``,
``predicted_per_token_ms``, ``predicted_per_second``, ``draft_n``, ``draft_n_accepted`` — computed from the
engine's ``GenerationStats`` (docs/metrics.md), plus Outrider's own: ``acceptance_rate``, ``token_acceptance``,
``tokens_per_pass``, ``k_mean``, ``speedup`` with its interval ``speedup_low``/``speedup_high`` and
``speedup_settled`` (false: show the range, not the figure), ``plain_steps``, ``ttft_ms`` and ``draft_mode``.
Times in milliseconds, rates in tokens per second; a figure that was not measured is null.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from outrider.engine.stats import GenerationStats

FINISH_REASONS = {"stop": "stop", "length": "length", "cancelled": "stop", "tool_calls": "tool_calls"}


def timings(stats: GenerationStats) -> dict[str, Any]:
    """llama-server's ``timings`` plus Outrider's speculative figures (see the module docstring)."""
    evaluated = stats.prompt_tokens - stats.prompt_tokens_reused
    prompt_ms = stats.prompt_s * 1000.0
    predicted_ms = stats.decode_s * 1000.0
    return {
        "prompt_n": evaluated,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / evaluated if evaluated > 0 else None,
        "prompt_per_second": stats.prompt_tps,
        "cache_n": stats.prompt_tokens_reused,
        "predicted_n": stats.generated,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / stats.generated if stats.generated > 0 else None,
        "predicted_per_second": stats.decode_tps,
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
        "draft_mode": stats.draft_mode,
        "acceptance_rate": stats.acceptance_rate,
        "token_acceptance": stats.token_acceptance,
        "tokens_per_pass": stats.tokens_per_pass,
        "k_mean": stats.k_mean,
        "speedup": stats.speedup,
        "speedup_low": stats.speedup_low,
        "speedup_high": stats.speedup_high,
        "speedup_settled": stats.speedup_settled,
        "plain_steps": stats.plain_steps,
        "plain_per_second": stats.plain_tps,
        "ttft_ms": stats.ttft_s * 1000.0 if stats.ttft_s is not None else None,
    }


def usage(stats: GenerationStats | list[GenerationStats]) -> dict[str, int]:
    """``usage`` of one reply, or of a request's choices (``n`` > 1, OpenAI's convention): the prompt counted once
    (every choice continues the same prompt), the completions summed."""
    choices = stats if isinstance(stats, list) else [stats]
    prompt = choices[0].prompt_tokens
    generated = sum(s.generated for s in choices)
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def sse(obj: dict[str, Any] | str) -> bytes:
    """One SSE ``data:`` event (compact JSON has no line breaks: one ``data:`` line suffices)."""
    text = obj if isinstance(obj, str) else _dumps(obj)
    return b"data: " + text.encode() + b"\n\n"


DONE_EVENT = sse("[DONE]")


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class ReplyShape:
    """The bodies of one reply, whole or streamed: a chat completion (``chat``) or a text completion.

    Every body repeats the reply's ``id``, ``created`` (Unix seconds) and ``model``. ``text_event(text)`` is the
    streamed text chunk as SSE bytes, the hot path of a stream: its constant part is encoded once per reply and only
    ``text`` is encoded per chunk; it equals ``sse(chunk(text))`` byte for byte.
    """

    def __init__(self, model: str, *, chat: bool, index: int = 0, id_: str | None = None,
                 created: int | None = None) -> None:
        self.chat = chat
        self.index = index  # the choice these bodies are about (``n`` > 1: 0 … n - 1)
        self.id = id_ or f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time()) if created is None else created
        self.model = model
        head, _, tail = sse(self.chunk(_MARK)).partition(_dumps(_MARK).encode())
        self._text_head, self._text_tail = head, tail

    def for_choice(self, index: int) -> ReplyShape:
        """The same reply's bodies for choice ``index`` (same id, created and model)."""
        return ReplyShape(self.model, chat=self.chat, index=index, id_=self.id, created=self.created)

    def _object(self, *, chunk: bool) -> dict[str, Any]:
        if self.chat:
            name = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            name = "text_completion"
        return {"id": self.id, "object": name, "created": self.created, "model": self.model}

    def logprobs(self, entries: list[Any], offset: int = 0) -> dict[str, Any]:
        """``choices[].logprobs`` from the engine's per-token entries (``[text, bytes, logprob, top]``): a chat's
        ``{"content": [{token, logprob, bytes, top_logprobs}]}``, or the legacy completion form (``tokens``,
        ``token_logprobs``, ``top_logprobs``, ``text_offset`` counted from ``offset`` characters)."""
        if self.chat:
            return {"content": [{"token": t, "logprob": lp, "bytes": b,
                                 "top_logprobs": [{"token": at, "logprob": alp, "bytes": ab} for at, ab, alp in top]}
                                for t, b, lp, top in entries], "refusal": None}
        offsets = []
        for t, _, _, _ in entries:
            offsets.append(offset)
            offset += len(t)
        return {"tokens": [e[0] for e in entries], "token_logprobs": [e[2] for e in entries],
                "top_logprobs": [{at: alp for at, _, alp in e[3]} for e in entries], "text_offset": offsets}

    def completion(self, text: str | None, stop_reason: str, stats: GenerationStats,
                   tool_calls: list[dict[str, Any]] | None = None,
                   logprobs: list[Any] | None = None) -> dict[str, Any]:
        """The whole answer: ``stop_reason`` is the engine's (``stop``, ``length``, ``cancelled``); with
        ``tool_calls`` (a chat), ``message.tool_calls`` and ``finish_reason: "tool_calls"``."""
        return self.whole([self.choice(text, stop_reason, tool_calls, logprobs)], [stats])

    def choice(self, text: str | None, stop_reason: str, tool_calls: list[dict[str, Any]] | None = None,
               logprobs: list[Any] | None = None) -> dict[str, Any]:
        """One entry of a whole answer's ``choices`` (its ``index`` this shape's)."""
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if tool_calls:
                message["tool_calls"] = tool_calls
                stop_reason = "tool_calls"
            body: dict[str, Any] = {"message": message}
        else:
            body = {"text": text or ""}
        return {"index": self.index, **body, "finish_reason": FINISH_REASONS.get(stop_reason, "stop"),
                "logprobs": None if logprobs is None else self.logprobs(logprobs)}

    def whole(self, choices: list[dict[str, Any]], stats: list[GenerationStats]) -> dict[str, Any]:
        """The whole answer of ``choices`` (``stats[i]`` choice i's): ``usage`` summed (``usage``), ``timings``
        choice 0's — and, with several choices, each choice's own ``timings`` in it."""
        if len(choices) > 1:
            choices = [{**c, "timings": timings(s)} for c, s in zip(choices, stats, strict=True)]
        return {**self._object(chunk=False), "choices": choices, "usage": usage(stats), "timings": timings(stats[0])}

    def logprob_event(self, text: str, entries: list[Any], offset: int) -> bytes:
        """A streamed text chunk with the log-probabilities of its tokens."""
        chunk = self.chunk(text)
        chunk["choices"][0]["logprobs"] = self.logprobs(entries, offset)
        return sse(chunk)

    def chunk(self, text: str | None, finish_reason: str | None = None,
              stats: GenerationStats | None = None) -> dict[str, Any]:
        """A streamed chunk: ``text`` (None: no content, as the last chat chunk's empty delta), the
        ``finish_reason`` of the last chunk and its ``timings``."""
        if self.chat:
            body: dict[str, Any] = {"delta": {} if text is None else {"content": text}}
        else:
            body = {"text": text or ""}
        chunk = {**self._object(chunk=True),
                 "choices": [{"index": self.index, **body, "finish_reason": finish_reason, "logprobs": None}]}
        if stats is not None:
            chunk["timings"] = timings(stats)
        return chunk

    def opening(self) -> bytes:
        """What a stream starts with: a chat's first chunk, ``delta: {"role": "assistant", "content": ""}``."""
        if not self.chat:
            return b""
        chunk = self.chunk("")
        chunk["choices"][0]["delta"] = {"role": "assistant", "content": ""}
        return sse(chunk)

    def call_events(self, deltas: list[Any]) -> bytes:
        """A stream's ``tools.CallDelta`` pieces: content as text chunks, call pieces as ``delta.tool_calls``."""
        out = b""
        for delta in deltas:
            if delta.content is not None:
                out += self.text_event(delta.content)
            else:
                chunk = self.chunk(None)
                chunk["choices"][0]["delta"] = {"tool_calls": [delta.tool_call()]}
                out += sse(chunk)
        return out

    def text_event(self, text: str) -> bytes:
        """``sse(chunk(text))``, encoding only ``text``."""
        return self._text_head + _dumps(text).encode() + self._text_tail

    def closing(self, stop_reason: str, stats: GenerationStats, *, include_usage: bool) -> bytes:
        """What a stream ends with: the chunk with ``finish_reason`` and ``timings``, with ``include_usage`` the
        chunk with ``usage`` and no choices, then ``[DONE]``."""
        return self.finish_event(stop_reason, stats) + self.end_events([stats], include_usage=include_usage)

    def finish_event(self, stop_reason: str, stats: GenerationStats) -> bytes:
        """The last chunk of this choice: ``finish_reason`` and its ``timings``."""
        return sse(self.chunk(None, FINISH_REASONS.get(stop_reason, "stop"), stats))

    def end_events(self, stats: list[GenerationStats], *, include_usage: bool) -> bytes:
        """After the last choice: with ``include_usage`` the chunk with ``usage`` (summed over the choices, with
        choice 0's ``timings``) and no choices, then ``[DONE]``."""
        out = b""
        if include_usage:
            out += sse({**self._object(chunk=True), "choices": [], "usage": usage(stats),
                        "timings": timings(stats[0])})
        return out + DONE_EVENT


_MARK = "\x00text\x00"  # stands for the text while a chunk's constant part is encoded
