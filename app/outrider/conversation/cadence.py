"""When a streaming reply's text is written to the history: the checkpoint cadence (no Qt, no store).

The rule (docs/history.md): while a reply streams, its text so far is committed whenever it changed and
``interval_s`` has passed since the last commit (or since the reply's row was made), so a crash or a kill loses
at most about that much; never twice within ``interval_s``, never unchanged text; the end is always written
(that write is not the cadence's business). The flow asks on every batch of steps and on every tick of a timer
that runs while the reply streams (the GUI's, every ``TICK_S``), so text that stopped arriving just after a
commit is still written within ``interval_s`` + one tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable

CHECKPOINT_INTERVAL_S = 1.0  # seconds between two commits of a streaming reply, at least
TICK_S = 0.25  # how often a front end with a timer asks between batches (a quarter of the interval)


class CheckpointCadence:
    """Says when a checkpoint is due. ``clock`` is monotonic seconds (a fake one in tests).

    Attributes:
        written: the size of the reply (in pieces, any measure that grows with it) at the last commit.
    """

    def __init__(self, interval_s: float = CHECKPOINT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        if interval_s <= 0:
            raise ValueError("the checkpoint interval must be positive")
        self.interval_s = interval_s
        self._clock = clock
        self._last = clock()
        self.written = 0

    def restart(self, size: int = 0) -> None:
        """The reply's row exists now, holding ``size`` (a continued reply holds its earlier text)."""
        self._last = self._clock()
        self.written = size

    def due(self, size: int) -> bool:
        """Whether the reply, now ``size``, is to be committed now; if so it counts as committed."""
        if size == self.written or self._clock() - self._last < self.interval_s:
            return False
        self._last = self._clock()
        self.written = size
        return True
