"""The checkpoint cadence alone (``conversation/cadence.py``), on a fake clock: no Qt, no store."""

from __future__ import annotations

import pytest

from outrider.conversation.cadence import CheckpointCadence


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_commit_waits_for_the_interval_and_for_new_text() -> None:
    """Breaking it: ``due`` without the interval check committed at every batch (the first assert failed)."""
    clock = Clock()
    cadence = CheckpointCadence(1.0, clock)
    clock.now = 0.5
    assert not cadence.due(3)  # text, but too soon
    clock.now = 1.0
    assert cadence.due(4)
    clock.now = 2.5
    assert not cadence.due(4)  # the interval passed, but nothing new
    assert cadence.due(5)
    clock.now = 3.0
    assert not cadence.due(6)  # 0.5 s after the last commit


def test_a_steady_stream_is_committed_once_per_interval() -> None:
    """A batch every 0.125 s for 5 s: one commit per second, each of the latest text."""
    clock = Clock()
    cadence = CheckpointCadence(1.0, clock)
    commits = []
    for i in range(1, 41):
        clock.now = i * 0.125
        if cadence.due(i):
            commits.append((clock.now, i))
    assert commits == [(1.0, 8), (2.0, 16), (3.0, 24), (4.0, 32), (5.0, 40)]


def test_a_continued_reply_counts_from_the_text_it_already_had() -> None:
    clock = Clock()
    cadence = CheckpointCadence(1.0, clock)
    clock.now = 10.0
    cadence.restart(7)  # its row holds 7 pieces already
    clock.now = 12.0
    assert not cadence.due(7) and cadence.due(8)


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        CheckpointCadence(0.0)
