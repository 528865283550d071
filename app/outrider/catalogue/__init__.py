"""Catalogue of verified pairs, model store, discovery of files on disk, resumable verified downloads.

No Qt and no llama_cpp here. The GUI's entry points::

    cat = load_catalogue()                       # Catalogue (honours OUTRIDER_CATALOGUE)
    store = ModelStore()                         # honours OUTRIDER_HOME
    found = DiscoveryScanner(store).match_catalogue(cat)
    state = store.pair_state(cat.get("qwen3-8b-q4km-0.6b"), found)   # PairState: installed, paths
    dl = DownloadManager(store).download_pair(pair, on_event)          # PairDownload: wait(), cancel()
"""

from __future__ import annotations

from outrider.catalogue.discovery import DiscoveryScanner, FoundFile, ensure_offline_hub
from outrider.catalogue.download_manager import (
    DownloadEvent,
    DownloadHandle,
    DownloadManager,
    DownloadOptions,
    FileRequest,
    PairDownload,
)
from outrider.catalogue.errors import (
    BusyError,
    CancelledError,
    CorruptedError,
    DiskFullError,
    DownloadError,
    GatedError,
    MismatchError,
    NetworkError,
    NotFoundError,
    OfflineError,
    ServerError,
    UnauthorizedError,
    UnverifiableError,
)
from outrider.catalogue.loading import load_catalogue
from outrider.catalogue.local import LocalPairReport, check_local_pair
from outrider.catalogue.schema import (
    PROMPT_LOOKUP,
    Catalogue,
    CatalogueError,
    DraftSettings,
    MemoryEstimate,
    ModelFile,
    Pair,
)
from outrider.catalogue.store import FileState, ModelStore, PairState, startup_pair

__all__ = [
    "PROMPT_LOOKUP", "BusyError", "CancelledError", "Catalogue", "CatalogueError", "CorruptedError",
    "DiscoveryScanner", "DiskFullError", "DownloadError", "DownloadEvent", "DownloadHandle", "DownloadManager",
    "DownloadOptions", "DraftSettings", "FileRequest", "FileState", "FoundFile", "GatedError",
    "LocalPairReport", "MemoryEstimate", "MismatchError", "ModelFile", "ModelStore", "NetworkError",
    "NotFoundError", "OfflineError", "Pair", "PairDownload", "PairState", "ServerError", "UnauthorizedError",
    "UnverifiableError", "check_local_pair", "ensure_offline_hub", "load_catalogue", "startup_pair",
]
