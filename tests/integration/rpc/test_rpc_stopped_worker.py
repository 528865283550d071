"""An RPC worker that stops answering without closing its connection (its process stopped with SIGSTOP, as a hung
driver would) blocks llama.cpp where no cancel reaches it: Stop then ends the engine after the client's grace, the
streamed part is kept, the error says what happened, and the next load starts a fresh engine."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from rpc_helpers import two_workers

from outrider.engine.events import DoneEvent, StepBatch
from outrider.engine.llama.rpc import has_rpc
from outrider.engine.params import ContextSettings, ModelSettings, PairSpec, TextRequest
from outrider.worker.client import EngineClient
from outrider.worker.errors import EngineIgnoredCancel
from support.tiny_gguf import Family

GRACE_S = 3.0
LIMIT_S = GRACE_S + 15.0  # generous: a loaded 2-core CI machine


def test_stop_ends_an_engine_blocked_on_a_stopped_worker(tiny_family: Family, tmp_path: Path) -> None:
    if not has_rpc():
        pytest.fail("llama-cpp-python has no libggml-rpc.so: run `make setup` (it builds with GGML_RPC=on)")
    with two_workers(tmp_path) as (w1, w2), EngineClient(cancel_grace=GRACE_S) as client:
        client.load(PairSpec(target=str(tiny_family.target),
                             target_settings=ModelSettings(rpc=(w1.endpoint, w2.endpoint)),
                             context=ContextSettings(n_ctx=4096, threads=1)))
        tokens: list[int] = []
        cancelled_at = None
        try:
            with pytest.raises(EngineIgnoredCancel) as caught, client.generate(
                    TextRequest(prompt="the", max_tokens=3500, plain=True)) as gen:
                for event in gen:
                    if isinstance(event, StepBatch):
                        tokens += [t for step in event.steps for t in step.tokens]
                    assert not isinstance(event, DoneEvent), "the reply ended before the worker was stopped"
                    if len(tokens) >= 5 and cancelled_at is None:
                        w2.proc.send_signal(signal.SIGSTOP)
                        time.sleep(0.5)  # the engine's next pass now waits on the stopped worker
                        cancelled_at = time.monotonic()
                        client.cancel()
            assert cancelled_at is not None
            elapsed = time.monotonic() - cancelled_at
        finally:
            w2.proc.send_signal(signal.SIGCONT)
        assert GRACE_S <= elapsed < LIMIT_S
        assert 5 <= len(tokens) < 3500  # what streamed before is the consumer's
        assert f"did not stop within {GRACE_S:g} s" in str(caught.value)
        assert "RPC worker" in str(caught.value)
        # The client recovers: a new engine process loads the pair locally and replies.
        client.load(PairSpec(target=str(tiny_family.target), context=ContextSettings(n_ctx=512, threads=1)))
        with client.generate(TextRequest(prompt="the", max_tokens=4)) as gen:
            done = [e for e in gen if isinstance(e, DoneEvent)]
        assert done and done[0].stats.generated == 4
