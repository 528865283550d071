"""Fixtures of the engine-process tests: an isolated OUTRIDER_HOME, a shared client, the bad-model corpus."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # worker_helpers (the suite runs --import-mode=importlib)

from outrider.worker.client import EngineClient
from support import bad_models


@pytest.fixture(scope="session", autouse=True)
def outrider_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Registry, logs and data of these tests live in a temporary OUTRIDER_HOME."""
    home = tmp_path_factory.mktemp("outrider-home")
    old = os.environ.get("OUTRIDER_HOME")
    os.environ["OUTRIDER_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("OUTRIDER_HOME", None)
    else:
        os.environ["OUTRIDER_HOME"] = old


@pytest.fixture(scope="session")
def good_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bad_models.small_model(tmp_path_factory.mktemp("good") / "small.gguf")


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bad-models")


@pytest.fixture(scope="module")
def client(outrider_home: Path) -> Iterator[EngineClient]:
    """One engine process per test module; a test that crashes it gets a fresh one on the next load."""
    c = EngineClient()
    c.start()
    yield c
    c.stop()
