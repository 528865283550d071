"""A hostile or broken Hub: path-like ``X-Repo-Commit`` headers, bodies cut short forever, and a download process
whose parent is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.integration.catalogue.conftest import make_manager
from tests.support.fake_hf import FakeHub, payload, wait_for

from outrider.catalogue import DownloadError, FileRequest, ModelStore

REPO = "org/tiny-GGUF"
ROOT = Path(__file__).resolve().parents[3]


def _files_outside(tmp_path: Path, store: ModelStore) -> set[Path]:
    """Every file under tmp_path that is not in the store (the hf home holds no downloads)."""
    root = store.root.resolve()
    return {p for p in tmp_path.rglob("*") if p.is_file() and not p.resolve().is_relative_to(root)}


@pytest.mark.parametrize("header", ["VICTIM", "../../../..", "../../x", "main", "0" * 39 + "/", ""])
def test_hostile_commit_header_cannot_write_outside_the_store(hub: FakeHub, store: ModelStore, tmp_path: Path,
                                                              header: str) -> None:
    data = payload(200_000, 3)
    hub.add(REPO, "tiny.gguf", data)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "tiny.gguf").write_bytes(b"precious, not a model")
    hub.faults.commit_header = str(victim) if header == "VICTIM" else header
    before = _files_outside(tmp_path, store)
    with pytest.raises(DownloadError) as err:  # an unpinned fetch: the folder comes from X-Repo-Commit
        make_manager(store, hub).download_file(FileRequest(REPO, "tiny.gguf")).wait(30)
    assert err.value.kind == "unsafe_path"
    assert "40-hex commit" in err.value.message
    assert (victim / "tiny.gguf").read_bytes() == b"precious, not a model"
    assert _files_outside(tmp_path, store) == before
    assert not [p for p in store.root.rglob("*") if p.is_file() and p.name.startswith("tiny.gguf")]


def test_hostile_commit_header_through_the_cli(hub: FakeHub, home: Path, tmp_path: Path) -> None:
    hub.add(REPO, "tiny.gguf", payload(100_000, 4))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "tiny.gguf").write_bytes(b"precious")
    hub.faults.commit_header = str(victim)
    r = subprocess.run([sys.executable, "-m", "outrider.cli", "models", "fetch", REPO, "tiny.gguf"],
                       env=dict(os.environ), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "refusing to use it as a folder name" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (victim / "tiny.gguf").read_bytes() == b"precious"


def _cdn_gets(hub: FakeHub) -> int:
    return len(hub.gets())


@pytest.mark.parametrize("mode", ["advertise-more-than-sent", "ignore-range-and-cut-short"])
def test_server_cutting_bodies_short_ends_with_a_bounded_error(hub: FakeHub, store: ModelStore, mode: str) -> None:
    data = payload(6 * 256 * 1024, 5)  # whole 256 KiB read chunks: every attempt delivers bytes
    f = hub.add(REPO, "tiny.gguf", data)
    if mode == "advertise-more-than-sent":
        hub.faults.advertise_extra = 100_000  # claims 100 kB more than it sends; a Range past the real end gets 200
        req = FileRequest(REPO, "tiny.gguf")  # size and sha256 from the (lying) server, like `models fetch`
    else:
        hub.faults.ignore_range = True
        hub.faults.cut_at = 900_000
        req = FileRequest(REPO, "tiny.gguf", f.commit, len(data), f.sha256)
    handle = make_manager(store, hub, retries=4, retry_backoff=0.02).download_file(req)
    t0 = time.monotonic()
    try:
        with pytest.raises(DownloadError) as err:
            handle.wait(20)  # before the fix: re-downloads without end (TimeoutError here)
    finally:
        handle.cancel()
    assert time.monotonic() - t0 < 15
    assert err.value.kind == "cut_short", err.value.message
    assert "keeps cutting the download" in err.value.message and err.value.resumable
    assert _cdn_gets(hub) <= 4 + 2  # the first attempt grows the file, then the retry budget (4) runs out
    dest = store.path_for(REPO, "tiny.gguf", f.commit)
    part = store.part_path(dest)
    assert not dest.exists() and part.is_file() and part.stat().st_size > 0  # kept for a resume
    if mode == "ignore-range-and-cut-short":
        assert 0 < part.stat().st_size <= 900_000
        hub.faults.cut_at = None  # the server mends its ways: the next start completes from the kept bytes
        assert make_manager(store, hub).download_file(req).wait(30).read_bytes() == data


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_download_child_dies_with_its_parent(hub: FakeHub, home: Path) -> None:
    hub.add(REPO, "slow.gguf", payload(3_000_000, 6))
    hub.faults.chunk_delay = 0.2  # ~10 s for the whole file
    cli = subprocess.Popen([sys.executable, "-m", "outrider.cli", "models", "fetch", REPO, "slow.gguf", "--json"],
                           env=dict(os.environ), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True)
    child = None
    try:
        assert cli.stdout is not None
        for line in cli.stdout:  # wait for the first progress line: the download child is running
            if '"progress"' in line:
                break
        kids = _children(cli.pid)
        assert len(kids) == 1, kids
        child = kids[0]
        assert _alive(child)
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(10)
        t0 = time.monotonic()
        assert wait_for(lambda: not _alive(child), 5.0), "the download child outlived its parent"
        assert time.monotonic() - t0 < 5.0
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)
