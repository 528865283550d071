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

WAKE_MARGIN = 0.02  # a head whose awake replies saved less than this share of their plain-equivalent time sleeps
LEDGER_HALF_LIFE = 512  # awake tokens after which a reply's entries weigh half (the memory: ~740 tokens)
LEDGER_MIN_TOKENS = 384  # awake tokens (decayed) before the ledger decides anything: several replies, several
# prompts (with one reply, 24, the quiet hybrid slept after the first 192-token reply of a prompt its head drafts
# badly, and missed a prompt where it ran 2x: 0.90x the best depth on 192-token replies, bench_mtp.py)


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
        self._saved = self._plain = 0.0
        self._tokens = 0

    def totals(self) -> tuple[float, float, float]:
        """(saved seconds, plain-equivalent seconds, tokens), the open reply counted as closed: the replies before
        weigh 2^(-t / LEDGER_HALF_LIFE), t the open reply's tokens (a reply's evidence is its tokens)."""
        if self._tokens == 0 and self._saved == 0.0:
            return self.saved_s, self.plain_s, self.tokens
        keep = 0.5 ** (self._tokens / LEDGER_HALF_LIFE)
        return keep * self.saved_s + self._saved, keep * self.plain_s + self._plain, keep * self.tokens + self._tokens

    def waking_does_not_pay(self) -> bool:
        """Whether the awake replies so far (at least LEDGER_MIN_TOKENS of them) saved less than WAKE_MARGIN of
        their plain-equivalent time."""
        saved, plain, tokens = self.totals()
        return tokens >= LEDGER_MIN_TOKENS and plain > 0 and saved < WAKE_MARGIN * plain
