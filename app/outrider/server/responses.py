"""Response bodies in OpenAI's shape, with the speculative statistics in llama-server's ``timings`` convention.

``timings`` (every response, and the last chunk of a stream) carries llama-server's fields — ``prompt_n``,
``prompt_ms``, ``prompt_per_token_ms``, ``prompt_per_second``, ``predicted_n``, ``predicted_ms``,
``predicted_per_token_ms``, ``predicted_per_second``, ``draft_n``, ``draft_n_accepted`` — computed from the
engine's ``GenerationStats`` (docs/metrics.md), plus Outrider's own: ``acceptance_rate``, ``token_acceptance``,
``tokens_per_pass``, ``k_mean``, ``speedup``, ``speedup_error``, ``plain_steps``, ``ttft_ms`` and ``draft_mode``.
Times in milliseconds, rates in tokens per second; a figure that was not measured is null.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from outrider.engine.stats import GenerationStats

FINISH_REASONS = {"stop": "stop", "length": "length", "cancelled": "stop"}


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
        "speedup_error": stats.speedup_error,
        "plain_steps": stats.plain_steps,
        "plain_per_second": stats.plain_tps,
        "ttft_ms": stats.ttft_s * 1000.0 if stats.ttft_s is not None else None,
    }


def usage(stats: GenerationStats) -> dict[str, int]:
    return {"prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.generated,
            "total_tokens": stats.prompt_tokens + stats.generated}


class ReplyIds:
    """The id, creation time and model name every chunk of one reply repeats."""

    def __init__(self, prefix: str, model: str) -> None:
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model


def chat_completion(ids: ReplyIds, text: str, stop_reason: str, stats: GenerationStats) -> dict[str, Any]:
    return {
        "id": ids.id, "object": "chat.completion", "created": ids.created, "model": ids.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": FINISH_REASONS.get(stop_reason, "stop"), "logprobs": None}],
        "usage": usage(stats), "timings": timings(stats),
    }


def text_completion(ids: ReplyIds, text: str, stop_reason: str, stats: GenerationStats) -> dict[str, Any]:
    return {
        "id": ids.id, "object": "text_completion", "created": ids.created, "model": ids.model,
        "choices": [{"index": 0, "text": text, "finish_reason": FINISH_REASONS.get(stop_reason, "stop"),
                     "logprobs": None}],
        "usage": usage(stats), "timings": timings(stats),
    }


def chat_chunk(ids: ReplyIds, delta: dict[str, Any], finish_reason: str | None = None,
               stats: GenerationStats | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": ids.id, "object": "chat.completion.chunk", "created": ids.created, "model": ids.model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
    }
    if stats is not None:
        chunk["timings"] = timings(stats)
    return chunk


def text_chunk(ids: ReplyIds, text: str, finish_reason: str | None = None,
               stats: GenerationStats | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": ids.id, "object": "text_completion", "created": ids.created, "model": ids.model,
        "choices": [{"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}],
    }
    if stats is not None:
        chunk["timings"] = timings(stats)
    return chunk


def usage_chunk(ids: ReplyIds, obj: str, stats: GenerationStats) -> dict[str, Any]:
    """The extra last chunk of ``stream_options.include_usage``: no choices, the usage."""
    return {"id": ids.id, "object": obj, "created": ids.created, "model": ids.model, "choices": [],
            "usage": usage(stats), "timings": timings(stats)}
