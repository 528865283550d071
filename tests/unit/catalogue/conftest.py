from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.tiny_gguf import Family, make_family


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    return make_family(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("OUTRIDER_HOME", str(h))
    monkeypatch.delenv("OUTRIDER_CATALOGUE", raising=False)
    return h
