"""With drafting off (the request's k = 0: the GUI's "Draft off", ``outrider serve --draft-k 0``) the server's
timings say ``draft_mode: off`` and that nothing was drafted, not the loaded drafter's kind.

Broken on purpose (the engine's ``stats.draft_mode`` left at the drafter's kind when k = 0): ``draft_mode`` read
``lookup`` with ``draft_n`` 0, which is what issue 23 saw (``draft_mode: model`` with drafting off)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from server_helpers import Served, serve

from outrider.worker.client import EngineClient

pytestmark = [pytest.mark.smollm, pytest.mark.slow]


@pytest.fixture(scope="module")
def plain(demo_engine: EngineClient) -> Iterator[Served]:
    served = serve(demo_engine, "smollm2-135m-lookup", k=0)
    yield served
    served.server.stop()


def test_the_timings_say_drafting_was_off(plain: Served) -> None:
    reply = plain.api.chat.completions.create(
        model="m", temperature=0, max_tokens=24,
        messages=[{"role": "user", "content": "Repeat exactly: the cat sat on the mat, the cat sat on the mat."}])
    t = reply.model_extra["timings"]  # type: ignore[index]
    assert t["draft_mode"] == "off"
    assert t["draft_n"] == 0 and t["predicted_n"] > 0
