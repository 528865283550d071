"""Self-drafts in the model store (``catalogue/selfdraft.py``): a real build (llama.cpp in the build process) is
stored with its provenance and found again for its target; a cancelled build, a full disk and a target that
cannot be cut each end with a clear error and leave nothing half-written in the store."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from outrider.catalogue import ModelStore
from outrider.catalogue import selfdraft as selfdraft_module
from outrider.catalogue.selfdraft import SelfDraftBuild, SelfDraftEvent, neutral_prompts, preview
from outrider.engine.llama.gguf_header import read_header
from outrider.engine.selfdraft import DraftType, SelfDraftError
from support.tiny_gguf import Family, TinyShape, build_vocab, random_weights, write_gguf

WAIT_S = 600  # a build takes seconds; the limit is for a loaded 2-core machine, never reached when it works
PROMPTS = ("the model is fast", "hello world")


def _leftovers(store: ModelStore) -> list[Path]:
    """Everything under the self-drafts folder that is not a finished draft with its record."""
    root = store.self_drafts_root
    if not root.exists():
        return []
    out = []
    for p in root.rglob("*"):
        if p.is_dir():
            if p.name.startswith(".build-"):
                out.append(p)
            continue
        if p.name.endswith(".gguf") and store.record_path(p).is_file():
            continue
        if p.name.endswith(".gguf.outrider.json") and p.with_name(p.name.removesuffix(".outrider.json")).is_file():
            continue
        out.append(p)
    return out


def _drafts(store: ModelStore) -> list[Path]:
    return sorted(store.self_drafts_root.rglob("*.gguf")) if store.self_drafts_root.exists() else []


def test_a_self_draft_is_stored_with_its_provenance_and_found_again_for_its_target(
        store: ModelStore, tiny_family: Family) -> None:
    """Breaking the record's provenance (no ``keep``) made ``self_drafts_of`` find nothing."""
    events: list[SelfDraftEvent] = []
    plan = preview(store, tiny_family.target, "auto", DraftType.Q8_0)
    assert plan.auto and plan.memory.total > plan.memory.target_weights
    result = SelfDraftBuild(store, plan, PROMPTS, calibration="test", on_event=events.append,
                            max_tokens=16, threads=1).wait(WAIT_S)
    header = read_header(result.path)
    assert header.arch_value("block_count") == len(result.record.keep)
    assert {e.stage for e in events} >= {"hash", "build", "calibrate"}
    assert len(result.measures) == len(plan.plans), "every candidate was measured"
    assert all(m["drafted"] > 0 for m in result.measures)
    chosen = result.measures[0]
    assert chosen["predicted_speedup"] == max(m["predicted_speedup"] for m in result.measures)
    assert list(result.record.keep) == chosen["keep"]
    found = store.self_drafts_of(tiny_family.target)
    assert [r.path for r in found] == [result.path]
    record = found[0]
    assert record.target_sha256 == store.file_sha256(tiny_family.target)
    assert record.draft_type == "q8_0" and record.calibration == "test"
    assert record.acceptance == pytest.approx(chosen["acceptance"])
    assert store.self_drafts_of(tiny_family.draft) == [], "another model has no self-draft"
    assert _leftovers(store) == []
    assert result.path.stat().st_size <= plan.draft_bytes * 1.05, "the size shown before is the largest candidate"


def test_an_explicit_layer_list_builds_exactly_those_blocks(store: ModelStore, tiny_family: Family) -> None:
    """Without ``prune_layers`` in the quantiser's parameters, llama.cpp wrote all four blocks."""
    plan = preview(store, tiny_family.target, "0,3", DraftType.Q4_0)
    result = SelfDraftBuild(store, plan, PROMPTS[:1], max_tokens=8, threads=1).wait(WAIT_S)
    assert result.record.keep == (0, 3)
    assert result.record.draft_type == "q4_0"
    assert abs(result.path.stat().st_size - plan.draft_bytes) < 0.05 * plan.draft_bytes + 4096
    assert read_header(result.path).arch_value("block_count") == 2


def _no_blocks(path: Path) -> Path:
    shape = TinyShape(n_layer=4, n_embd=64, n_head=2, n_ff=128)
    vocab = build_vocab()
    w = {k: v for k, v in random_weights(shape, len(vocab[0]), 0).items() if not k.startswith("blk.")}
    return write_gguf(path, w, shape, vocab)


@pytest.mark.parametrize("case", ["not_gguf", "too_few_layers", "no_blocks", "truncated"])
def test_a_target_that_cannot_be_cut_is_refused_before_anything_is_written(
        store: ModelStore, tiny_family: Family, tmp_path: Path, case: str) -> None:
    if case == "not_gguf":
        target = tmp_path / "notes.gguf"
        target.write_text("not a model")
    elif case == "too_few_layers":
        target = tiny_family.draft  # one block
    elif case == "no_blocks":
        target = _no_blocks(tmp_path / "vocab-only.gguf")
    else:
        target = tmp_path / "cut.gguf"
        target.write_bytes(tiny_family.target.read_bytes()[:100_000])
    with pytest.raises(SelfDraftError) as info:
        preview(store, target)
    expected = "not_gguf" if case == "truncated" else case
    assert info.value.kind == expected
    assert target.name in str(info.value)
    assert _drafts(store) == [] and _leftovers(store) == []


def test_a_cancelled_build_leaves_nothing_and_ends_its_process(store: ModelStore, smollm_path: Path) -> None:
    """Cancel while llama.cpp works in the build process. Breaking ``cancel`` (no terminate) left the build
    running: it had not ended 60 s later."""
    started = threading.Event()

    def on_event(ev: SelfDraftEvent) -> None:
        if ev.stage in ("build", "calibrate"):
            started.set()

    plan = preview(store, smollm_path, "auto")
    build = SelfDraftBuild(store, plan, neutral_prompts(), on_event=on_event, threads=1)
    assert started.wait(WAIT_S), "the build never started"
    proc = build._proc
    assert proc is not None and proc.poll() is None
    build.cancel()
    with pytest.raises(SelfDraftError) as info:
        build.wait(60)  # a cancel ends the build in well under a second; a build left running takes minutes
    assert info.value.kind == "cancelled"
    assert "nothing was kept" in str(info.value)
    assert proc.poll() is not None, "the build process still runs"
    assert _drafts(store) == [] and _leftovers(store) == []


def test_a_disk_that_fills_up_while_llama_cpp_writes_the_draft(store: ModelStore, tiny_family: Family) -> None:
    """The build process may write at most 200 kB per file (RLIMIT_FSIZE: writes beyond fail as on a full disk,
    inside llama.cpp's own writer). Without the errno check the error said only "iostream error"."""
    plan = preview(store, tiny_family.target, "0,3")
    build = SelfDraftBuild(store, plan, PROMPTS, fsize_limit=200_000, threads=1)
    with pytest.raises(SelfDraftError) as info:
        build.wait(WAIT_S)
    assert info.value.kind == "disk_full", info.value
    assert "disk" in str(info.value)
    assert _drafts(store) == [] and _leftovers(store) == []


def test_a_disk_that_fills_up_while_the_draft_is_recorded(store: ModelStore, tiny_family: Family,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The last write (the record) fails with ENOSPC: the draft just moved into place is removed again, so the
    store never holds a draft without its provenance (without that removal, the draft stayed, unrecorded)."""
    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(store.self_drafts_root / "x.outrider.json"))

    monkeypatch.setattr(store, "write_record", full)
    plan = preview(store, tiny_family.target, "0,3")
    with pytest.raises(SelfDraftError) as info:
        SelfDraftBuild(store, plan, PROMPTS[:1], max_tokens=8, threads=1).wait(WAIT_S)
    assert info.value.kind == "disk_full"
    assert "the disk is full" in str(info.value) and "Errno" not in str(info.value)
    assert _drafts(store) == [] and _leftovers(store) == []


def test_too_little_free_space_is_said_before_building(store: ModelStore, tiny_family: Family,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = selfdraft_module.shutil.disk_usage

    def tiny_disk(path: object) -> object:
        usage = real(path)  # type: ignore[arg-type]
        return type(usage)(usage.total, usage.total - 1000, 1000)

    monkeypatch.setattr(selfdraft_module.shutil, "disk_usage", tiny_disk)
    with pytest.raises(SelfDraftError) as info:
        preview(store, tiny_family.target)
    assert info.value.kind == "disk_full"
    assert "needs" in str(info.value) and "free" in str(info.value)


def test_a_scratch_folder_of_a_killed_build_is_removed_by_the_next(store: ModelStore, tiny_family: Family) -> None:
    """A folder named after a process that is gone goes; one of a live process stays."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = store.self_drafts_root / f".build-{dead.pid}-abc"
    stale.mkdir(parents=True)
    (stale / "candidate-0.gguf").write_bytes(b"half")
    mine = store.self_drafts_root / f".build-{os.getpid()}-live"
    mine.mkdir()
    selfdraft_module.remove_stale_builds(store)
    assert not stale.exists()
    assert mine.exists(), "a folder of a live process is kept"
    mine.rmdir()


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outrider", "models", *args], capture_output=True, text=True,
                          env=env, timeout=WAIT_S, stdin=subprocess.DEVNULL)


def test_the_command_prints_the_path_last_and_json_on_request(home: Path, tiny_family: Family,
                                                             tmp_path: Path) -> None:
    env = {**os.environ, "OUTRIDER_HOME": str(home)}
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(list(PROMPTS)))
    plain = _cli("self-draft", "--target", str(tiny_family.target), "--layers", "0,3", "--calibrate",
                 str(prompts), "--tokens", "8", "--threads", "1", env=env)
    assert plain.returncode == 0, plain.stderr
    last = plain.stdout.strip().splitlines()[-1]
    assert Path(last).is_file() and Path(last).is_relative_to(home)
    assert "memory" in plain.stderr, "the memory the pair needs is shown before building"
    out = tmp_path / "out" / "mine.gguf"
    js = _cli("self-draft", "--target", str(tiny_family.target), "--layers", "auto", "--type", "q4_0",
              "--calibrate", str(prompts), "--tokens", "8", "--threads", "1", "--out", str(out), "--json", env=env)
    assert js.returncode == 0, js.stderr
    obj = json.loads(js.stdout)
    assert obj["path"] == str(out) and out.is_file()
    assert Path(obj["store_path"]).is_file()
    assert obj["layers_kept"][0] == 0 and obj["type"] == "q4_0"
    assert 0.0 <= obj["acceptance"] <= 1.0 and obj["chosen"]["drafted"] > 0
    # a draft not predicted to pay off is said so (on a loaded machine tiny models rarely do)
    assert ("no layer subset is predicted to be faster" in js.stderr) == (obj["predicted_speedup"] < 1.0)
    assert read_header(out).arch_value("block_count") == len(obj["layers_kept"])

    bad = _cli("self-draft", "--target", str(tiny_family.target), "--layers", "0-9", env=env)
    assert bad.returncode == 2 and "block 9 does not exist" in bad.stderr
    bad = _cli("self-draft", "--target", str(tiny_family.target), "--calibrate", str(tmp_path / "no.json"),
               env=env)
    assert bad.returncode == 2 and "cannot read" in bad.stderr


def test_deleting_a_target_offers_to_delete_its_self_drafts(home: Path, tiny_family: Family) -> None:
    """A target in the store, with a self-draft: without a choice the command refuses and names the draft;
    ``--with-drafts`` deletes both, ``--keep-drafts`` keeps the draft."""
    env = {**os.environ, "OUTRIDER_HOME": str(home)}
    store = ModelStore(home / "models")
    for keep in (False, True):
        target = store.root / "me" / "tiny" / ("a" * 40) / "tiny-target.gguf"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(tiny_family.target.read_bytes())
        store.verify_path(target, None)
        build = SelfDraftBuild(store, preview(store, target, "0,3"), PROMPTS[:1], max_tokens=8, threads=1)
        draft = build.wait(WAIT_S).path
        asked = _cli("delete", str(target), env=env)
        assert asked.returncode == 2 and str(draft) in asked.stderr and "--with-drafts" in asked.stderr
        assert target.is_file(), "nothing is deleted without an answer"
        done = _cli("delete", str(target), "--keep-drafts" if keep else "--with-drafts", "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert not target.exists() and not store.record_path(target).exists()
        assert draft.is_file() == keep
    outside = _cli("delete", str(tiny_family.target), "--with-drafts", env=env)
    assert outside.returncode == 2 and "deletes only files it installed" in outside.stderr
    assert tiny_family.target.is_file()


def test_the_command_calibrates_on_the_users_own_prompts(home: Path, tiny_family: Family) -> None:
    """Without --calibrate: the history's recent prompts; with the history locked (the app is running), the
    bundled prompts, said on stderr. Breaking ``calibration_prompts`` to skip the history made it "bundled"."""
    from outrider.history import HistoryStore

    env = {**os.environ, "OUTRIDER_HOME": str(home)}
    args = ("self-draft", "--target", str(tiny_family.target), "--layers", "0,3", "--tokens", "4", "--threads", "1",
            "--json")
    with HistoryStore.open(home) as history:
        history.start_conversation("t", "the model is fast")
        locked = _cli(*args, env=env)  # the history is open here: another process cannot read it
    assert locked.returncode == 0, locked.stderr
    assert json.loads(locked.stdout)["calibration"] == "bundled"
    assert "the chat history cannot be read" in locked.stderr
    mine = _cli(*args, env=env)
    assert mine.returncode == 0, mine.stderr
    assert json.loads(mine.stdout)["calibration"] == "history"
    assert "1 prompt(s) (history)" in mine.stderr
