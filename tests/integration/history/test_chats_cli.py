"""``outrider chats …`` end to end, through a real subprocess with ``OUTRIDER_HOME`` in a temp dir."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from outrider.history import HistoryStore, MessageStatus, ReplyStats

CHILD = Path(__file__).with_name("history_child.py")


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUTRIDER_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "outrider.cli", "chats", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_bad_input(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    with HistoryStore.open(home) as store:
        for title, question, answer in (("Geography", "capital of France?", "Paris"), ("Jokes", "a joke", "no")):
            cid = store.create_conversation(title, pair_id="pair-a")
            store.add_user_message(cid, question)
            rid = store.begin_reply(cid)
            store.finish_reply(rid, answer, MessageStatus.COMPLETE, ReplyStats(k_mean=3.5, decode_tps=20.0))
    return home


def test_list_plain_and_json(home: Path) -> None:
    result = run(home, "list")
    assert result.returncode == 0 and "Geography" in result.stdout and "Jokes" in result.stdout
    rows = [json.loads(line) for line in run(home, "list", "--json").stdout.splitlines()]
    assert {r["title"] for r in rows} == {"Geography", "Jokes"} and all(r["message_count"] == 2 for r in rows)


@pytest.mark.parametrize("bad_id", ["999", "abc", "-1"])
def test_bad_id_exits_2_with_one_line(home: Path, bad_id: str) -> None:
    for args in (("export", bad_id, "--format", "md"), ("rename", bad_id, "x"), ("delete", bad_id)):
        assert_bad_input(run(home, *args), "conversation")


def test_export_md_and_json_to_file_and_stdout(home: Path, tmp_path: Path) -> None:
    ids = {r["title"]: r["id"] for r in map(json.loads, run(home, "list", "--json").stdout.splitlines())}
    md = run(home, "export", str(ids["Geography"]), "--format", "md")
    assert md.returncode == 0 and md.stdout.startswith("# Geography") and "mean k 3.5" in md.stdout
    out = tmp_path / "geo.json"
    result = run(home, "export", str(ids["Geography"]), "--format", "json", "-o", str(out))
    assert result.returncode == 0 and result.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["conversations"][0]["messages"][1]["stats"] == {"k_mean": 3.5, "decode_tps": 20.0}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_export_import_round_trip_and_no_duplicates(home: Path, tmp_path: Path) -> None:
    export = tmp_path / "all.json"
    assert run(home, "export", "all", "--format", "json", "-o", str(export)).returncode == 0
    other = tmp_path / "other"
    first = run(other, "import", str(export))
    assert first.returncode == 0 and "imported 2" in first.stdout
    second = run(other, "import", str(export))
    assert second.returncode == 0 and "imported 0" in second.stdout and "skipped 2" in second.stdout
    hits = [json.loads(line) for line in run(other, "search", "Paris", "--json").stdout.splitlines()]
    assert [h["conversation_title"] for h in hits] == ["Geography"]


@pytest.mark.parametrize(("limit", "fragment"), [("0", "must be at least 1, got 0"), ("x", "expected a whole number")])
def test_search_limit_must_be_a_positive_whole_number(home: Path, limit: str, fragment: str) -> None:
    assert_bad_input(run(home, "search", "Paris", "--limit", limit), fragment)


def test_import_bad_file_exits_2(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert_bad_input(run(home, "import", str(bad)), "cannot import")
    assert_bad_input(run(home, "import", str(tmp_path / "missing.json")), "no such file")


def test_rename_delete_restore(home: Path) -> None:
    rows = [json.loads(line) for line in run(home, "list", "--json").stdout.splitlines()]
    cid = str(next(r["id"] for r in rows if r["title"] == "Jokes"))
    assert run(home, "rename", cid, "Puns").returncode == 0
    assert "Puns" in run(home, "list").stdout
    deleted = run(home, "delete", cid)
    assert deleted.returncode == 0 and f"chats restore {cid}" in deleted.stdout
    assert "Puns" not in run(home, "list").stdout
    assert run(home, "search", "joke").stdout == ""
    assert run(home, "restore", cid).returncode == 0
    assert "Puns" in run(home, "list").stdout


def test_unreadable_conversation_is_listed_and_raw_exportable(home: Path) -> None:
    conn = sqlite3.connect(home / "history.sqlite3")
    conn.execute("UPDATE conversations SET settings_json = '{oops' WHERE title = 'Jokes'")
    conn.commit()
    conn.close()
    rows = [json.loads(line) for line in run(home, "list", "--json").stdout.splitlines()]
    bad = next(r for r in rows if r.get("unreadable"))
    assert bad["label"] == "could not be read" and len(rows) == 2
    assert "could not be read" in run(home, "list").stdout
    failed = run(home, "export", str(bad["id"]), "--format", "md")
    assert failed.returncode == 1 and "--raw" in failed.stderr and "Traceback" not in failed.stderr
    raw = run(home, "export", str(bad["id"]), "--raw")
    assert raw.returncode == 0 and json.loads(raw.stdout)["conversation"]["settings_json"] == "{oops"
    everything = run(home, "export", "all", "--format", "json")
    assert everything.returncode == 0 and len(json.loads(everything.stdout)["conversations"]) == 1
    assert "could not be read" in everything.stderr


def test_locked_data_directory_is_refused_clearly(home: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(CHILD), "hold", str(home)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        result = run(home, "list")
        assert result.returncode == 1
        assert "already running with data directory" in result.stderr and "Traceback" not in result.stderr
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_corrupted_database_gives_a_notice_and_a_fresh_history(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "history.sqlite3").write_bytes(b"\0" * 4096 + b"garbage" * 100)
    result = run(home, "list")
    assert result.returncode == 0 and "notice" in result.stderr and ".corrupt-" in result.stderr
    assert len(list(home.glob("history.sqlite3.corrupt-*"))) == 1
    assert run(home, "list").stderr == ""


def test_delete_and_reindex_reach_history_lookups_index(home: Path) -> None:
    """`chats delete` takes the conversation out of the draft index file at once (no engine running) and
    `chats reindex` deletes the files for the engine to rebuild. (Without the store's hook the deleted chat's
    entries stayed in the file.)"""
    from outrider.engine.history_index import HistoryIndex, index_dir_for

    with HistoryStore.open(home) as store:
        db = store.db_path
    index = HistoryIndex.open(index_dir_for(db) / "t.npz")
    index.sync(db, lambda text: [len(w) for w in text.split()])
    assert set(index.conversation_ids.tolist()) == {1, 2}
    assert run(home, "delete", "1").returncode == 0
    assert set(HistoryIndex.open(index.path).conversation_ids.tolist()) == {2}
    result = run(home, "reindex")
    assert result.returncode == 0 and "removed 1 draft index file" in result.stdout, result
    assert not index.path.exists()
