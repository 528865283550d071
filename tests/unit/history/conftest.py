from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from outrider.history import HistoryStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    with HistoryStore.open(tmp_path) as opened:
        yield opened
