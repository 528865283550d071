"""ModelStore.path_for: only a valid repo id, a 40-hex commit and a relative file inside the store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from outrider.catalogue import ModelStore
from outrider.catalogue.errors import DownloadError, UnsafePathError

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("repo, file, revision", [
    ("org/x", "a.gguf", "/tmp/x/victim"),
    ("org/x", "a.gguf", "../../../.."),
    ("org/x", "a.gguf", "main"),
    ("org/x", "a.gguf", COMMIT + "\n"),
    ("org/x", "../../a.gguf", COMMIT),
    ("org/x", "/etc/passwd", COMMIT),
    ("org/x", "sub/../../../a.gguf", COMMIT),
    ("org/x", "C:evil.gguf", COMMIT),
    ("org/x", "a\\..\\..\\b.gguf", COMMIT),
    ("../x", "a.gguf", COMMIT),
    ("org/..", "a.gguf", COMMIT),
    ("/abs", "a.gguf", COMMIT),
    ("org/a..b", "a.gguf", COMMIT),
])
def test_path_for_refuses_anything_outside_the_store(home: Path, repo: str, file: str, revision: str) -> None:
    store = ModelStore()
    with pytest.raises(UnsafePathError, match="refusing to write outside the model store") as err:
        store.path_for(repo, file, revision)
    assert isinstance(err.value, DownloadError) and isinstance(err.value, ValueError)  # typed, and still a ValueError


def test_path_for_follows_symlinks_out_of_the_store(home: Path, tmp_path: Path) -> None:
    store = ModelStore()
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.root / "org").mkdir()
    os.symlink(outside, store.root / "org" / "x")
    with pytest.raises(UnsafePathError, match="resolves to"):
        store.path_for("org/x", "a.gguf", COMMIT)


def test_path_for_accepts_normal_paths(home: Path) -> None:
    store = ModelStore()
    p = store.path_for("unsloth/Qwen3-8B-GGUF", "sub/dir/Qwen3-8B-Q4_K_M.gguf", COMMIT)
    assert p == store.root / "unsloth" / "Qwen3-8B-GGUF" / COMMIT / "sub" / "dir" / "Qwen3-8B-Q4_K_M.gguf"
