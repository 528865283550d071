"""The passes a one-token pass needs after a pass of another size before it costs what plain decoding costs
(``speedup.settle_passes``) reach the decoder from the back-end: 1 on a CPU build, 2 on a CUDA one with the target
offloaded (llama.cpp replays a CUDA graph only from the third call of one shape). The reply's speed-up meter
(whose forced plain runs it lengthens: tests/unit/engine/test_stats.py) and automatic k (which times plain decoding
on settled passes only) are told it."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from outrider.engine.engine import Engine
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams, ModelSettings, PairSpec
from outrider.engine.speculative import StepEvent
from support.tiny_gguf import TinyShape, make_family

SHAPE = TinyShape(n_layer=2, n_embd=64, n_head=2, n_ff=128)


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_family(tmp_path_factory.mktemp("settle"), shape=SHAPE, extra_layer_scale=0.05, prefix="st")


def _as_built_with(backend: Backend, name: str) -> Backend:
    """The same llama.cpp, described as a build with GPU offload named ``name`` (only what the engine reads)."""
    described = copy.copy(backend)
    described.info = dataclasses.replace(backend.info, name=name, gpu_offload=True)
    return described


@pytest.mark.parametrize(("name", "gpu_layers", "settle"), [
    (None, -1, 1),  # this machine's own build, as it describes itself (a CPU here)
    ("CUDA", -1, 2),
    ("CUDA", 0, 1),  # a CUDA build with nothing offloaded: the CPU runs the passes
    ("Metal", -1, 1),
])
def test_the_back_end_decides_how_many_passes_a_plain_pass_needs_to_settle(backend: Backend, family, name: str | None,  # type: ignore[no-untyped-def]
                                                                   gpu_layers: int, settle: int) -> None:
    described = backend if name is None else _as_built_with(backend, name)
    if name is None and backend.info.name == "CUDA":
        pytest.skip("this machine's build is a CUDA one: covered by the CUDA row")
    engine = Engine(described)
    settings = ModelSettings(gpu_layers=gpu_layers)
    engine.load(PairSpec(target=str(family.target), draft=str(family.draft), target_settings=settings,
                         draft_settings=settings, context=ContextSettings(n_ctx=256, threads=1)))
    try:
        decoder = engine._decoder_or_raise()
        assert decoder.settle == settle
        prompt = engine.tokenize_prompt("the model is fast and the draft is")
        for event in engine.generate(prompt, max_tokens=12, draft=DraftParams(), ignore_eos=True):
            assert not isinstance(event, StepEvent) or decoder._meter is not None
        # The reply's plain runs (tests/unit/engine/test_stats.py times their length) and automatic k's plain cost.
        assert decoder._meter is not None and decoder._meter.settle == settle
        assert decoder.auto_policy is not None and decoder.auto_policy.settle == settle
    finally:
        engine.unload()
