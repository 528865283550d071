"""Every compatibility rule fails on its own, at its boundary, on GGUF headers AND when loading the pair.

Real GGUF files are generated for each case (``support/tiny_gguf.py``), each differing from its target in exactly
one fact (checked). The same pair then goes through the header-only path (``compat.check_files`` — what the
catalogue view uses — and ``catalogue.local.check_local_pair`` — "add my own pair") and through ``Engine.load``
(``raise_if_incompatible`` on the loaded vocabularies); both must name the same rule, or both accept the pair.
Boundaries (llama.cpp's ``common_speculative_are_compatible``): vocabulary sizes 128 apart pass and 129 fail (either
way round); token texts are compared from id 5 (a difference at id 4 passes, at id 5 and at the last shared id
fails); special ids are compared only when that token is added. Header facts equal loaded facts for every file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from outrider.catalogue.local import check_local_pair
from outrider.engine.compat import (
    VOCAB_CHECK_START_TOKEN_ID,
    VOCAB_MAX_SIZE_DIFFERENCE,
    check_facts,
    check_files,
    facts_from_header,
)
from outrider.engine.engine import Engine, PairSpec
from outrider.engine.errors import IncompatiblePairError
from outrider.engine.llama.backend import LoadedModel
from outrider.engine.llama.gguf_header import read_header
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, ModelSettings
from support.tiny_gguf import TinyShape, build_vocab, random_weights, vocab_variant, write_gguf

SHAPE = TinyShape(n_layer=1, n_embd=64, n_head=2, n_ff=128)
N_BASE = len(build_vocab()[0])
LAST_SHARED = N_BASE - 1

# name -> write_gguf keyword arguments (plus "vocab": vocab_variant arguments)
VARIANTS: dict[str, dict[str, object]] = {
    "base": {},
    "same": {"seed": 11},  # other weights, same vocabulary facts
    "bpe": {"tokenizer_model": "gpt2"},
    "no_add_bos": {"add_bos": False},
    "bos5": {"bos_id": 5},
    "no_add_bos_bos5": {"add_bos": False, "bos_id": 5},
    "add_eos": {"add_eos": True},
    "add_eos_eos5": {"add_eos": True, "eos_id": 5},
    "eos5": {"eos_id": 5},
    "plus128": {"vocab": {"extra_words": VOCAB_MAX_SIZE_DIFFERENCE}},
    "plus129": {"vocab": {"extra_words": VOCAB_MAX_SIZE_DIFFERENCE + 1}},
    "renamed4": {"vocab": {"renamed": {VOCAB_CHECK_START_TOKEN_ID - 1: "renamed4"}}},
    "renamed5": {"vocab": {"renamed": {VOCAB_CHECK_START_TOKEN_ID: "renamed5"}}},
    "plus128_renamed_last": {"vocab": {"extra_words": 128, "renamed": {LAST_SHARED: "renamedlast"}}},
    "keys_omitted": {"add_bos": None, "add_eos": None, "bos_id": None, "eos_id": None},
    "ids_out_of_range": {"bos_id": 100_000, "eos_id": 100_001},
}

# (target, draft, failing rule or None, words of the reason, the one fact that differs or None)
CASES: list[tuple[str, str, str | None, str, str | None]] = [
    ("base", "same", None, "", None),
    ("base", "bpe", "vocab_type", "draft vocabulary type is BPE, target SPM", "vocab_type"),
    ("base", "no_add_bos", "add_bos", "draft adds BOS: no, target adds BOS: yes", "add_bos"),
    ("base", "bos5", "bos_id", "draft BOS id is 5, target 1", "bos_id"),
    ("no_add_bos", "no_add_bos_bos5", None, "", "bos_id"),  # BOS not added: its id is not compared
    ("base", "add_eos", "add_eos", "draft adds EOS: yes, target adds EOS: no", "add_eos"),
    ("add_eos", "add_eos_eos5", "eos_id", "draft EOS id is 5, target 2", "eos_id"),
    ("base", "eos5", None, "", "eos_id"),  # EOS not added: its id is not compared
    ("base", "plus128", None, "", "n_tokens"),
    ("plus128", "base", None, "", "n_tokens"),
    ("base", "plus129", "vocab_size", f"draft vocabulary has {N_BASE + 129} tokens, target {N_BASE}", "n_tokens"),
    ("plus129", "base", "vocab_size", f"draft vocabulary has {N_BASE} tokens, target {N_BASE + 129}", "n_tokens"),
    ("base", "renamed4", None, "", "token_texts"),  # ids below 5 are not compared
    ("base", "renamed5", "token_text", "token 5 differs: draft 'renamed5', target '<0x02>'", "token_texts"),
    ("base", "plus128_renamed_last", "token_text", f"token {LAST_SHARED} differs: draft 'renamedlast'", "n_tokens"),
    ("base", "keys_omitted", None, "", None),  # llama.cpp's SPM defaults: add BOS 1, not EOS 2
    ("base", "ids_out_of_range", None, "", None),  # ids outside the vocabulary are ignored by llama.cpp
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("compat")
    out = {}
    for name, spec in VARIANTS.items():
        kwargs = dict(spec)
        vocab = vocab_variant(**kwargs.pop("vocab", {}))  # type: ignore[arg-type]
        seed = int(kwargs.pop("seed", 3))  # type: ignore[call-overload]
        weights = random_weights(SHAPE, len(vocab[0]), seed)
        out[name] = write_gguf(directory / f"{name}.gguf", weights, SHAPE, vocab, name=name, **kwargs)  # type: ignore[arg-type]
    return out


@pytest.fixture(scope="module")
def engine(backend: Backend) -> Iterator[Engine]:
    e = Engine(backend)
    yield e
    e.unload()


def _differing_facts(a: Path, b: Path) -> set[str]:
    fa, fb = facts_from_header(read_header(a)), facts_from_header(read_header(b))
    out = {f.name for f in dataclasses.fields(fa) if getattr(fa, f.name) != getattr(fb, f.name)}
    if fa.n_tokens != fb.n_tokens:
        out = (out - {"token_texts"}) | {"n_tokens"}
    return out


@pytest.mark.parametrize(("target", "draft", "rule", "words", "differs"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_rule_on_headers_and_at_load(
    target: str, draft: str, rule: str | None, words: str, differs: str | None, files: dict[str, Path], engine: Engine
) -> None:
    # The pair differs in exactly the fact under test (so the rule fails on its own).
    assert _differing_facts(files[target], files[draft]) == ({differs} if differs else set())

    header = check_files(files[target], files[draft])
    local = check_local_pair(files[target], files[draft], n_ctx=256).compatibility
    assert (header.ok, header.rule) == (rule is None, rule or ""), header
    assert local == header
    assert words in header.reason

    spec = PairSpec(target=str(files[target]), draft=str(files[draft]), context=ContextSettings(n_ctx=64, threads=1))
    if rule is None:
        info = engine.load(spec)
        assert info.draft_mode == "model"
        engine.unload()
    else:
        with pytest.raises(IncompatiblePairError) as raised:
            engine.load(spec)
        assert raised.value.rule == rule
        assert str(raised.value) == header.reason  # the same sentence before and after loading
        assert engine.info is None


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_header_facts_equal_loaded_facts(name: str, files: dict[str, Path], backend: Backend) -> None:
    header = facts_from_header(read_header(files[name]))
    with LoadedModel(backend, files[name], ModelSettings()) as model:
        loaded = model.vocab_facts()
    for field in ("vocab_type", "add_bos", "bos_id", "add_eos", "eos_id", "n_tokens"):
        assert getattr(header, field) == getattr(loaded, field), field
    assert list(header.token_texts) == list(loaded.token_texts)
    assert check_facts(header, loaded).ok
