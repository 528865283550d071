"""`outrider ask` stores the reply's speed-up exactly as the engine reported it (measured in that reply)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from outrider.history import HistoryStore, Message

pytestmark = pytest.mark.smollm


def ask(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OUTRIDER_HOME=str(home), PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, "-m", "outrider.cli", "ask", *args], capture_output=True, text=True,
                          env=env, timeout=180, check=False)


def _stored_reply(home: Path, conversation: int) -> Message:
    with HistoryStore.open(home) as store:
        reply = store.get_conversation(conversation).messages[-1]
    assert isinstance(reply, Message) and reply.stats is not None
    return reply


def test_ask_stores_the_engines_speedup_as_reported(tmp_path: Path, smollm_path: Path) -> None:
    r = ask(tmp_path, "List the numbers from one to twenty, separated by commas.", "--target", str(smollm_path),
            "--lookup", "--max-tokens", "48", "--json")
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout.splitlines()[-1])
    st = done["stats"]
    assert "baseline_tps" not in st and st["plain_steps"] >= 1 and st["speedup"] is not None
    stats = _stored_reply(tmp_path, done["conversation"]).stats
    assert stats is not None
    assert (stats.speedup, stats.speedup_low, stats.speedup_high) == (
        st["speedup"], st["speedup_low"], st["speedup_high"])  # bit for bit
    assert stats.decode_tps == st["decode_tps"] and stats.decode_tps  # one name, the engine's, from engine to disk


def test_ask_with_the_draft_off_stores_one_and_prints_it(tmp_path: Path, smollm_path: Path) -> None:
    r = ask(tmp_path, "Say hello.", "--target", str(smollm_path), "--lookup", "--k", "0",
            "--max-tokens", "12")
    assert r.returncode == 0, r.stderr
    assert "speed-up 1.00×" in r.stderr and "measured in this reply" in r.stderr
    with HistoryStore.open(tmp_path) as store:
        (summary,) = store.list_conversations()
    stats = _stored_reply(tmp_path, summary.id).stats
    assert stats is not None and stats.speedup == stats.speedup_low == stats.speedup_high == 1.0
