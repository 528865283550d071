"""The loaded pair's memory figures against what llama.cpp itself says it allocated, for generated hybrid models:
a ``qwen35`` target with its NextN layer drafting by MTP (the target's KV of its attention layers, its recurrent
state with ``n_rs_seq`` snapshots, the MTP context's KV), and an ``lfm2`` target with its hybrid draft.

llama.cpp logs each buffer in MiB with two decimals ("KV buffer size = 2.00 MiB", "RS buffer size = ..."), and
the cells and layers of each cache ("llama_kv_cache: size = ... ( 1024 cells,   2 layers, ..."): the figures must
agree to the print's rounding, and the layer and cell counts exactly. The header-only estimate
(``layout_from_header``, what the catalogue uses before a download completes) must give the same bytes.

Breaking it (the previous all-layers figure for the target's KV, which counted all 8 trunk layers as attention
layers where 2 have a cache): the first test fails at the target's KV, 4.00 MiB against llama.cpp's 1.00 MiB.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from outrider.catalogue.local import check_local_pair
from outrider.engine.compat import DRAFT_RECURRENT_STATES, ROLLBACK_TOKENS
from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.gguf_header import read_header
from outrider.engine.llama.runtime import Backend
from outrider.engine.memory_layout import layout_from_header, padded_context
from outrider.engine.params import ContextSettings
from support.hybrid_gguf import Lfm2Shape, Qwen35Shape, make_lfm2_family, make_qwen35_family, make_qwen35_mtp

N_CTX = 1000  # not a multiple of 256: llama.cpp pads it to 1024
MIB = 2**20
ROUNDING = 0.0051  # MiB: llama.cpp prints two decimals


def _logged(lines: list[str], label: str) -> list[float]:
    return [float(m.group(1)) for line in lines if (m := re.search(re.escape(label) + r"\s*=\s*([0-9.]+) MiB", line))]


def _caches(lines: list[str]) -> list[tuple[int, int]]:
    """(cells, layers) of each KV cache llama.cpp created, in order."""
    return [(int(m.group(1)), int(m.group(2))) for line in lines
            if "llama_kv_cache" in line and (m := re.search(r"\(\s*(\d+) cells,\s*(\d+) layers", line))]


def _load(spec: PairSpec) -> tuple[Engine, list[str]]:
    """The engine and every line llama.cpp logged while loading (through the log's echo: its ring buffer keeps
    the last 400 lines, and a load logs more). A Backend of its own: llama.cpp has one log sink per process."""
    lines: list[str] = []
    engine = Engine(Backend(echo_log=lines.append))
    engine.load(spec)
    return engine, list(lines)


def test_an_mtp_hybrid_pair_reports_what_llama_cpp_allocated(tmp_path: Path) -> None:
    shape = Qwen35Shape(n_layer=8, n_embd=256)
    models = make_qwen35_mtp(tmp_path, shape=shape)
    engine, lines = _load(PairSpec(target=str(models.target), mtp=True, context=ContextSettings(n_ctx=N_CTX,
                                                                                                 threads=2)))
    try:
        info = engine.info
        assert info is not None and info.draft_mode == "mtp"
        kv = _logged(lines, "KV buffer size")
        rs = _logged(lines, "RS buffer size")
        assert len(kv) == 2 and len(rs) == 1, lines  # the target's cache, then the MTP context's; one RS buffer
        assert _caches(lines) == [(1024, 2), (1024, 1)]  # attention layers 3 and 7; the NextN layer alone
        assert info.target_kv_bytes / MIB == pytest.approx(kv[0], abs=ROUNDING)
        assert info.draft_kv_bytes / MIB == pytest.approx(kv[1], abs=ROUNDING)
        assert info.target_recurrent_bytes / MIB == pytest.approx(rs[0], abs=ROUNDING)
        expected = layout_from_header(read_header(models.target))
        assert expected.exact and expected.recurrent_state_bytes == shape.recurrent_state_bytes()
        assert info.target_kv_bytes == expected.kv_bytes(N_CTX)
        assert info.draft_kv_bytes == expected.mtp_kv_bytes(N_CTX)
        assert info.target_recurrent_bytes == expected.recurrent_bytes(ROLLBACK_TOKENS)
    finally:
        engine.unload()
    head, lines = _load(PairSpec(target=str(models.plain), mtp_head=str(models.head),
                                 context=ContextSettings(n_ctx=N_CTX, threads=2)))
    try:
        assert head.info is not None and head.info.draft_mode == "mtp"
        kv = _logged(lines, "KV buffer size")
        assert head.info.draft_kv_bytes / MIB == pytest.approx(kv[-1], abs=ROUNDING)
        assert head.info.draft_kv_bytes == layout_from_header(read_header(models.head)).mtp_kv_bytes(N_CTX)
    finally:
        head.unload()


def test_a_hybrid_draft_pair_reports_what_llama_cpp_allocated(tmp_path: Path) -> None:
    shape = Lfm2Shape(n_layer=8, n_embd=512, attention_layers=(2, 5))
    family = make_lfm2_family(tmp_path, shape=shape, draft_layers=4)
    engine, lines = _load(PairSpec(target=str(family.target), draft=str(family.draft),
                                   context=ContextSettings(n_ctx=N_CTX, threads=2)))
    try:
        info = engine.info
        assert info is not None
        kv = _logged(lines, "KV buffer size")
        assert len(kv) == 2, lines  # target, then draft
        assert info.target_kv_bytes / MIB == pytest.approx(kv[0], abs=ROUNDING)
        assert info.draft_kv_bytes / MIB == pytest.approx(kv[1], abs=ROUNDING)
        assert info.target_kv_bytes == layout_from_header(read_header(family.target)).kv_bytes(N_CTX)
        assert info.target_recurrent_bytes == shape.recurrent_state_bytes() * (1 + ROLLBACK_TOKENS)
        assert info.target_recurrent_bytes / MIB == pytest.approx(_logged(lines, "RS buffer size")[0], abs=ROUNDING)
        assert padded_context(N_CTX) == 1024
    finally:
        engine.unload()


def test_add_my_own_pair_counts_the_recurrent_states_from_the_headers(tmp_path: Path) -> None:
    """Before anything loads ("add my own pair"): a hybrid pair's estimate holds the target's state with its
    ``ROLLBACK_TOKENS`` snapshots and the hybrid draft's state with its checkpoint, by the generator's own
    arithmetic, and the KV of the attention layers only. (It counted no recurrent state before.)"""
    shape = Qwen35Shape(n_layer=8, n_embd=256)
    family = make_qwen35_family(tmp_path, shape=shape, draft_layers=4)
    memory = check_local_pair(family.target, family.draft, n_ctx=1024).memory
    draft_shape = Qwen35Shape(n_layer=4, n_embd=256)
    assert memory.recurrent == (shape.recurrent_state_bytes() * (1 + ROLLBACK_TOKENS)
                                + draft_shape.recurrent_state_bytes() * DRAFT_RECURRENT_STATES)
    assert memory.target_kv == 2 * 2 * (64 + 64) * 2 * 1024  # layers 3 and 7: 2 KV heads x (K 64 + V 64) x F16
