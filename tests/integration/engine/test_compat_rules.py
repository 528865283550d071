"""Every compatibility rule fails on its own — on facts, on GGUF headers, and when loading a pair."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from outrider.engine.chat import ChatMessage
from outrider.engine.compat import VocabFacts, check_facts, check_files
from outrider.engine.engine import Engine, PairSpec
from outrider.engine.errors import IncompatiblePairError
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings
from support.tiny_gguf import TinyShape, build_vocab, random_weights, write_gguf

BASE = VocabFacts(
    vocab_type=1, add_bos=True, bos_id=1, add_eos=False, eos_id=2, token_texts=[f"t{i}" for i in range(1000)]
)


@pytest.mark.parametrize(
    ("change", "rule", "words"),
    [
        ({"vocab_type": 2}, "vocab_type", "draft vocabulary type is BPE, target SPM"),
        ({"add_bos": False}, "add_bos", "draft adds BOS: no, target adds BOS: yes"),
        ({"bos_id": 7}, "bos_id", "draft BOS id is 7, target 1"),
        ({"add_eos": True}, "add_eos", "draft adds EOS: yes, target adds EOS: no"),
        (
            {"token_texts": [f"t{i}" for i in range(1200)]},
            "vocab_size",
            "draft vocabulary has 1200 tokens, target 1000 (more than 128 apart)",
        ),
        ({"token_texts": [f"t{i}" if i != 42 else "x" for i in range(1000)]}, "token_text", "token 42 differs"),
    ],
)
def test_each_rule_fails_alone(change: dict[str, object], rule: str, words: str) -> None:
    report = check_facts(BASE, dataclasses.replace(BASE, **change))  # type: ignore[arg-type]
    assert not report.ok
    assert report.rule == rule
    assert words in report.reason


def test_rules_that_must_pass() -> None:
    assert check_facts(BASE, BASE).ok
    near = dataclasses.replace(BASE, token_texts=[f"t{i}" for i in range(1100)])  # 100 apart: allowed
    assert check_facts(BASE, near).ok
    low_ids_differ = dataclasses.replace(BASE, token_texts=["x", *BASE.token_texts[1:]])  # ids < 5 unchecked
    assert check_facts(BASE, low_ids_differ).ok
    eos_differs_unused = dataclasses.replace(BASE, eos_id=9)  # EOS not added: id not compared
    assert check_facts(BASE, eos_differs_unused).ok


def _model(tmp: Path, name: str, **kwargs: object) -> Path:
    shape = TinyShape(n_layer=1, n_embd=64, n_head=2, n_ff=128)
    vocab = build_vocab(int(kwargs.pop("extra", 0)))  # type: ignore[call-overload]
    return write_gguf(tmp / f"{name}.gguf", random_weights(shape, len(vocab[0]), 3), shape, vocab, **kwargs)  # type: ignore[arg-type]


def test_header_only_check_explains_before_loading(tmp_path: Path) -> None:
    target = _model(tmp_path, "target")
    assert check_files(target, _model(tmp_path, "same")).ok
    cases = {
        "vocab_size": _model(tmp_path, "big", extra=300),
        "bos_id": _model(tmp_path, "bos", bos_id=5),
        "add_bos": _model(tmp_path, "nobos", add_bos=False),
        "vocab_type": _model(tmp_path, "bpe", tokenizer_model="gpt2"),
    }
    for rule, draft in cases.items():
        report = check_files(target, draft)
        assert (report.ok, report.rule) == (False, rule), report


def test_loading_an_incompatible_pair_names_the_rule(tmp_path: Path) -> None:
    target = _model(tmp_path, "target")
    engine = Engine(Backend())
    with pytest.raises(IncompatiblePairError, match="more than 128 apart"):
        engine.load(
            PairSpec(
                target=str(target), draft=str(_model(tmp_path, "big", extra=300)), context=ContextSettings(n_ctx=128)
            )
        )
    info = engine.load(
        PairSpec(target=str(target), draft=str(_model(tmp_path, "same")), context=ContextSettings(n_ctx=128))
    )
    assert info.draft_mode == "model"
    engine.unload()


def test_unsafe_model_template_falls_back_with_a_note(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    evil = "{{ lipsum.__globals__['os'].popen('touch " + str(marker) + "').read() }}"
    model = _model(tmp_path, "evil", chat_template=evil)
    engine = Engine(Backend())
    info = engine.load(PairSpec(target=str(model), context=ContextSettings(n_ctx=128)))
    try:
        assert info.chat_template == "plain"
        assert any("unsafe" in note and "built-in template" in note for note in info.notes)
        engine.tokenize_chat([ChatMessage("user", "hi")])
        assert not marker.exists()
    finally:
        engine.unload()
