"""The memory layout rules (engine/memory_layout.py) on metadata written out by hand; what llama.cpp allocates for
generated models is checked in tests/integration/engine/test_memory_layout.py."""

from __future__ import annotations

from typing import Any

from outrider.engine.memory_layout import layout, padded_context


def _meta(values: dict[str, Any]) -> Any:
    return values.get


QWEN35 = {"block_count": 9, "nextn_predict_layers": 1, "embedding_length": 256, "attention.head_count": 4,
          "attention.head_count_kv": 2, "attention.key_length": 64, "attention.value_length": 64,
          "full_attention_interval": 4, "ssm.conv_kernel": 4, "ssm.inner_size": 128, "ssm.state_size": 32,
          "ssm.group_count": 2}


def test_a_qwen35_hybrid_caches_its_attention_layers_and_keeps_its_nextn_layer_apart() -> None:
    """8 trunk layers, one in 4 full attention (layers 3 and 7), 6 gated delta-net layers, one NextN layer."""
    shape = layout("qwen35", _meta(QWEN35))
    per_attention_layer = 2 * 64 * 2 + 2 * 64 * 2  # 2 KV heads x (K 64 + V 64) x 2 bytes
    assert shape.exact and shape.attention_layers == 2 and shape.recurrent_layers == 6
    assert shape.kv_bytes_per_position == 2 * per_attention_layer
    assert shape.nextn_kv_bytes_per_position == per_attention_layer
    conv, state = 3 * (128 + 2 * 2 * 32), 32 * 128
    assert shape.recurrent_state_bytes == 6 * (conv + state) * 4
    assert shape.recurrent_bytes(8) == 9 * shape.recurrent_state_bytes
    assert shape.kv_bytes(1000) == 1024 * shape.kv_bytes_per_position  # llama.cpp pads to 256


def test_the_recurrent_layer_list_wins_over_the_interval_as_in_llama_cpp() -> None:
    meta = dict(QWEN35, **{"attention.recurrent_layers": [True] * 6 + [False, False, False]})
    shape = layout("qwen35", _meta(meta))
    assert shape.recurrent_layers == 6 and shape.attention_layers == 2
    as_text = dict(QWEN35, **{"attention.recurrent_layers": "[true, true, true, true, true, true, false, false, "
                                                            "false]"})  # how llama.cpp renders it
    assert layout("qwen35", _meta(as_text)) == shape


def test_lfm2_convolution_layers_are_the_ones_without_kv_heads() -> None:
    meta = {"block_count": 6, "embedding_length": 128, "attention.head_count": 4,
            "attention.head_count_kv": "[0, 0, 2, 0, 0, 2]", "shortconv.l_cache": 3}
    shape = layout("lfm2", _meta(meta))
    assert shape.exact and shape.attention_layers == 2 and shape.recurrent_layers == 4
    assert shape.kv_bytes_per_position == 2 * 2 * (32 + 32) * 2
    assert shape.recurrent_state_bytes == 4 * 128 * 2 * 4


def test_a_dense_model_counts_every_layer_and_an_unknown_recurrent_family_is_not_exact() -> None:
    dense = layout("llama", _meta({"block_count": 4, "embedding_length": 256, "attention.head_count": 4,
                                   "attention.head_count_kv": 4}))
    assert dense.exact and dense.kv_bytes_per_position == 4 * 4 * 128 * 2 and dense.recurrent_state_bytes == 0
    mamba = layout("mamba", _meta({"block_count": 2, "embedding_length": 128, "ssm.conv_kernel": 4,
                                   "ssm.state_size": 16, "ssm.inner_size": 256}))
    assert not mamba.exact
    swa = layout("llama", _meta({"block_count": 4, "embedding_length": 256, "attention.head_count": 4,
                                 "attention.sliding_window": 512}))
    assert not swa.exact
    assert padded_context(256) == 256 and padded_context(257) == 512
