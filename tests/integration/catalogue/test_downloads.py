"""Downloads against the fake Hub: resume, Range faults, corruption, gated/404, stall, cancel, concurrency,
disk full."""

from __future__ import annotations

import os
import signal
import time

import pytest
from tests.integration.catalogue.conftest import make_manager
from tests.support.fake_hf import FakeHub, payload, wait_for

from outrider.catalogue import (
    CancelledError,
    CorruptedError,
    DiskFullError,
    DownloadError,
    DownloadEvent,
    FileRequest,
    GatedError,
    MismatchError,
    ModelStore,
    NetworkError,
    NotFoundError,
    ServerError,
    UnauthorizedError,
)

REPO = "org/tiny-GGUF"
SIZE = 1_500_000


def _add(hub: FakeHub, name: str = "tiny.gguf", size: int = SIZE, seed: int = 0) -> tuple[bytes, FileRequest]:
    data = payload(size, seed)
    f = hub.add(REPO, name, data)
    return data, FileRequest(REPO, name, f.commit, size, f.sha256)


def _ranges(hub: FakeHub) -> list[str | None]:
    return [r[2] for r in hub.gets()]


def test_drops_at_several_offsets_then_resumes(hub: FakeHub, store: ModelStore) -> None:
    data, req = _add(hub)
    hub.faults.drop_at = [300_000, 700_000, 1_100_000]
    events: list[DownloadEvent] = []
    path = make_manager(store, hub).download_file(req, events.append).wait(30)
    assert path.read_bytes() == data
    assert path == store.path_for(REPO, req.file, req.revision)
    assert sum(1 for r in _ranges(hub) if r and r.startswith("bytes=") and r != "bytes=0-") >= 2
    assert [e.type for e in events][-1] == "done"
    assert any(e.type == "progress" and e.total == SIZE for e in events)
    assert not store.part_path(path).exists()
    assert store.recorded_sha256(path) == req.sha256


def test_server_ignoring_range_restarts_from_zero(hub: FakeHub, store: ModelStore) -> None:
    data, req = _add(hub)
    hub.faults.drop_at = [600_000]
    hub.faults.ignore_range = True
    path = make_manager(store, hub).download_file(req).wait(30)
    assert path.read_bytes() == data
    assert any(r for r in _ranges(hub))  # a Range was asked for and answered with 200


def test_416_inside_file_restarts_and_416_at_end_completes(hub: FakeHub, store: ModelStore) -> None:
    data, req = _add(hub)
    hub.faults.drop_at = [600_000]
    hub.faults.range_416_once = True
    path = make_manager(store, hub).download_file(req).wait(30)
    assert path.read_bytes() == data
    # a complete .part answered with 416 is verified and installed
    data2, req2 = _add(hub, "b.gguf", 200_000, seed=2)
    dest = store.path_for(REPO, "b.gguf", req2.revision)
    dest.parent.mkdir(parents=True, exist_ok=True)
    store.part_path(dest).write_bytes(data2)
    (store.part_path(dest).with_name(dest.name + ".part.json")).write_text(
        f'{{"repo": "{REPO}", "file": "b.gguf", "size": 200000, "sha256": "{req2.sha256}", "git_sha1": null}}')
    assert make_manager(store, hub).download_file(req2).wait(30).read_bytes() == data2


def test_same_size_corruption_is_quarantined(hub: FakeHub, store: ModelStore) -> None:
    _, req = _add(hub)
    hub.faults.corrupt = True
    with pytest.raises(CorruptedError, match="downloaded file is corrupted — download again"):
        make_manager(store, hub).download_file(req).wait(30)
    dest = store.path_for(REPO, req.file, req.revision)
    assert not dest.exists() and not store.part_path(dest).exists()
    assert len(list(store.quarantine_dir.iterdir())) == 1


def test_gated_not_found_and_server_errors(hub: FakeHub, store: ModelStore,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _, req = _add(hub)
    m = make_manager(store, hub, retries=1)
    hub.faults.repo_status[REPO] = (401, "GatedRepo")
    with pytest.raises(GatedError, match="log in") as e1:
        m.download_file(req).wait(30)
    assert e1.value.url == f"{hub.endpoint}/{REPO}"
    hub.faults.repo_status[REPO] = (403, "GatedRepo")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token_value")
    events: list[DownloadEvent] = []
    with pytest.raises(GatedError, match="not approved") as e2:
        make_manager(store, hub).download_file(req, events.append).wait(30)
    assert "hf_secret_token_value" not in str(e2.value) and "hf_secret" not in repr([e.to_json() for e in events])
    hub.faults.repo_status[REPO] = (401, "InvalidCredentials")
    with pytest.raises(UnauthorizedError, match="token was rejected"):
        make_manager(store, hub).download_file(req).wait(30)
    monkeypatch.delenv("HF_TOKEN")
    hub.faults.repo_status.clear()
    with pytest.raises(NotFoundError):
        m.download_file(FileRequest(REPO, "missing.gguf", req.revision, 10, "0" * 64)).wait(30)
    with pytest.raises(NotFoundError):
        m.download_file(FileRequest("org/nope", "x.gguf", req.revision, 10, "0" * 64)).wait(30)
    hub.faults.get_status = [500, 500, 500]
    with pytest.raises(ServerError):
        make_manager(store, hub, retries=1).download_file(req).wait(30)


def test_stall_times_out_keeps_part_and_resumes(hub: FakeHub, store: ModelStore) -> None:
    data, req = _add(hub)
    hub.faults.stall_at = 500_000
    hub.faults.stall_seconds = 3.0
    t0 = time.monotonic()
    with pytest.raises(NetworkError) as err:
        make_manager(store, hub, read_timeout=0.5, retries=0).download_file(req).wait(30)
    assert err.value.resumable and time.monotonic() - t0 < 10
    part = store.part_path(store.path_for(REPO, req.file, req.revision))
    assert part.exists() and part.stat().st_size > 0
    hub.faults.stall_at = None
    assert make_manager(store, hub).download_file(req).wait(30).read_bytes() == data
    assert (_ranges(hub)[-1] or "").startswith("bytes=")


def test_cancel_is_fast_then_resumes_after_restart(hub: FakeHub, store: ModelStore) -> None:
    data, req = _add(hub, size=3_000_000)
    hub.faults.chunk_delay = 0.05
    events: list[DownloadEvent] = []
    h = make_manager(store, hub).download_file(req, events.append)
    assert wait_for(lambda: any(e.type == "progress" and e.bytes_done > 300_000 for e in events), 20)
    t0 = time.monotonic()
    h.cancel()
    assert time.monotonic() - t0 < 10.0  # cancel() returns without waiting for the transfer
    with pytest.raises(CancelledError):
        h.wait(5)
    dest = store.path_for(REPO, req.file, req.revision)
    part = store.part_path(dest)
    assert not dest.exists() and part.exists()
    kept = part.stat().st_size
    assert kept > 0
    hub.faults.chunk_delay = 0.0
    # a new manager (as after an app restart) continues from the kept bytes
    assert make_manager(store, hub).download_file(req).wait(30).read_bytes() == data
    assert _ranges(hub)[-1] == f"bytes={kept}-"


def test_two_concurrent_downloads_of_one_file(hub: FakeHub, store: ModelStore) -> None:
    data, req = _add(hub, size=3_000_000)
    hub.faults.chunk_delay = 0.05
    m = make_manager(store, hub)
    first = m.download_file(req)
    assert m.download_file(req) is first  # same process: joined
    events: list[DownloadEvent] = []
    other = make_manager(store, hub)  # another app instance: another process for the same file
    assert wait_for(lambda: store.part_path(store.path_for(REPO, req.file, req.revision)).exists(), 10)
    second = other.download_file(req, events.append)
    p1, p2 = first.wait(60), second.wait(60)
    assert p1 == p2 and p1.read_bytes() == data
    assert any(e.type == "joined" for e in events), [e.type for e in events]
    assert len([g for g in hub.gets() if g[2] is None]) == 1  # the bytes were fetched once


def test_disk_full_mid_download_keeps_previous_model(hub: FakeHub, store: ModelStore) -> None:
    old_data = payload(300_000, 7)
    old = hub.add(REPO, "model.gguf", old_data, commit="a" * 40)
    old_path = make_manager(store, hub).download_file(
        FileRequest(REPO, "model.gguf", "a" * 40, len(old_data), old.sha256)).wait(30)
    new_data = payload(2_000_000, 8)
    new = hub.add(REPO, "model.gguf", new_data, commit="b" * 40)
    with pytest.raises(DiskFullError, match="disk filled up"):
        make_manager(store, hub, fsize_limit=1_000_000).download_file(
            FileRequest(REPO, "model.gguf", "b" * 40, len(new_data), new.sha256)).wait(30)
    new_dest = store.path_for(REPO, "model.gguf", "b" * 40)
    assert not new_dest.exists() and not store.part_path(new_dest).exists()
    assert old_path.read_bytes() == old_data and store.verify_path(old_path, old.sha256, len(old_data))


def test_preflight_refuses_with_sizes(hub: FakeHub, store: ModelStore) -> None:
    m = make_manager(store, hub)
    with pytest.raises(DiskFullError, match=r"needs \d+\.\d GB, \d+\.\d GB free on"):
        m.preflight([FileRequest(REPO, "huge.gguf", "c" * 40, 10**16, "0" * 64)])


def test_catalogue_size_mismatch_and_hub_sha_for_local_additions(hub: FakeHub, store: ModelStore) -> None:
    data, req = _add(hub)
    with pytest.raises(MismatchError):
        make_manager(store, hub).download_file(FileRequest(REPO, req.file, req.revision, SIZE + 1, req.sha256)).wait(30)
    # no size/sha given: taken from X-Linked-Size / X-Linked-Etag; unpinned revision resolved to the commit
    path = make_manager(store, hub).download_file(FileRequest(REPO, req.file)).wait(30)
    assert path.read_bytes() == data and req.revision in str(path)


def test_already_installed_file_needs_no_network(hub: FakeHub, store: ModelStore) -> None:
    _, req = _add(hub)
    make_manager(store, hub).download_file(req).wait(30)
    n = len(hub.requests)
    path = make_manager(store, hub).download_file(req).wait(30)
    assert path.exists() and len(hub.requests) == n


def test_part_of_another_file_is_discarded(hub: FakeHub, store: ModelStore) -> None:
    data, req = _add(hub)
    dest = store.path_for(REPO, req.file, req.revision)
    dest.parent.mkdir(parents=True, exist_ok=True)
    store.part_path(dest).write_bytes(b"x" * 1000)
    (dest.with_name(dest.name + ".part.json")).write_text('{"size": 5}')
    assert make_manager(store, hub).download_file(req).wait(30).read_bytes() == data
    assert _ranges(hub)[0] is None


def test_sigkill_of_the_download_process_keeps_part_and_resumes(hub: FakeHub, store: ModelStore) -> None:
    data, req = _add(hub, size=3_000_000)
    hub.faults.chunk_delay = 0.05
    events: list[DownloadEvent] = []
    h = make_manager(store, hub).download_file(req, events.append)
    assert wait_for(lambda: any(e.type == "progress" and e.bytes_done > 500_000 for e in events), 20)
    assert h.pid is not None
    os.kill(h.pid, signal.SIGKILL)
    with pytest.raises(DownloadError):
        h.wait(10)
    dest = store.path_for(REPO, req.file, req.revision)
    assert not dest.exists() and store.part_path(dest).stat().st_size > 0
    hub.faults.chunk_delay = 0.0
    assert make_manager(store, hub).download_file(req).wait(30).read_bytes() == data
    assert (_ranges(hub)[-1] or "").startswith("bytes=")
