"""bench_mtp_confidence.py's recording: each drafted token matched with the step that verified it.

Checked against the decoder's own count of kept draft tokens (``GenerationStats.accepted``), on the generated
dense MTP target (``support/mtp_gguf.py``). Broken on purpose (the step's kept count read as every drafted token
of it): the kept tokens exceed the decoder's count and the test fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings
from support.mtp_gguf import make_mtp_models

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_mtp_confidence import DraftedToken, gate_rows, kept_tokens, record


def test_a_draft_reaches_its_kept_tokens_and_the_first_rejected_one() -> None:
    assert kept_tokens([0.9, 0.5, 0.2, 0.7], 1) == [DraftedToken(1, 0.9, True), DraftedToken(2, 0.5, False)]
    assert kept_tokens([0.9, 0.5], 2) == [DraftedToken(1, 0.9, True), DraftedToken(2, 0.5, True)]
    assert kept_tokens([0.3], 0) == [DraftedToken(1, 0.3, False)]


def test_a_gate_counts_the_first_tokens_below_it() -> None:
    tokens = [DraftedToken(1, 0.15, False), DraftedToken(1, 0.25, True), DraftedToken(1, 0.6, True),
              DraftedToken(2, 0.05, False)]  # (a later position: not a first draft token)
    rows = gate_rows(tokens)
    assert rows[0] == "| 0.1 | 0 of 1 | 0 of 2 |"
    assert rows[1] == "| 0.2 | 1 of 1 | 0 of 2 |"
    assert rows[2] == "| 0.3 | 1 of 1 | 1 of 2 |"


def test_the_recording_matches_the_decoders_kept_tokens(backend: Backend, tmp_path: Path) -> None:
    models = make_mtp_models(tmp_path / "mtp")
    engine = Engine(backend)
    engine.load(PairSpec(target=str(models.target), mtp=True, context=ContextSettings(n_ctx=256)))
    try:
        prompts = [engine.tokenize_prompt(text) for text in ("the model is fast", "hello world def return")]
        recording = record(engine, prompts, [24], depth=3)
    finally:
        engine.unload()
    firsts = [t for t in recording.tokens if t.position == 1]
    assert firsts, "no draft was recorded"
    assert sum(t.kept for t in recording.tokens) == recording.accepted > 0
    assert all(0.0 < t.confidence <= 1.0 for t in recording.tokens)
    # Within a draft, positions run 1, 2, ... and only the last reached one may be rejected.
    drafts: list[list[DraftedToken]] = []
    for t in recording.tokens:
        if t.position == 1:
            drafts.append([])
        drafts[-1].append(t)
    for draft in drafts:
        assert [t.position for t in draft] == list(range(1, len(draft) + 1))
        assert all(t.kept for t in draft[:-1]) and len(draft) <= 3


def test_an_engine_with_no_mtp_head_is_refused(backend: Backend, tmp_path: Path) -> None:
    models = make_mtp_models(tmp_path / "mtp")
    engine = Engine(backend)
    engine.load(PairSpec(target=str(models.trunk), context=ContextSettings(n_ctx=256)))
    try:
        with pytest.raises(ValueError, match="no MTP head"):
            record(engine, [engine.tokenize_prompt("hello")], [8], depth=2)
    finally:
        engine.unload()
