"""What llama.cpp allocates for a model's memory, computed exactly from its metadata (no llama_cpp import: the
catalogue's estimates and the loaded pair's figures use the same rules).

The rules are the vendored llama.cpp's (``src/llama-model.cpp`` ``create_memory``, ``src/llama-kv-cache.cpp``,
``src/llama-memory-recurrent.cpp``, ``src/llama-hparams.cpp``):

- **KV cache** (F16 K and V, 2 bytes an element): one K and one V row of ``n_head_kv(il) * key_length`` /
  ``value_length`` elements per position for every *attention* layer of the trunk, at ``kv_size`` =
  the context rounded up to a multiple of 256 (``llama_context``: ``GGML_PAD(n_ctx, 256)``). Recurrent layers have
  none, and NextN (MTP) layers are left out of the target's own cache (``filter = il < n_layer()``): they are cached
  in the MTP context, which holds exactly those layers, each a full-attention layer.
- **Recurrent state** (F32): per recurrent layer a conv row of ``n_embd_r`` and a state row of ``n_embd_s``
  elements per cell; a context keeps ``n_seq * (1 + n_rs_seq)`` rows (the state and ``n_rs_seq`` rollback
  snapshots). ``qwen35``/``qwen35moe``/``qwen3next`` (gated delta-net): ``n_embd_r = (ssm.conv_kernel - 1) *
  (ssm.inner_size + 2 * ssm.group_count * ssm.state_size)``, ``n_embd_s = ssm.state_size * ssm.inner_size``;
  which layers are recurrent: ``attention.recurrent_layers``, else every layer but each
  ``full_attention_interval``-th (default 4). ``lfm2``/``lfm2moe`` (short convolutions): the layers whose
  ``attention.head_count_kv`` is 0, ``n_embd_r = embedding_length * (shortconv.l_cache - 1)``, no state row.

``exact`` is False for architectures outside these rules (other hybrids, sliding-window caches): their figures
are then the older all-layers estimate, and a loaded pair reports what llama.cpp logged instead.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

KV_BYTES_PER_ELEMENT = 2  # F16 K and V, llama.cpp's default cache type
STATE_BYTES_PER_ELEMENT = 4  # F32 recurrent states
KV_PAD = 256  # llama.cpp rounds a context up to a multiple of this many positions
GATED_DELTA_NET = frozenset({"qwen35", "qwen35moe", "qwen3next"})
SHORT_CONV = frozenset({"lfm2", "lfm2moe"})

Lookup = Callable[[str], Any]
"""``{architecture}.{suffix}`` of a model's metadata: an int, a list of ints, or None when absent."""


@dataclasses.dataclass(frozen=True)
class MemoryLayout:
    """Bytes per context position and per sequence of one model file (see the module doc)."""

    kv_bytes_per_position: int  # the trunk's attention layers, K + V
    nextn_kv_bytes_per_position: int  # its NextN (MTP) layers: what an MTP context of this file caches
    recurrent_state_bytes: int  # one sequence's recurrent state (conv + state rows of every recurrent layer)
    attention_layers: int
    recurrent_layers: int
    exact: bool

    def kv_bytes(self, n_ctx: int) -> int:
        """The target context's KV cache at ``n_ctx`` positions (padded as llama.cpp pads them)."""
        return self.kv_bytes_per_position * padded_context(n_ctx)

    def mtp_kv_bytes(self, n_ctx: int) -> int:
        """An MTP context's KV cache at ``n_ctx`` positions."""
        return self.nextn_kv_bytes_per_position * padded_context(n_ctx)

    def recurrent_bytes(self, n_rs_seq: int) -> int:
        """A one-sequence context's recurrent memory with ``n_rs_seq`` rollback snapshots."""
        return self.recurrent_state_bytes * (1 + max(0, n_rs_seq))


def padded_context(n_ctx: int) -> int:
    return -(-max(1, n_ctx) // KV_PAD) * KV_PAD


def _ints(value: Any, n: int) -> list[int] | None:
    """A per-layer value as n ints (a scalar repeated), None when absent or unreadable."""
    if value is None:
        return None
    if isinstance(value, str):  # llama.cpp's metadata strings: "4" or "[0, 0, 2, ...]"
        text = value.strip()
        if text.startswith("["):
            items = [x for x in re.split(r"[,\s]+", text.strip("[]")) if x]
            value = items
        else:
            value = text
    try:
        if isinstance(value, (list, tuple)):
            out = [_to_int(x) for x in value]
            return out if len(out) == n else None
        return [_to_int(value)] * n
    except (TypeError, ValueError):
        return None


def _to_int(x: Any) -> int:
    """An int, a bool, or their text (llama.cpp writes booleans as ``true`` / ``false``)."""
    text = str(x).strip().lower()
    return {"true": 1, "false": 0}.get(text, int(x) if not isinstance(x, str) else int(text))


def _int(value: Any, default: int = 0) -> int:
    got = _ints(value, 1)
    return got[0] if got else default


def layout(architecture: str, get: Lookup) -> MemoryLayout:
    """The memory layout of a model of ``architecture`` whose metadata ``get`` reads (see ``Lookup``)."""
    n_all = _int(get("block_count"))
    nextn = min(_int(get("nextn_predict_layers")), n_all)
    trunk = n_all - nextn
    n_embd = _int(get("embedding_length"))
    heads = _ints(get("attention.head_count"), n_all) or [0] * n_all
    kv_heads = _ints(get("attention.head_count_kv"), n_all) or heads
    head_width = [n_embd // h if h else 0 for h in heads]
    key_len = _int(get("attention.key_length")) or None
    value_len = _int(get("attention.value_length")) or None
    per_layer = [kv_heads[i] * ((key_len or head_width[i]) + (value_len or key_len or head_width[i]))
                 * KV_BYTES_PER_ELEMENT for i in range(n_all)]
    recurrent, state = _recurrent_layers(architecture, get, trunk, n_all, kv_heads, n_embd)
    exact = recurrent is not None and not _int(get("attention.sliding_window"))
    is_recurrent = recurrent or [False] * n_all
    attention = [i for i in range(trunk) if not is_recurrent[i]]
    return MemoryLayout(
        kv_bytes_per_position=sum(per_layer[i] for i in attention),
        nextn_kv_bytes_per_position=sum(per_layer[i] for i in range(trunk, n_all)),
        recurrent_state_bytes=state * sum(is_recurrent[:trunk]),
        attention_layers=len(attention),
        recurrent_layers=sum(is_recurrent[:trunk]),
        exact=exact,
    )


def _recurrent_layers(architecture: str, get: Lookup, trunk: int, n_all: int, kv_heads: list[int], n_embd: int
                      ) -> tuple[list[bool] | None, int]:
    """(which layers are recurrent, one such layer's state bytes per sequence); (None, 0) for an architecture
    whose rules this module does not know. Dense architectures: no recurrent layer."""
    if architecture in GATED_DELTA_NET:
        flags = _ints(get("attention.recurrent_layers"), n_all)
        if flags is not None:
            layers = [bool(f) and i < trunk for i, f in enumerate(flags)]
        else:
            interval = _int(get("full_attention_interval"), 4) or 4
            layers = [i < trunk and (i + 1) % interval != 0 for i in range(n_all)]
        d_conv, d_inner = _int(get("ssm.conv_kernel")), _int(get("ssm.inner_size"))
        d_state, n_group = _int(get("ssm.state_size")), _int(get("ssm.group_count"))
        n_embd_r = max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state)
        return layers, (n_embd_r + d_state * d_inner) * STATE_BYTES_PER_ELEMENT
    if architecture in SHORT_CONV:
        l_cache = _int(get("shortconv.l_cache"))
        return [i < trunk and kv_heads[i] == 0 for i in range(n_all)], n_embd * max(0, l_cache - 1) * \
            STATE_BYTES_PER_ELEMENT
    if get("ssm.conv_kernel") is not None or get("ssm.state_size") is not None \
            or get("wkv.head_size") is not None or get("shortconv.l_cache") is not None:
        return None, 0  # another recurrent or hybrid family: not modelled here
    return [False] * n_all, 0


def layout_from_header(header: Any) -> MemoryLayout:
    """``layout`` of a parsed GGUF header (``llama.gguf_header.GGUFHeader``, read with its arrays kept)."""
    return layout(header.architecture, header.arch_value)
