"""MTP drafting on a hybrid target: a generated ``qwen35`` (gated delta-net + attention layers) with one NextN layer,
and the same NextN layer as a separate head file (``support/hybrid_gguf.py``). The target's rejected draft tokens
roll back through its recurrent-state snapshots (``n_rs_seq``); the MTP context itself is attention-only. Greedy
output must be the independent reference's (``support/reference_decoding.py``), with drafts made and rejected.

Breaking it on purpose: running the MTP drafter with the target's snapshots switched off (``rollback_tokens=0``
on the target context, ``engine.py``) turned drafting off with the "cannot be rolled back" note, which the
fixture's ``draft_mode`` assertion caught.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams
from outrider.engine.speculative import DoneEvent
from support.hybrid_gguf import MtpModels, make_qwen35_mtp
from support.reference_decoding import ReferenceModel

PROMPTS = ["the model is fast", "a b a b a b a b", "def return class import self"]
N_TOKENS = 24
TIE_GAP = 1e-3
CTX = ContextSettings(n_ctx=160, threads=1)


@pytest.fixture(scope="module")
def q35(tmp_path_factory: pytest.TempPathFactory) -> MtpModels:
    return make_qwen35_mtp(tmp_path_factory.mktemp("q35-mtp"))


@pytest.fixture(scope="module")
def references(q35: MtpModels) -> dict[str, tuple[list[int], list[int]]]:
    out: dict[str, tuple[list[int], list[int]]] = {}
    with ReferenceModel(q35.target, n_ctx=160) as reference:
        for text in PROMPTS:
            prompt = reference.tokenize(text)
            out[text] = prompt, reference.greedy(prompt, N_TOKENS)
    return out


@pytest.fixture(scope="module", params=["mtp", "mtp-head"])
def engine(request: pytest.FixtureRequest, backend: Backend, q35: MtpModels) -> Iterator[tuple[str, Engine]]:
    spec = (PairSpec(target=str(q35.target), mtp=True, context=CTX) if request.param == "mtp"
            else PairSpec(target=str(q35.plain), mtp_head=str(q35.head), context=CTX))
    e = Engine(backend)
    info = e.load(spec)
    assert info.draft_mode == "mtp", info.notes
    yield request.param, e
    e.unload()


def test_mtp_on_a_hybrid_target_equals_the_reference(engine: tuple[str, Engine],
                                                     references: dict[str, tuple[list[int], list[int]]],
                                                     q35: MtpModels) -> None:
    kind, e = engine
    drafted = accepted = ties = 0
    mismatches: list[str] = []
    with ReferenceModel(q35.target, n_ctx=160) as reference:
        for draft in (DraftParams(k=1), DraftParams(k=2), DraftParams(k=3), DraftParams(k=None)):
            for text in PROMPTS:
                prompt, expected = references[text]
                got: list[int] = []
                done = None
                for event in e.generate(prompt, max_tokens=N_TOKENS, draft=draft, ignore_eos=True):
                    if isinstance(event, DoneEvent):
                        done = event
                    else:
                        got.extend(event.tokens)
                assert done is not None and done.stats.draft_mode == "mtp"
                drafted += done.stats.drafted
                accepted += done.stats.accepted
                if got == expected:
                    continue
                i = next(j for j, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
                gap = reference.top2_gap(prompt + expected[:i])
                if gap < TIE_GAP:
                    ties += 1
                else:
                    mismatches.append(f"{text!r} {draft}: first difference at token {i} (gap {gap:.3g})")
    assert not mismatches, f"{kind}: MTP on a hybrid target is not greedy decoding:\n" + "\n".join(mismatches)
    assert ties <= 2
    assert drafted > 0 and 0 < accepted < drafted, (kind, accepted, drafted)
