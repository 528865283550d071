"""Log-probabilities under speculation are the target's own: every emitted token's logprob and its top
alternatives equal an independent reference — target-only llama.cpp, one token per ``llama_decode``
(``tests/support/reference_decoding.py``), log-softmax of its logits — while prompt lookup drafted and the target
accepted drafted tokens (so the rows read were batch rows of verification passes). Fill-in-the-middle uses the
GGUF's FIM tokens in prefix-suffix-middle order, and a model without them refuses a suffix.

Breaking it on purpose: reading ``logits_row(0)`` for every token of a step (instead of row i) made the logprobs
of accepted draft tokens differ from the reference by several nats.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.errors import FimUnsupported
from outrider.engine.events import DoneEvent, StepEvent
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams, SamplingParams
from support.reference_decoding import ReferenceModel
from support.tiny_gguf import TinyShape, build_vocab, random_weights, write_gguf


def test_logprobs_under_speculation_are_the_targets(smol: Engine, smollm_path: Path) -> None:
    prompt = smol.tokenize_chat([ChatMessage("user", "Repeat exactly: the cat sat on the mat, the cat sat on the "
                                                     "mat, the cat sat on the mat.")])
    tokens: list[int] = []
    entries = []
    done = None
    for event in smol.generate(prompt, max_tokens=24, sampling=SamplingParams(), draft=DraftParams(k=8),
                               top_logprobs=3):
        if isinstance(event, StepEvent):
            tokens += event.tokens
            entries += event.logprobs
        else:
            done = event
    assert isinstance(done, DoneEvent) and done.stats.accepted > 0  # drafted tokens were accepted
    assert len(entries) == len(tokens)
    with ReferenceModel(smollm_path, n_ctx=1024) as ref:
        for i, (token, (text, raw, logprob, top)) in enumerate(zip(tokens, entries, strict=True)):
            logits = ref.logits_after([*prompt, *tokens[:i]])
            log_p = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
            assert logprob == pytest.approx(log_p[token], abs=2e-3), i
            assert bytes(raw) == smol.target.piece(token) and text == bytes(raw).decode("utf-8", "replace")
            assert len(top) == 3 and top[0][2] == pytest.approx(float(log_p.max()), abs=2e-3)
            assert [t[2] for t in top] == sorted((t[2] for t in top), reverse=True)
            assert all(alp <= top[0][2] + 1e-9 for _, _, alp in top)


def test_a_model_without_fim_tokens_refuses_a_suffix(smol: Engine) -> None:
    with pytest.raises(FimUnsupported, match="fill-in-the-middle"):
        smol.tokenize_infill("def f(", "):\n    return x")


def test_fim_uses_the_declared_tokens(tmp_path: Path, backend: Backend) -> None:
    shape = TinyShape(n_layer=1)
    vocab = build_vocab()
    pre, suf, mid = 3, 4, 5  # three byte tokens stand for the FIM markers
    path = write_gguf(tmp_path / "fim.gguf", random_weights(shape, len(vocab[0]), 7), shape, vocab,
                      extra_kv={"tokenizer.ggml.fim_pre_token_id": pre, "tokenizer.ggml.fim_suf_token_id": suf,
                                "tokenizer.ggml.fim_mid_token_id": mid})
    engine = Engine(backend)
    engine.load(PairSpec(target=str(path), context=ContextSettings(n_ctx=256, threads=1)))
    try:
        tokens = engine.tokenize_infill("the of", "and to")
        body = engine.target.tokenize("the of", add_special=False, parse_special=False)
        tail = engine.target.tokenize("and to", add_special=False, parse_special=False)
        assert tokens == [engine.target.bos_id, pre, *body, suf, *tail, mid]
        events = list(engine.generate(tokens, max_tokens=3))
        assert isinstance(events[-1], DoneEvent)
    finally:
        engine.unload()
