"""Structured output under speculation is exact: with a JSON schema, greedy speculative decoding (SmolLM2 with
prompt lookup, and the tiny family's draft model) gives token for token what an independent reference gives —
target-only decoding, one token per ``llama_decode``, masked by its own llama.cpp grammar sampler over the whole
vocabulary (``tests/support/reference_decoding.py``; nothing of ``engine/grammar.py``). Drafts were proposed and
accepted (speculation happened), and the text validates against the schema (``jsonschema``). At temperature > 0
the reply validates too, and a draft model's proposals are all grammar-allowed.

Breaking it on purpose: with the unmasked ``_verify`` in place of ``verify_draft`` in ``SpeculativeDecoder.generate``
the target emitted a token the grammar forbids (llama.cpp aborted the process on accepting it; ``GrammarMask.accept``
now refuses it with ``GrammarError``). Checking the draft against the unmasked argmax alone changed nothing on
these prompts: the drafts are cut to allowed tokens first (``cut_draft``), and an allowed argmax is the masked one.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import jsonschema
import llama_cpp.llama_cpp as ll
import numpy as np
import pytest

from outrider.engine.drafters import ModelDraft
from outrider.engine.engine import Engine, PairSpec
from outrider.engine.events import DoneEvent, StepEvent
from outrider.engine.grammar import gbnf_of
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams, GrammarSpec, SamplingParams
from support.reference_decoding import ReferenceModel
from support.tiny_gguf import Family

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer"},
                                           "languages": {"type": "array", "items": {"type": "string",
                                                                                   "maxLength": 12},
                                                         "maxItems": 3}},
          "required": ["name", "age", "languages"], "additionalProperties": False}
SPEC = GrammarSpec("json_schema", json.dumps(SCHEMA))


def reference_constrained_greedy(ref: ReferenceModel, prompt: list[int], gbnf: str, n: int,
                                 is_eog: list[bool]) -> list[int]:
    """Target-only greedy decoding under ``gbnf``: every step masks the whole vocabulary with llama.cpp's grammar
    sampler, takes the argmax, and accepts it; stops at an end-of-generation token."""
    sampler = ll.llama_sampler_init_grammar(ref._vocab, gbnf.encode(), b"root")
    assert sampler
    data = (ll.llama_token_data * ref.n_vocab)()
    fields = np.frombuffer(data, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
    out: list[int] = []
    try:
        for _ in range(n):
            logits = ref.logits_after([*prompt, *out])
            fields["id"] = np.arange(ref.n_vocab)
            fields["logit"] = logits
            array = ll.llama_token_data_array(data=ctypes.cast(data, ctypes.POINTER(ll.llama_token_data)),
                                              size=ref.n_vocab, selected=-1, sorted=False)
            ll.llama_sampler_apply(sampler, ctypes.byref(array))
            masked = fields["logit"].astype(np.float64)
            token = int(np.argmax(masked))
            if is_eog[token]:
                break
            ll.llama_sampler_accept(sampler, token)
            out.append(token)
    finally:
        ll.llama_sampler_free(sampler)
    return out


def generate(engine: Engine, prompt: list[int], sampling: SamplingParams, k: int, n: int = 96
             ) -> tuple[list[int], DoneEvent]:
    tokens: list[int] = []
    done = None
    for event in engine.generate(prompt, max_tokens=n, sampling=sampling, draft=DraftParams(k=k), grammar=SPEC):
        if isinstance(event, StepEvent):
            tokens += event.tokens
        else:
            done = event
    assert done is not None
    return tokens, done


@pytest.mark.slow
def test_json_schema_greedy_under_prompt_lookup_equals_the_reference(smol: Engine, smollm_path: Path) -> None:
    prompt = smol.tokenize_chat([ChatMessage("user", "Describe a programmer called Ada as JSON with name, age "
                                                     "and languages. Ada is 36 and writes Python and C.")])
    tokens, done = generate(smol, prompt, SamplingParams(), k=8)
    assert done.stop_reason == "stop", done.text
    jsonschema.validate(json.loads(done.text), SCHEMA)
    assert done.stats.drafted > 0 and done.stats.accepted > 0  # speculation happened
    is_eog = [smol.target.is_eog(t) for t in range(smol.target.n_vocab)]
    with ReferenceModel(smollm_path, n_ctx=1024) as ref:
        expected = reference_constrained_greedy(ref, prompt, gbnf_of(SPEC), 96, is_eog)
    assert tokens == expected


def test_json_schema_sampled_validates(smol: Engine) -> None:
    prompt = smol.tokenize_chat([ChatMessage("user", "A person as JSON, please.")])
    for seed in range(3):
        _, done = generate(smol, prompt, SamplingParams(temperature=0.8, seed=seed), k=6, n=200)
        if done.stop_reason == "stop":
            jsonschema.validate(json.loads(done.text), SCHEMA)
        else:  # cut at max_tokens: a prefix of valid JSON
            assert done.text.startswith("{")


@pytest.fixture(scope="module")
def family_engine(backend: Backend, tiny_family: Family) -> Engine:
    engine = Engine(backend)
    engine.load(PairSpec(target=str(tiny_family.target), draft=str(tiny_family.draft),
                         context=ContextSettings(n_ctx=512, threads=2)))
    return engine


def test_a_draft_model_is_masked_and_greedy_stays_exact(family_engine: Engine, tiny_family: Family) -> None:
    engine = family_engine
    assert isinstance(engine._decoder.drafter, ModelDraft)  # type: ignore[union-attr]
    prompt = engine.tokenize_prompt("the of and to in is that it for on with")
    tokens, done = generate(engine, prompt, SamplingParams(), k=4, n=48)
    assert done.stats.drafted > 0
    is_eog = [engine.target.is_eog(t) for t in range(engine.target.n_vocab)]
    with ReferenceModel(tiny_family.target, n_ctx=512) as ref:
        expected = reference_constrained_greedy(ref, prompt, gbnf_of(SPEC), 48, is_eog)
    assert tokens == expected
    assert done.text.startswith("{")


def test_a_bad_schema_is_a_grammar_error(smol: Engine) -> None:
    from outrider.engine.errors import GrammarError

    with pytest.raises(GrammarError):
        smol.generate([1, 2], grammar=GrammarSpec("gbnf", "root ::= ("))
