"""Live statistics of the streaming reply and of the conversation (no Qt).

The engine sends its running totals (``GenerationStats``, docs/metrics.md) with every batch of steps; ``ReplyMeter``
keeps the newest, a short window of them for the *current* decode speed, and the series the charts draw.
``LiveStats`` is what a display reads of it, derived from ``GenerationStats`` once per tick (about 4 Hz in the GUI),
never per token.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any

from outrider.engine.stats import GenerationStats
from outrider.history import Message, Role

NOW_WINDOW_S = 1.0  # "tok/s now" = tokens decoded over the last second of engine decode time
SLOWER_MARGIN = 0.95  # measured speed-up below this (with enough tokens) counts as "slower than plain"
SLOWER_MIN_TOKENS = 32


@dataclasses.dataclass(frozen=True)
class LiveStats:
    """What a display shows of a reply at one tick: a view of its ``GenerationStats`` (docs/metrics.md). A field
    named as a ``GenerationStats`` field or property holds exactly that figure (``test_stats_names.py``); the
    others are made here: ``decode_now`` (tokens/s over the last second of the engine's decode time), ``k`` (the
    last step's), the ``*_share``s (each time over ``decode_s``), ``draft_cost`` (seconds per drafted token in
    one-token passes), ``streaming``, and ``by_drafter`` as (kind, accepted, drafted) rows."""

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
    prompt_tokens_reused: int = 0  # prompt tokens whose KV cache was kept from the previous turn (not evaluated)
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
    """Accumulates the engine's running totals for one reply at a time, and per-reply results for the conversation.

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
        snap = self.live_stats()
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

    def tick(self) -> LiveStats:
        """The ``LiveStats`` for this tick; while streaming also appends a point to ``reply_series``."""
        snap = self.live_stats()
        if self.streaming and snap.decode_now is not None:
            self.reply_series.append((self._clock() - self._started, snap.decode_now, snap.acceptance_rate))
        return snap

    def live_stats(self) -> LiveStats:
        s = self._stats
        if s is None:
            return LiveStats(streaming=self.streaming)
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

        return LiveStats(
            generated=s.generated, drafted=s.drafted, accepted=s.accepted, decode_now=now, decode_tps=decode_tps,
            acceptance_rate=s.acceptance_rate, token_acceptance=s.token_acceptance,
            tokens_per_pass=s.tokens_per_pass, k=self._k, k_mean=s.k_mean,
            speedup=s.speedup, speedup_low=s.speedup_low, speedup_high=s.speedup_high, plain_tps=s.plain_tps,
            ttft_s=s.ttft_s,
            prompt_tps=s.prompt_tps, prompt_tokens=s.prompt_tokens, prompt_tokens_reused=s.prompt_tokens_reused,
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
