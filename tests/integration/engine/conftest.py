from __future__ import annotations

from collections.abc import Iterator

import pytest

from outrider.engine.llama.runtime import Backend


@pytest.fixture(scope="session")
def backend() -> Iterator[Backend]:
    yield Backend()
