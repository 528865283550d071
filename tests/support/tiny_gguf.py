"""Tiny GGUF model families generated at test time (never committed).

Recipe (works with llama-cpp-python 0.3.36): architecture ``llama``, an SPM vocabulary (``<unk>``, ``<s>``,
``</s>``, the 256 byte tokens ``<0xNN>``, then word pieces), F16 matrices and F32 norms.

A *family* shares embeddings and the output head: the draft is the target's first layer, and the target's
extra layers have their output projections (``attn_output``, ``ffn_down``) scaled by ``extra_layer_scale`` so
that they only nudge the residual stream. A small scale keeps the target close to its draft (high acceptance),
a large one pulls them apart (scale 0.1 gave ~0.8, 0.3 ~0.58, 0.5 ~0.35 with 8 layers x 256).

Every matrix is converted to F16 explicitly: numpy promotes mixed float arithmetic to float64, and a GGUF with an
F64 matrix loads fine and then segfaults this llama.cpp at the first decode (kept as a crash fixture).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gguf
import numpy as np

WORDS = (
    "the of and to in is that it for on with as was by he she they we you this be at from or an are not have "
    "but what all were when there can one out more if will up about who which their so said time would do "
    "def return class import self print if else for while in range list dict str int value data result "
    "hello world model draft target token speed fast slow text code line file name user assistant system"
).split()
SYMBOLS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?()[]{}=+-*/_'\"#<>")

UNK, BOS, EOS = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class TinyShape:
    """Dimensions of a generated model."""

    n_layer: int = 8
    n_embd: int = 256
    n_head: int = 4
    n_ff: int = 512
    n_ctx_train: int = 4096


def build_vocab(extra_words: int = 0) -> tuple[list[str], list[float], list[int]]:
    """Return (tokens, scores, token types) of the shared SPM vocabulary; ``extra_words`` makes it longer."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces: list[str] = []
    for word in WORDS:
        for piece in ("\u2581" + word, word):
            if piece not in pieces:
                pieces.append(piece)
    for sym in SYMBOLS:
        for piece in (sym, "\u2581" + sym):
            if piece not in pieces:
                pieces.append(piece)
    pieces.append("\u2581")
    pieces += [f"\u2581extra{i}" for i in range(extra_words)]
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    assert len(set(tokens)) == len(tokens), "llama.cpp aborts at load on duplicated token texts"
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, [int(t) for t in types]


def vocab_variant(
    *, extra_words: int = 0, renamed: dict[int, str] | None = None
) -> tuple[list[str], list[float], list[int]]:
    """``build_vocab`` with ``extra_words`` more tokens and the texts of some ids replaced (as normal tokens)."""
    tokens, scores, types = build_vocab(extra_words)
    for token_id, text in (renamed or {}).items():
        assert text not in tokens, "llama.cpp aborts at load on duplicated token texts"
        tokens[token_id] = text
        types[token_id] = int(gguf.TokenType.NORMAL)
    return tokens, scores, types


def _f16(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float16)


def random_weights(shape: TinyShape, n_vocab: int, seed: int, *, output_scale: float = 1.0) -> dict[str, np.ndarray]:
    """Random llama weights (F16 matrices, F32 norms) keyed by GGUF tensor name.

    ``output_scale`` multiplies the output head: logits have a standard deviation of about ``output_scale``, so
    a larger value gives peaked next-token distributions (a few tokens hold most of the mass at temperature 1).
    """
    rng = np.random.default_rng(seed)
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
        w[f"blk.{i}.ffn_norm.weight"] = np.ones(d, dtype=np.float32)
        w[f"blk.{i}.attn_q.weight"] = mat(d, d, 1.0 / np.sqrt(d))
        w[f"blk.{i}.attn_k.weight"] = mat(d, d, 1.0 / np.sqrt(d))
        w[f"blk.{i}.attn_v.weight"] = mat(d, d, 1.0 / np.sqrt(d))
        w[f"blk.{i}.attn_output.weight"] = mat(d, d, 1.0 / np.sqrt(d))
        w[f"blk.{i}.ffn_gate.weight"] = mat(f, d, 1.0 / np.sqrt(d))
        w[f"blk.{i}.ffn_up.weight"] = mat(f, d, 1.0 / np.sqrt(d))
        w[f"blk.{i}.ffn_down.weight"] = mat(d, f, 1.0 / np.sqrt(f))
    return w


def write_gguf(
    path: Path,
    weights: dict[str, np.ndarray],
    shape: TinyShape,
    vocab: tuple[list[str], list[float], list[int]],
    *,
    arch: str = "llama",
    name: str = "tiny",
    bos_id: int | None = BOS,
    eos_id: int | None = EOS,
    add_bos: bool | None = True,
    add_eos: bool | None = False,
    chat_template: str | None = None,
    tokenizer_model: str = "llama",
    merges: list[str] | None = None,
    extra_kv: dict[str, object] | None = None,
    check_dtypes: bool = True,
) -> Path:
    """Write one GGUF file; the metadata follows what llama.cpp's ``llama`` loader reads."""
    tokens, scores, types = vocab
    if check_dtypes:
        for key, value in weights.items():
            if value.ndim == 2 and value.dtype != np.float16:
                raise AssertionError(f"{key} is {value.dtype}; matrices must be F16")
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    if f"{arch}.rope.dimension_count" not in (extra_kv or {}):
        writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    if merges is None and tokenizer_model == "gpt2":
        merges = ["t h"]  # llama.cpp refuses a BPE vocabulary without tokenizer.ggml.merges
    if merges is not None:
        writer.add_token_merges(merges)
    if bos_id is not None:
        writer.add_bos_token_id(bos_id)
    if eos_id is not None:
        writer.add_eos_token_id(eos_id)
    writer.add_unk_token_id(UNK)
    if add_bos is not None:  # None: the key is left out (llama.cpp's per-vocabulary default applies)
        writer.add_add_bos_token(add_bos)
    if add_eos is not None:
        writer.add_add_eos_token(add_eos)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for key, value in (extra_kv or {}).items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_string(key, str(value))
    for key, value in weights.items():
        writer.add_tensor(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@dataclasses.dataclass(frozen=True)
class Family:
    """Paths of a generated family."""

    target: Path
    draft: Path
    unrelated: Path
    incompatible: Path


def make_family(
    directory: Path,
    *,
    shape: TinyShape = TinyShape(),
    extra_layer_scale: float = 0.1,
    seed: int = 1234,
    prefix: str = "tiny",
    output_scale: float = 1.0,
    draft_layers: int = 1,
) -> Family:
    """Generate target, family draft (the target's first ``draft_layers`` layers), unrelated draft and
    incompatible draft."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    n_vocab = len(vocab[0])
    target_w = random_weights(shape, n_vocab, seed, output_scale=output_scale)
    for i in range(1, shape.n_layer):
        for part in ("attn_output", "ffn_down"):
            key = f"blk.{i}.{part}.weight"
            target_w[key] = _f16(target_w[key].astype(np.float32) * np.float32(extra_layer_scale))
    draft_shape = dataclasses.replace(shape, n_layer=draft_layers)
    draft_w = {k: v for k, v in target_w.items()
               if not k.startswith("blk.") or int(k.split(".")[1]) < draft_layers}
    one_layer = dataclasses.replace(shape, n_layer=1)  # the unrelated and incompatible drafts
    unrelated_w = random_weights(one_layer, n_vocab, seed + 1, output_scale=output_scale)
    other_vocab = build_vocab(extra_words=200)
    incompatible_w = random_weights(one_layer, len(other_vocab[0]), seed + 2)
    return Family(
        target=write_gguf(directory / f"{prefix}-target.gguf", target_w, shape, vocab, name=f"{prefix}-target"),
        draft=write_gguf(directory / f"{prefix}-draft.gguf", draft_w, draft_shape, vocab, name=f"{prefix}-draft"),
        unrelated=write_gguf(
            directory / f"{prefix}-unrelated.gguf", unrelated_w, one_layer, vocab, name=f"{prefix}-unrelated"
        ),
        incompatible=write_gguf(
            directory / f"{prefix}-incompatible.gguf",
            incompatible_w,
            one_layer,
            other_vocab,
            name=f"{prefix}-incompatible",
        ),
    )
