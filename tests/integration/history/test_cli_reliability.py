"""``outrider ask`` / ``chats`` / ``generate`` / ``models`` when the history or its folder is not as expected
a damaged history is reported, a full disk stores all of the question or
nothing, and every bad situation is one line on stderr with exit status 2 (1 for a full disk), never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from outrider.history import HistoryStore

BAD_UTF8 = b"caf\xe9 au lait"  # Latin-1 bytes on a UTF-8 command line: Python sees lone surrogates


def cli(home: Path, *args: str | bytes, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OUTRIDER_HOME=str(home), PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "outrider.cli", *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], code: int, *fragments: str) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def conversations(home: Path) -> list[Any]:
    with HistoryStore.open(home) as store:
        return store.list_conversations()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    with HistoryStore.open(home) as store:
        cid = store.create_conversation("Kept")
        store.add_user_message(cid, "an old question")
    return home


@pytest.fixture
def dummy_model(tmp_path: Path) -> Path:
    """A file where a model is expected (enough for the checks made before the engine starts)."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    return path


# ----------------------------------------------------------------------- item 3: damage is always reported


def test_ask_reports_a_damaged_history_naming_the_kept_file(home: Path, tiny_family: Any) -> None:
    db = home / "history.sqlite3"
    with HistoryStore.open(home) as store:
        for i in range(60):
            store.add_user_message(store.create_conversation(f"c{i}"), "x" * 500)
    os.truncate(db, 20_000)  # `truncate -s 20000 history.sqlite3`
    r = cli(home, "ask", "hello", "--target", str(tiny_family.target), "--lookup", "--max-tokens", "2")
    assert r.returncode == 0, r.stderr
    notices = [line for line in r.stderr.splitlines() if line.startswith("outrider: notice:")]
    assert len(notices) == 1, r.stderr
    (kept,) = home.glob("history.sqlite3.corrupt-*")
    assert str(kept) in notices[0] and "recovered" in notices[0]


# --------------------------------------------------------------------------------- item 5: disk full


class _NoReplyEngine:
    def run(self, request: Any) -> Iterator[Any]:
        return iter(())

    def close(self) -> None:
        pass


def test_ask_on_a_full_disk_keeps_nothing_half_done_and_says_disk_full(
    home: Path, dummy_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Simulated ENOSPC (SQLite's max_page_count: "database or disk is full"), in process."""
    from outrider import cli as cli_module
    from outrider.commands import ask as ask_module

    original = HistoryStore.open.__func__  # type: ignore[attr-defined]

    def full_disk_open(cls: type[HistoryStore], *args: Any, **kwargs: Any) -> HistoryStore:
        store: HistoryStore = original(cls, *args, **kwargs)
        pages = store._db.conn.execute("PRAGMA page_count").fetchone()[0]
        store._db.conn.execute(f"PRAGMA max_page_count = {pages}")
        return store

    monkeypatch.setenv("OUTRIDER_HOME", str(home))
    monkeypatch.setattr(HistoryStore, "open", classmethod(full_disk_open))
    monkeypatch.setattr(ask_module, "open_engine", lambda args: _NoReplyEngine())
    code = cli_module.main(["ask", "q" * 100_000, "--system", "Be brief.", "--target", str(dummy_model)])
    err = capsys.readouterr().err
    assert code == 1
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("outrider: error: disk full:"), err
    assert "disk I/O error" not in err and "Traceback" not in err
    monkeypatch.undo()
    assert [c.title for c in conversations(home)] == ["Kept"]  # no empty conversation left behind


@contextlib.contextmanager
def tiny_tmpfs(where: Path, size_kib: int) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_ask_on_a_really_full_disk_stores_all_or_nothing(tmp_path: Path, tiny_family: Any) -> None:
    """Real ENOSPC: the history on a tiny tmpfs filled up to the last few KiB."""
    with tiny_tmpfs(tmp_path / "small", 2048) as mount:
        home = mount / "home"
        with HistoryStore.open(home) as store:
            store.create_conversation("Kept")
        free = shutil.disk_usage(mount).free
        (mount / "filler").write_bytes(b"\0" * (free - 48 * 1024))
        r = cli(home, "ask", "q" * 120_000, "--target", str(tiny_family.target), "--lookup", "--max-tokens", "2")
        line = assert_one_line(r, 1, "disk full:")
        assert "disk I/O error" not in line
        (mount / "filler").unlink()
        assert [c.title for c in conversations(home)] == ["Kept"]


# --------------------------------------------------------------------- clear errors: one line, exit 2


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make one file read-only even for root (a read-only bind mount of the file), else by its mode."""
    if os.geteuid() != 0:
        os.chmod(path, 0o444)
        try:
            yield
        finally:
            os.chmod(path, 0o600)
        return
    if subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True).returncode != 0:
        pytest.skip("root ignores file modes and cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield
    finally:
        subprocess.run(["umount", str(path)], check=False)


def test_read_only_history_is_one_line_exit_2(home: Path, dummy_model: Path) -> None:
    db = home / "history.sqlite3"
    with read_only(db):
        assert_one_line(cli(home, "chats", "list"), 2, "read-only", str(db))
        assert_one_line(cli(home, "ask", "hi", "--target", str(dummy_model)), 2, "read-only")
    assert [c.title for c in conversations(home)] == ["Kept"]


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_outrider_home_that_cannot_be_a_folder_is_one_line_exit_2(tmp_path: Path, kind: str) -> None:
    a_file = tmp_path / "afile"
    a_file.write_text("not a folder")
    home = a_file if kind == "a file" else a_file / "sub"
    for args in (("chats", "list"), ("models", "list"), ("generate", "--target", str(a_file), "--prompt", "hi")):
        assert_one_line(cli(home, *args), 2, "cannot use the data directory", str(home))


def test_text_that_is_not_utf8_is_one_line_exit_2(home: Path, dummy_model: Path) -> None:
    target = ("--target", str(dummy_model))
    assert_one_line(cli(home, "ask", BAD_UTF8, *target), 2, "the message is not valid UTF-8")
    assert_one_line(cli(home, "ask", "hi", "--system", BAD_UTF8, *target), 2, "system prompt", "not valid UTF-8")
    assert_one_line(cli(home, "chats", "rename", "1", BAD_UTF8), 2, "the title is not valid UTF-8")
    assert [c.title for c in conversations(home)] == ["Kept"]


@pytest.mark.parametrize(
    "text",
    [
        '{"format": "outrider-history", "format_version": 1, "conversations": [{"uuid": "u", "title": "\\ud83d", '
        '"created_at": 1, "updated_at": 1, "messages": []}]}',
        '{"format": "outrider-history", "format_version": 1, "conversations": [], "x": ' + "[" * 200_000,
    ],
    ids=["lone-surrogate", "deep-nesting"],
)
def test_import_of_unstorable_text_is_one_line_exit_2(home: Path, tmp_path: Path, text: str) -> None:
    path = tmp_path / "export.json"
    path.write_text(text, encoding="utf-8")
    assert_one_line(cli(home, "chats", "import", str(path)), 2, "cannot import")
    assert [c.title for c in conversations(home)] == ["Kept"]


def test_ask_checks_its_options_before_creating_a_conversation(home: Path, tmp_path: Path, tiny_family: Any) -> None:
    model = ("--target", str(tiny_family.target), "--lookup")
    assert_one_line(cli(home, "ask", "hi", *model, "--max-tokens", "0"), 2, "max tokens")
    assert_one_line(cli(home, "ask", "hi", "--target", str(tmp_path / "missing.gguf")), 2, "file not found")
    assert [c.title for c in conversations(home)] == ["Kept"]
    conn = sqlite3.connect(home / "history.sqlite3")
    try:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
    finally:
        conn.close()


def test_chats_import_still_works_after_the_checks(home: Path, tmp_path: Path) -> None:
    export = tmp_path / "all.json"
    assert cli(home, "chats", "export", "all", "--format", "json", "-o", str(export)).returncode == 0
    doc = json.loads(export.read_text(encoding="utf-8"))
    assert [c["title"] for c in doc["conversations"]] == ["Kept"]
    r = cli(tmp_path / "other", "chats", "import", str(export))
    assert r.returncode == 0 and "imported 1" in r.stdout
