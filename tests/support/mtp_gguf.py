"""Tiny dense models with MTP (NextN) heads, generated at test time (never committed).

Architecture ``glm4moe`` of the vendored llama.cpp: a plain attention trunk (every trunk block dense through
``leading_dense_block_count``, so no recurrent state and exact KV rollback without ``n_rs_seq``) followed by one
NextN block, which llama.cpp runs in a context of type ``LLAMA_CONTEXT_TYPE_MTP`` (``src/models/glm4-moe.cpp``:
the block needs a routed-expert FFN; two experts, one used, and a shared expert keep it small).

Why the head predicts the target's next token: the trunk's blocks add only a small amount to the residual stream
(their output projections are scaled by ``trunk_scale``), so the target's next token is mostly a function of the
current token read through the shared output head. The NextN block's input projection ``eh_proj`` passes the
normalised token embedding through unchanged and adds ``hidden_noise`` times a random map of the target's hidden
state; its attention and FFN are scaled down the same way. Its logits are then the same function of the token it
is given, plus noise: ``hidden_noise`` near 0 gives high acceptance, a large value (with ``head_seed`` differing)
gives a head that mostly disagrees (MTP that cannot pay).

Three files from one call: the target with the NextN block inside (``--mtp``), the trunk alone (no NextN block:
``--mtp`` must be refused), and a separate head file holding only the NextN block (``--mtp-head``), which
llama.cpp loads as an "MTP-only" model of the same architecture.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from support.tiny_gguf import TinyShape, build_vocab, write_gguf

ARCH = "glm4moe"


@dataclasses.dataclass(frozen=True)
class MtpShape:
    """Dimensions of a generated MTP model; ``n_layer`` counts trunk blocks (the NextN block comes on top)."""

    n_layer: int = 4
    n_embd: int = 256
    n_head: int = 4
    n_ff: int = 512
    n_ff_exp: int = 128
    n_expert: int = 2
    n_ctx_train: int = 4096


@dataclasses.dataclass(frozen=True)
class MtpModels:
    """Paths of one generated set."""

    target: Path  # trunk + NextN block in one file
    trunk: Path  # the same trunk without the NextN block
    head: Path  # the NextN block alone


def _f16(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float16)


def _trunk_weights(shape: MtpShape, n_vocab: int, rng: np.random.Generator, trunk_scale: float,
                   output_scale: float, attention_scale: float | None = None) -> dict[str, np.ndarray]:
    d, f = shape.n_embd, shape.n_ff

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return _f16(rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale))

    w: dict[str, np.ndarray] = {
        "token_embd.weight": mat(n_vocab, d, 1.0),
        "output_norm.weight": np.ones(d, dtype=np.float32),
        "output.weight": mat(n_vocab, d, output_scale / np.sqrt(d)),
    }
    for i in range(shape.n_layer):
        w[f"blk.{i}.attn_norm.weight"] = np.ones(d, dtype=np.float32)
        w[f"blk.{i}.post_attention_norm.weight"] = np.ones(d, dtype=np.float32)
        for part in ("q", "k", "v"):
            w[f"blk.{i}.attn_{part}.weight"] = mat(d, d, 1.0 / np.sqrt(d))
        attn = trunk_scale if attention_scale is None or i > 0 else attention_scale
        w[f"blk.{i}.attn_output.weight"] = mat(d, d, attn / np.sqrt(d))
        w[f"blk.{i}.ffn_gate.weight"] = mat(f, d, 1.0 / np.sqrt(d))
        w[f"blk.{i}.ffn_up.weight"] = mat(f, d, 1.0 / np.sqrt(d))
        w[f"blk.{i}.ffn_down.weight"] = mat(d, f, trunk_scale / np.sqrt(f))
    return w


def _nextn_weights(shape: MtpShape, n_vocab: int, rng: np.random.Generator, hidden_noise: float,
                   block_scale: float, hidden_weight: float = 0.0, token_weight: float = 1.0) -> dict[str, np.ndarray]:
    """The NextN block ``blk.{n_layer}``: input projection [identity on the token | noise on the hidden state]."""
    d, fe, ne = shape.n_embd, shape.n_ff_exp, shape.n_expert
    i = shape.n_layer

    def mat(*dims: int, scale: float) -> np.ndarray:
        return _f16(rng.standard_normal(dims, dtype=np.float32) * np.float32(scale))

    eh = np.zeros((d, 2 * d), dtype=np.float32)
    eh[:, :d] = np.eye(d, dtype=np.float32) * np.float32(token_weight)
    eh[:, d:] = rng.standard_normal((d, d), dtype=np.float32) * np.float32(hidden_noise / np.sqrt(d))
    eh[:, d:] += np.eye(d, dtype=np.float32) * np.float32(hidden_weight)
    w: dict[str, np.ndarray] = {
        f"blk.{i}.nextn.eh_proj.weight": _f16(eh),
        f"blk.{i}.nextn.enorm.weight": np.ones(d, dtype=np.float32),
        f"blk.{i}.nextn.hnorm.weight": np.ones(d, dtype=np.float32),
        f"blk.{i}.attn_norm.weight": np.ones(d, dtype=np.float32),
        f"blk.{i}.post_attention_norm.weight": np.ones(d, dtype=np.float32),
        f"blk.{i}.attn_q.weight": mat(d, d, scale=1.0 / np.sqrt(d)),
        f"blk.{i}.attn_k.weight": mat(d, d, scale=1.0 / np.sqrt(d)),
        f"blk.{i}.attn_v.weight": mat(d, d, scale=1.0 / np.sqrt(d)),
        f"blk.{i}.attn_output.weight": mat(d, d, scale=block_scale / np.sqrt(d)),
        f"blk.{i}.ffn_gate_inp.weight": mat(ne, d, scale=1.0 / np.sqrt(d)),
        f"blk.{i}.exp_probs_b.bias": np.zeros(ne, dtype=np.float32),
        f"blk.{i}.ffn_gate_exps.weight": mat(ne, fe, d, scale=1.0 / np.sqrt(d)),
        f"blk.{i}.ffn_up_exps.weight": mat(ne, fe, d, scale=1.0 / np.sqrt(d)),
        f"blk.{i}.ffn_down_exps.weight": mat(ne, d, fe, scale=block_scale / np.sqrt(fe)),
        f"blk.{i}.ffn_gate_shexp.weight": mat(fe, d, scale=1.0 / np.sqrt(d)),
        f"blk.{i}.ffn_up_shexp.weight": mat(fe, d, scale=1.0 / np.sqrt(d)),
        f"blk.{i}.ffn_down_shexp.weight": mat(d, fe, scale=block_scale / np.sqrt(fe)),
    }
    return w


def _kv(shape: MtpShape, *, nextn: bool) -> dict[str, object]:
    kv: dict[str, object] = {
        f"{ARCH}.expert_feed_forward_length": shape.n_ff_exp,
        f"{ARCH}.expert_shared_count": 1,
        f"{ARCH}.leading_dense_block_count": shape.n_layer,  # every trunk block dense; the NextN block MoE
        f"{ARCH}.expert_count": shape.n_expert,
        f"{ARCH}.expert_used_count": 1,
        f"{ARCH}.rope.dimension_count": shape.n_embd // shape.n_head,
    }
    if nextn:
        kv[f"{ARCH}.nextn_predict_layers"] = 1
    return kv


def _write(path: Path, weights: dict[str, np.ndarray], shape: MtpShape, *, nextn: bool, name: str) -> Path:
    tiny = TinyShape(n_layer=shape.n_layer + int(nextn), n_embd=shape.n_embd, n_head=shape.n_head, n_ff=shape.n_ff,
                     n_ctx_train=shape.n_ctx_train)
    return write_gguf(path, weights, tiny, build_vocab(), arch=ARCH, name=name, extra_kv=_kv(shape, nextn=nextn))


def make_mtp_models(directory: Path, *, shape: MtpShape = MtpShape(), seed: int = 4321, trunk_scale: float = 0.03,
                    hidden_noise: float = 0.05, block_scale: float = 0.05, output_scale: float = 4.0,
                    prefix: str = "mtp", head_seed: int | None = None, hidden_weight: float = 0.0,
                    token_weight: float = 1.0, attention_scale: float | None = None) -> MtpModels:
    """Write the target (trunk + NextN), the trunk alone and the head alone into ``directory``.

    ``token_weight`` and ``hidden_weight`` scale the identity maps of ``eh_proj`` on the token and on the hidden
    state (1 and 0 by default: the head reads the token). With 0 and 1 the head reads only the hidden state it
    is given, and its logits are then the target's own at the position of that state: a probe of which state
    the drafter feeds. ``attention_scale`` scales the first trunk block's attention output alone.

    ``head_seed`` (default ``seed + 1``) seeds the NextN block's random parts.
    """
    directory.mkdir(parents=True, exist_ok=True)
    n_vocab = len(build_vocab()[0])
    rng = np.random.default_rng(seed)
    trunk = _trunk_weights(shape, n_vocab, rng, trunk_scale, output_scale, attention_scale)
    head = _nextn_weights(shape, n_vocab, np.random.default_rng(seed + 1 if head_seed is None else head_seed),
                          hidden_noise, block_scale, hidden_weight, token_weight)
    # The head file: the NextN block and what llama.cpp's MTP graph reads besides (embeddings, output head).
    shared = {k: trunk[k] for k in ("token_embd.weight", "output_norm.weight", "output.weight")}
    return MtpModels(
        target=_write(directory / f"{prefix}-target.gguf", {**trunk, **head}, shape, nextn=True,
                      name=f"{prefix}-target"),
        trunk=_write(directory / f"{prefix}-trunk.gguf", trunk, shape, nextn=False, name=f"{prefix}-trunk"),
        head=_write(directory / f"{prefix}-head.gguf", {**shared, **head}, shape, nextn=True,
                    name=f"{prefix}-head"),
    )
