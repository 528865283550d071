"""Memory of this machine and whether a pair fits in it (no Qt: the GUI and ``outrider models list`` share it).

``read_ram()`` reads ``/proc/meminfo`` (else ``os.sysconf``); ``probe_nvidia_vram()`` asks ``nvidia-smi``. A pair's
estimate (``MemoryEstimate``: both files + F16 KV caches, docs/catalogue.md) is judged against free VRAM when it
is known (everything offloaded), else against free RAM: ``Fit`` is fits / tight (> 90 %) / too big / unknown.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import shutil
import subprocess
from typing import Any

from outrider.catalogue.schema import MemoryEstimate


def format_bytes(n: int | None) -> str:
    """``1.2 GB`` / ``840 MB`` / ``12 KB`` (decimal units, like the Hub and file managers)."""
    if n is None:
        return "unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


@dataclasses.dataclass(frozen=True)
class MemoryInfo:
    """RAM of this machine and, when known, the GPU's memory (bytes; ``None`` = unknown)."""

    ram_total: int | None
    ram_available: int | None
    vram_total: int | None = None
    vram_free: int | None = None

    def describe(self) -> str:
        ram = (f"RAM {format_bytes(self.ram_available)} free of {format_bytes(self.ram_total)}"
               if self.ram_total else "RAM unknown")
        vram = (f"VRAM {format_bytes(self.vram_free)} free of {format_bytes(self.vram_total)}"
                if self.vram_total else "VRAM unknown (no GPU found, or a CPU build)")
        return f"{ram} · {vram}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_ram() -> tuple[int | None, int | None]:
    """(total, available) bytes of RAM without psutil: ``/proc/meminfo`` (Linux), else ``os.sysconf``."""
    total: int | None = None
    available: int | None = None
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key == "MemTotal":
                total = int(rest.split()[0]) * 1024
            elif key == "MemAvailable":
                available = int(rest.split()[0]) * 1024
    if total is None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if available is None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return total, available if available is not None else total


def probe_nvidia_vram(timeout: float = 2.0) -> tuple[int | None, int | None]:
    """(total, free) bytes of the first NVIDIA GPU through ``nvidia-smi``, or (None, None). Blocking."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    try:
        out = subprocess.run([exe, "--query-gpu=memory.total,memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=timeout, check=True).stdout
        total_mib, free_mib = (int(v.strip()) for v in out.splitlines()[0].split(","))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None, None
    return total_mib * 1024 * 1024, free_mib * 1024 * 1024


class Fit(enum.Enum):
    """Does a pair's memory estimate fit this machine?"""

    FITS = "fits"
    TIGHT = "tight"  # within 90 % of what is free: it may swap
    TOO_BIG = "too_big"
    UNKNOWN = "unknown"


def judge_fit(needed: int, memory: MemoryInfo) -> Fit:
    """Against VRAM when known (everything offloaded), else against free RAM."""
    free = memory.vram_free if memory.vram_free is not None else memory.ram_available
    if not free:
        return Fit.UNKNOWN
    if needed > free:
        return Fit.TOO_BIG
    return Fit.TIGHT if needed > 0.9 * free else Fit.FITS


# What follows the memory figure of a pair (the picker's Memory column, ``outrider models list``).
FIT_MARK = {Fit.FITS: "", Fit.TIGHT: " (tight)", Fit.TOO_BIG: " ⚠ too big", Fit.UNKNOWN: ""}


def describe_memory(estimate: MemoryEstimate, memory: MemoryInfo) -> str:
    """One line for a tooltip or the details pane; compute buffers come on top (docs/catalogue.md)."""
    where = "VRAM" if memory.vram_free is not None else "RAM"
    free = memory.vram_free if memory.vram_free is not None else memory.ram_available
    return (f"needs about {format_bytes(estimate.total)} at {estimate.n_ctx} tokens of context "
            f"(weights {format_bytes(estimate.weights)} + KV cache {format_bytes(estimate.kv_cache)}; compute "
            f"buffers come on top) · {format_bytes(free)} {where} free")
