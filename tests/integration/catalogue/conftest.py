from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.fake_hf import FakeHub, fake_hub

from outrider.catalogue import DownloadManager, DownloadOptions, ModelStore


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("OUTRIDER_HOME", str(h))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token file, no user cache
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("OUTRIDER_CATALOGUE", raising=False)
    return h


@pytest.fixture
def hub(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with fake_hub() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        yield h


@pytest.fixture
def store(home: Path) -> ModelStore:
    return ModelStore(home / "models")


def make_manager(store: ModelStore, hub: FakeHub, **kw: object) -> DownloadManager:
    opts: dict[str, object] = {"endpoint": hub.endpoint, "read_timeout": 3.0, "connect_timeout": 3.0,
                               "retries": 4, "retry_backoff": 0.02, "progress_interval": 0.05,
                               "join_stall_timeout": 5.0}
    opts.update(kw)
    return DownloadManager(store, DownloadOptions(**opts))  # type: ignore[arg-type]


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


@pytest.fixture
def cli_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    return env
