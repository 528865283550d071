"""A hostile ``unsafe_models.json`` (the registry of models that crashed the engine) is ignored, never fatal."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from outrider.worker.registry import UnsafeModels


@pytest.mark.parametrize("content", [
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 100_000 + "1" + "}" * 100_000,
    "[" * 5_000_000,
    '{"x": ' + "[" * 900 + "]" * 900 + "}",
    " " * (5 * 1024 * 1024) + "{}",
    "\xff\xfe not utf-8",
])
def test_hostile_registry_is_ignored_and_replaced(tmp_path: Path, content: str) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    path = tmp_path / "unsafe_models.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape") if content.isascii() else b"\xff\xfe junk")
    reg = UnsafeModels(path)
    t0 = time.monotonic()
    assert reg.reason(model) is None and not reg.is_unsafe(model)
    assert isinstance(reg.entries(), dict)
    reg.mark(model, "SIGSEGV while loading")
    assert reg.reason(model) == "SIGSEGV while loading"
    assert time.monotonic() - t0 < 5
    assert set(json.loads(path.read_text(encoding="utf-8"))) == {str(model.resolve())}


def test_entry_with_a_nested_reason_reads_as_the_default(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    path = tmp_path / "unsafe_models.json"
    path.write_text(json.dumps({str(model.resolve()): {"reason": [[[1]]]}}), encoding="utf-8")
    assert UnsafeModels(path).reason(model) == "it crashed the engine"


def test_entry_with_missing_or_odd_fields_does_not_crash(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    path = tmp_path / "unsafe_models.json"
    path.write_text(json.dumps({str(model.resolve()): {"size": 4, "mtime_ns": {"deep": [1]}}}), encoding="utf-8")
    assert UnsafeModels(path).reason(model) is None  # not the same file any more: judged afresh
