"""Generation statistics: each number is defined once, here and in docs/metrics.md.

Times are seconds from ``time.perf_counter``; rates are tokens per second.

The speed-up is *measured in the reply it describes*. Plain decoding is timed on the reply's own plain steps
(a step that drafted nothing: k = 0, or an empty draft, with the drafter's time taken out), which the decoder
interleaves every few dozen steps; each speculative step is compared with the plain steps around it, so the
comparison is made at the same context length and under the same machine load:

    speedup = Σ_steps pass_tokens_i · c_i  /  Σ_steps step_s_i

where ``c_i`` is the plain cost of one token near step i (the mean of the plain measurements just before and just
after it; only the one before while the reply is still running) and ``step_s_i`` is the step's real time. A
plain step contributes its own time to both sums, so a reply decoded without drafting reads exactly 1.00.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any


@dataclasses.dataclass
class DrafterCounts:
    """One drafter's part of a reply (a chain of drafters has one per member, chain_draft.py).

    Attributes:
        drafted: tokens it proposed that the target verified (cut where a stop ended the reply, like ``drafted``).
        accepted: of those, the tokens the target accepted.
        steps: steps in which it proposed at least one token.
    """

    drafted: int = 0
    accepted: int = 0
    steps: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


@dataclasses.dataclass
class GenerationStats:
    """Counters of one reply; the derived numbers are properties so they can never disagree.

    Attributes:
        prompt_tokens: tokens in the prompt (the formatted conversation).
        prompt_tokens_reused: prompt tokens whose KV cache was kept from the previous turn (not evaluated).
        prompt_s: time evaluating the new prompt tokens (target and draft), until the device finished.
        generated: tokens emitted in the reply (accepted draft tokens + target tokens).
        drafted: tokens the drafter proposed and the target verified.
        accepted: drafted tokens the target accepted.
        rejections: steps that ended on a rejected draft token (a draft run the target cut short).
        passes: target verification passes (one per decoding step).
        pass_tokens: tokens the target passes yielded: ``generated`` plus an end-of-generation token that ended
            the reply (it costs a pass but is not emitted). Invariant: pass_tokens >= passes.
        k_sum: sum over steps of the tokens drafted and verified (the chosen k less what p-min cut).
        draft_s / verify_s: time spent drafting (draft model catch-up included) / in target passes.
        decode_s: wall time from the first decoding step to the last (draft + verify + bookkeeping).
        step_s: engine time of all decoding steps (``decode_s`` less the time the consumer held each step).
        ttft_s: time from the request to the first emitted token.
        plain_steps: steps that drafted nothing and so measured plain decoding (see the module docstring).
        plain_s / plain_sq_s2: sum of their per-token times and of the squares (seconds, seconds²).
        plain_equiv_s: seconds plain decoding would have needed for the tokens of every step so far.
        by_drafter: ``drafted`` and ``accepted`` split by the kind of drafter that proposed each token (``lookup``
            = prompt lookup, ``history``, ``model``, ``mtp``); their sums are ``drafted`` and ``accepted``.
    """

    prompt_tokens: int = 0
    prompt_tokens_reused: int = 0
    prompt_s: float = 0.0
    generated: int = 0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0
    passes: int = 0
    pass_tokens: int = 0
    k_sum: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    decode_s: float = 0.0
    step_s: float = 0.0
    ttft_s: float | None = None
    plain_steps: int = 0
    plain_s: float = 0.0
    plain_sq_s2: float = 0.0
    plain_equiv_s: float = 0.0
    draft_mode: str = "none"
    threads: int = 0  # llama.cpp CPU threads the reply ran with (engine/threads.py; 0: not known)
    by_drafter: dict[str, DrafterCounts] = dataclasses.field(default_factory=dict)

    def count_drafters(self, sources: Sequence[str], accepted: int) -> None:
        """Add one step's verified draft tokens, ``sources[i]`` the drafter of token i; the first ``accepted``
        were accepted."""
        seen: set[str] = set()
        for i, kind in enumerate(sources):
            counts = self.by_drafter.get(kind)
            if counts is None:
                counts = self.by_drafter[kind] = DrafterCounts()
            counts.drafted += 1
            counts.accepted += int(i < accepted)
            if kind not in seen:
                seen.add(kind)
                counts.steps += 1

    @property
    def acceptance_rate(self) -> float | None:
        """accepted draft tokens / drafted tokens (None before anything was drafted)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def token_acceptance(self) -> float | None:
        """accepted / (accepted + rejections): the per-token acceptance ``a`` of the geometric model (the
        chance that the next draft token is accepted given the previous one was), which E(k) expects."""
        total = self.accepted + self.rejections
        return self.accepted / total if total else None

    @property
    def tokens_per_pass(self) -> float | None:
        """pass_tokens / passes: how many tokens each read of the target's weights bought (>= 1.00)."""
        return self.pass_tokens / self.passes if self.passes else None

    @property
    def k_mean(self) -> float | None:
        """Mean draft length verified per step (0 for a plain step or a draft p-min emptied)."""
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
    def plain_tps(self) -> float | None:
        """Plain-decoding tokens/s measured in this reply (1 / mean plain per-token time)."""
        return self.plain_steps / self.plain_s if self.plain_s > 0 else None

    @property
    def speedup(self) -> float | None:
        """plain_equiv_s / step_s: the measured speed-up against plain decoding in this very reply (see the
        module docstring). None until the reply has measured a plain step."""
        if self.plain_steps == 0 or self.step_s <= 0:
            return None
        return self.plain_equiv_s / self.step_s

    @property
    def speedup_error(self) -> float | None:
        """One standard error of ``speedup`` from the spread of the plain measurements (None below two)."""
        speedup = self.speedup
        n = self.plain_steps
        if speedup is None or n < 2:
            return None
        mean = self.plain_s / n
        var = max(0.0, self.plain_sq_s2 / n - mean * mean) * n / (n - 1)
        return speedup * math.sqrt(var / n) / mean if mean > 0 else None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for name in DERIVED:
            out[name] = getattr(self, name)
        return out


DERIVED = ("acceptance_rate", "token_acceptance", "tokens_per_pass", "k_mean", "decode_tps", "prompt_tps",
           "other_s", "plain_tps", "speedup", "speedup_error")


class PlainRateMeter:
    """Accumulates the speed-up terms of ``GenerationStats`` step by step (see the module docstring).

    Speculative steps after the latest plain measurement are held as a pending segment; when the next plain
    measurement arrives they are valued at the mean of the two measurements around them.
    """

    def __init__(self, stats: GenerationStats) -> None:
        self.stats = stats
        self._last_plain: float | None = None  # seconds per token of the latest plain step
        self._closed_equiv = 0.0
        self._pending_tokens = 0  # pass tokens of speculative steps since the latest plain step
        self.steps_since_plain = 0

    def add_step(self, *, pass_tokens: int, step_s: float, plain_s: float | None) -> None:
        """One decoding step: ``pass_tokens`` yielded in ``step_s`` seconds; ``plain_s`` is its plain-decoding
        time (step time without drafting) when the step drafted nothing, else None."""
        s = self.stats
        s.step_s += step_s
        if plain_s is None or pass_tokens < 1:
            self._pending_tokens += pass_tokens
            self.steps_since_plain += 1
        else:
            per_token = plain_s / pass_tokens
            s.plain_steps += 1
            s.plain_s += per_token
            s.plain_sq_s2 += per_token * per_token
            before = self._last_plain if self._last_plain is not None else per_token
            self._closed_equiv += self._pending_tokens * (before + per_token) / 2 + plain_s
            self._pending_tokens = 0
            self._last_plain = per_token
            self.steps_since_plain = 0
        pending = self._pending_tokens * self._last_plain if self._last_plain is not None else 0.0
        s.plain_equiv_s = self._closed_equiv + pending
