"""`outrider ask`: one turn through the engine process, stored in the same history as the app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from outrider.history import HistoryStore, MessageStatus


def ask(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OUTRIDER_HOME=str(home), PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "outrider.cli", "ask", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


def test_ask_stores_both_sides_and_continues_a_conversation(tmp_path: Path, smollm_path: Path) -> None:
    r = ask(
        tmp_path,
        "What is 2+2?",
        "--target",
        str(smollm_path),
        "--lookup",
        "--max-tokens",
        "12",
        "--json",
        "--system",
        "Be brief.",
    )
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout.splitlines()[-1])
    conversation = done["conversation"]
    r = ask(
        tmp_path,
        "And 3+3?",
        "--conversation",
        str(conversation),
        "--target",
        str(smollm_path),
        "--lookup",
        "--max-tokens",
        "12",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    with HistoryStore.open(tmp_path) as store:
        messages = store.get_conversation(conversation).messages
    roles = [m.role.value for m in messages]  # type: ignore[union-attr]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    reply = messages[-1]
    assert reply.status == MessageStatus.COMPLETE  # type: ignore[union-attr]
    assert reply.stats is not None and reply.stats.generated and reply.stats.draft_mode == "lookup"  # type: ignore[union-attr]
    steps_text = "".join(json.loads(line)["text"] for line in r.stdout.splitlines()[:-1])
    assert reply.text == steps_text  # type: ignore[union-attr]


def test_engine_crash_keeps_the_question_and_marks_the_reply(tmp_path: Path) -> None:
    from support.bad_models import f64_output

    model = f64_output(tmp_path)  # segfaults at the first decode
    r = ask(tmp_path, "hello there", "--target", str(model), "--max-tokens", "8")
    assert r.returncode == 3
    assert "engine crashed (SIGSEGV) while generating" in r.stderr and "Traceback" not in r.stderr
    with HistoryStore.open(tmp_path) as store:
        (summary,) = store.list_conversations()
        messages = store.get_conversation(summary.id).messages  # type: ignore[union-attr]
    assert [m.text for m in messages if m.role.value == "user"] == ["hello there"]  # type: ignore[union-attr]
    assert messages[-1].status == MessageStatus.INTERRUPTED  # type: ignore[union-attr]
    assert messages[-1].stats.stop_reason == "crashed"  # type: ignore[union-attr]  # not "stopped by the user"


def test_unknown_conversation_is_bad_input(tmp_path: Path, smollm_path: Path) -> None:
    r = ask(tmp_path, "hi", "--conversation", "999", "--target", str(smollm_path), "--lookup")
    assert r.returncode == 2 and "no conversation with id 999" in r.stderr
