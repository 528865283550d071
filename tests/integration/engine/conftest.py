from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings


@pytest.fixture(scope="session")
def backend() -> Iterator[Backend]:
    yield Backend()


@pytest.fixture(scope="module")
def smol(backend: Backend, smollm_path: Path) -> Iterator[Engine]:
    """SmolLM2-135M-Instruct with prompt lookup, loaded once per test module."""
    engine = Engine(backend)
    engine.load(PairSpec(target=str(smollm_path), lookup=True, context=ContextSettings(n_ctx=1024, threads=2)))
    yield engine
    engine.unload()
