"""Fixtures of the server tests: a real engine process behind a ``LocalServer`` on 127.0.0.1 (a free port), driven
with the official ``openai`` client. The demo pair (SmolLM2-135M-Instruct + prompt lookup) checks real output; a
tiny generated family (seconds of generation for a long request) checks queueing, cancellation and limits."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # server_helpers (the suite runs --import-mode=importlib)

from server_helpers import DEMO_CTX, TINY_CTX, Served, serve

from outrider.engine.params import ContextSettings, PairSpec
from outrider.worker.client import EngineClient
from support.tiny_gguf import Family


@pytest.fixture(scope="module")
def demo_engine(smollm_path: Path) -> Iterator[EngineClient]:
    client = EngineClient()
    client.load(PairSpec(str(smollm_path), lookup=True, context=ContextSettings(n_ctx=DEMO_CTX, threads=2)))
    yield client
    client.stop()


@pytest.fixture(scope="module")
def demo(demo_engine: EngineClient) -> Iterator[Served]:
    served = serve(demo_engine, "smollm2-135m-lookup", k=8)  # the catalogue's k for the demo pair
    yield served
    served.server.stop()


@pytest.fixture(scope="module")
def tiny_engine(tiny_family: Family) -> Iterator[EngineClient]:
    client = EngineClient()
    client.load(PairSpec(str(tiny_family.target), draft=str(tiny_family.draft),
                         context=ContextSettings(n_ctx=TINY_CTX, n_batch=256, threads=2)))
    yield client
    client.stop()


@pytest.fixture
def tiny(tiny_engine: EngineClient) -> Iterator[Served]:
    served = serve(tiny_engine, "tiny", max_tokens_limit=TINY_CTX)
    yield served
    served.server.stop()
