"""Find GGUF files already on disk: Hugging Face cache, LM Studio, Ollama, the user's folders, our store.

Nothing here touches the network: huggingface_hub is imported with ``HF_HUB_OFFLINE=1`` when it was not imported
yet (``ensure_offline_hub``). sha256 is only taken when it is free: an HF cache blob is named by its LFS sha256,
and our store keeps verification records. An Ollama blob is named by its digest too, but a blob with the right
name and size can still hold other bytes: it is hashed once, when it would match a catalogue file, and the verdict
is cached by path + size + mtime (``ModelStore.content_sha256``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from outrider.catalogue.schema import SHA256_RE, Catalogue, ModelFile
from outrider.catalogue.store import FileState, ModelStore

OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
GGUF_MAGIC = b"GGUF"


def ensure_offline_hub() -> None:
    """Set ``HF_HUB_OFFLINE=1`` before huggingface_hub is first imported (it reads it at import time)."""
    if "huggingface_hub" not in sys.modules and "HF_HUB_OFFLINE" not in os.environ:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["OUTRIDER_SET_HF_HUB_OFFLINE"] = "1"  # download children undo it


@dataclasses.dataclass(frozen=True)
class FoundFile:
    """A GGUF on disk. ``sha256`` only when known without hashing; ``sha256_claimed``: it is only what the file's
    name says (an Ollama blob), and the content must be hashed before it is trusted."""

    path: Path
    name: str  # the file name the publisher gave it (an Ollama blob gets its model name)
    size: int
    source: str  # hf-cache, lmstudio, ollama, folder, store
    repo: str = ""
    sha256: str | None = None
    sha256_claimed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "name": self.name, "size": self.size, "source": self.source,
                "repo": self.repo or None, "sha256": self.sha256}


def _is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def _walk_gguf(root: Path, max_depth: int = 6) -> Iterable[Path]:
    if not root.is_dir():
        return
    base = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if len(Path(dirpath).parts) - base >= max_depth:
            dirnames.clear()
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for fn in filenames:
            if fn.lower().endswith(".gguf"):
                yield Path(dirpath) / fn


class DiscoveryScanner:
    """Scans the usual places. Every root can be overridden (tests, portable installs)."""

    def __init__(self, store: ModelStore | None = None, *, home: Path | None = None,
                 hf_cache: Path | None = None, lmstudio_dirs: list[Path] | None = None,
                 ollama_dir: Path | None = None, extra_folders: list[Path] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.store = store or ModelStore()
        h = home or Path.home()
        self.hf_cache = hf_cache
        self.lmstudio_dirs = lmstudio_dirs if lmstudio_dirs is not None else [
            h / ".lmstudio" / "models", h / ".cache" / "lm-studio" / "models"]
        self.ollama_dir = ollama_dir or (Path(env["OLLAMA_MODELS"]) if env.get("OLLAMA_MODELS")
                                         else h / ".ollama" / "models")
        self.extra_folders = extra_folders

    # -- sources ------------------------------------------------------------------------------------------
    def scan_hf_cache(self) -> list[FoundFile]:
        ensure_offline_hub()
        from huggingface_hub import scan_cache_dir
        from huggingface_hub.errors import CacheNotFound

        try:
            info = scan_cache_dir(self.hf_cache)
        except (CacheNotFound, OSError, ValueError):
            return []
        found: list[FoundFile] = []
        for repo in info.repos:
            if repo.repo_type != "model":
                continue
            for rev in repo.revisions:
                for f in rev.files:
                    if not f.file_name.lower().endswith(".gguf"):
                        continue
                    blob = Path(f.blob_path).name
                    found.append(FoundFile(Path(f.file_path), f.file_name, f.size_on_disk, "hf-cache",
                                           repo.repo_id, blob if SHA256_RE.match(blob) else None))
        return found

    def scan_lmstudio(self) -> list[FoundFile]:
        found: list[FoundFile] = []
        for root in self.lmstudio_dirs:
            for p in _walk_gguf(root, 4):
                rel = p.relative_to(root).parts
                repo = "/".join(rel[:2]) if len(rel) >= 3 else ""
                found.append(FoundFile(p, p.name, p.stat().st_size, "lmstudio", repo))
        return found

    def scan_ollama(self) -> list[FoundFile]:
        manifests = self.ollama_dir / "manifests"
        blobs = self.ollama_dir / "blobs"
        found: list[FoundFile] = []
        if not manifests.is_dir():
            return found
        for dirpath, _dirs, files in os.walk(manifests):
            for fn in files:
                mpath = Path(dirpath) / fn
                try:
                    manifest = json.loads(mpath.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                rel = mpath.relative_to(manifests).parts  # registry/namespace/model/tag
                name = f"{rel[-2]}:{rel[-1]}" if len(rel) >= 2 else fn
                for layer in manifest.get("layers", []) if isinstance(manifest, dict) else []:
                    if not isinstance(layer, dict) or layer.get("mediaType") != OLLAMA_MODEL_MEDIA_TYPE:
                        continue
                    digest = str(layer.get("digest", ""))
                    algo, _, hexd = digest.partition(":")
                    blob = blobs / f"{algo}-{hexd}"
                    if not blob.is_file() or not _is_gguf(blob):
                        continue
                    found.append(FoundFile(blob, name, blob.stat().st_size, "ollama", name,
                                           hexd if algo == "sha256" and SHA256_RE.match(hexd) else None,
                                           sha256_claimed=True))
        return found

    def scan_folders(self) -> list[FoundFile]:
        folders = self.extra_folders if self.extra_folders is not None else self.store.user_folders()
        return [FoundFile(p, p.name, p.stat().st_size, "folder") for folder in folders for p in _walk_gguf(folder)]

    def scan_store(self) -> list[FoundFile]:
        found = []
        for p in _walk_gguf(self.store.root, 8):
            found.append(FoundFile(p, p.name, p.stat().st_size, "store", "", self.store.recorded_sha256(p)))
        return found

    def scan(self) -> list[FoundFile]:
        """Every GGUF found, each path once."""
        seen: set[Path] = set()
        out: list[FoundFile] = []
        for part in (self.scan_store(), self.scan_hf_cache(), self.scan_lmstudio(), self.scan_ollama(),
                     self.scan_folders()):
            for f in part:
                key = f.path.resolve()
                if key not in seen:
                    seen.add(key)
                    out.append(f)
        return out

    # -- matching -----------------------------------------------------------------------------------------
    @staticmethod
    def match(model: ModelFile, found: Iterable[FoundFile],
              content_sha256: Callable[[Path], str | None] | None = None) -> FileState | None:
        """The best on-disk copy of ``model``: a sha256 match beats a name+size match.

        A digest that is only claimed by a file's name (``sha256_claimed``) is checked with ``content_sha256``
        (hashes the file; cached) before it counts; without it such a file is not a sha256 match."""
        best: FileState | None = None
        for f in found:
            if f.size != model.size:
                continue
            if f.sha256 is not None and model.sha256 is not None:
                if f.sha256 == model.sha256:
                    if not f.sha256_claimed:
                        return FileState(model, f.path, True, f.source)
                    if content_sha256 is not None and content_sha256(f.path) == model.sha256:
                        return FileState(model, f.path, True, f.source)
                continue  # same size, different content (or a name that lies about it)
            if f.name.lower() == model.filename.lower() and best is None:
                best = FileState(model, f.path, False, f.source)
        return best

    def match_catalogue(self, catalogue: Catalogue, found: list[FoundFile] | None = None) -> dict[str, FileState]:
        """Catalogue model key → where it already is on disk (outside or inside the store)."""
        files = self.scan() if found is None else found
        out: dict[str, FileState] = {}
        for key, model in catalogue.models.items():
            if model.source != "hf":
                continue
            st = self.match(model, files, self.store.content_sha256)
            if st is not None:
                out[key] = st
        return out
