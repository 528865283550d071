"""Live statistics of the streaming reply and of the conversation (plain Python, no Qt: testable alone).

The engine sends its running totals (``GenerationStats``, docs/metrics.md) with every batch of steps; ``ReplyMeter``
keeps the newest snapshot, a short window of snapshots for the *current* decode speed, and the series the
charts draw. The GUI reads it on a fixed tick (about 4 Hz), never per token.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from outrider.engine.autodraft import expected_rate, expected_tokens_per_pass
from outrider.engine.speedup import describe_speedup, speedup_is_settled
from outrider.engine.stats import GenerationStats
from outrider.history import Message, Role

NOW_WINDOW_S = 1.0  # "tok/s now" = tokens decoded over the last second of engine decode time
SLOWER_MARGIN = 0.95  # measured speed-up below this (with enough tokens) counts as "slower than plain"
SLOWER_MIN_TOKENS = 32

_PLAIN = "plain decoding measured in this reply, at the same context length and load"

# Tooltips: the definitions of docs/metrics.md, word for word where possible.
TOOLTIPS: dict[str, str] = {
    "decode_now": "Decode tokens/s over the last second: tokens emitted / decode time (prompt evaluation "
                  "excluded).",
    "decode_tps": "decode_tps — generated / decode time (first step to last; prompt evaluation excluded), for "
                  "the whole reply.",
    "acceptance_rate": "acceptance_rate — accepted / drafted: the share of drafted tokens the target accepted "
                       "(none before anything was drafted).",
    "token_acceptance": "token_acceptance — accepted / (accepted + rejections): the per-token acceptance a, the "
                        "chance that a draft token is accepted given the one before it was; the cost model "
                        "E(k) = (1 − a^(k+1)) / (1 − a) uses it.",
    "tokens_per_pass": "tokens_per_pass — pass_tokens / passes: how many tokens each read of the target's weights "
                       "bought (at least 1).",
    "k": "Current draft length k chosen for the last step (0 = a plain step); k_mean is the mean draft length "
         "chosen per step.",
    "speedup": f"speedup — measured against {_PLAIN}: the time plain decoding takes for this reply's tokens "
               "(from a cost model fitted to every target pass of the reply, stalls and the cold first step "
               "left out) / the time the reply took, drafting included. Measured, never predicted; the range is "
               "a 95 % interval, shown instead of one figure while it is wider than ±20 %; exactly 1.00× with "
               "the draft off.",
    "plain_tps": f"plain_tps — tokens/s of {_PLAIN}: 1 / the fitted cost of a one-token pass (the decoder "
                 "forces a few plain steps early in the reply, then one every few dozen steps).",
    "ttft_s": "ttft_s — time from the request to the first emitted token.",
    "prompt_tps": "prompt_tps — evaluated (not reused) prompt tokens / prompt evaluation time. When the prompt's "
                  "start was kept in the KV cache from the previous turn (prompt_tokens_reused), those tokens were "
                  "not read again: the panel says how many, since a rate over the few new ones means nothing.",
    "time_share": "draft_s, verify_s, other_s — decode time spent drafting, in target passes, and in everything "
                  "else.",
    "generated": "generated — tokens emitted in the reply (accepted draft tokens + target tokens).",
    "by_drafter": "by_drafter — accepted / drafted for each drafter of a chain (history lookup, prompt lookup, "
                  "draft model, MTP), each with its own automatic k; a drafter that does not pay is switched off.",
    "provenance": "Accepted draft token: the drafter proposed it and the target agreed. Target token: the token "
                  "the target chose itself after a rejection, or its bonus token after a fully accepted draft.",
}


# One line beside each statistic for a first-time user: what it means, in plain words (docs/metrics.md).
EXPLANATIONS: dict[str, str] = {
    "speedup": "below 1×, drafting and checking cost more time than the accepted tokens save",
    "decode_now": "tokens per second over the last second",
    "decode_tps": "tokens per second over the whole reply",
    "acceptance_rate": "share of drafted tokens the target kept",
    "token_acceptance": "chance a draft token is kept if the one before was",
    "tokens_per_pass": "tokens gained per read of the target (never below 1)",
    "k": "tokens drafted for the last step (0 = plain step)",
    "plain_tps": "the target alone, timed between drafted steps",
    "ttft_s": "from sending to the first token",
    "prompt_tps": "prompt tokens read per second, or how many were kept from the last turn",
    "time_share": "where decoding time went",
    "generated": "tokens in this reply",
    "by_drafter": "accepted / drafted per drafter",
}

DRAFTER_LABELS = {"history": "history", "lookup": "prompt", "model": "model", "mtp": "MTP"}


def by_drafter_text(counts: Sequence[tuple[str, int, int]]) -> str:
    """``history 62/62 · prompt 2/60``: (kind, accepted, drafted) per drafter; an en dash when none drafted."""
    if not counts:
        return "–"
    return " · ".join(f"{DRAFTER_LABELS.get(kind, kind)} {accepted}/{drafted}" for kind, accepted, drafted in counts)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the panel shows, computed once per tick. Every figure is the engine's own (``GenerationStats``, see
    docs/metrics.md) except ``decode_now``, a rate over the last second of the engine's decode time."""

    generated: int = 0
    drafted: int = 0
    accepted: int = 0
    decode_now: float | None = None
    decode_tps: float | None = None
    acceptance_rate: float | None = None
    token_acceptance: float | None = None
    tokens_per_pass: float | None = None
    k: int | None = None
    k_mean: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    plain_tps: float | None = None
    ttft_s: float | None = None
    prompt_tps: float | None = None
    prompt_tokens: int = 0
    prompt_reused: int = 0  # prompt tokens whose KV cache was kept from the previous turn (not evaluated)
    draft_share: float | None = None
    verify_share: float | None = None
    other_share: float | None = None
    draft_mode: str = "none"
    streaming: bool = False
    by_drafter: tuple[tuple[str, int, int], ...] = ()  # (kind, accepted, drafted) per drafter (stats.by_drafter)
    # The measured costs, in one-token target passes (the plain cost c1 the speed-up is measured against):
    # drafting one token (draft_s / drafted), and g of a pass of n tokens costing 1 + g · (n - 1).
    draft_cost: float | None = None
    pass_growth: float | None = None

    @property
    def curve_k(self) -> int | None:
        """The draft length the "you are here" curves are drawn for: the reply's mean k rounded (automatic k
        changes k every step, and its last step's 16 drew a curve far from the reply's 2.7 on average; a fixed k
        is its mean, less the plain probes), else the last step's k; None when the reply drafts nothing."""
        if self.k_mean is not None and self.k_mean >= 0.5:
            return round(self.k_mean)
        return self.k or None

    @property
    def has_reply(self) -> bool:
        """A reply is streaming or its statistics are shown."""
        return self.streaming or self.generated > 0

    @property
    def slower_than_plain(self) -> bool:
        """The reply's measured speed-up is below ``SLOWER_MARGIN`` and its whole interval below 1 (with enough
        tokens, and a drafter that drafted)."""
        if self.speedup is None or self.speedup >= SLOWER_MARGIN:
            return False
        if self.speedup_high is None or self.speedup_high >= 1.0:
            return False
        return (self.generated >= SLOWER_MIN_TOKENS and self.draft_mode not in ("none", "off")
                and self.drafted > 0)


class ReplyMeter:
    """Accumulates the engine's snapshots for one reply at a time, and per-reply results for the conversation.

    Attributes:
        reply_series: (seconds since the reply started, tok/s now, acceptance so far) per tick.
        conversation_series: (reply number, decode_tps, acceptance_rate) per finished reply that has statistics;
            the reply number counts every reply of the conversation shown (``replies``), so a reply without
            statistics (stopped before its first token, stored by an old version) leaves a gap.
        conversation_points: (reply number, per-token acceptance a, tokens per pass, speed-up or None, its mean
            k rounded or None) per finished reply that drafted (the "you are here" chart's points).
        replies: replies of the conversation shown, with or without statistics.
        started: replies begun since the meter was made (never reset): which reply the statistics are of.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._stats: GenerationStats | None = None
        self._k: int | None = None
        self._window: collections.deque[tuple[float, int]] = collections.deque()  # (decode_s, generated)
        self._started = 0.0
        self.streaming = False
        self.reply_series: list[tuple[float, float, float | None]] = []
        self.conversation_series: list[tuple[int, float, float | None]] = []
        self.conversation_points: list[tuple[int, float, float, float | None, int | None]] = []
        self.replies = 0
        self.started = 0  # replies begun since the meter was made: tells one reply from the next
        self._continuing = False
        self._dirty = False

    # -- feeding ----------------------------------------------------------------------------------------------
    def begin_reply(self, *, continuing: bool = False) -> None:
        """A reply starts streaming; ``continuing``: it continues the last reply (Continue after the token limit),
        so at its end that reply's point in the conversation chart is updated rather than a new one added."""
        self._continuing = continuing and self.replies > 0
        self.started += 1
        self._stats = None
        self._k = None
        self._window.clear()
        self._started = self._clock()
        self.streaming = True
        self.reply_series = []
        self._dirty = True

    def add(self, stats: GenerationStats, k: int | None) -> None:
        """The engine's running totals after a batch of steps, and the last step's k."""
        self._stats = stats
        self._k = k
        decode_s = stats.decode_s
        self._window.append((decode_s, stats.generated))
        while len(self._window) > 2 and decode_s - self._window[0][0] > NOW_WINDOW_S:
            self._window.popleft()
        self._dirty = True

    def finish_reply(self, stats: GenerationStats | None) -> None:
        if stats is not None:
            self._stats = stats
        self.streaming = False
        snap = self.snapshot()
        if self._continuing:
            self.conversation_series = [p for p in self.conversation_series if p[0] != self.replies]
            self.conversation_points = [p for p in self.conversation_points if p[0] != self.replies]
        else:
            self.replies += 1
        self._continuing = False
        if snap.decode_tps:
            self.conversation_series.append((self.replies, snap.decode_tps, snap.acceptance_rate))
        if snap.token_acceptance is not None and snap.tokens_per_pass is not None:
            self.conversation_points.append((self.replies, snap.token_acceptance, snap.tokens_per_pass,
                                             snap.speedup, snap.curve_k))
        self._dirty = True

    def reset_conversation(self) -> None:
        """A new (empty) conversation: no reply, no series, nothing left of the last reply's statistics."""
        self.conversation_series = []
        self.conversation_points = []
        self.replies = 0
        self._continuing = False
        self.reply_series = []
        self._stats = None
        self._k = None
        self._window.clear()
        self.streaming = False
        self._dirty = True

    def load_conversation(self, messages: Iterable[Any]) -> None:
        """The conversation chart of the messages shown (history ``Message``s, in order; see ``reply_points``).
        Replaces the series: opening a conversation, or an edit-and-resend that removed the later replies."""
        self.conversation_series = []
        self.conversation_points = []
        self.replies = 0
        for m in messages:
            if not (isinstance(m, Message) and m.role is Role.ASSISTANT):
                continue
            self.replies += 1
            st = m.stats
            if st is None:
                continue
            if st.decode_tps:
                self.conversation_series.append((self.replies, st.decode_tps, st.acceptance_rate))
            if st.token_acceptance is not None and st.tokens_per_pass is not None:
                k = round(st.k_mean) if st.k_mean is not None and st.k_mean >= 0.5 else None
                self.conversation_points.append((self.replies, st.token_acceptance, st.tokens_per_pass,
                                                 st.speedup, k))
        self._dirty = True

    # -- reading ----------------------------------------------------------------------------------------------
    def take_dirty(self) -> bool:
        dirty, self._dirty = self._dirty, False
        return dirty

    def tick(self) -> Snapshot:
        """The snapshot for this tick; while streaming also appends a point to ``reply_series``."""
        snap = self.snapshot()
        if self.streaming and snap.decode_now is not None:
            self.reply_series.append((self._clock() - self._started, snap.decode_now, snap.acceptance_rate))
        return snap

    def snapshot(self) -> Snapshot:
        s = self._stats
        if s is None:
            return Snapshot(streaming=self.streaming)
        now: float | None = None
        if len(self._window) >= 2:
            (d0, g0), (d1, g1) = self._window[0], self._window[-1]
            if d1 - d0 > 1e-6:
                now = (g1 - g0) / (d1 - d0)
        decode_tps = s.decode_tps
        if now is None:
            now = decode_tps
        decode_s = s.decode_s

        def share(seconds: float) -> float | None:
            return seconds / decode_s if decode_s > 0 else None

        return Snapshot(
            generated=s.generated, drafted=s.drafted, accepted=s.accepted, decode_now=now, decode_tps=decode_tps,
            acceptance_rate=s.acceptance_rate, token_acceptance=s.token_acceptance,
            tokens_per_pass=s.tokens_per_pass, k=self._k, k_mean=s.k_mean,
            speedup=s.speedup, speedup_low=s.speedup_low, speedup_high=s.speedup_high, plain_tps=s.plain_tps,
            ttft_s=s.ttft_s,
            prompt_tps=s.prompt_tps, prompt_tokens=s.prompt_tokens, prompt_reused=s.prompt_tokens_reused,
            draft_share=share(s.draft_s), verify_share=share(s.verify_s),
            other_share=share(s.other_s), draft_mode=s.draft_mode, streaming=self.streaming,
            by_drafter=tuple((kind, c.accepted, c.drafted) for kind, c in s.by_drafter.items()),
            draft_cost=s.draft_s / s.drafted * s.plain_tps if s.drafted and s.plain_tps else None,
            pass_growth=s.pass_growth,
        )


def reply_points(messages: Iterable[Any]) -> list[tuple[float | None, float | None]]:
    """(decode tok/s, acceptance rate) of each assistant reply among a conversation's ``messages`` (history
    ``Message``s; other entries are skipped), for ``ReplyMeter.load_conversation``."""
    points: list[tuple[float | None, float | None]] = []
    for m in messages:
        if isinstance(m, Message) and m.role is Role.ASSISTANT:
            points.append((m.stats.decode_tps, m.stats.acceptance_rate) if m.stats is not None else (None, None))
    return points


def prompt_speed_text(s: Snapshot) -> str:
    """The "Prompt speed" figure: tokens/s over the prompt evaluated; after a prompt-cache reuse how many tokens
    were cached instead (``412 cached``): a rate over the few new tokens of a cached prompt read "14464 tok/s",
    which says nothing about prompt reading. As short as a rate: "cached 24 tokens · 12 new" widened the panel
    and cut every value off at its right."""
    if s.prompt_reused > 0:
        return f"{s.prompt_reused} cached"
    return fmt(s.prompt_tps, ".0f", " tok/s")


CURVE_POINTS = 41  # acceptances from 0 to 1 the "you are here" curves are evaluated at


def you_are_here_curves(k: int, draft_cost: float | None, growth: float | None
                        ) -> tuple[list[float], list[float], list[float] | None]:
    """The "you are here" chart's curves for draft length ``k``: acceptances a from 0 to 1, the expected tokens
    per target pass E(k) = (1 − a^(k+1)) / (1 − a) at each, and the expected net speed-up over plain decoding
    E(k) / (k · c_draft + c_verify(k + 1)) with the reply's measured costs in one-token passes (``Snapshot.
    draft_cost``; c_verify(k + 1) = 1 + g · k, ``pass_growth``) — the cost model automatic k chooses by
    (``engine.autodraft``), not a second formula. No speed-up curve (None) until the costs are measured."""
    xs = [i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)]
    tokens = [expected_tokens_per_pass(a, k) for a in xs]
    if draft_cost is None or growth is None:
        return xs, tokens, None
    return xs, tokens, [expected_rate(a, k, draft_cost, 1.0 + growth * k) for a in xs]


def fmt(value: float | int | None, spec: str, suffix: str = "") -> str:
    """A number for a label, or an en dash when there is none yet."""
    if value is None:
        return "–"
    return f"{value:{spec}}{suffix}"


def format_speedup(speedup: float | None, low: float | None, high: float | None, *,
                   streaming: bool = True) -> str:
    """The measured speed-up as the panel shows it (``describe_speedup``, docs/metrics.md): ``1.85× (1.70–2.00)``
    once settled, the range ``measuring… 1.40–2.60×`` while it is wider than ±20 % and the reply runs (``1.40–
    2.60×, uncertain`` once it ended so), ``measuring…`` before it can be measured (``not measured`` at the end)."""
    if speedup is None or low is None or high is None:
        return "measuring…" if streaming else "not measured"
    if streaming and not speedup_shown_as_figure(speedup, low, high):
        return f"measuring… {low:.2f}–{high:.2f}×"
    return describe_speedup(speedup, low, high)


def speedup_shown_as_figure(speedup: float | None, low: float | None, high: float | None) -> bool:
    """Whether the speed-up is shown as one bold figure: measured exactly, or its interval within ±20 %."""
    if speedup is None or low is None or high is None:
        return False
    return high - low <= 1e-9 * max(1.0, speedup) or speedup_is_settled(speedup, low, high)
