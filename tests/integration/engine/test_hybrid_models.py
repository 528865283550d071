"""The generated hybrid test models (``support/hybrid_gguf.py``) load and decode in the vendored llama.cpp.

Each check drives llama.cpp through llama-cpp-python's low-level API directly (no Outrider engine code), so a
broken generator shows here and not as a puzzling engine failure. Breaking the generator on purpose showed:
a wrong ``ssm_conv1d`` shape fails the load ("tensor 'blk.0.ssm_conv1d.weight' has wrong shape"), a missing
``shortconv.l_cache`` key fails the lfm2 load, family drafts built from an unrelated seed drop the agreement
below the bound, and a head file whose NextN layer differs from the target's fails the identical-logits check.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as ll
import numpy as np
import pytest

from support.hybrid_gguf import (
    HybridFamily,
    MtpModels,
    make_lfm2_family,
    make_mamba,
    make_qwen35_family,
    make_qwen35_mtp,
)
from support.reference_decoding import ReferenceModel

PROMPT_WORDS = "the model is fast and the draft"
N_TOKENS = 32


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("hybrid")
    return {
        "qwen35": make_qwen35_family(root),
        "lfm2": make_lfm2_family(root),
        "mtp": make_qwen35_mtp(root),
        "mamba": make_mamba(root / "mamba.gguf"),
    }


class _Raw:
    """A model + one context, created with the given parameters (for facts the reference does not expose)."""

    def __init__(self, path: Path, *, load_mtp: bool = False, n_rs_seq: int = 0, mtp_context: bool = False) -> None:
        ll.llama_backend_init()
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.load_mtp = load_mtp
        self.model = ll.llama_model_load_from_file(os.fsencode(str(path)), mparams)
        assert self.model, f"llama.cpp refused {path.name}"
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = cparams.n_batch = 128
        cparams.n_threads = cparams.n_threads_batch = 1
        cparams.n_rs_seq = n_rs_seq
        if mtp_context:
            cparams.ctx_type = ll.LLAMA_CONTEXT_TYPE_MTP
        self.ctx = ll.llama_init_from_model(self.model, cparams)
        assert self.ctx, f"no context for {path.name}"
        self.n_vocab = int(ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self.model)))

    def logits(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()

    def decode_all(self, tokens: Sequence[int]) -> np.ndarray:
        """Evaluate ``tokens`` in one batch; the logits of every position."""
        batch = ll.llama_batch_init(len(tokens), 0, 1)
        try:
            batch.n_tokens = len(tokens)
            for i, token in enumerate(tokens):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, i, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = True
            assert ll.llama_decode(self.ctx, batch) == 0
            return np.array([self.logits(i) for i in range(len(tokens))])
        finally:
            ll.llama_batch_free(batch)

    def decode_mtp(self, tokens: Sequence[int], hidden: np.ndarray) -> np.ndarray:
        """An MTP-context pass: each token paired with a hidden-state row (the target's ``h`` before it)."""
        batch = ll.llama_batch_ext_init(self.ctx)
        rows = np.ascontiguousarray(hidden, dtype=np.float32)
        try:
            for i, token in enumerate(tokens):
                idx = ll.llama_batch_ext_add_token(batch, 0, token)
                assert idx >= 0
                row = rows[i]
                embd = ll.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, rows.shape[1])
                assert ll.llama_batch_ext_set_embd_token(batch, idx, embd)
                assert ll.llama_batch_ext_set_pos(batch, idx, (ll.llama_pos * 1)(i))
                assert ll.llama_batch_ext_set_output_logits(batch, idx, True)
            assert ll.llama_process(self.ctx, ll.LLAMA_PROCESS_TYPE_DECODE, batch) == 0
            return np.array([self.logits(i) for i in range(len(tokens))])
        finally:
            ll.llama_batch_ext_free(batch)

    def close(self) -> None:
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)


@pytest.fixture
def raw() -> Iterator[list[_Raw]]:
    opened: list[_Raw] = []
    yield opened
    for r in opened:
        r.close()


def _open(opened: list[_Raw], path: Path, **kwargs: Any) -> _Raw:
    r = _Raw(path, **kwargs)
    opened.append(r)
    return r


def _greedy(path: Path, n: int = N_TOKENS) -> tuple[list[int], list[int]]:
    with ReferenceModel(path, n_ctx=128) as ref:
        prompt = ref.tokenize(PROMPT_WORDS)
        return prompt, ref.greedy(prompt, n)


def _agreement(draft: Path, prompt: list[int], target_tokens: list[int]) -> float:
    """Share of positions where the draft's argmax equals the target's greedy token (teacher-forced)."""
    with ReferenceModel(draft, n_ctx=128) as ref:
        hits = sum(int(np.argmax(ref.logits_after([*prompt, *target_tokens[:i]]))) == tok
                   for i, tok in enumerate(target_tokens))
    return hits / len(target_tokens)


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_hybrid_family_loads_as_hybrid_and_batches_match_one_token_decoding(
        models: dict[str, Any], raw: list[_Raw], arch: str) -> None:
    """Both family members are hybrids that accept partial rollback snapshots (n_rs_seq kept, not clamped), and a
    batched evaluation gives the greedy tokens that one-token-at-a-time decoding gives."""
    family: HybridFamily = models[arch]
    for path in (family.target, family.draft):
        r = _open(raw, path, n_rs_seq=4)
        assert ll.llama_model_is_hybrid(r.model) and not ll.llama_model_is_recurrent(r.model)
        assert ll.llama_n_rs_seq(r.ctx) == 4
        prompt, greedy = _greedy(path, 12)
        tokens = [*prompt, *greedy]
        batched = r.decode_all(tokens)
        assert np.isfinite(batched).all()
        assert [int(t) for t in batched[len(prompt) - 1 : -1].argmax(axis=1)] == greedy


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_hybrid_family_draft_agrees_with_its_target(models: dict[str, Any], arch: str) -> None:
    """The draft (the target's first layers) predicts most of the target's greedy tokens, so speculation on the
    pair accepts tokens; and it is not a copy (some disagreement leaves rejections to roll back)."""
    family: HybridFamily = models[arch]
    prompt, target_tokens = _greedy(family.target)
    share = _agreement(family.draft, prompt, target_tokens)
    assert 0.5 <= share < 1.0, share


def test_qwen35_nextn_target_keeps_the_trunk_and_its_head_file_matches(models: dict[str, Any], raw: list[_Raw]
                                                                         ) -> None:
    """The target with a NextN layer reports it (``llama_model_n_layer_nextn`` = 1), its trunk gives the same
    logits as the same trunk without the layer, the separate head file loads as an MTP-only model, and an MTP
    context on the head file computes exactly what an MTP context on the target's own NextN layer computes."""
    mtp: MtpModels = models["mtp"]
    tokens = [1, 300, 301, 302, 303]
    target = _open(raw, mtp.target, load_mtp=True)
    plain = _open(raw, mtp.plain)
    assert ll.llama_model_n_layer_nextn(target.model) == 1
    assert ll.llama_model_n_layer_nextn(plain.model) == 0
    np.testing.assert_allclose(target.decode_all(tokens), plain.decode_all(tokens), atol=1e-4)

    hidden = np.random.default_rng(0).standard_normal((len(tokens), 256))
    in_file = _open(raw, mtp.target, load_mtp=True, mtp_context=True)
    head = _open(raw, mtp.head, load_mtp=True, mtp_context=True)
    assert ll.llama_model_n_layer_nextn(head.model) == 1
    from_target = in_file.decode_mtp(tokens, hidden)
    from_head = head.decode_mtp(tokens, hidden)
    assert np.isfinite(from_head).all()
    np.testing.assert_array_equal(from_head, from_target)


def test_qwen35_mtp_head_predicts_the_token_after_next(models: dict[str, Any], raw: list[_Raw]) -> None:
    """Fed token t+1 (and any hidden state: the head ignores it by construction), the head's argmax is the
    target's greedy token t+2 most of the time, so MTP drafting on this model is accepted."""
    mtp: MtpModels = models["mtp"]
    prompt, greedy = _greedy(mtp.target)
    tokens = [*prompt, *greedy]
    head = _open(raw, mtp.head, load_mtp=True, mtp_context=True)
    predicted = head.decode_mtp(tokens, np.zeros((len(tokens), 256))).argmax(axis=1)
    # predicted[i] is the head's guess for tokens[i + 1] given tokens[i]
    start = len(prompt) - 1
    hits = sum(int(predicted[i]) == tokens[i + 1] for i in range(start, len(tokens) - 1))
    assert hits / (len(tokens) - 1 - start) >= 0.5


def test_mamba_is_recurrent_and_gets_no_rollback_snapshots(models: dict[str, Any], raw: list[_Raw]) -> None:
    """The mamba model loads and decodes, and llama.cpp clamps ``n_rs_seq`` to 0 for it (no partial rollback)."""
    r = _open(raw, models["mamba"], n_rs_seq=4)
    assert ll.llama_model_is_recurrent(r.model)
    assert ll.llama_n_rs_seq(r.ctx) == 0
    assert np.isfinite(r.decode_all([1, 300, 301])).all()
