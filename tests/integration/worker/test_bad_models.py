"""The bad-model corpus: each file gives its specific message, the app process survives, the next load works."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from worker_helpers import assert_good_load_works, family_spec, generate_text, good_spec

from outrider.worker.client import EngineClient
from outrider.worker.errors import EngineCrashed, EngineRequestError
from outrider.worker.registry import UnsafeModels
from support import bad_models
from support.tiny_gguf import Family

# name -> (error kind, words the message must contain)
EXPECTED: dict[str, tuple[str, str]] = {
    "empty": ("not_gguf", "empty.gguf is not a GGUF file"),
    "random_bytes": ("not_gguf", "is not a GGUF file"),
    "wrong_magic": ("not_gguf", "fugg.gguf is not a GGUF file"),
    "png_renamed": ("not_gguf", "picture.gguf is not a GGUF file"),
    "zip_renamed": ("not_gguf", "archive.gguf is not a GGUF file"),
    "html_renamed": ("not_gguf", "download.gguf is not a GGUF file"),
    "future_version": ("bad_version", "unsupported GGUF version 99"),
    "header_only": ("incomplete", "file is incomplete:"),
    "truncated_header": ("truncated_header", "file is incomplete"),
    "truncated_data": ("incomplete", "file is incomplete:"),
    "unsupported_arch": ("unsupported_arch", "unsupported model architecture 'xyzformer'"),
    "huge_alignment": ("bad_metadata", "invalid general.alignment"),
    "a_directory": ("is_directory", "is a directory, not a model file"),
    "missing": ("missing", "file not found"),
}


@pytest.fixture(scope="module")
def corpus(corpus_dir: Path, good_model: Path) -> dict[str, Path]:
    return bad_models.build_corpus(corpus_dir, good_model)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_file_gives_its_specific_message(
    name: str, corpus: dict[str, Path], client: EngineClient, good_model: Path
) -> None:
    kind, words = EXPECTED[name]
    pid = client.pid if client.running else None
    with pytest.raises(EngineRequestError) as info:
        client.load(good_spec(corpus[name]))
    assert info.value.kind == kind, info.value
    assert words in str(info.value)
    assert "Failed to load model from file" not in str(info.value)
    if pid is not None:
        assert client.pid == pid, "a refused file must not cost the engine process"
    assert_good_load_works(client, good_model)


def test_incomplete_file_reports_sizes(corpus: dict[str, Path], client: EngineClient) -> None:
    size = corpus["truncated_data"].stat().st_size
    with pytest.raises(EngineRequestError, match=rf"file is incomplete: {size} of \d+ bytes"):
        client.load(good_spec(corpus["truncated_data"]))


@pytest.mark.parametrize("name", ["absurd_block_count", "absurd_context"])
def test_absurd_metadata_is_refused_or_contained(
    name: str, corpus: dict[str, Path], client: EngineClient, good_model: Path
) -> None:
    """llama.cpp may refuse these or die on them; either way the app lives and says which file it was."""
    try:
        client.load(good_spec(corpus[name]))
    except EngineRequestError as exc:
        assert corpus[name].name in str(exc) or exc.kind != "load_failed"
    except EngineCrashed as exc:
        assert str(exc).startswith("engine crashed (SIG") and str(exc).endswith(f"while loading {corpus[name].name}")
        assert client.unsafe_models.is_unsafe(corpus[name])
    else:
        pytest.fail(f"{name} loaded")
    assert_good_load_works(client, good_model)


def test_unreadable_file(corpus_dir: Path, good_model: Path, client: EngineClient) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod 000 does not stop reads (covered by test_permission_precheck)")
    path = bad_models.unreadable(corpus_dir, good_model)
    with pytest.raises(EngineRequestError, match="no permission to read") as info:
        client.load(good_spec(path))
    assert info.value.kind == "permission"


def test_permission_precheck(good_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's pre-check (run in the engine process before llama.cpp sees the file) names the problem."""
    from outrider.engine.llama import gguf_header

    monkeypatch.setattr(gguf_header.os, "access", lambda *_a, **_k: False)
    with pytest.raises(gguf_header.GGUFHeaderError, match="no permission to read") as info:
        gguf_header.read_header(good_model)
    assert info.value.kind == "permission"


def test_incompatible_draft(tiny_family: Family, client: EngineClient, good_model: Path) -> None:
    with pytest.raises(EngineRequestError) as info:
        client.load(family_spec(tiny_family, "incompatible"))
    assert info.value.kind == "incompatible_pair"
    assert "draft vocabulary" in str(info.value)
    client.load(family_spec(tiny_family))  # the compatible draft of the same family is accepted
    generate_text(client)
    info = client.load(family_spec(tiny_family, "incompatible"), draft_fallback=True)  # chat goes on, no draft
    assert info.draft is None and info.draft_mode == "none"
    assert info.notes[0].startswith("draft model not compatible — running without draft")
    generate_text(client)


def test_duplicated_token_aborts_at_load(
    corpus_dir: Path, client: EngineClient, good_model: Path, outrider_home: Path
) -> None:
    path = bad_models.duplicated_token(corpus_dir)
    with pytest.raises(EngineCrashed) as info:
        client.load(good_spec(path))
    crash = info.value
    assert str(crash) == "engine crashed (SIGABRT) while loading dup-token.gguf"
    assert crash.phase == "loading" and crash.cause == "SIGABRT"
    assert crash.log_tail, "the crash report carries the engine's log tail"
    assert crash.log_path and os.path.exists(crash.log_path)
    # remembered as unsafe (in the registry file, so across restarts) and refused for automatic loads
    assert UnsafeModels().is_unsafe(path)
    assert (outrider_home / "unsafe_models.json").exists()
    with pytest.raises(EngineRequestError) as refused:
        client.load(good_spec(path), refuse_unsafe=True)
    assert refused.value.kind == "unsafe_model"
    assert_good_load_works(client, good_model)  # a fresh engine process starts at once


def test_f64_output_segfaults_at_first_decode(corpus_dir: Path, client: EngineClient, good_model: Path) -> None:
    path = bad_models.f64_output(corpus_dir)
    client.load(good_spec(path))
    with pytest.raises(EngineCrashed) as info:
        generate_text(client)
    assert str(info.value) == "engine crashed (SIGSEGV) while generating"
    assert not client.unsafe_models.is_unsafe(path), "only crashes during load mark a model unsafe"
    assert_good_load_works(client, good_model)


def test_stuck_load_times_out(tmp_path: Path, client: EngineClient, good_model: Path) -> None:
    """A FIFO named .gguf blocks the open() forever: the load is stopped, the process replaced."""
    fifo = tmp_path / "stuck.gguf"
    os.mkfifo(fifo)
    from outrider.worker.errors import EngineStuck

    with pytest.raises(EngineStuck, match=r"loading stuck.gguf did not finish within 1\.5 s"):
        client.load(good_spec(fifo), timeout=1.5)
    assert_good_load_works(client, good_model)
