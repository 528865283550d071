"""The 2026 pairs (MTP heads, MTP head files, a plain draft on a hybrid target) and the schema that describes them:
the drafter kind, hybrid layers (recurrent state), sliding-window KV and the MTP context in the memory estimate.

Breaking it on purpose: counting every layer as a full-context KV layer (``kv_bytes`` reading ``n_layer`` only,
as before these fields) made Qwen3.6 27B's KV four times too large and Gemma 4's far too large at 32k tokens;
``test_memory_of_hybrid_sliding_window_and_mtp_pairs`` failed.
"""

from __future__ import annotations

import copy
import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest

from outrider.catalogue import load_catalogue
from outrider.catalogue.loading import validate_data
from outrider.catalogue.schema import DRAFTER_KINDS, SWA_UBATCH
from outrider.catalogue.service import unsupported_drafter
from outrider.engine.compat import DRAFT_RECURRENT_STATES, ROLLBACK_TOKENS

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "models" / "catalogue.toml"
F16 = 2


def _data() -> dict[str, Any]:
    return tomllib.loads(SHIPPED.read_text(encoding="utf-8"))


def test_the_2026_pairs_are_listed_with_their_drafter_kinds() -> None:
    cat = load_catalogue(SHIPPED)
    kinds = {p.id: p.draft_kind for p in cat}
    assert kinds["qwen3.6-27b-mtp"] == "mtp"
    assert kinds["qwen3.6-35b-a3b-mtp"] == "mtp"
    assert kinds["qwen3.8-27b-mtp-head"] == "mtp-head"
    assert kinds["gemma-4-31b-mtp-head"] == "mtp-head"
    assert kinds["gemma-4-12b-mtp-head"] == "mtp-head"
    assert kinds["qwen3.6-27b-0.8b"] == "model"
    assert set(kinds.values()) <= set(DRAFTER_KINDS)
    for pid in ("qwen3.6-27b-mtp", "qwen3.6-35b-a3b-mtp"):
        pair = cat.get(pid)
        assert pair.draft is None and pair.files == (pair.target,) and pair.target.nextn_layers == 1
        assert pair.drafter_text == "MTP heads in this model (1 NextN layer)"
    head = cat.get("qwen3.8-27b-mtp-head")
    assert head.draft is not None and head.draft.file == "MTP/mtp-Qwen3.8-27B-Q4_0.gguf"
    assert head.drafter_text == "MTP head file MTP/mtp-Qwen3.8-27B-Q4_0.gguf"
    assert cat.get("qwen3.6-27b-0.8b").target.is_hybrid and cat.get("qwen3.6-27b-0.8b").draft.is_hybrid  # type: ignore[union-attr]
    # Pinned, hashed, and not yet matched against the Hub: `outrider models refresh --write` records `checked`.
    for pid in ("qwen3.6-27b-mtp", "qwen3.6-35b-a3b-mtp", "qwen3.8-27b-mtp-head", "gemma-4-31b-mtp-head",
                "gemma-4-12b-mtp-head", "qwen3.6-27b-0.8b"):
        pair = cat.get(pid)
        for f in pair.files:
            assert len(f.revision) == 40 and f.sha256 and len(f.sha256) == 64 and f.size > 0
        assert pair.checked == ""
        assert pair.to_json()["drafter"] == pair.drafter_text


def test_memory_of_hybrid_sliding_window_and_mtp_pairs() -> None:
    cat = load_catalogue(SHIPPED)
    ctx = 32768
    mtp = cat.get("qwen3.6-27b-mtp").memory(ctx)
    # Qwen3.6 27B: 16 of 64 layers hold KV (4 heads x 256); the MTP context holds one more such layer; 48 Gated
    # DeltaNet layers hold a recurrent state, counted with the engine's rollback snapshots.
    assert mtp.target_kv == 2 * 16 * 4 * 256 * ctx * F16
    assert mtp.draft_kv == 2 * 1 * 4 * 256 * ctx * F16
    assert mtp.recurrent == 156893184 * (1 + ROLLBACK_TOKENS)
    assert mtp.total == mtp.weights + mtp.kv_cache + mtp.recurrent
    gemma = cat.get("gemma-4-31b-mtp-head").memory(ctx)
    # Gemma 4 31B: 10 global layers (4 x 512) at the full context, 50 sliding ones (16 x 256) at the window.
    assert gemma.target_kv == (2 * 10 * 4 * 512 * ctx + 2 * 50 * 16 * 256 * (1024 + SWA_UBATCH)) * F16
    assert gemma.draft_kv == 0  # the assistant head drafts from the target's own cache
    assert gemma.draft_weights == 514687104 and gemma.recurrent == 0
    small = cat.get("gemma-4-31b-mtp-head").memory(1024)
    assert small.target_kv == (2 * 10 * 4 * 512 * 1024 + 2 * 50 * 16 * 256 * 1024) * F16  # window > context
    plain = cat.get("qwen3.6-27b-0.8b").memory(ctx)
    assert plain.draft_kv == 2 * 6 * 2 * 256 * ctx * F16
    assert plain.recurrent == 156893184 * (1 + ROLLBACK_TOKENS) + 20201472 * DRAFT_RECURRENT_STATES


def test_architecture_notes_say_what_the_memory_depends_on() -> None:
    cat = load_catalogue(SHIPPED)
    notes = cat.get("qwen3.6-27b-mtp").architecture_notes
    assert notes[0].startswith("Hybrid model: 16 of 64 layers keep a KV cache") and "157 MB per sequence" in notes[0]
    assert "own MTP heads (1 NextN layer" in notes[1]
    assert cat.get("gemma-4-12b-mtp-head").architecture_notes[0] == (
        "Sliding window: 40 of 48 layers cache only the last 1,024 positions")
    assert cat.get("qwen3-8b-q4km-0.6b").architecture_notes == ()


def test_gemma_assistant_heads_are_listed_as_not_runnable_yet() -> None:
    cat = load_catalogue(SHIPPED)
    for pid in ("gemma-4-31b-mtp-head", "gemma-4-12b-mtp-head"):
        assert "cannot run such heads yet" in unsupported_drafter(cat.get(pid))
    for pid in ("qwen3.6-27b-mtp", "qwen3.8-27b-mtp-head", "qwen3.6-27b-0.8b", "qwen3-8b-q4km-0.6b"):
        assert unsupported_drafter(cat.get(pid)) == ""


def test_a_target_whose_recurrent_state_cannot_roll_back_is_listed_with_the_reason() -> None:
    """Before download, from the catalogue's architecture fact: a Granite 4 hybrid target could never be drafted for
    (llama.cpp keeps no rollback snapshots for granitehybrid); the shipped hybrid Qwen3.6 pairs can."""
    cat = load_catalogue(SHIPPED)
    pair = cat.get("qwen3.6-27b-0.8b")
    assert pair.target.architecture == "qwen35" and unsupported_drafter(pair) == ""
    granite = dataclasses.replace(pair, target=dataclasses.replace(pair.target, architecture="granitehybrid"))
    reason = unsupported_drafter(granite)
    assert "granitehybrid" in reason and "plain decoding" in reason


def _pair(data: dict[str, Any], pid: str) -> dict[str, Any]:
    return next(p for p in data["pairs"] if p["id"] == pid)


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: _pair(d, "qwen3.6-27b-mtp").update(drafter="heads"), "drafter must be one of"),
    (lambda d: _pair(d, "qwen3.6-27b-mtp").update(target="qwen3.6-27b-q4_k_m"), "needs a target with nextn_layers"),
    (lambda d: _pair(d, "qwen3.6-27b-mtp").update(drafter="lookup"), "drafter lookup needs draft = 'prompt-lookup'"),
    (lambda d: _pair(d, "qwen3.8-27b-mtp-head").update(draft="qwen3.5-0.8b-q4_0"), "needs nextn_layers > 0"),
    (lambda d: _pair(d, "qwen3.8-27b-mtp-head").update(draft="mtp"), "needs draft to be a models key"),
    (lambda d: d["models"]["qwen3.8-27b-mtp-head-q4_0"].update(architecture="glm4moe"), "is for glm4moe models"),
    (lambda d: d["models"]["gemma-4-12b-it-q4_k_m"].pop("swa_window"), "need their swa_window"),
    (lambda d: d["models"]["gemma-4-12b-it-q4_k_m"].update(n_layer_kv=20), "at most n_layer"),
    (lambda d: d["models"]["qwen3.6-27b-q4_k_m"].update(recurrent_bytes=-1), "recurrent_bytes must be a whole"),
    (lambda d: d["models"]["qwen3.6-27b-q4_k_m"].update(architecture=""), "architecture must be"),
])
def test_the_validator_catches_drafter_and_memory_mistakes(mutate: Any, expected: str) -> None:
    data = copy.deepcopy(_data())
    mutate(data)
    problems = validate_data(data)
    assert any(expected in p for p in problems), problems
