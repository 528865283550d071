"""Downloads on the edges of what a server or a link does: a link that drops every few kilobytes, redirects that
lead nowhere, sizes that are no size, a second download of a file whose size the catalogue does not know.
Each test failed on the code before it (what it showed is in each docstring)."""

from __future__ import annotations

import pytest
from tests.integration.catalogue.conftest import make_manager
from tests.support.fake_hf import FakeHub, payload, wait_for

from outrider.catalogue import DownloadError, DownloadEvent, FileRequest, ModelStore

REPO = "org/tiny-GGUF"


def test_a_link_that_drops_every_100_kb_still_completes(hub: FakeHub, store: ModelStore) -> None:
    """Before: bytes were taken in 256 KiB chunks, and a connection that dropped inside one kept none of it, so
    the download never grew and ended with "the server keeps cutting the download short"."""
    data = payload(1_200_000, 11)
    f = hub.add(REPO, "tiny.gguf", data)
    hub.faults.drop_after = 100_000
    req = FileRequest(REPO, "tiny.gguf", f.commit, len(data), f.sha256)
    path = make_manager(store, hub, retries=3).download_file(req).wait(120)
    assert path.read_bytes() == data
    ranges = [r for _, _, r in hub.gets() if r]
    assert len(ranges) >= 10  # resumed from every byte kept, about 100 kB further each time


@pytest.mark.parametrize(("target", "words"), [
    ("self", "redirects the download of tiny.gguf in a loop"),
    ("file:///etc/passwd", "that is not http(s); refused"),
])
def test_a_redirect_that_leads_nowhere_is_said_so(hub: FakeHub, store: ModelStore, target: str, words: str) -> None:
    """Before: both were reported as "the connection to 127.0.0.1 was lost" (or an internal error)."""
    data = payload(200_000, 12)
    f = hub.add(REPO, "tiny.gguf", data)
    hub.faults.cdn_redirect = target
    req = FileRequest(REPO, "tiny.gguf", f.commit, len(data), f.sha256)
    with pytest.raises(DownloadError) as err:
        make_manager(store, hub).download_file(req).wait(60)
    assert words in err.value.message
    assert "connection" not in err.value.message
    dest = store.path_for(REPO, "tiny.gguf", f.commit)
    assert not dest.exists()


@pytest.mark.parametrize("size", ["0", "-5"])
def test_a_size_that_is_no_size_is_refused_before_any_byte(hub: FakeHub, store: ModelStore, size: str) -> None:
    """Before: the file was downloaded and then called "corrupted — download again"."""
    hub.add(REPO, "tiny.gguf", payload(100_000, 13))
    hub.faults.linked_size = size
    with pytest.raises(DownloadError) as err:
        make_manager(store, hub).download_file(FileRequest(REPO, "tiny.gguf")).wait(30)
    assert f"is {size} bytes, which no model file is" in err.value.message
    assert "corrupted" not in err.value.message
    assert not [g for g in hub.gets() if g[1].startswith("/cdn/")]


def test_a_second_download_of_a_file_of_unknown_size_shows_its_size(hub: FakeHub, store: ModelStore) -> None:
    """Before: the joining process reported a total of 0 bytes ("0.0 % (0.01 GB of 0.00 GB)")."""
    data = payload(2_000_000, 14)
    hub.add(REPO, "tiny.gguf", data)
    hub.faults.chunk_delay = 0.05
    req = FileRequest(REPO, "tiny.gguf")  # size and checksum from the server, as `outrider models fetch` asks
    first = make_manager(store, hub).download_file(req)
    assert wait_for(lambda: any(p.name.endswith(".part") for p in store.root.rglob("*")), 20)
    events: list[DownloadEvent] = []
    second = make_manager(store, hub).download_file(req, events.append)
    assert first.wait(60).read_bytes() == data and second.wait(60).read_bytes() == data
    joined = [e for e in events if e.type in ("joined", "progress")]
    assert any(e.type == "joined" for e in joined), [e.type for e in events]
    assert all(e.total == len(data) for e in joined), {e.total for e in joined}
