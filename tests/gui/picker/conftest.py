"""Fixtures of the pair-picker and benchmark-dialog tests: a private OUTRIDER_HOME, a small test catalogue built
from generated tiny GGUFs, the fake Hub, and guards (Qt warnings fail, no thread or download process left)."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from outrider.catalogue import (
    DiscoveryScanner,
    DownloadManager,
    DownloadOptions,
    ModelStore,
    load_catalogue,
)
from outrider.catalogue.service import CatalogueService
from outrider.ui.picker.dialog import PairPickerDialog
from support.fake_hf import COMMIT, FakeHub, fake_hub
from support.tiny_gguf import Family, TinyShape, make_family

HERE = Path(__file__).resolve().parent
LOCAL_REPO = "org/tiny-GGUF"
REMOTE_REPO = "org/remote-GGUF"
THREAD_PREFIXES = ("outrider-picker", "outrider-downloads", "outrider-ui")
GIB = 1024**3


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in this directory fails on a Qt warning (pytest-qt's qt_log_level_fail)."""
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
            # the offscreen platform plugin warns about a window-manager feature it lacks
            item.add_marker(pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints"))


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """OUTRIDER_HOME, HOME (discovery looks in ~/.lmstudio, ~/.ollama) and HF_HOME in the test's tmp dir."""
    home = tmp_path / "outrider-home"
    monkeypatch.setenv("OUTRIDER_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "OUTRIDER_SET_HF_HUB_OFFLINE", "OLLAMA_MODELS", "OUTRIDER_CATALOGUE",
                "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    return home


def _download_children() -> list[int]:
    """Our child processes running the download module (Linux: /proc; elsewhere nothing is checked)."""
    out = []
    me = str(os.getpid())
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[1] == me and b"outrider.catalogue.download" in cmd:
            out.append(int(d.name))
    return out


@pytest.fixture(autouse=True)
def _no_dangling_workers() -> Iterator[None]:
    """After the test (widgets closed by pytest-qt), no picker thread and no download process may be left."""
    yield
    left = [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIXES)]
    assert not left, f"threads left running: {left}"
    assert not _download_children(), "download processes left running"


# ----------------------------------------------------------------------------------------- tiny families ---
@pytest.fixture(scope="session")
def remote_family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    """A second tiny family (other weights, so other sha256s) served only by the fake Hub."""
    return make_family(tmp_path_factory.mktemp("remote"), shape=TinyShape(n_layer=2, n_embd=128, n_head=4, n_ff=256),
                       seed=77, prefix="remote")


def _model(key: str, repo: str, path: Path, n_layer: int, *, gated: bool = False, note: str = "") -> str:
    data = path.read_bytes()
    return (f'[models."{key}"]\nsource = "hf"\nrepo = "{repo}"\nfile = "{path.name}"\nrevision = "{COMMIT}"\n'
            f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"\nlicence = "apache-2.0"\n'
            f'gated = {"true" if gated else "false"}\ngated_note = "{note}"\nfamily = "tiny"\n'
            f'n_layer = {n_layer}\nn_head_kv = 4\nhead_dim = 32\n\n')


def _pair(pid: str, name: str, target: str, draft: str, *, speedup: str = "", source: str = "",
          tags: str = '["chat"]', ctx: int = 512) -> str:
    return (f'[[pairs]]\nid = "{pid}"\nname = "{name}"\nfamily = "tiny"\ntags = {tags}\ntarget = "{target}"\n'
            f'draft = "{draft}"\nk = 6\ndraft_min = 1\np_min = 0.5\ndefault_context = {ctx}\n'
            f'speedup = "{speedup}"\nspeedup_source = "{source}"\nstatus = "measured"\n\n')


@pytest.fixture
def catalogue_path(tmp_path: Path, tiny_family: Family, remote_family: Family,
                   monkeypatch: pytest.MonkeyPatch) -> Path:
    """Four pairs: installed (model draft), installed (prompt lookup), incompatible (both on disk, gated draft)
    and downloadable (only on the fake Hub)."""
    text = "schema_version = 1\ndefault_context = 512\n\n"
    text += _model("tiny-target", LOCAL_REPO, tiny_family.target, 4)
    text += _model("tiny-draft", LOCAL_REPO, tiny_family.draft, 1)
    text += _model("tiny-incompatible", LOCAL_REPO, tiny_family.incompatible, 1, gated=True,
                   note="accept the tiny licence")
    text += _model("remote-target", REMOTE_REPO, remote_family.target, 2)
    text += _model("remote-draft", REMOTE_REPO, remote_family.draft, 1)
    text += _pair("tiny-installed", "Tiny target + tiny draft", "tiny-target", "tiny-draft", speedup="1.8×",
                  source="https://example.org/tiny-benchmark")
    text += _pair("tiny-lookup", "Tiny target + prompt lookup", "tiny-target", "prompt-lookup", tags='["code"]')
    text += _pair("tiny-bad", "Tiny target + wrong vocabulary", "tiny-target", "tiny-incompatible")
    text += _pair("remote-pair", "Remote target + remote draft", "remote-target", "remote-draft")
    path = tmp_path / "catalogue.toml"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("OUTRIDER_CATALOGUE", str(path))
    return path


def install(store: ModelStore, repo: str, src: Path) -> Path:
    """Put ``src`` in the store as a verified download would (file + record)."""
    dest = store.path_for(repo, src.name, COMMIT)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    store.write_record(dest, hashlib.sha256(dest.read_bytes()).hexdigest())
    return dest


@pytest.fixture
def store(_private_home: Path) -> ModelStore:
    return ModelStore(_private_home / "models")


@pytest.fixture
def installed(store: ModelStore, tiny_family: Family) -> dict[str, Path]:
    return {"target": install(store, LOCAL_REPO, tiny_family.target),
            "draft": install(store, LOCAL_REPO, tiny_family.draft),
            "incompatible": install(store, LOCAL_REPO, tiny_family.incompatible)}


@pytest.fixture
def hub(remote_family: Family, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with fake_hub() as h:
        h.add(REMOTE_REPO, remote_family.target.name, remote_family.target.read_bytes())
        h.add(REMOTE_REPO, remote_family.draft.name, remote_family.draft.read_bytes())
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        yield h


ServiceFactory = Callable[..., CatalogueService]


@pytest.fixture
def make_service(catalogue_path: Path, store: ModelStore, tmp_path: Path) -> ServiceFactory:
    """A CatalogueService over the test catalogue; ``endpoint`` points downloads at a fake Hub."""

    def make(endpoint: str | None = None, vram: tuple[int | None, int | None] = (None, None)) -> CatalogueService:
        options = DownloadOptions(endpoint=endpoint, read_timeout=3.0, connect_timeout=3.0, retries=2,
                                  retry_backoff=0.02, progress_interval=0.05, join_stall_timeout=5.0)
        scanner = DiscoveryScanner(store, home=tmp_path / "user", hf_cache=tmp_path / "hf-home" / "hub")
        return CatalogueService(load_catalogue(catalogue_path), store, DownloadManager(store, options), scanner,
                                vram_probe=lambda: vram)

    return make


PickerFactory = Callable[[CatalogueService], PairPickerDialog]


@pytest.fixture
def open_picker(qtbot: QtBot) -> Iterator[PickerFactory]:
    """Open a picker and wait for its first scan. Each is closed at teardown (pytest-qt keeps only weak
    references, so a dialog dropped by the test would be destroyed without ``close()``, skipping its shutdown)."""
    opened: list[PairPickerDialog] = []

    def open_(service: CatalogueService) -> PairPickerDialog:
        dlg = PairPickerDialog(service)
        qtbot.addWidget(dlg)
        opened.append(dlg)
        with qtbot.waitSignal(dlg.scan_finished, timeout=10_000):
            pass  # the scan runs on a worker thread; its result is applied in the event loop
        return dlg

    yield open_
    for dlg in opened:
        dlg.close()
