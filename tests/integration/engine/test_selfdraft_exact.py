"""A self-draft cut from the real SmolLM2-135M loads as its target's draft, speculates, and the greedy output is
exactly the independent reference's (``support/reference_decoding.py``: the target alone, one token per
``llama_decode``, no Outrider code)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from outrider.catalogue import ModelStore
from outrider.catalogue.selfdraft import SelfDraftBuild, preview
from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams
from outrider.engine.speculative import DoneEvent
from support.reference_decoding import ReferenceModel

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Here is a list of fruits: apple, banana, cherry, apple, banana,",
]
N_TOKENS = 24
TIE_GAP = 1e-3
LAYERS = "0-13,17-29"  # three middle blocks dropped: SmolLM2-135M still agrees often enough to be accepted


@pytest.fixture(scope="module")
def self_draft(tmp_path_factory: pytest.TempPathFactory, smollm_path: Path) -> Path:
    store = ModelStore(tmp_path_factory.mktemp("selfdraft-store"))
    plan = preview(store, smollm_path, LAYERS)
    result = SelfDraftBuild(store, plan, ["Say hello."], max_tokens=4, threads=1).wait(600)
    assert store.self_drafts_of(smollm_path)[0].path == result.path
    return result.path


@pytest.fixture(scope="module")
def engine(backend: Backend, smollm_path: Path, self_draft: Path) -> Iterator[Engine]:
    e = Engine(backend)
    info = e.load(PairSpec(target=str(smollm_path), draft=str(self_draft),
                           context=ContextSettings(n_ctx=256, threads=1)))
    assert info.draft_mode == "model"
    assert info.draft is not None and info.draft.n_layer == 27
    yield e
    e.unload()


def test_a_smollm2_self_draft_speculates_with_exactly_the_reference_greedy_output(
        engine: Engine, smollm_path: Path) -> None:
    """Breaking the draft's verification (accepting every drafted token) made the outputs differ from the
    reference at the first rejected token."""
    drafted = accepted = 0
    mismatches: list[str] = []
    ties = 0
    with ReferenceModel(smollm_path, n_ctx=256, threads=1) as reference:
        for text in PROMPTS:
            prompt = reference.tokenize(text)
            assert engine.tokenize_prompt(text) == prompt
            expected = reference.greedy(prompt, N_TOKENS)
            for k in (2, 5):
                got: list[int] = []
                done: DoneEvent | None = None
                for event in engine.generate(prompt, max_tokens=N_TOKENS, draft=DraftParams(k=k),
                                             ignore_eos=True):
                    if isinstance(event, DoneEvent):
                        done = event
                    else:
                        got.extend(event.tokens)
                assert done is not None
                drafted += done.stats.drafted
                accepted += done.stats.accepted
                if got != expected:
                    i = next(j for j, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b)
                    gap = reference.top2_gap(prompt + expected[:i])
                    if gap < TIE_GAP:
                        ties += 1
                    else:
                        mismatches.append(f"{text!r} k={k}: first difference at token {i} (gap {gap:.3g})")
    assert not mismatches, "\n".join(mismatches)
    assert ties <= 1
    assert drafted > 0, "the self-draft proposed nothing"
    assert 0 < accepted < drafted, (accepted, drafted)
