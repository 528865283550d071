"""The model store: where verified files live, their verification records, quarantine, user folders.

Layout under ``models_dir()`` (``$OUTRIDER_HOME/models``)::

    {owner}/{name}/{revision}/{file}               a verified file (moved in atomically)
    {owner}/{name}/{revision}/{file}.outrider.json  its record: sha256, size, mtime_ns (cheap re-check)
    {owner}/{name}/{revision}/{file}.part           a partial download (+ .part.json: what it is part of)
    .quarantine/                                    files whose sha256 did not match
    folders.json                                    folders the user added for discovery
    self-drafts/{target sha256[:16]}/{file}         a self-draft cut from that target's layers (+ its record,
                                                    whose ``source`` is the provenance: target sha256, layers
                                                    kept, type, acceptance measured)
    self-drafts/.build-{pid}-{random}/              a self-draft being built (removed when it ends)
No network access and no huggingface_hub import here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outrider.catalogue.errors import UnsafePathError
from outrider.catalogue.schema import REVISION_RE, Catalogue, ModelFile, Pair, file_path_problem, repo_id_problem
from outrider.engine.selfdraft import format_ranges
from outrider.fileio import atomic_write_json, fsync_directory, move_into_place
from outrider.paths import models_dir

RECORD_SUFFIX = ".outrider.json"
HASH_CACHE_NAME = ".hash-cache.json"  # sha256 of files outside the store, by real path + size + mtime
HASH_CACHE_MAX_BYTES = 4 * 1024 * 1024
PART_SUFFIX = ".part"
CHUNK = 4 * 1024 * 1024
SELF_DRAFT_DIR = "self-drafts"
SELF_DRAFT_KIND = "self-draft"  # ``source.kind`` of a self-draft's record
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done)
    return h.hexdigest()


def fsync_dir(path: Path) -> None:
    """``fileio.fsync_directory``, best effort (a folder that cannot be synced is not an error here)."""
    with contextlib.suppress(OSError):
        fsync_directory(path)


def write_json_atomic(path: Path, data: Any) -> None:
    """Records, hash cache, folder list, download identities: ``fileio.atomic_write_json`` (``0600``)."""
    atomic_write_json(path, data, indent=1)


@dataclasses.dataclass(frozen=True)
class FileState:
    """Where a catalogue file is and how sure we are it is the right one."""

    model: ModelFile
    path: Path | None
    verified: bool  # sha256 matched (now or by a record/cheap hash)
    how: str  # "store", "package", "hf-cache", "lmstudio", "ollama", "folder", "" (missing)
    partial_bytes: int = 0

    @property
    def present(self) -> bool:
        return self.path is not None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.model.key, "file": self.model.file, "size": self.model.size,
                "path": str(self.path) if self.path else None, "verified": self.verified, "how": self.how or None,
                "partial_bytes": self.partial_bytes}


@dataclasses.dataclass(frozen=True)
class PairState:
    pair: Pair
    files: tuple[FileState, ...]

    @property
    def installed(self) -> bool:
        """Every file present and verified: the pair can be loaded."""
        return all(f.present and f.verified for f in self.files)

    @property
    def complete(self) -> bool:
        """Every file present (maybe matched only by name and size)."""
        return all(f.present for f in self.files)

    @property
    def missing_bytes(self) -> int:
        return sum(f.model.size - f.partial_bytes for f in self.files if not f.present)

    @property
    def target_path(self) -> Path | None:
        return self.files[0].path

    @property
    def draft_path(self) -> Path | None:
        return self.files[1].path if len(self.files) > 1 else None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.pair.id, "installed": self.installed, "complete": self.complete,
                "missing_bytes": self.missing_bytes, "files": [f.to_json() for f in self.files]}


@dataclasses.dataclass(frozen=True)
class SelfDraftRecord:
    """A self-draft in the store and where it came from (its record's ``source``).

    ``keep``: the target's blocks it kept (target numbering); ``n_layer``: the target's block count;
    ``acceptance``: accepted / drafted measured on the calibration prompts when it was built (None: not measured).
    """

    path: Path
    target_sha256: str
    target_name: str
    n_layer: int
    keep: tuple[int, ...]
    draft_type: str
    acceptance: float | None
    predicted_speedup: float | None
    calibration: str
    target_path: str = ""
    target_size: int | None = None
    target_mtime_ns: int | None = None

    @classmethod
    def from_source(cls, path: Path, source: dict[str, Any]) -> SelfDraftRecord | None:
        """None when ``source`` is not a well-formed self-draft provenance."""
        try:
            keep = tuple(int(i) for i in source["keep"])
            sha = str(source["target_sha256"])
            if source.get("kind") != SELF_DRAFT_KIND or not SHA256_HEX.match(sha):
                return None

            def number(key: str) -> float | None:
                v = source.get(key)
                return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

            def whole(key: str) -> int | None:
                v = source.get(key)
                return v if isinstance(v, int) and not isinstance(v, bool) else None

            return cls(path, sha, str(source.get("target_name", "")), int(source["n_layer"]), keep,
                       str(source["type"]), number("acceptance"), number("predicted_speedup"),
                       str(source.get("calibration", "")), str(source.get("target_path", "")),
                       whole("target_size"), whole("target_mtime_ns"))
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def layers(self) -> str:
        return format_ranges(self.keep)

    def describe(self) -> str:
        """One line for people: what it is cut from and how well it did."""
        measured = (f", acceptance {self.acceptance:.0%} when built" if self.acceptance is not None else "")
        return (f"self-draft of {self.target_name or 'this model'}: blocks {self.layers} of {self.n_layer}, "
                f"{self.draft_type.upper()}{measured}")

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "target_sha256": self.target_sha256, "target_name": self.target_name,
                "n_layer": self.n_layer, "keep": list(self.keep), "layers": self.layers, "type": self.draft_type,
                "acceptance": self.acceptance, "predicted_speedup": self.predicted_speedup,
                "calibration": self.calibration}


class ModelStore:
    """Verified model files on disk. ``root`` defaults to ``models_dir()`` (honours ``OUTRIDER_HOME``)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else models_dir()
        self.root.mkdir(parents=True, exist_ok=True)
        self._hash_cache: dict[str, Any] | None = None

    # -- paths --------------------------------------------------------------------------------------------
    def path_for(self, repo: str, file: str, revision: str) -> Path:
        """``root/owner/name/revision/file``. Raises UnsafePathError (a ValueError) unless ``repo`` is a valid
        Hub repo id, ``revision`` a 40-hex commit and ``file`` a relative path, and the resolved destination
        folder (symbolic links followed) lies inside the store."""
        problem = None
        if not isinstance(revision, str) or not REVISION_RE.fullmatch(revision):
            problem = f"revision {str(revision)[:80]!r} is not a 40-hex commit"
        elif (why := repo_id_problem(repo)) is not None:
            problem = f"repo {str(repo)[:80]!r} {why}"
        elif (why := file_path_problem(file)) is not None:
            problem = f"file {str(file)[:80]!r} {why}"
        if problem is not None:
            raise UnsafePathError(f"refusing to write outside the model store: {problem}")
        owner, _, name = repo.partition("/")
        dest = self.root / owner / name / revision / file
        root = self.root.resolve()
        folder = dest.parent.resolve()  # where the file, its .part, .lock and record are written
        if not folder.is_relative_to(root) or folder == root:
            raise UnsafePathError(f"refusing to write outside the model store: {dest.parent} resolves to "
                                  f"{folder}, outside {root}")
        return dest

    def path_for_model(self, model: ModelFile) -> Path | None:
        if model.source == "pypi":
            return model.package_path()
        return self.path_for(model.repo, model.file, model.revision)

    @staticmethod
    def part_path(dest: Path) -> Path:
        return dest.with_name(dest.name + PART_SUFFIX)

    @staticmethod
    def record_path(dest: Path) -> Path:
        return dest.with_name(dest.name + RECORD_SUFFIX)

    @property
    def quarantine_dir(self) -> Path:
        return self.root / ".quarantine"

    # -- verification records -----------------------------------------------------------------------------
    def write_record(self, path: Path, sha256: str, *, source: dict[str, Any] | None = None) -> None:
        st = path.stat()
        write_json_atomic(self.record_path(path), {"sha256": sha256, "size": st.st_size,
                                                   "mtime_ns": st.st_mtime_ns, "verified_at": time.time(),
                                                   "source": source or {}})

    def read_record(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(self.record_path(path).read_text(encoding="utf-8"))
            st = path.stat()
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("size") != st.st_size or data.get("mtime_ns") != st.st_mtime_ns:
            return None
        return data

    def recorded_sha256(self, path: Path) -> str | None:
        rec = self.read_record(path)
        return str(rec["sha256"]) if rec and isinstance(rec.get("sha256"), str) else None

    def verify_path(self, path: Path, expected_sha256: str | None, expected_size: int | None = None,
                    progress: Callable[[int], None] | None = None) -> bool:
        """Hash ``path`` (full read) and compare; writes a record when it matches."""
        try:
            size = path.stat().st_size
        except OSError:
            return False
        if expected_size is not None and size != expected_size:
            return False
        digest = sha256_file(path, progress)
        if expected_sha256 is not None and digest != expected_sha256:
            return False
        if path.is_relative_to(self.root):
            self.write_record(path, digest)
        return True

    # -- content hashes of files outside the store -----------------------------------------------------------
    @property
    def hash_cache_file(self) -> Path:
        return self.root / HASH_CACHE_NAME

    def _load_hash_cache(self) -> dict[str, Any]:
        if self._hash_cache is None:
            data: Any = None
            try:
                with open(self.hash_cache_file, "rb") as f:
                    raw = f.read(HASH_CACHE_MAX_BYTES + 1)
                if len(raw) <= HASH_CACHE_MAX_BYTES:
                    data = json.loads(raw.decode("utf-8"))
            except (OSError, ValueError, RecursionError):
                data = None
            self._hash_cache = data if isinstance(data, dict) else {}
        return self._hash_cache

    def content_sha256(self, path: Path) -> str | None:
        """The sha256 of ``path`` (a file found outside the store, e.g. an Ollama blob whose name only *claims* a
        digest): hashed once, then remembered in ``.hash-cache.json`` by real path, size and mtime, so a later
        listing does not read the file again. None when the file cannot be read."""
        try:
            key = os.path.realpath(path)
            st = os.stat(key)
        except OSError:
            return None
        cache = self._load_hash_cache()
        entry = cache.get(key)
        if (isinstance(entry, dict) and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns
                and isinstance(entry.get("sha256"), str)):
            return str(entry["sha256"])
        try:
            digest = sha256_file(Path(key))
        except OSError:
            return None
        cache[key] = {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        with contextlib.suppress(OSError):  # a read-only store: the verdict is still kept for this process
            write_json_atomic(self.hash_cache_file, cache)
        return digest

    def quarantine(self, path: Path) -> Path:
        self.quarantine_dir.mkdir(parents=True, exist_ok=True)
        target = self.quarantine_dir / f"{int(time.time() * 1000)}-{path.name.removesuffix(PART_SUFFIX)}"
        os.replace(path, target)
        return target

    # -- state --------------------------------------------------------------------------------------------
    def file_state(self, model: ModelFile, discovered: dict[str, FileState] | None = None) -> FileState:
        """Cheap: no hashing except for a packaged file, which is checked against its wheel RECORD size."""
        if model.source == "pypi":
            p = model.package_path()
            ok = p is not None and p.stat().st_size == model.size
            return FileState(model, p if ok else None, ok, "package" if ok else "")
        dest = self.path_for_model(model)
        assert dest is not None
        if dest.is_file() and dest.stat().st_size == model.size:
            rec = self.recorded_sha256(dest)
            verified = rec is not None and (model.sha256 is None or rec == model.sha256)
            return FileState(model, dest, verified, "store")
        if discovered and model.key in discovered:
            return discovered[model.key]
        part = self.part_path(dest)
        partial = part.stat().st_size if part.is_file() else 0
        return FileState(model, None, False, "", partial_bytes=min(partial, model.size))

    def pair_state(self, pair: Pair, discovered: dict[str, FileState] | None = None) -> PairState:
        return PairState(pair, tuple(self.file_state(m, discovered) for m in pair.files))

    def verify_model(self, model: ModelFile, path: Path | None = None,
                     progress: Callable[[int], None] | None = None) -> FileState:
        """Full sha256 check of ``model`` at ``path`` (default: its store/package path)."""
        p = path or self.path_for_model(model)
        if p is None or not p.is_file():
            return FileState(model, None, False, "")
        ok = self.verify_path(p, model.sha256, model.size, progress)
        how = "package" if model.source == "pypi" else ("store" if p.is_relative_to(self.root) else "folder")
        return FileState(model, p, ok, how)

    # -- self-drafts ----------------------------------------------------------------------------------------
    @property
    def self_drafts_root(self) -> Path:
        return self.root / SELF_DRAFT_DIR

    def self_draft_folder(self, target_sha256: str) -> Path:
        """Where the self-drafts of the target with this sha256 live. Raises ``UnsafePathError`` for a value
        that is not 64 lowercase hex digits (it names a folder)."""
        if not SHA256_HEX.match(target_sha256):
            raise UnsafePathError(f"refusing a self-draft folder for {target_sha256[:80]!r}: not a sha256")
        return self.self_drafts_root / target_sha256[:16]

    def file_sha256(self, path: Path) -> str | None:
        """The sha256 of a model file anywhere: its record inside the store, else hashed once and cached
        (``content_sha256``). None when it cannot be read."""
        path = Path(path)
        if path.resolve().is_relative_to(self.root.resolve()):
            recorded = self.recorded_sha256(path)
            if recorded is not None:
                return recorded
        return self.content_sha256(path)

    def add_self_draft(self, built: Path, name: str, provenance: dict[str, Any]) -> SelfDraftRecord:
        """Move the finished draft ``built`` (written in ``self_drafts_root``, same file system) into its
        target's folder as ``name`` — durably and atomically (``fileio.move_into_place``) — then write its
        record. An existing self-draft of that name is replaced whole. Raises ``OSError``; on failure nothing
        new is left in the folder (the caller removes ``built``)."""
        if file_path_problem(name) is not None or "/" in name or not name.endswith(".gguf"):
            raise UnsafePathError(f"refusing the self-draft name {name[:80]!r}")
        record = SelfDraftRecord.from_source(built, {**provenance, "kind": SELF_DRAFT_KIND})
        if record is None:
            raise ValueError("incomplete self-draft provenance")
        folder = self.self_draft_folder(record.target_sha256)
        folder.mkdir(parents=True, exist_ok=True)
        dest = folder / name
        digest = sha256_file(built)
        move_into_place(built, dest)
        try:
            self.write_record(dest, digest, source={**provenance, "kind": SELF_DRAFT_KIND})
        except BaseException:
            with contextlib.suppress(OSError):  # a draft without its record would be an orphan nobody finds
                dest.unlink()
            raise
        return dataclasses.replace(record, path=dest)

    def self_drafts(self, target_sha256: str | None = None) -> list[SelfDraftRecord]:
        """Self-drafts in the store whose file still matches its record, of one target or of all; newest first."""
        if target_sha256 is not None:
            if not SHA256_HEX.match(target_sha256):
                return []
            folders = [self.self_draft_folder(target_sha256)]
        else:
            try:
                folders = [p for p in self.self_drafts_root.iterdir() if p.is_dir() and not p.name.startswith(".")]
            except OSError:
                return []
        found: list[tuple[float, SelfDraftRecord]] = []
        for folder in folders:
            try:
                files = [p for p in folder.iterdir() if p.suffix == ".gguf"]
            except OSError:
                continue
            for path in files:
                rec = self.read_record(path)
                source = rec.get("source") if rec else None
                record = SelfDraftRecord.from_source(path, source) if isinstance(source, dict) else None
                if record is not None and (target_sha256 is None or record.target_sha256 == target_sha256):
                    found.append((float(rec.get("verified_at", 0.0)) if rec else 0.0, record))
        return [r for _, r in sorted(found, key=lambda t: -t[0])]

    def self_drafts_of(self, target: Path, *, hash_if_needed: bool = True) -> list[SelfDraftRecord]:
        """The self-drafts made from the file ``target``: those recorded for this very path, size and mtime
        without reading it; else (``hash_if_needed``) by its sha256, wherever it lies now (a full read once, then
        cached)."""
        target = Path(target)
        try:
            st = target.stat()
        except OSError:
            return []
        same_file = [r for r in self.self_drafts() if r.target_path == str(target.absolute())
                     and r.target_size == st.st_size and r.target_mtime_ns == st.st_mtime_ns]
        if same_file or not hash_if_needed:
            return same_file
        sha = self.file_sha256(target)
        return self.self_drafts(sha) if sha else []

    def delete_model(self, path: Path) -> None:
        """Delete a model file of the store and its record. Raises ``UnsafePathError`` for a file outside the
        store (files the user keeps elsewhere are never deleted by Outrider), ``OSError`` when it cannot."""
        path = Path(path)
        if not path.resolve().is_relative_to(self.root.resolve()) or not path.is_file():
            raise UnsafePathError(f"{path} is not a model file of the store ({self.root}); Outrider deletes only "
                                  "files it installed")
        path.unlink()
        with contextlib.suppress(FileNotFoundError):
            self.record_path(path).unlink()
        fsync_dir(path.parent)

    # -- disk space ---------------------------------------------------------------------------------------
    def free_bytes(self) -> int:
        return shutil.disk_usage(self.root).free

    # -- user folders -------------------------------------------------------------------------------------
    @property
    def folders_file(self) -> Path:
        return self.root / "folders.json"

    def user_folders(self) -> list[Path]:
        try:
            data = json.loads(self.folders_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [Path(p) for p in data if isinstance(p, str)] if isinstance(data, list) else []

    def add_folder(self, folder: Path) -> None:
        folders = self.user_folders()
        folder = Path(folder).expanduser().resolve()
        if folder not in folders:
            folders.append(folder)
        write_json_atomic(self.folders_file, [str(f) for f in folders])

    def remove_folder(self, folder: Path) -> None:
        folder = Path(folder).expanduser().resolve()
        write_json_atomic(self.folders_file, [str(f) for f in self.user_folders() if f != folder])


def startup_pair(catalogue: Catalogue, store: ModelStore,
                 discovered: dict[str, FileState] | None = None) -> PairState | None:
    """What the app opens with: the first installed (verified) catalogue pair, else the offline demo pair."""
    demo = catalogue.demo
    for pair in catalogue:
        if demo is not None and pair.id == demo.id:
            continue
        state = store.pair_state(pair, discovered)
        if state.installed:
            return state
    if demo is None:
        return None
    state = store.pair_state(demo)
    return state if state.installed else None
