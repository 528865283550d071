"""Generation statistics: each number is defined once, here and in docs/metrics.md.

Times are seconds from ``time.perf_counter``; rates are tokens per second.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class GenerationStats:
    """Counters of one reply; the derived numbers are properties so they can never disagree.

    Attributes:
        prompt_tokens: tokens in the prompt (the formatted conversation).
        prompt_tokens_reused: prompt tokens whose KV cache was kept from the previous turn (not evaluated).
        prompt_s: time evaluating the new prompt tokens (target and draft).
        generated: tokens emitted in the reply (accepted draft tokens + target tokens).
        drafted: tokens the drafter proposed and the target verified.
        accepted: drafted tokens the target accepted.
        passes: target verification passes (one per speculative step).
        k_sum: sum over steps of the draft length k chosen for the step.
        draft_s / verify_s: time spent drafting / in target passes while decoding.
        decode_s: wall time from the first decoding step to the last (draft + verify + bookkeeping).
        ttft_s: time from the request to the first emitted token.
        baseline_tps: plain-decoding tokens/s measured for this pair (``calibrate``), if any.
    """

    prompt_tokens: int = 0
    prompt_tokens_reused: int = 0
    prompt_s: float = 0.0
    generated: int = 0
    drafted: int = 0
    accepted: int = 0
    passes: int = 0
    k_sum: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    decode_s: float = 0.0
    ttft_s: float | None = None
    baseline_tps: float | None = None
    draft_mode: str = "none"

    @property
    def acceptance_rate(self) -> float | None:
        """accepted draft tokens / drafted tokens (None before anything was drafted)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_pass(self) -> float | None:
        """generated tokens / target passes: how many tokens each weight read bought."""
        return self.generated / self.passes if self.passes else None

    @property
    def k_mean(self) -> float | None:
        """Mean draft length chosen per step (0 for a plain step)."""
        return self.k_sum / self.passes if self.passes else None

    @property
    def decode_tps(self) -> float | None:
        """generated tokens / decode_s (prompt evaluation excluded)."""
        return self.generated / self.decode_s if self.decode_s > 0 else None

    @property
    def prompt_tps(self) -> float | None:
        """Evaluated (not reused) prompt tokens / prompt_s."""
        evaluated = self.prompt_tokens - self.prompt_tokens_reused
        return evaluated / self.prompt_s if self.prompt_s > 0 and evaluated > 0 else None

    @property
    def other_s(self) -> float:
        """decode_s not spent drafting or verifying (sampling, detokenising, bookkeeping)."""
        return max(0.0, self.decode_s - self.draft_s - self.verify_s)

    @property
    def speedup(self) -> float | None:
        """decode_tps / baseline_tps: the measured speed-up against plain decoding of the same pair."""
        tps = self.decode_tps
        if tps is None or not self.baseline_tps:
            return None
        return tps / self.baseline_tps

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for name in ("acceptance_rate", "tokens_per_pass", "k_mean", "decode_tps", "prompt_tps", "other_s",
                     "speedup"):
            out[name] = getattr(self, name)
        return out
