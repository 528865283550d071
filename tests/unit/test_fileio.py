"""The one atomic writer (``outrider.fileio``): unique temp file, fsync, replace, directory fsync, 0600 by default."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from outrider import crash, fileio
from outrider.catalogue.store import write_json_atomic
from outrider.worker.registry import UnsafeModels

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_fsyncs_the_file_then_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(fileio.os, "fsync", spy)
    target = tmp_path / "export.md"
    fileio.atomic_write_text(target, "hello")
    assert target.read_text() == "hello"
    assert synced == (["file", "dir"] if os.name == "posix" else ["file"])
    assert [p.name for p in tmp_path.iterdir()] == ["export.md"]


def test_a_file_another_writer_made_is_fsynced_by_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file", os.fstat(fd).st_ino))
        real_fsync(fd)

    monkeypatch.setattr(fileio.os, "fsync", spy)
    made = tmp_path / "backup.sqlite3"
    made.write_bytes(b"SQLite format 3\0")
    fileio.fsync_file(made)
    assert synced == [("file", made.stat().st_ino)]
    with pytest.raises(FileNotFoundError):
        fileio.fsync_file(tmp_path / "gone")


@posix_only
def test_files_are_private_unless_a_mode_is_given(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        fileio.atomic_write_text(tmp_path / "private.json", "{}")
        fileio.atomic_write_bytes(tmp_path / "shared.md", b"# report\n", mode=0o644)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "private.json") == 0o600
    assert _mode(tmp_path / "shared.md") == 0o644


def test_a_failed_replace_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "settings.json"
    fileio.atomic_write_text(target, "old")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "replace", broken_replace)
    with pytest.raises(OSError):
        fileio.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_concurrent_writers_never_share_a_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "cache.json"
    texts = [json.dumps({"writer": i, "pad": "x" * 50_000}) for i in range(8)]
    errors: list[BaseException] = []

    def write(text: str) -> None:
        try:
            for _ in range(10):
                fileio.atomic_write_text(target, text)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_text() in texts  # one writer's whole text, never a mix
    assert [p.name for p in tmp_path.iterdir()] == ["cache.json"]


def test_missing_parent_folders_are_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "x.json"
    fileio.atomic_write_json(target, {"k": [1, 2]}, indent=None)
    assert json.loads(target.read_text()) == {"k": [1, 2]}


@posix_only
def test_registry_catalogue_records_and_crash_marker_use_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[str] = []
    real = fileio.atomic_write_bytes

    def spy(path: Path, data: bytes, *, mode: int = fileio.PRIVATE_FILE_MODE) -> None:
        written.append(Path(path).name)
        real(path, data, mode=mode)

    monkeypatch.setattr(fileio, "atomic_write_bytes", spy)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    UnsafeModels(tmp_path / "unsafe_models.json").mark(model, "SIGSEGV while loading")
    write_json_atomic(tmp_path / "m.gguf.outrider.json", {"sha256": "0" * 64})
    crash._write_marker(tmp_path, tmp_path / "report.txt")
    assert written == ["unsafe_models.json", "m.gguf.outrider.json", crash.MARKER_NAME]
    for name in written:
        assert _mode(tmp_path / name) == 0o600, name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*written, "m.gguf"])  # no temp files left
