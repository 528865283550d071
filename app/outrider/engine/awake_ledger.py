"""What keeping an MTP head awake saved, reply by reply, against plain decoding with the head asleep.

An awake head costs every reply something whether or not it drafts: its scoring on the prompt, the copy of each
target pass's hidden states it follows the target with, and a scoring every few plain steps. Automatic depth
weighs each step's draft against plain decoding *with* those costs (``AutoDraftLength._plain_step_cost``), which
decides the depth; whether the head should be awake at all is another question, answered by what waking has
saved in the replies where it was awake:

    saved  = plain-equivalent time of the reply's tokens  -  what the awake reply cost
    plain-equivalent time  = tokens x (c_verify(1) - f)     (f: following's copy on a one-token pass)

Each speculative step saves (accepted + 1)(c_verify(1) - f) - c_verify(k + 1) - drafting time; each plain step
loses its copy f; each scoring and the prompt's scoring lose their measured time. Verify costs are the cost
model's lower medians (a stalled pass decides nothing here either); the head's own work is timed as it happens.

Measured on a busy machine (bench_mtp.py --burner: one thread, a batch of two tokens 2.8x one): the hybrid's head,
awake, ran 1.01-1.02x plain on 192-token replies and 0.84-0.86x on 24-token ones — its head drafts well in the
later stretches of long replies, and the fixed costs of waking fall on every reply. Summed over the replies it
saved less than nothing, and a head that saves less than ``WAKE_MARGIN`` of the plain-equivalent time sleeps.
"""

from __future__ import annotations

import math

WAKE_MARGIN = 0.02  # a head whose awake replies saved less than this share of their plain-equivalent time sleeps
LEDGER_HALF_LIFE = 512  # awake tokens after which a reply's entries weigh half (the memory: ~740 tokens)
LEDGER_MIN_TOKENS = 384  # awake tokens (decayed) before the ledger decides anything: several replies, several
# prompts (with one reply, 24, the quiet hybrid slept after the first 192-token reply of a prompt its head drafts
# badly, and missed a prompt where it ran 2x: 0.90x the best depth on 192-token replies, bench_mtp.py)
CONSISTENT_REPLIES = 6  # ... unless the latest replies, this many at least, agree (``_consistently_losing``)
RECENT_REPLIES = 8  # replies kept for that verdict
CONSISTENT_Z = 2.0  # how far below 0, in standard errors of their mean, the replies' saved shares must lie


class AwakeLedger:
    """Seconds saved and plain-equivalent seconds of the awake replies, the latest tokens weighed most.

    Invariant: ``plain_s`` >= 0 and ``tokens`` >= 0; ``saved_s`` may be negative (waking cost more than it saved).
    The open reply's entries count as if it were closed (``totals``), so a verdict asked between two replies
    includes the reply that just ended."""

    def __init__(self) -> None:
        self.saved_s = 0.0  # closed replies, decayed by LEDGER_HALF_LIFE per awake token since
        self.plain_s = 0.0
        self.tokens = 0.0
        self._saved = 0.0  # the open reply
        self._plain = 0.0
        self._tokens = 0
        # (saved seconds, plain-equivalent seconds) of the latest closed replies, at most RECENT_REPLIES, oldest first
        self.recent: list[tuple[float, float]] = []

    def step(self, *, tokens: int, bare_pass_s: float, cost_s: float) -> None:
        """A step of an awake reply: ``tokens`` emitted at ``cost_s`` seconds, where plain decoding with the head
        asleep costs ``bare_pass_s`` a token."""
        self._tokens += tokens
        self._plain += tokens * bare_pass_s
        self._saved += tokens * bare_pass_s - cost_s

    def charge(self, seconds: float) -> None:
        """Work of the awake head that plain decoding does not do (a scoring, the prompt's scoring)."""
        self._saved -= seconds

    def close_reply(self) -> None:
        """The open reply ends (a reply with no token counted leaves the ledger as it was)."""
        if self._tokens == 0 and self._saved == 0.0:
            return
        self.saved_s, self.plain_s, self.tokens = self.totals()
        if self._plain > 0:
            self.recent = [*self.recent, (self._saved, self._plain)][-RECENT_REPLIES:]
        self._saved = self._plain = 0.0
        self._tokens = 0

    def totals(self) -> tuple[float, float, float]:
        """(saved seconds, plain-equivalent seconds, tokens), the open reply counted as closed: the replies before
        weigh 2^(-t / LEDGER_HALF_LIFE), t the open reply's tokens (a reply's evidence is its tokens)."""
        if self._tokens == 0 and self._saved == 0.0:
            return self.saved_s, self.plain_s, self.tokens
        keep = 0.5 ** (self._tokens / LEDGER_HALF_LIFE)
        return keep * self.saved_s + self._saved, keep * self.plain_s + self._plain, keep * self.tokens + self._tokens

    def latest(self) -> list[tuple[float, float]]:
        """The latest replies' (saved, plain-equivalent) seconds, the open one counted as closed (``totals``)."""
        replies = [*self.recent, (self._saved, self._plain)] if self._plain > 0 else list(self.recent)
        return replies[-RECENT_REPLIES:]

    def waking_does_not_pay(self) -> bool:
        """Whether the awake replies so far (at least LEDGER_MIN_TOKENS of them) saved less than WAKE_MARGIN of
        their plain-equivalent time, or the latest replies consistently lost (``_consistently_losing``)."""
        saved, plain, tokens = self.totals()
        if tokens >= LEDGER_MIN_TOKENS:
            return plain > 0 and saved < WAKE_MARGIN * plain
        return self._consistently_losing()

    def _consistently_losing(self) -> bool:
        """Whether the latest awake replies (the open one with them; CONSISTENT_REPLIES at least) each lost, so
        alike that the mean of their saved shares lies CONSISTENT_Z standard errors below 0: a verdict before
        LEDGER_MIN_TOKENS, from agreement rather than amount. On a busy CPU the hybrid's head lost 5-15 % of every
        24-token reply, and waiting for 384 awake tokens (16 such replies) cost a session of short replies most
        of what the ledger saves; a quiet head that drafts one prompt badly and another at 2x saves on the other,
        and replies that disagree leave the verdict to LEDGER_MIN_TOKENS."""
        shares = [saved / plain for saved, plain in self.latest()]
        n = len(shares)
        if n < CONSISTENT_REPLIES or max(shares) >= 0:
            return False
        mean = sum(shares) / n
        spread = math.sqrt(sum((x - mean) ** 2 for x in shares) / (n - 1))
        return mean + CONSISTENT_Z * spread / math.sqrt(n) < 0
