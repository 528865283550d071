"""A pair with an MTP head times its target's passes and a drafted token at load, and leaves nothing behind.

Generated models (``support/mtp_gguf.py``, ``support/hybrid_gguf.py``). Counts and states, never timings' values:
which sizes were timed, that the target's memory and the head's are empty after the load, that a fresh policy
starts from the timings, and that the first reply is the independent reference's (a fresh llama.cpp context, one
token per decode, its own argmax: ``support/reference_decoding.py``).
"""

from __future__ import annotations

from pathlib import Path

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.mtp import MtpDraft
from outrider.engine.params import ContextSettings, DraftParams
from outrider.engine.pass_costs import PASS_REPEATS, PASS_SIZES
from outrider.engine.speculative import DoneEvent
from support.hybrid_gguf import make_qwen35_mtp
from support.mtp_gguf import make_mtp_models
from support.reference_decoding import ReferenceModel

CTX = ContextSettings(n_ctx=512, threads=2)
PROMPT = "the model is fast and the draft is quick and the"


def test_an_mtp_load_times_every_size_and_leaves_the_memories_empty(backend: Backend, tmp_path: Path) -> None:
    """Breaking it (``Engine.load`` not calling ``time_passes``): ``pass_costs`` is empty and the first assertion
    fails."""
    target = make_mtp_models(tmp_path / "agreeing").target
    e = Engine(backend)
    try:
        e.load(PairSpec(target=str(target), mtp=True, context=CTX))
        decoder = e._decoder_or_raise()
        assert sorted(decoder.pass_costs) == sorted(PASS_SIZES)
        assert all(len(t) == PASS_REPEATS and min(t) > 0 for t in decoder.pass_costs.values())
        assert len(decoder.draft_token_costs) == PASS_REPEATS and min(decoder.draft_token_costs) > 0
        assert decoder.context.n_past == 0 and decoder.cached == []
        drafter = decoder.drafter
        assert isinstance(drafter, MtpDraft) and drafter.mtp.n_past == 0 and drafter.cells == []
        prompt = e.tokenize_prompt(PROMPT)
        got: list[int] = []
        done = None
        for event in e.generate(prompt, max_tokens=24, draft=DraftParams(k=None), ignore_eos=True):
            if isinstance(event, DoneEvent):
                done = event
            else:
                got.extend(event.tokens)
        assert done is not None and done.stats.draft_mode == "mtp"
        policy = decoder.auto_policy
        assert policy is not None and all(policy.model.at_load[n].count == PASS_REPEATS for n in PASS_SIZES)
        with ReferenceModel(target, n_ctx=512) as reference:
            assert got == reference.greedy(prompt, 24)
    finally:
        e.unload()


def test_a_hybrid_target_is_timed_only_on_passes_its_snapshots_roll_back(backend: Backend, tmp_path: Path) -> None:
    """A ``qwen35`` target keeps ``n_rs_seq`` recurrent-state snapshots: a verify pass longer than that + 1 could
    not be rolled back, so no such pass is timed (``compat.ROLLBACK_TOKENS`` snapshots: every size here)."""
    models = make_qwen35_mtp(tmp_path / "q35")
    e = Engine(backend)
    try:
        e.load(PairSpec(target=str(models.target), mtp=True, context=ContextSettings(n_ctx=160, threads=1)))
        decoder = e._decoder_or_raise()
        limit = decoder.rollback_limit
        assert limit is not None and limit >= 1
        assert sorted(decoder.pass_costs) == [n for n in PASS_SIZES if n <= limit + 1]
        assert decoder.context.n_past == 0
    finally:
        e.unload()
