"""Can this draft speculate for this target? The rules of llama.cpp's ``common_speculative_are_compatible``.

The rules (``common/speculative.cpp`` in the llama.cpp vendored by llama-cpp-python 0.3.36), checked in order:

1. same vocabulary type;
2. same add-BOS flag and, when BOS is added, the same BOS id;
3. same add-EOS flag and, when EOS is added, the same EOS id;
4. vocabulary sizes at most ``VOCAB_MAX_SIZE_DIFFERENCE`` apart;
5. identical token text for every id from ``VOCAB_CHECK_START_TOKEN_ID`` up to the smaller vocabulary.

The same check runs on a loaded model (facts from ``llama_vocab_*``) and on GGUF headers alone (facts from the
``tokenizer.ggml.*`` metadata), so a pair can be explained before it is downloaded or loaded. This module must
not import llama_cpp: the GUI uses it.

One more rule concerns the target alone (``rollback_report``, from ``general.architecture``): a draft token the
target rejects must be taken back out of its memory. Attention layers forget positions exactly; a recurrent
layer keeps one state per sequence, which llama.cpp rolls back only on the architectures that store per-token
state snapshots (``llm_arch_supports_rs_rollback``). On the other recurrent and hybrid architectures Outrider
runs plain decoding, with this rule's reason as the note.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from outrider.engine.errors import IncompatiblePairError
from outrider.engine.llama.gguf_header import GGUFHeader, read_header

VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5

# llama.cpp's enum llama_vocab_type, keyed by the GGUF ``tokenizer.ggml.model`` string.
VOCAB_TYPE_NAMES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo-2"}
_TOKENIZER_MODEL_TO_TYPE = {"no_vocab": 0, "none": 0, "llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5,
                            "plamo2": 6}
# Defaults llama.cpp applies when the GGUF does not say (llama-vocab.cpp, load()); BPE defaults vary by
# pre-tokenizer, so a header without the key is compared as "unspecified".
_DEFAULT_ADD_BOS = {1: True, 3: True, 4: False}
_DEFAULT_ADD_EOS = {1: False, 3: False, 4: True}
# Special-token ids llama.cpp assumes when the GGUF does not give one, or gives one outside the vocabulary (it
# warns and keeps the default): llama-vocab.cpp, load(); -1 is LLAMA_TOKEN_NULL.
_DEFAULT_BOS_ID = {0: -1, 1: 1, 2: 11, 3: 101, 4: -1, 5: -1}
_DEFAULT_EOS_ID = {0: -1, 1: 2, 2: 11, 3: -1, 4: 1, 5: -1}


# GGUF architecture names (src/llama-arch.cpp) of llm_arch_is_recurrent, llm_arch_is_hybrid and
# llm_arch_supports_rs_rollback in the vendored llama.cpp.
RECURRENT_ARCHITECTURES = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID_ARCHITECTURES = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
    "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp",
    "deepseek4", "minimax-01",
})
ROLLBACK_TOKENS = 8
"""Recurrent-state snapshots a hybrid target's context keeps (``llama_context_params.n_rs_seq``): the most tokens
one rollback can remove from the end of the latest batch, so the longest draft a hybrid target verifies. Each
snapshot costs one sequence's recurrent state (157 MB on Qwen3.6-27B), hence a bound and not ``k_max`` (64)."""
DRAFT_RECURRENT_STATES = 2
"""Recurrent states a hybrid *draft* model's context holds: its own and one checkpoint (drafts are one-token
decodes, which snapshots cannot step back through; ``ModelContext.checkpoint``)."""

ROLLBACK_ARCHITECTURES = frozenset({
    "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe", "lfm2",
    "lfm2moe", "bailingmoe3",
})


@dataclasses.dataclass(frozen=True)
class VocabFacts:
    """What the compatibility rules look at. ``token_texts`` holds every token's raw text in id order."""

    vocab_type: int
    add_bos: bool | None
    bos_id: int
    add_eos: bool | None
    eos_id: int
    token_texts: Sequence[str]

    @property
    def n_tokens(self) -> int:
        return len(self.token_texts)


@dataclasses.dataclass(frozen=True)
class CompatibilityReport:
    """``ok`` or the first failing ``rule`` with a sentence naming both values."""

    ok: bool
    rule: str = ""
    reason: str = ""

    def raise_if_incompatible(self) -> None:
        if not self.ok:
            raise IncompatiblePairError(self.rule, self.reason)


def _type_name(t: int) -> str:
    return VOCAB_TYPE_NAMES.get(t, str(t))


def check_facts(target: VocabFacts, draft: VocabFacts) -> CompatibilityReport:
    """Apply the rules in llama.cpp's order and report the first that fails."""
    if target.vocab_type != draft.vocab_type:
        return CompatibilityReport(
            False,
            "vocab_type",
            f"draft vocabulary type is {_type_name(draft.vocab_type)}, target {_type_name(target.vocab_type)}",
        )
    if target.add_bos != draft.add_bos:
        return CompatibilityReport(
            False, "add_bos", f"draft adds BOS: {_flag(draft.add_bos)}, target adds BOS: {_flag(target.add_bos)}"
        )
    if target.add_bos and target.bos_id != draft.bos_id:
        return CompatibilityReport(False, "bos_id", f"draft BOS id is {draft.bos_id}, target {target.bos_id}")
    if target.add_eos != draft.add_eos:
        return CompatibilityReport(
            False, "add_eos", f"draft adds EOS: {_flag(draft.add_eos)}, target adds EOS: {_flag(target.add_eos)}"
        )
    if target.add_eos and target.eos_id != draft.eos_id:
        return CompatibilityReport(False, "eos_id", f"draft EOS id is {draft.eos_id}, target {target.eos_id}")
    n_t, n_d = target.n_tokens, draft.n_tokens
    if abs(n_t - n_d) > VOCAB_MAX_SIZE_DIFFERENCE:
        return CompatibilityReport(
            False,
            "vocab_size",
            f"draft vocabulary has {n_d} tokens, target {n_t} (more than {VOCAB_MAX_SIZE_DIFFERENCE} apart)",
        )
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(n_t, n_d)):
        if target.token_texts[i] != draft.token_texts[i]:
            return CompatibilityReport(
                False,
                "token_text",
                f"token {i} differs: draft {draft.token_texts[i]!r}, target {target.token_texts[i]!r}",
            )
    return CompatibilityReport(True)


def _flag(value: bool | None) -> str:
    return "unspecified" if value is None else ("yes" if value else "no")


def facts_from_header(header: GGUFHeader) -> VocabFacts:
    """Read the compatibility facts from GGUF metadata (no model load)."""
    md = header.metadata
    model = str(md.get("tokenizer.ggml.model", "none"))
    vocab_type = _TOKENIZER_MODEL_TO_TYPE.get(model, -1)
    tokens = md.get("tokenizer.ggml.tokens", [])
    add_bos = md.get("tokenizer.ggml.add_bos_token")
    add_eos = md.get("tokenizer.ggml.add_eos_token")

    def special_id(key: str, defaults: dict[int, int]) -> int:
        value = md.get(key)
        default = defaults.get(vocab_type, -1)
        if not isinstance(value, int) or isinstance(value, bool):
            return default
        return value if 0 <= value < len(tokens) else default

    return VocabFacts(
        vocab_type=vocab_type,
        add_bos=bool(add_bos) if add_bos is not None else _DEFAULT_ADD_BOS.get(vocab_type),
        bos_id=special_id("tokenizer.ggml.bos_token_id", _DEFAULT_BOS_ID),
        add_eos=bool(add_eos) if add_eos is not None else _DEFAULT_ADD_EOS.get(vocab_type),
        eos_id=special_id("tokenizer.ggml.eos_token_id", _DEFAULT_EOS_ID),
        token_texts=[str(t) for t in tokens],
    )


def rollback_report(architecture: str) -> CompatibilityReport:
    """Can draft tokens be rolled back out of a target of this GGUF ``architecture``? (see the module docstring)"""
    recurrent = architecture in RECURRENT_ARCHITECTURES or architecture in HYBRID_ARCHITECTURES
    if recurrent and architecture not in ROLLBACK_ARCHITECTURES:
        kind = "recurrent" if architecture in RECURRENT_ARCHITECTURES else "hybrid (recurrent + attention)"
        return CompatibilityReport(
            False,
            "recurrent_rollback",
            f"the target's architecture {architecture} is {kind}, and llama.cpp cannot take rejected draft tokens "
            "back out of its recurrent state: it runs with plain decoding (no draft)",
        )
    return CompatibilityReport(True)


def check_files(target: str | os.PathLike[str], draft: str | os.PathLike[str]) -> CompatibilityReport:
    """Header-only compatibility of two GGUF files (the target's rollback rule first, then the vocabulary
    rules). Raises GGUFHeaderError for unreadable files."""
    target_header = read_header(target)
    rollback = rollback_report(target_header.architecture)
    if not rollback.ok:
        return rollback
    return check_facts(facts_from_header(target_header), facts_from_header(read_header(draft)))


def check_target_file(target: str | os.PathLike[str]) -> CompatibilityReport:
    """Header-only: can this GGUF be a speculation target at all (prompt lookup has no draft to compare)?"""
    return rollback_report(read_header(target, keep_arrays=False).architecture)
