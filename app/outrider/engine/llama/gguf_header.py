"""A bounded, pure-Python reader of GGUF headers: metadata and tensor table, never tensor data.

Used before anything is handed to llama.cpp (which aborts or crashes on some malformed files) and by the
catalogue/UI to explain a pair before it is downloaded or loaded. Every count and length read from the file is
checked against the file size before it is trusted, so a hostile header cannot make us allocate gigabytes.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from pathlib import Path
from typing import Any, BinaryIO

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_STRING_BYTES = 64 * 1024 * 1024
MAX_TENSOR_DIMS = 8

# GGUF value type ids (gguf.GGUFValueType) and their struct formats.
_SCALAR_FORMATS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                                   10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GGUFHeaderError(Exception):
    """The file is not a readable GGUF; ``kind`` is one of not_gguf, bad_version, truncated_header,
    incomplete, bad_metadata, missing, is_directory, permission."""

    def __init__(self, kind: str, message: str, *, size: int | None = None, expected: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.size = size
        self.expected = expected


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One tensor table entry; ``offset`` is relative to the start of the data section."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    n_bytes: int


@dataclasses.dataclass(frozen=True)
class GGUFHeader:
    """Parsed header. ``expected_size`` is the byte length a complete file must have."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    file_size: int

    @property
    def expected_size(self) -> int:
        end = max((t.offset + t.n_bytes for t in self.tensors), default=0)
        return self.data_offset + end

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, suffix: str, default: Any = None) -> Any:
        """Value of ``{architecture}.{suffix}``."""
        return self.metadata.get(f"{self.architecture}.{suffix}", default)


# Numeric arrays this long or shorter are kept even by a quick look (``keep_arrays=False``): per-layer values
# (``attention.head_count_kv`` of a hybrid, ``attention.recurrent_layers``) have a few hundred items at most, and
# their bytes are read either way; a vocabulary's scores and token types are far longer.
SMALL_ARRAY = 4096


class _Reader:
    def __init__(self, stream: BinaryIO, size: int) -> None:
        self.stream = stream
        self.size = size

    def read(self, n: int) -> bytes:
        if n < 0 or self.stream.tell() + n > self.size:
            raise GGUFHeaderError("truncated_header", "GGUF header is truncated", size=self.size)
        return self.stream.read(n)

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.scalar("<Q")
        if n > MAX_STRING_BYTES:
            raise GGUFHeaderError("bad_metadata", f"GGUF string of {n} bytes is larger than allowed")
        return self.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, *, keep_arrays: bool) -> Any:
        if vtype in _SCALAR_FORMATS:
            return self.scalar(_SCALAR_FORMATS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type = self.scalar("<I")
            count = self.scalar("<Q")
            remaining = self.size - self.stream.tell()
            if count > remaining:  # every item takes at least one byte
                raise GGUFHeaderError("bad_metadata", f"GGUF array of {count} items exceeds the file")
            if item_type in _SCALAR_FORMATS:
                fmt = _SCALAR_FORMATS[item_type]
                width = struct.calcsize(fmt)
                raw = self.read(width * count)
                if not keep_arrays and count > SMALL_ARRAY:
                    return _ArrayStub(count)
                return list(struct.unpack(f"<{count}{fmt[1]}", raw))
            items = [self.value(item_type, keep_arrays=keep_arrays) for _ in range(count)]
            return items if keep_arrays else _ArrayStub(count)
        raise GGUFHeaderError("bad_metadata", f"unknown GGUF value type {vtype}")


@dataclasses.dataclass(frozen=True)
class _ArrayStub:
    """An array skipped without keeping its items (only its length is known)."""

    count: int

    def __len__(self) -> int:
        return self.count


def _tensor_bytes(shape: tuple[int, ...], ggml_type: int) -> int:
    # Imported here: gguf pulls numpy (~0.4 s), and importing this module must stay cheap (the GUI's start-up).
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError) as exc:
        raise GGUFHeaderError("bad_metadata", f"unknown tensor type {ggml_type}") from exc
    n = 1
    for d in shape:
        n *= d
    return n // block * type_size


def check_path(path: Path) -> int:
    """Return the file size, or raise the specific reason the path cannot be read."""
    if not path.exists():
        raise GGUFHeaderError("missing", f"file not found: {path}")
    if path.is_dir():
        raise GGUFHeaderError("is_directory", f"{path} is a directory, not a model file")
    if not os.access(path, os.R_OK):
        raise GGUFHeaderError("permission", f"no permission to read {path}")
    return path.stat().st_size


def read_header(path: str | os.PathLike[str], *, keep_arrays: bool = True) -> GGUFHeader:
    """Parse a GGUF file's header; raises GGUFHeaderError with a specific kind.

    ``keep_arrays=False`` skips array contents (e.g. 150k-token vocabularies) for a quick look.
    """
    p = Path(path)
    size = check_path(p)
    try:
        stream = p.open("rb")
    except PermissionError as exc:
        raise GGUFHeaderError("permission", f"no permission to read {p}") from exc
    with stream:
        r = _Reader(stream, size)
        if size < 4 or stream.read(4) != GGUF_MAGIC:
            raise GGUFHeaderError("not_gguf", f"{p.name} is not a GGUF file", size=size)
        try:
            version = r.scalar("<I")
            if version not in SUPPORTED_VERSIONS:
                raise GGUFHeaderError("bad_version", f"unsupported GGUF version {version}")
            n_tensors = r.scalar("<Q")
            n_kv = r.scalar("<Q")
            if n_tensors > size or n_kv > size:
                raise GGUFHeaderError("bad_metadata", "GGUF header declares more entries than the file holds")
            metadata: dict[str, Any] = {}
            for _ in range(n_kv):
                key = r.string()
                vtype = r.scalar("<I")
                metadata[key] = r.value(vtype, keep_arrays=keep_arrays)
            tensors = []
            for _ in range(n_tensors):
                name = r.string()
                n_dims = r.scalar("<I")
                if n_dims > MAX_TENSOR_DIMS:
                    raise GGUFHeaderError("bad_metadata", f"tensor {name} has {n_dims} dimensions")
                shape = tuple(r.scalar("<Q") for _ in range(n_dims))
                ggml_type = r.scalar("<I")
                offset = r.scalar("<Q")
                tensors.append(TensorInfo(name, shape, ggml_type, offset, _tensor_bytes(shape, ggml_type)))
        except GGUFHeaderError as exc:
            if exc.kind == "truncated_header":
                raise GGUFHeaderError(
                    "truncated_header", f"file is incomplete: {size} bytes end inside the GGUF header", size=size
                ) from exc
            raise
        alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT) or DEFAULT_ALIGNMENT)
        if alignment <= 0 or alignment & (alignment - 1) or alignment > 1 << 20:
            raise GGUFHeaderError("bad_metadata", f"invalid general.alignment {alignment}")
        pos = stream.tell()
        data_offset = (pos + alignment - 1) // alignment * alignment
    header = GGUFHeader(p, version, metadata, tuple(tensors), data_offset, size)
    if header.expected_size > size:
        raise GGUFHeaderError(
            "incomplete",
            f"file is incomplete: {size} of {header.expected_size} bytes",
            size=size,
            expected=header.expected_size,
        )
    return header
