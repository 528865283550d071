"""'Add my own pair': two local GGUFs → header-only compatibility and a memory estimate (no load, no network)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from outrider.catalogue.schema import KV_BYTES_PER_ELEMENT, MemoryEstimate
from outrider.engine.compat import (
    DRAFT_RECURRENT_STATES,
    ROLLBACK_TOKENS,
    CompatibilityReport,
    check_facts,
    facts_from_header,
    rollback_report,
)
from outrider.engine.llama.gguf_header import GGUFHeader, read_header
from outrider.engine.memory_layout import layout_from_header


def kv_bytes_from_header(header: GGUFHeader, n_ctx: int) -> int:
    """F16 KV cache bytes at ``n_ctx`` from the architecture keys of a GGUF header: the attention layers of the
    trunk exactly (``engine/memory_layout.py``) where the architecture's rules are known, else every layer."""
    shape = layout_from_header(header)
    if shape.exact:
        return shape.kv_bytes_per_position * n_ctx
    n_layer = int(header.arch_value("block_count", 0) or 0)
    n_head = header.arch_value("attention.head_count", 0)
    n_head_kv = header.arch_value("attention.head_count_kv", n_head)
    n_embd = int(header.arch_value("embedding_length", 0) or 0)

    def first(v: Any) -> int:
        if isinstance(v, (list, tuple)):
            return int(max(v)) if v else 0
        try:
            return int(v)
        except (TypeError, ValueError):
            return 0

    heads = first(n_head)
    kv_heads = first(n_head_kv) or heads
    k_len = first(header.arch_value("attention.key_length", 0)) or (n_embd // heads if heads else 0)
    v_len = first(header.arch_value("attention.value_length", 0)) or k_len
    return n_layer * kv_heads * (k_len + v_len) * n_ctx * KV_BYTES_PER_ELEMENT


def recurrent_bytes_from_headers(target: GGUFHeader, draft: GGUFHeader | None = None) -> int:
    """Recurrent states a loaded pair keeps: the target's state and its ``ROLLBACK_TOKENS`` snapshots, a hybrid
    draft's state and its checkpoint (0 for dense models and for architectures whose rules are not known)."""
    total = layout_from_header(target).recurrent_bytes(ROLLBACK_TOKENS)
    if draft is not None:
        total += layout_from_header(draft).recurrent_state_bytes * DRAFT_RECURRENT_STATES
    return total


@dataclasses.dataclass(frozen=True)
class LocalPairReport:
    target: Path
    draft: Path
    compatibility: CompatibilityReport
    memory: MemoryEstimate

    def to_json(self) -> dict[str, Any]:
        return {"target": str(self.target), "draft": str(self.draft), "compatible": self.compatibility.ok,
                "rule": self.compatibility.rule or None, "reason": self.compatibility.reason or None,
                "memory": self.memory.to_json()}


def check_local_pair(target: str | os.PathLike[str], draft: str | os.PathLike[str],
                     n_ctx: int = 4096) -> LocalPairReport:
    """Raises GGUFHeaderError (with ``.kind``) for a file that is not a readable GGUF."""
    th, dh = read_header(target), read_header(draft)
    report = rollback_report(th.architecture)
    if report.ok:
        report = check_facts(facts_from_header(th), facts_from_header(dh))
    memory = MemoryEstimate(n_ctx, th.file_size, dh.file_size, kv_bytes_from_header(th, n_ctx),
                            kv_bytes_from_header(dh, n_ctx), recurrent_bytes_from_headers(th, dh))
    return LocalPairReport(Path(target), Path(draft), report, memory)
