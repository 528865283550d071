"""llama.cpp's process-wide runtime: initialisation (``Backend``), what it was built with (``BackendInfo``), its log.

One ``Backend`` is made per process (the engine process), before any model is loaded (``backend.LoadedModel``).
llama.cpp's log sink is process-wide too: ``LlamaLog`` keeps its last lines, which the load checks read to say
why a model did not load (``load_checks.explain_load_failure``).
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import llama_cpp.llama_cpp as ll

from outrider.engine.llama import rpc

_INSTALLED_LOG_CALLBACKS: list[Any] = []  # see LlamaLog.install: C keeps pointers to these


class LlamaLog:
    """llama.cpp's log, routed through ``llama_log_set`` into a ring buffer of whole lines.

    llama.cpp's log sink is process-wide, so one instance is installed per process (by ``Backend``); the
    ``ctypes`` callback object is kept alive here, or llama.cpp would call freed memory.
    """

    def __init__(self, max_lines: int = 400, echo: Callable[[str], None] | None = None) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=max_lines)
        self._partial = ""
        self._count = 0  # lines ever appended; marks are counts, so they survive the ring buffer wrapping
        self._lock = threading.Lock()
        self._echo = echo
        self._callback = ll.llama_log_callback(self._on_log)

    def install(self) -> None:
        # llama.cpp keeps the last installed sink for the life of the process: a LlamaLog garbage-collected after
        # another Backend was made would leave it calling freed memory (seen as segfaults at a later model load
        # or free). Callbacks once installed are therefore kept alive for good.
        _INSTALLED_LOG_CALLBACKS.append(self._callback)
        ll.llama_log_set(self._callback, ctypes.c_void_p(0))

    def _on_log(self, level: int, text: bytes | None, _user_data: Any) -> None:
        if not text:
            return
        chunk = text.decode("utf-8", errors="replace")
        with self._lock:
            self._partial += chunk
            *done, self._partial = self._partial.split("\n")
            for line in done:
                if line.strip():
                    self._lines.append(line)
                    self._count += 1
                    if self._echo is not None:
                        self._echo(line)

    def mark(self) -> int:
        """A position in the log; ``since(mark)`` returns the lines logged after it."""
        with self._lock:
            return self._count

    def since(self, mark: int) -> tuple[str, ...]:
        with self._lock:
            n_new = min(self._count - mark, len(self._lines))
            lines = list(self._lines)[len(self._lines) - n_new :] if n_new > 0 else []
            if self._partial.strip():
                lines.append(self._partial)
        return tuple(lines)

    def tail(self, n: int = 30) -> tuple[str, ...]:
        with self._lock:
            lines = list(self._lines)
            if self._partial.strip():
                lines.append(self._partial)
        return tuple(lines[-n:])

    def clear(self) -> None:
        with self._lock:
            self._lines.clear()
            self._partial = ""


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """What llama.cpp was built with. ``gpu_offload`` is llama_supports_gpu_offload()."""

    gpu_offload: bool
    name: str
    system_info: str


class Backend:
    """Process-wide llama.cpp initialisation plus its log capture."""

    def __init__(self, echo_log: Callable[[str], None] | None = None) -> None:
        self.log = LlamaLog(echo=echo_log)
        self.log.install()
        ll.llama_backend_init()
        self.ggml = _ggml_or_none()
        self.info = _backend_info(self.ggml)


def _ggml_or_none() -> rpc.Ggml | None:
    """The ggml device API, or None where its libraries are not found by name (RPC is then unavailable)."""
    try:
        return rpc.Ggml()
    except OSError:
        return None


def _backend_info(ggml: rpc.Ggml | None) -> BackendInfo:
    system = ll.llama_print_system_info().decode("utf-8", errors="replace")
    # llama_supports_gpu_offload() alone is true in any build with the RPC backend, GPU or not.
    gpu = bool(ll.llama_supports_gpu_offload()) and (ggml is None or bool(ggml.local_accelerators()))
    name = "CPU"
    for marker, label in (("CUDA", "CUDA"), ("METAL", "Metal"), ("VULKAN", "Vulkan"), ("HIP", "ROCm"),
                          ("SYCL", "SYCL")):
        if marker in system.upper() and gpu:
            name = label
            break
    else:
        if gpu:
            name = "GPU"
    return BackendInfo(gpu_offload=gpu, name=name, system_info=system)
