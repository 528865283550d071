"""A corpus of bad model files, built at test time (never committed), for the engine-process tests.

Each builder writes one file (or makes one path) under ``directory`` and returns its path. ``good`` is a small
valid model of ``tests.support.tiny_gguf`` used to derive the malformed ones.
"""

from __future__ import annotations

import io
import random
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from support.tiny_gguf import TinyShape, build_vocab, random_weights, write_gguf

SMALL = TinyShape(n_layer=1, n_embd=64, n_head=2, n_ff=128, n_ctx_train=512)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def small_model(path: Path, **kwargs: object) -> Path:
    vocab = build_vocab()
    return write_gguf(path, random_weights(SMALL, len(vocab[0]), seed=7), SMALL, vocab, name="small",
                      **kwargs)  # type: ignore[arg-type]


def empty(directory: Path) -> Path:
    path = directory / "empty.gguf"
    path.write_bytes(b"")
    return path


def random_bytes(directory: Path) -> Path:
    path = directory / "random.gguf"
    path.write_bytes(random.Random(42).randbytes(64 * 1024))
    return path


def wrong_magic(directory: Path, good: Path) -> Path:
    path = directory / "fugg.gguf"
    path.write_bytes(b"FUGG" + good.read_bytes()[4:])
    return path


def png_renamed(directory: Path) -> Path:
    path = directory / "picture.gguf"
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    path.write_bytes(PNG_SIGNATURE + struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + b"\0" * 64)
    return path


def zip_renamed(directory: Path) -> Path:
    path = directory / "archive.gguf"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("model.gguf", b"GGUF" + b"\0" * 100)
    path.write_bytes(buf.getvalue())
    return path


def html_renamed(directory: Path) -> Path:
    path = directory / "download.gguf"
    path.write_text("<!DOCTYPE html><html><body>Sign in to download</body></html>\n")
    return path


def future_version(directory: Path, good: Path) -> Path:
    data = bytearray(good.read_bytes())
    data[4:8] = struct.pack("<I", 99)
    path = directory / "future.gguf"
    path.write_bytes(bytes(data))
    return path


def header_only(directory: Path, good: Path) -> Path:
    """The complete header and metadata, no tensor data at all."""
    from outrider.engine.llama.gguf_header import read_header

    header = read_header(good, keep_arrays=False)
    path = directory / "header-only.gguf"
    path.write_bytes(good.read_bytes()[: header.data_offset])
    return path


def truncated_header(directory: Path, good: Path) -> Path:
    path = directory / "truncated-header.gguf"
    path.write_bytes(good.read_bytes()[:200])
    return path


def truncated_data(directory: Path, good: Path) -> Path:
    """An interrupted download: the file ends inside the tensor data."""
    data = good.read_bytes()
    path = directory / "truncated.gguf"
    path.write_bytes(data[: len(data) * 3 // 4])
    return path


def unsupported_arch(directory: Path) -> Path:
    return small_model(directory / "xyz-arch.gguf", arch="xyzformer")


def absurd_block_count(directory: Path) -> Path:
    """``llama.block_count`` = 100,000 (llama.cpp allows 512 layers) with one layer of tensors."""
    vocab = build_vocab()
    weights = random_weights(SMALL, len(vocab[0]), seed=7)
    path = directory / "absurd-layers.gguf"
    write_gguf(path, weights, TinyShape(n_layer=100_000, n_embd=64, n_head=2, n_ff=128, n_ctx_train=512), vocab)
    return path


def absurd_context(directory: Path) -> Path:
    """Absurd but well-typed metadata: a 2**31-token training context and 4 billion attention heads."""
    return small_model(directory / "absurd-heads.gguf",
                       extra_kv={"llama.context_length": 2**31 - 1, "llama.attention.head_count": 2**32 - 1})


def huge_alignment(directory: Path) -> Path:
    return small_model(directory / "huge-alignment.gguf", extra_kv={"general.alignment": 1 << 30})


def f64_output(directory: Path) -> Path:
    """Loads without complaint, then segfaults llama.cpp's CPU matmul at the first decode."""
    vocab = build_vocab()
    weights = random_weights(SMALL, len(vocab[0]), seed=7)
    weights["output.weight"] = weights["output.weight"].astype(np.float64)
    path = directory / "f64-output.gguf"
    return write_gguf(path, weights, SMALL, vocab, check_dtypes=False)


def duplicated_token(directory: Path) -> Path:
    """A vocabulary with one token text twice: llama.cpp aborts (GGML_ASSERT) at load."""
    tokens, scores, types = build_vocab()
    tokens = list(tokens)
    tokens[-1] = tokens[-2]
    weights = random_weights(SMALL, len(tokens), seed=7)
    path = directory / "dup-token.gguf"
    return write_gguf(path, weights, SMALL, (tokens, scores, types))


def a_directory(directory: Path) -> Path:
    path = directory / "folder.gguf"
    path.mkdir(exist_ok=True)
    return path


def missing(directory: Path) -> Path:
    return directory / "does-not-exist.gguf"


def unreadable(directory: Path, good: Path) -> Path:
    path = directory / "unreadable.gguf"
    path.write_bytes(good.read_bytes())
    path.chmod(0)
    return path


# name -> (builder needing the good model?, builder)
SIMPLE: dict[str, Callable[[Path], Path]] = {
    "empty": empty,
    "random_bytes": random_bytes,
    "png_renamed": png_renamed,
    "zip_renamed": zip_renamed,
    "html_renamed": html_renamed,
    "unsupported_arch": unsupported_arch,
    "absurd_block_count": absurd_block_count,
    "absurd_context": absurd_context,
    "huge_alignment": huge_alignment,
    "a_directory": a_directory,
    "missing": missing,
}
DERIVED: dict[str, Callable[[Path, Path], Path]] = {
    "wrong_magic": wrong_magic,
    "future_version": future_version,
    "header_only": header_only,
    "truncated_header": truncated_header,
    "truncated_data": truncated_data,
}


def build_corpus(directory: Path, good: Path) -> dict[str, Path]:
    """Every non-crashing bad file of the corpus, by name."""
    directory.mkdir(parents=True, exist_ok=True)
    corpus = {name: build(directory) for name, build in SIMPLE.items()}
    corpus.update({name: build(directory, good) for name, build in DERIVED.items()})
    return corpus
