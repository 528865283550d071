"""Tiny hybrid (recurrent + attention) GGUF models generated at test time (never committed).

The 2026 local models are hybrids: some layers keep a fixed-size recurrent state instead of a KV cache, so a
rejected draft token cannot be removed by dropping cache cells. These generators give the tests and benchmarks
such models in a few hundred kilobytes, random weights, built with the ``gguf`` package after the tensor names,
shapes and metadata keys that the vendored llama.cpp (0c1e57098, in llama-cpp-python 0.3.36) reads:
``src/llama-arch.cpp`` (names), ``src/models/qwen35.cpp`` and ``src/models/lfm2.cpp`` (``load_arch_hparams`` /
``load_arch_tensors``: keys and shapes), ``conversion/qwen.py`` (how an MTP head file is cut).

Architectures
-------------
* ``qwen35`` (Qwen3.5 / 3.6 / 3.8 dense): gated delta-net linear-attention layers (``attn_qkv``, ``attn_gate``,
  ``ssm_conv1d``, ``ssm_dt.bias``, ``ssm_a``, ``ssm_alpha``, ``ssm_beta``, ``ssm_norm``, ``ssm_out``) and, every
  ``full_attention_interval``-th layer, a gated full-attention layer (``attn_q`` holds query + gate, Q/K norms,
  interleaved M-RoPE with ``rope.dimension_sections``). Both layer kinds have ``post_attention_norm`` + SwiGLU FFN.
* ``qwen35`` with one NextN / MTP layer: ``block_count`` = trunk + 1, ``qwen35.nextn_predict_layers`` = 1 and
  the layer ``blk.{n}`` holds a full-attention block plus ``nextn.eh_proj`` / ``nextn.enorm`` / ``nextn.hnorm``
  (and ``nextn.shared_head_norm``). llama.cpp loads it only with ``llama_model_params.load_mtp`` and runs it
  in a context of type ``LLAMA_CONTEXT_TYPE_MTP``; the trunk's own pass never executes it.
* A separate MTP **head file** (what ``convert_hf_to_gguf.py --mtp`` writes as ``mtp-<name>.gguf``): the same
  metadata, only ``token_embd``, ``output_norm``, ``output`` and the NextN layer. The vendored loader accepts it
  (``qwen35.cpp``: ``mtp_only`` when ``blk.0.attn_norm`` is absent, the trunk tensors become optional). The other
  separate-head format in this llama.cpp, ``gemma4-assistant`` (Gemma 4's assistant head, which needs a Gemma 4
  target's context as ``ctx_other``), is not generated here: there is no tiny Gemma 4 target to pair it with.
* ``lfm2`` (LiquidAI LFM2): gated short-convolution layers (``shortconv.conv`` / ``in_proj`` / ``out_proj``,
  ``shortconv.l_cache``) and grouped-query attention layers with Q/K norms; which layer is which is given by the
  per-layer ``attention.head_count_kv`` array (0 = convolution layer); the final norm is named
  ``token_embd_norm`` (a historical misnaming llama.cpp keeps).
* ``mamba`` (purely recurrent, **no** partial rollback in this llama.cpp: ``llm_arch_supports_rs_rollback``
  lists qwen35 and lfm2 but not mamba/rwkv/jamba/granitehybrid/falcon-h1/qwen3next): for fall-back tests.

Vocabulary and families
-----------------------
Every model uses ``tiny_gguf.build_vocab`` (the shared SPM vocabulary), so any two of them are vocabulary-
compatible, exactly like the dense tiny families. A *family* is a target and a smaller draft of the same
architecture whose weights are the target's first ``draft_layers`` layers (plus the shared embeddings, final
norm and output head). The target's later layers have their output projections (``ssm_out`` / ``attn_output`` /
``shortconv.out_proj`` and ``ffn_down``) scaled by ``extra_layer_scale`` so they only nudge the residual stream,
which keeps the draft's greedy choices close to the target's (high acceptance); a larger scale pulls them apart
(default 8-layer shapes, draft = 4 layers, teacher-forced greedy agreement over 48 tokens: scale 0.05 -> ~0.9,
0.1 -> ~0.85, 0.2 -> 0.63-0.75, 0.3 -> ~0.67, for both architectures).
``trunk_scale`` scales every trunk layer's output projections the same way (the draft's included): a small value
makes the model nearly a function of the current token, which is what lets an MTP head built from the token
embedding (``eh_proj`` = [identity | 0]) predict the token after next well.

Public functions (names are stable; tests and benchmarks share them)
--------------------------------------------------------------------
``qwen35_weights``, ``qwen35_nextn_weights``, ``write_qwen35``, ``make_qwen35`` (one model),
``make_qwen35_family`` -> ``HybridFamily``, ``make_qwen35_mtp`` -> ``MtpModels`` (target with its NextN layer,
the separate head file, and the same trunk without the NextN layer), ``lfm2_weights``, ``write_lfm2``,
``make_lfm2``, ``make_lfm2_family`` -> ``HybridFamily``, ``make_mamba`` (one non-rollback recurrent model),
and the shapes ``Qwen35Shape``, ``Lfm2Shape``, ``MambaShape``. Files are rewritten on every call. A family whose
draft would keep no attention layer is refused (ValueError): this llama.cpp aborts at the first decode of a hybrid
architecture with only recurrent layers.

Matrices are F16, norms, convolution kernels and the per-head SSM vectors F32 (numpy float64 would slip into
an F64 tensor, which this llama.cpp loads and then crashes on; see tiny_gguf).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from support.tiny_gguf import BOS, EOS, UNK, build_vocab

Vocab = tuple[list[str], list[float], list[int]]
Weights = dict[str, np.ndarray]


# -- shapes ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Qwen35Shape:
    """Dimensions of a generated ``qwen35`` model (trunk only; the NextN layer has the attention layer's shape).

    Layer ``i`` is full attention when ``(i + 1) % full_attention_interval == 0``, linear attention otherwise
    (llama.cpp's default rule when ``attention.recurrent_layers`` is absent). The gated delta-net uses
    ``ssm_n_group`` key heads and ``ssm_dt_rank`` value heads of width ``ssm_d_state``
    (``ssm_d_inner`` = ``ssm_d_state * ssm_dt_rank``); more value heads than key heads, as in the real models.
    ``rope_sections`` must sum to ``head_dim // 2`` (the rotated dimensions are the whole head here).
    """

    n_layer: int = 8
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 512
    n_ctx_train: int = 4096
    full_attention_interval: int = 4
    ssm_d_conv: int = 4
    ssm_d_state: int = 32
    ssm_n_group: int = 2
    ssm_dt_rank: int = 4
    rope_sections: tuple[int, int, int, int] = (11, 11, 10, 0)

    @property
    def ssm_d_inner(self) -> int:
        return self.ssm_d_state * self.ssm_dt_rank

    def is_recurrent(self, layer: int) -> bool:
        return (layer + 1) % self.full_attention_interval != 0

    def recurrent_state_bytes(self) -> int:
        """F32 bytes of one sequence's recurrent state (conv rows + delta-net state, all linear layers)."""
        conv_channels = self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state
        per_layer = (self.ssm_d_conv - 1) * conv_channels + self.ssm_d_state * self.ssm_d_state * self.ssm_dt_rank
        return 4 * per_layer * sum(self.is_recurrent(i) for i in range(self.n_layer))


@dataclasses.dataclass(frozen=True)
class Lfm2Shape:
    """Dimensions of a generated ``lfm2`` model; layers in ``attention_layers`` are attention, the rest
    short-convolution layers (kernel ``l_cache``)."""

    n_layer: int = 8
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 512
    n_ctx_train: int = 4096
    l_cache: int = 3
    attention_layers: tuple[int, ...] = (2, 5)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def is_recurrent(self, layer: int) -> bool:
        return layer not in self.attention_layers

    def recurrent_state_bytes(self) -> int:
        """F32 bytes of one sequence's recurrent state (the convolution rows of every convolution layer)."""
        return 4 * self.n_embd * (self.l_cache - 1) * sum(self.is_recurrent(i) for i in range(self.n_layer))


@dataclasses.dataclass(frozen=True)
class MambaShape:
    """Dimensions of a generated ``mamba`` (v1) model."""

    n_layer: int = 2
    n_embd: int = 128
    d_inner: int = 256
    d_state: int = 16
    d_conv: int = 4
    dt_rank: int = 8
    n_ctx_train: int = 4096


@dataclasses.dataclass(frozen=True)
class HybridFamily:
    """Paths of a generated hybrid family: a target and a draft made of the target's first layers."""

    target: Path
    draft: Path


@dataclasses.dataclass(frozen=True)
class MtpModels:
    """Paths of a ``qwen35`` target with one NextN layer, its separate head file, and the same trunk alone."""

    target: Path  # trunk + NextN layer in one file (``nextn_predict_layers`` = 1)
    head: Path  # the NextN layer, embeddings, final norm and output head only (an ``mtp-*.gguf``)
    plain: Path  # the target's trunk without the NextN layer (identical trunk outputs)


_NO_ATTENTION = ("the draft would have no attention layer: this llama.cpp aborts at the first decode of a hybrid "
                 "architecture whose layers are all recurrent (GGML_ASSERT(buffer) in set_input_k_idxs)")


# -- helpers --------------------------------------------------------------------------------------------------
def _f16(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float16)


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def _rand(rng: np.random.Generator) -> Callable[[int, int, float], np.ndarray]:
    """A random F16 matrix maker: ``mat(rows, cols, scale)`` (numpy shape; llama.cpp's ne is reversed)."""

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return _f16(rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale))

    return mat


def _scale(weights: Weights, key: str, factor: float) -> None:
    if factor != 1.0:
        weights[key] = _f16(weights[key].astype(np.float32) * np.float32(factor))


def _writer(path: Path, arch: str, name: str, vocab: Vocab, n_ctx_train: int, n_embd: int, n_layer: int
            ) -> gguf.GGUFWriter:
    """A writer with the general keys and the shared SPM tokenizer (as ``tiny_gguf.write_gguf`` writes them)."""
    tokens, scores, types = vocab
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_unk_token_id(UNK)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    return writer


def _finish(writer: gguf.GGUFWriter, weights: Weights) -> None:
    for key, value in weights.items():
        if value.dtype not in (np.float16, np.float32):
            raise AssertionError(f"{key} is {value.dtype}; tensors must be F16 or F32")
        writer.add_tensor(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _common_weights(rng: np.random.Generator, n_vocab: int, d: int, output_scale: float, norm_name: str) -> Weights:
    mat = _rand(rng)
    return {
        "token_embd.weight": mat(n_vocab, d, 1.0),
        f"{norm_name}.weight": np.ones(d, dtype=np.float32),
        "output.weight": mat(n_vocab, d, output_scale / np.sqrt(d)),
    }


def _ffn(w: Weights, mat: Callable[[int, int, float], np.ndarray], i: int, d: int, f: int, out_scale: float) -> None:
    w[f"blk.{i}.ffn_gate.weight"] = mat(f, d, 1.0 / np.sqrt(d))
    w[f"blk.{i}.ffn_up.weight"] = mat(f, d, 1.0 / np.sqrt(d))
    w[f"blk.{i}.ffn_down.weight"] = mat(d, f, out_scale / np.sqrt(f))


# -- qwen35 ---------------------------------------------------------------------------------------------------
def _qwen35_attention(w: Weights, mat: Callable[[int, int, float], np.ndarray], i: int, s: Qwen35Shape,
                      out_scale: float) -> None:
    d, hd = s.n_embd, s.head_dim
    w[f"blk.{i}.attn_norm.weight"] = np.ones(d, dtype=np.float32)
    w[f"blk.{i}.post_attention_norm.weight"] = np.ones(d, dtype=np.float32)
    w[f"blk.{i}.attn_q.weight"] = mat(2 * hd * s.n_head, d, 1.0 / np.sqrt(d))  # query and output gate
    w[f"blk.{i}.attn_k.weight"] = mat(hd * s.n_head_kv, d, 1.0 / np.sqrt(d))
    w[f"blk.{i}.attn_v.weight"] = mat(hd * s.n_head_kv, d, 1.0 / np.sqrt(d))
    w[f"blk.{i}.attn_output.weight"] = mat(d, hd * s.n_head, out_scale / np.sqrt(hd * s.n_head))
    w[f"blk.{i}.attn_q_norm.weight"] = np.ones(hd, dtype=np.float32)
    w[f"blk.{i}.attn_k_norm.weight"] = np.ones(hd, dtype=np.float32)
    _ffn(w, mat, i, d, s.n_ff, out_scale)


def _qwen35_linear(w: Weights, rng: np.random.Generator, i: int, s: Qwen35Shape, out_scale: float) -> None:
    mat = _rand(rng)
    d = s.n_embd
    key_dim = s.ssm_d_state * s.ssm_n_group
    value_dim = s.ssm_d_inner
    conv_dim = 2 * key_dim + value_dim
    w[f"blk.{i}.attn_norm.weight"] = np.ones(d, dtype=np.float32)
    w[f"blk.{i}.post_attention_norm.weight"] = np.ones(d, dtype=np.float32)
    w[f"blk.{i}.attn_qkv.weight"] = mat(conv_dim, d, 1.0 / np.sqrt(d))
    w[f"blk.{i}.attn_gate.weight"] = mat(value_dim, d, 1.0 / np.sqrt(d))
    w[f"blk.{i}.ssm_conv1d.weight"] = _f32(rng.standard_normal((conv_dim, s.ssm_d_conv)) / np.sqrt(s.ssm_d_conv))
    # As the reference implementations initialise them: time steps dt log-uniform in [0.001, 0.1] stored as
    # softplus^-1(dt), and ssm_a = -exp(A_log) (the converter's form) with A uniform in [1, 16]. The per-token decay
    # exp(-A * softplus(alpha + dt_bias)) then stays close to 1: the state remembers many tokens back, so a state
    # that is not rolled back correctly changes what the model predicts (a fast-forgetting state would hide it).
    dt = np.exp(rng.uniform(np.log(0.001), np.log(0.1), s.ssm_dt_rank))
    w[f"blk.{i}.ssm_dt.bias"] = _f32(np.log(np.expm1(dt)))
    w[f"blk.{i}.ssm_a"] = _f32(-rng.uniform(1.0, 16.0, s.ssm_dt_rank))
    w[f"blk.{i}.ssm_alpha.weight"] = mat(s.ssm_dt_rank, d, 1.0 / np.sqrt(d))
    w[f"blk.{i}.ssm_beta.weight"] = mat(s.ssm_dt_rank, d, 1.0 / np.sqrt(d))
    w[f"blk.{i}.ssm_norm.weight"] = np.ones(s.ssm_d_state, dtype=np.float32)
    w[f"blk.{i}.ssm_out.weight"] = mat(d, value_dim, out_scale / np.sqrt(value_dim))
    _ffn(w, mat, i, d, s.n_ff, out_scale)


def qwen35_weights(shape: Qwen35Shape, n_vocab: int, seed: int, *, output_scale: float = 1.0,
                   trunk_scale: float = 1.0) -> Weights:
    """Random ``qwen35`` trunk weights keyed by GGUF tensor name (no NextN layer).

    ``trunk_scale`` multiplies every layer's output projections (``ssm_out`` / ``attn_output``, ``ffn_down``);
    ``output_scale`` the output head (logit standard deviation ~ ``output_scale``).
    """
    rng = np.random.default_rng(seed)
    mat = _rand(rng)
    w = _common_weights(rng, n_vocab, shape.n_embd, output_scale, "output_norm")
    for i in range(shape.n_layer):
        if shape.is_recurrent(i):
            _qwen35_linear(w, rng, i, shape, trunk_scale)
        else:
            _qwen35_attention(w, mat, i, shape, trunk_scale)
    return w


def qwen35_nextn_weights(shape: Qwen35Shape, seed: int, *, block_scale: float = 0.1) -> Weights:
    """The weights of one NextN / MTP layer at index ``shape.n_layer`` (right after the trunk).

    ``eh_proj`` maps the concatenation [enorm(embedding of token t+1), hnorm(h_t)] to the residual stream; it is
    the identity on the embedding half and zero on the hidden half, so the head predicts token t+2 from token
    t+1 the way a nearly-bigram trunk (small ``trunk_scale``) does. ``block_scale`` scales the block's output
    projections (how far the head departs from that).
    """
    rng = np.random.default_rng(seed)
    mat = _rand(rng)
    i, d = shape.n_layer, shape.n_embd
    w: Weights = {}
    _qwen35_attention(w, mat, i, shape, block_scale)
    eh = np.zeros((d, 2 * d), dtype=np.float32)  # numpy (out, in): llama.cpp's {2 * n_embd, n_embd}
    eh[:, :d] = np.eye(d, dtype=np.float32)
    w[f"blk.{i}.nextn.eh_proj.weight"] = _f16(eh)
    w[f"blk.{i}.nextn.enorm.weight"] = np.ones(d, dtype=np.float32)
    w[f"blk.{i}.nextn.hnorm.weight"] = np.ones(d, dtype=np.float32)
    w[f"blk.{i}.nextn.shared_head_norm.weight"] = np.ones(d, dtype=np.float32)
    return w


def write_qwen35(path: Path, weights: Weights, shape: Qwen35Shape, vocab: Vocab, *, name: str = "tiny-qwen35",
                 nextn_layers: int = 0) -> Path:
    """Write a ``qwen35`` GGUF: ``shape.n_layer`` trunk layers + ``nextn_layers`` NextN layers in ``weights``."""
    s = shape
    if 2 * sum(s.rope_sections) != s.head_dim:
        raise ValueError(f"rope sections {s.rope_sections} must sum to head_dim / 2 = {s.head_dim // 2}")
    writer = _writer(path, "qwen35", name, vocab, s.n_ctx_train, s.n_embd, s.n_layer + nextn_layers)
    writer.add_feed_forward_length(s.n_ff)
    writer.add_head_count(s.n_head)
    writer.add_head_count_kv(s.n_head_kv)
    writer.add_key_length(s.head_dim)
    writer.add_value_length(s.head_dim)
    writer.add_rope_dimension_count(s.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_sections(list(s.rope_sections))
    writer.add_ssm_conv_kernel(s.ssm_d_conv)
    writer.add_ssm_inner_size(s.ssm_d_inner)
    writer.add_ssm_state_size(s.ssm_d_state)
    writer.add_ssm_time_step_rank(s.ssm_dt_rank)
    writer.add_ssm_group_count(s.ssm_n_group)
    writer.add_full_attention_interval(s.full_attention_interval)
    if nextn_layers:
        writer.add_nextn_predict_layers(nextn_layers)
    _finish(writer, weights)
    return path


def _trunk_prefix(weights: Weights, n_layers: int) -> Weights:
    """The shared tensors and the first ``n_layers`` blocks (a draft cut from a target)."""
    keep: Weights = {}
    for key, value in weights.items():
        if key.startswith("blk.") and int(key.split(".", 2)[1]) >= n_layers:
            continue
        keep[key] = value
    return keep


def _scale_outputs(weights: Weights, layers: range, factor: float) -> None:
    for i in layers:
        for part in ("ssm_out", "attn_output", "shortconv.out_proj", "ffn_down"):
            key = f"blk.{i}.{part}.weight"
            if key in weights:
                _scale(weights, key, factor)


def make_qwen35(path: Path, *, shape: Qwen35Shape = Qwen35Shape(), seed: int = 2035, output_scale: float = 1.0,
                trunk_scale: float = 1.0, name: str | None = None) -> Path:
    """One random ``qwen35`` model (no NextN layer) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    w = qwen35_weights(shape, len(vocab[0]), seed, output_scale=output_scale, trunk_scale=trunk_scale)
    return write_qwen35(path, w, shape, vocab, name=name or path.stem)


def make_qwen35_family(directory: Path, *, shape: Qwen35Shape = Qwen35Shape(), draft_layers: int = 4,
                       extra_layer_scale: float = 0.1, trunk_scale: float = 1.0, seed: int = 2035,
                       prefix: str = "q35", output_scale: float = 1.0) -> HybridFamily:
    """A ``qwen35`` target and its draft (the target's first ``draft_layers`` layers, itself a hybrid when
    ``draft_layers >= full_attention_interval``). Files: ``{prefix}-target.gguf``, ``{prefix}-draft.gguf``."""
    if not 0 < draft_layers < shape.n_layer:
        raise ValueError(f"draft_layers must be in 1..{shape.n_layer - 1}, got {draft_layers}")
    if all(shape.is_recurrent(i) for i in range(draft_layers)):
        raise ValueError(_NO_ATTENTION)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    target_w = qwen35_weights(shape, len(vocab[0]), seed, output_scale=output_scale, trunk_scale=trunk_scale)
    _scale_outputs(target_w, range(draft_layers, shape.n_layer), extra_layer_scale)
    draft_shape = dataclasses.replace(shape, n_layer=draft_layers)
    return HybridFamily(
        target=write_qwen35(directory / f"{prefix}-target.gguf", target_w, shape, vocab, name=f"{prefix}-target"),
        draft=write_qwen35(directory / f"{prefix}-draft.gguf", _trunk_prefix(target_w, draft_layers), draft_shape,
                           vocab, name=f"{prefix}-draft"),
    )


def make_qwen35_mtp(directory: Path, *, shape: Qwen35Shape = Qwen35Shape(), trunk_scale: float = 0.1,
                    block_scale: float = 0.1, seed: int = 2036, prefix: str = "q35mtp",
                    output_scale: float = 1.0) -> MtpModels:
    """A ``qwen35`` target with one NextN layer, the same NextN layer as a separate head file, and the trunk
    alone. Files: ``{prefix}-target.gguf``, ``mtp-{prefix}.gguf``, ``{prefix}-plain.gguf``.

    The default ``trunk_scale`` (0.1) keeps the trunk close to a function of the current token so the head
    (see ``qwen35_nextn_weights``) drafts tokens the target accepts.
    """
    directory.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    trunk = qwen35_weights(shape, len(vocab[0]), seed, output_scale=output_scale, trunk_scale=trunk_scale)
    nextn = qwen35_nextn_weights(shape, seed + 1, block_scale=block_scale)
    head = {k: v for k, v in trunk.items() if not k.startswith("blk.")} | nextn
    return MtpModels(
        target=write_qwen35(directory / f"{prefix}-target.gguf", trunk | nextn, shape, vocab,
                            name=f"{prefix}-target", nextn_layers=1),
        head=write_qwen35(directory / f"mtp-{prefix}.gguf", head, shape, vocab, name=f"mtp-{prefix}",
                          nextn_layers=1),
        plain=write_qwen35(directory / f"{prefix}-plain.gguf", trunk, shape, vocab, name=f"{prefix}-plain"),
    )


# -- lfm2 -----------------------------------------------------------------------------------------------------
def lfm2_weights(shape: Lfm2Shape, n_vocab: int, seed: int, *, output_scale: float = 1.0,
                 trunk_scale: float = 1.0) -> Weights:
    """Random ``lfm2`` weights keyed by GGUF tensor name (``trunk_scale`` as in ``qwen35_weights``)."""
    rng = np.random.default_rng(seed)
    mat = _rand(rng)
    s, d = shape, shape.n_embd
    w = _common_weights(rng, n_vocab, d, output_scale, "token_embd_norm")
    for i in range(s.n_layer):
        w[f"blk.{i}.attn_norm.weight"] = np.ones(d, dtype=np.float32)
        w[f"blk.{i}.ffn_norm.weight"] = np.ones(d, dtype=np.float32)
        if s.is_recurrent(i):
            w[f"blk.{i}.shortconv.conv.weight"] = _f32(rng.standard_normal((d, s.l_cache)) / np.sqrt(s.l_cache))
            w[f"blk.{i}.shortconv.in_proj.weight"] = mat(3 * d, d, 1.0 / np.sqrt(d))
            w[f"blk.{i}.shortconv.out_proj.weight"] = mat(d, d, trunk_scale / np.sqrt(d))
        else:
            kv = s.head_dim * s.n_head_kv
            w[f"blk.{i}.attn_q.weight"] = mat(d, d, 1.0 / np.sqrt(d))
            w[f"blk.{i}.attn_k.weight"] = mat(kv, d, 1.0 / np.sqrt(d))
            w[f"blk.{i}.attn_v.weight"] = mat(kv, d, 1.0 / np.sqrt(d))
            w[f"blk.{i}.attn_output.weight"] = mat(d, d, trunk_scale / np.sqrt(d))
            w[f"blk.{i}.attn_q_norm.weight"] = np.ones(s.head_dim, dtype=np.float32)
            w[f"blk.{i}.attn_k_norm.weight"] = np.ones(s.head_dim, dtype=np.float32)
        _ffn(w, mat, i, d, s.n_ff, trunk_scale)
    return w


def write_lfm2(path: Path, weights: Weights, shape: Lfm2Shape, vocab: Vocab, *, name: str = "tiny-lfm2") -> Path:
    """Write an ``lfm2`` GGUF (``attention.head_count_kv`` per layer: 0 marks a convolution layer)."""
    s = shape
    writer = _writer(path, "lfm2", name, vocab, s.n_ctx_train, s.n_embd, s.n_layer)
    writer.add_feed_forward_length(s.n_ff)
    writer.add_head_count(s.n_head)
    writer.add_head_count_kv([0 if s.is_recurrent(i) else s.n_head_kv for i in range(s.n_layer)])
    writer.add_rope_freq_base(1000000.0)
    writer.add_shortconv_l_cache(s.l_cache)
    _finish(writer, weights)
    return path


def make_lfm2(path: Path, *, shape: Lfm2Shape = Lfm2Shape(), seed: int = 2025, output_scale: float = 1.0,
              name: str | None = None) -> Path:
    """One random ``lfm2`` model at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    return write_lfm2(path, lfm2_weights(shape, len(vocab[0]), seed, output_scale=output_scale), shape, vocab,
                      name=name or path.stem)


def make_lfm2_family(directory: Path, *, shape: Lfm2Shape = Lfm2Shape(), draft_layers: int = 4,
                     extra_layer_scale: float = 0.1, trunk_scale: float = 1.0, seed: int = 2025,
                     prefix: str = "lfm2", output_scale: float = 1.0) -> HybridFamily:
    """An ``lfm2`` target and its draft (the target's first ``draft_layers`` layers; with the default shape the
    draft keeps attention layer 2, so it is a hybrid too). Files: ``{prefix}-target.gguf``, ``{prefix}-draft.gguf``."""
    if not 0 < draft_layers < shape.n_layer:
        raise ValueError(f"draft_layers must be in 1..{shape.n_layer - 1}, got {draft_layers}")
    if all(shape.is_recurrent(i) for i in range(draft_layers)):
        raise ValueError(_NO_ATTENTION)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    target_w = lfm2_weights(shape, len(vocab[0]), seed, output_scale=output_scale, trunk_scale=trunk_scale)
    _scale_outputs(target_w, range(draft_layers, shape.n_layer), extra_layer_scale)
    draft_shape = dataclasses.replace(
        shape, n_layer=draft_layers, attention_layers=tuple(i for i in shape.attention_layers if i < draft_layers))
    return HybridFamily(
        target=write_lfm2(directory / f"{prefix}-target.gguf", target_w, shape, vocab, name=f"{prefix}-target"),
        draft=write_lfm2(directory / f"{prefix}-draft.gguf", _trunk_prefix(target_w, draft_layers), draft_shape,
                         vocab, name=f"{prefix}-draft"),
    )


# -- mamba (no partial rollback) ------------------------------------------------------------------------------
def make_mamba(path: Path, *, shape: MambaShape = MambaShape(), seed: int = 1953, name: str | None = None) -> Path:
    """One random ``mamba`` (v1) model: a recurrent architecture this llama.cpp cannot roll back partially."""
    path.parent.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    rng = np.random.default_rng(seed)
    mat = _rand(rng)
    s, d = shape, shape.n_embd
    w = _common_weights(rng, len(vocab[0]), d, 1.0, "output_norm")
    for i in range(s.n_layer):
        w[f"blk.{i}.attn_norm.weight"] = np.ones(d, dtype=np.float32)
        w[f"blk.{i}.ssm_in.weight"] = mat(2 * s.d_inner, d, 1.0 / np.sqrt(d))
        w[f"blk.{i}.ssm_conv1d.weight"] = _f32(rng.standard_normal((s.d_inner, s.d_conv)) / np.sqrt(s.d_conv))
        w[f"blk.{i}.ssm_conv1d.bias"] = np.zeros(s.d_inner, dtype=np.float32)
        w[f"blk.{i}.ssm_x.weight"] = mat(s.dt_rank + 2 * s.d_state, s.d_inner, 1.0 / np.sqrt(s.d_inner))
        w[f"blk.{i}.ssm_dt.weight"] = mat(s.d_inner, s.dt_rank, 1.0 / np.sqrt(s.dt_rank))
        w[f"blk.{i}.ssm_dt.bias"] = _f32(rng.standard_normal(s.d_inner) * 0.1 - 2.0)
        w[f"blk.{i}.ssm_a"] = _f32(-np.tile(np.arange(1, s.d_state + 1, dtype=np.float32), (s.d_inner, 1)))
        w[f"blk.{i}.ssm_d"] = np.ones(s.d_inner, dtype=np.float32)
        w[f"blk.{i}.ssm_out.weight"] = mat(d, s.d_inner, 1.0 / np.sqrt(s.d_inner))
    writer = _writer(path, "mamba", name or path.stem, vocab, s.n_ctx_train, d, s.n_layer)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_ssm_conv_kernel(s.d_conv)
    writer.add_ssm_inner_size(s.d_inner)
    writer.add_ssm_state_size(s.d_state)
    writer.add_ssm_time_step_rank(s.dt_rank)
    _finish(writer, w)
    return path

