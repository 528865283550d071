"""kill -9 of the real app (``outrider --smoke-test``, offscreen) in the middle of a reply, ten times.

The app checkpoints a streaming reply every second (``CHECKPOINT_INTERVAL_S``: the conversation flow's cadence, asked
on every batch of steps and on the GUI's ``TICK_S`` timer). Watched
from outside through a read-only connection, the stored reply must grow at that cadence while it streams, and a
kill loses at most the last second: the user's message is always there, the reply is kept up to its last
checkpoint (no older than about a second at the kill, however busy the machine), and the file is sound. Breaking
it: with no checkpoint taken while streaming (the timer, then the only trigger, never started), the stored reply
stayed empty while it streamed ("no checkpoint while streaming: stored only at its end").
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outrider.conversation.cadence import CHECKPOINT_INTERVAL_S, TICK_S
from outrider.history import HistoryStore, Message, MessageStatus
from outrider.ui.app import SMOKE_MAX_TOKENS_ENV, SMOKE_MESSAGE_ENV

pytestmark = [pytest.mark.slow, pytest.mark.smollm]

MESSAGE = "Write a long essay about the history of Rome, with many paragraphs."  # SmolLM2: 2,000 tokens
KILLS = 10
# How stale the last checkpoint may be at the kill: the 1 s cadence plus what a loaded 2-core machine adds
# (the store thread's fsync, a descheduled GUI thread). Measured here: at most ~1.3 s under load.
SLACK_S = 1.5
STALE_LIMIT_S = CHECKPOINT_INTERVAL_S + TICK_S + SLACK_S  # the cadence's own bound, plus the machine's


def _streaming_reply(db: Path) -> tuple[str | None, int] | None:
    """The stored text and status of the app's reply, read without taking any lock (None: not there yet)."""
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=0.2)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT text, status FROM messages WHERE role = 'assistant' ORDER BY id DESC").fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return None if row is None else (str(row[1]), len(row[0]))


def _run_and_kill(home: Path, rng: random.Random) -> tuple[int, float, list[float]]:
    """Start the app, kill -9 it a random while after its reply started streaming.

    Returns (characters stored at the kill, seconds since the stored text last grew, gaps between growths)."""
    env = dict(os.environ, OUTRIDER_HOME=str(home), QT_QPA_PLATFORM="offscreen",
               **{SMOKE_MESSAGE_ENV: MESSAGE, SMOKE_MAX_TOKENS_ENV: "2000"})
    app = subprocess.Popen([sys.executable, "-m", "outrider.cli", "--smoke-test"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db = home / "history.sqlite3"
    growths: list[float] = []
    length = 0
    kill_after: float | None = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert app.poll() is None, f"the app ended before the kill: {app.stderr.read() if app.stderr else ''}"
            seen = _streaming_reply(db)
            now = time.monotonic()
            if seen is not None:
                status, n = seen
                assert status == "streaming" or growths, "no checkpoint while streaming: stored only at its end"
                assert status == "streaming", f"the reply ended ({status}) before the kill: make it longer"
                if n > length:
                    length = n
                    growths.append(now)
                    if kill_after is None:
                        kill_after = now + rng.uniform(0.2, 2.5)  # somewhere in the stream, not at a checkpoint
            if kill_after is not None and now >= kill_after:
                break
            time.sleep(0.02)
        else:
            pytest.fail("the reply never reached its first checkpoint")
        os.kill(app.pid, signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        app.kill()
        app.wait(30)
    release_engine(home)
    gaps = [b - a for a, b in itertools.pairwise(growths)]
    return length, killed_at - growths[-1], gaps


def release_engine(home: Path) -> None:
    """The app's engine process dies with its parent; wait until the history's lock is free again."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            HistoryStore.open(home).close()
            return
        except Exception:
            time.sleep(0.2)


def test_kill9_of_the_app_mid_reply_loses_at_most_the_last_second(tmp_path: Path) -> None:
    rng = random.Random(20261201)
    for run in range(KILLS):
        home = tmp_path / f"run-{run}"
        stored, stale_s, gaps = _run_and_kill(home, rng)
        assert stored > 0, f"run {run}: no checkpoint before the kill"
        assert stale_s <= STALE_LIMIT_S, f"run {run}: last checkpoint {stale_s:.2f} s before the kill"
        assert all(gap <= STALE_LIMIT_S for gap in gaps), f"run {run}: gaps {gaps}"
        with HistoryStore.open(home) as store:
            (summary,) = store.list_conversations()
            messages = [m for m in store.get_conversation(summary.id).messages if isinstance(m, Message)]
            assert [m.role for m in messages] == ["user", "assistant"]
            assert messages[0].text == MESSAGE
            reply = messages[1]
            assert reply.status == MessageStatus.INTERRUPTED  # recovered at the next open, its text kept
            assert len(reply.text) >= stored
            check = sqlite3.connect(store.db_path)
            try:
                assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            finally:
                check.close()
