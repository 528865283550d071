"""Thin, typed wrappers over llama-cpp-python's low-level ctypes API (``llama_cpp.llama_cpp``).

Only this module touches ctypes. The per-token path (``ModelContext.decode`` + ``logits_row``) hands out numpy
*views* of llama.cpp's logits buffer: nothing the size of the vocabulary is copied into Python objects.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as ll
import numpy as np
import numpy.typing as npt

from outrider.engine.compat import VocabFacts
from outrider.engine.errors import DecodeError, ModelLoadError
from outrider.engine.events import ModelFacts
from outrider.engine.llama import rpc
from outrider.engine.llama.gguf_header import GGUFHeaderError, read_header
from outrider.engine.params import ContextSettings, ModelSettings

FloatArray = npt.NDArray[np.float32]

_LOG_LEVEL_NAMES = {1: "debug", 2: "info", 3: "warn", 4: "error", 5: "cont"}


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




_FILE_TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
                    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
                    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
                    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
                    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
                    38: "MXFP4"}


class LoadedModel:
    """A llama.cpp model and its vocabulary. Call ``close()`` (or use as a context manager) to free it."""

    def __init__(self, backend: Backend, path: str | os.PathLike[str], settings: ModelSettings) -> None:
        self.backend = backend
        self.path = str(path)
        self.settings = settings
        header = _precheck(Path(path))
        mark = backend.log.mark()
        params = ll.llama_model_default_params()
        params.n_gpu_layers = settings.gpu_layers if settings.gpu_layers >= 0 else 999
        params.use_mmap = settings.use_mmap
        params.use_extra_bufts = _extra_buffers_safe(backend.info, header, settings.cpu_extra_buffers)
        placement = rpc.connect(backend.ggml, settings.rpc, self.path) if settings.rpc else rpc.local_only(backend.ggml)
        if placement is not None:  # NULL-terminated; left NULL, llama.cpp would keep every layer local
            params.devices = ctypes.cast(placement.array, ctypes.c_void_p).value
        split = _tensor_split(settings.split, placement, self.path)
        if split is not None:
            params.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))
        model = ll.llama_model_load_from_file(os.fsencode(self.path), params)
        if not model:
            lines = backend.log.since(mark)
            raise _explain_load_failure(self.path, header.architecture, lines)
        self._placement = placement
        if settings.rpc:
            rpc.harden_connections(settings.rpc)
        self._buffers = tuple(rpc.buffer_sizes(backend.log.since(mark)))
        self._model: Any = model
        self._vocab: Any = ll.llama_model_get_vocab(model)
        self.n_vocab: int = ll.llama_vocab_n_tokens(self._vocab)
        self.bos_id: int = ll.llama_vocab_bos(self._vocab)
        self.eos_id: int = ll.llama_vocab_eos(self._vocab)
        self.add_bos: bool = bool(ll.llama_vocab_get_add_bos(self._vocab))
        self.add_eos: bool = bool(ll.llama_vocab_get_add_eos(self._vocab))
        self.is_recurrent = bool(ll.llama_model_is_recurrent(model)) or bool(ll.llama_model_is_hybrid(model))
        self.has_encoder = bool(ll.llama_model_has_encoder(model))
        self._eog = np.zeros(self.n_vocab, dtype=bool)
        for tok in range(self.n_vocab):
            if ll.llama_vocab_is_eog(self._vocab, tok):
                self._eog[tok] = True
        self._piece_cache: dict[int, bytes] = {}
        self.facts = self._facts(header.metadata.get("general.file_type"))

    # -- metadata -------------------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as llama.cpp renders it, or None."""
        buf = ctypes.create_string_buffer(4096)
        n = ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        raw = ll.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def _facts(self, file_type: Any) -> ModelFacts:
        desc = ctypes.create_string_buffer(256)
        ll.llama_model_desc(self._model, desc, len(desc))
        n_layer = int(ll.llama_model_n_layer(self._model))
        offloaded = 0
        if self.backend.info.gpu_offload or self.settings.rpc:
            wanted = self.settings.gpu_layers if self.settings.gpu_layers >= 0 else n_layer + 1
            offloaded = min(wanted, n_layer + 1)
        quant = _FILE_TYPE_NAMES.get(int(file_type), str(file_type)) if file_type is not None else "unknown"
        return ModelFacts(
            path=self.path,
            architecture=self.meta("general.architecture") or "unknown",
            description=desc.value.decode("utf-8", errors="replace"),
            n_params=int(ll.llama_model_n_params(self._model)),
            size_bytes=int(ll.llama_model_size(self._model)),
            n_layer=n_layer,
            n_embd=int(ll.llama_model_n_embd(self._model)),
            n_vocab=self.n_vocab,
            n_ctx_train=int(ll.llama_model_n_ctx_train(self._model)),
            has_chat_template=self.chat_template() is not None,
            quantisation=quant,
            gpu_layers_offloaded=offloaded,
            buffers=self._buffers,
            remote_devices=self.remote_devices(),
        )

    def remote_devices(self) -> tuple[tuple[str, str, int, int], ...]:
        """The RPC workers' devices this model may use: (name, endpoint, free bytes, total bytes), asked now."""
        if self._placement is None:
            return ()
        ggml = self.backend.ggml
        if ggml is None:
            return ()
        return tuple((d.name, d.description, d.memory_free, d.memory_total)
                     for d in (ggml.describe(h) for h in self._placement.handles) if d.is_rpc)

    def kv_bytes_per_token(self) -> int:
        """Bytes of F16 K+V cache per context position (all layers).

        Uses the model's own key and value lengths (``{arch}.attention.key_length`` / ``value_length``) when the
        file states them: n_embd / n_head is wrong for models whose heads are wider (Qwen3 0.6B: 128, not 64).
        """
        n_head = max(1, int(ll.llama_model_n_head(self._model)))
        n_head_kv = int(ll.llama_model_n_head_kv(self._model))
        arch = self.facts.architecture
        key_len = _int_or_none(self.meta(f"{arch}.attention.key_length")) or self.facts.n_embd // n_head
        value_len = _int_or_none(self.meta(f"{arch}.attention.value_length")) or key_len
        return 2 * self.facts.n_layer * n_head_kv * (key_len + value_len)

    # -- vocabulary -----------------------------------------------------------------------------------------
    def vocab_facts(self) -> VocabFacts:
        texts = [
            (ll.llama_vocab_get_text(self._vocab, i) or b"").decode("utf-8", errors="replace")
            for i in range(self.n_vocab)
        ]
        return VocabFacts(
            vocab_type=int(ll.llama_vocab_type(self._vocab)),
            add_bos=self.add_bos,
            bos_id=self.bos_id,
            add_eos=self.add_eos,
            eos_id=self.eos_id,
            token_texts=texts,
        )

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Text to token ids. ``add_special`` applies the model's BOS/EOS rule."""
        data = text.encode("utf-8", errors="replace")
        capacity = len(data) + 8
        buf = (ll.llama_token * capacity)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (ll.llama_token * capacity)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token renders to (special tokens render as nothing). Cached per token."""
        cached = self._piece_cache.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        out = buf.raw[:n]
        self._piece_cache[token] = out
        return out

    def token_text(self, token: int) -> str:
        return (ll.llama_vocab_get_text(self._vocab, token) or b"").decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token])

    # -- lifetime -------------------------------------------------------------------------------------------
    @property
    def handle(self) -> Any:
        return self._model

    def close(self) -> None:
        if getattr(self, "_model", None):
            ll.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> LoadedModel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _tensor_split(split: Sequence[float], placement: rpc.Placement | None, path: str) -> Any:
    """``llama_model_params.tensor_split``: one proportion per offload device, padded to llama_max_devices()."""
    if not split:
        return None
    n_devices = len(placement.handles) if placement is not None else len(split)
    if len(split) > n_devices:
        raise ModelLoadError("bad_split", path, f"a split of {len(split)} parts for {n_devices} devices")
    size = int(ll.llama_max_devices())
    return (ctypes.c_float * size)(*split[:size])


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


MAX_LAYERS = 512  # LLAMA_MAX_LAYERS: llama.cpp aborts (GGML_ASSERT) on more
# ggml types with AMX kernels (ggml-cpu/amx/common.h qtype_has_amx_kernels): Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K,
# IQ4_XS — the ones whose AMX matmul crashes in this llama.cpp (see ModelSettings).
AMX_TYPES = frozenset({2, 3, 8, 12, 13, 14, 23})


def _extra_buffers_safe(info: BackendInfo, header: Any, wanted: bool | None) -> bool:
    if wanted is not None:
        return wanted
    has_amx = "AMX_INT8 = 1" in info.system_info
    return not (has_amx and any(t.ggml_type in AMX_TYPES for t in header.tensors))


def _precheck(path: Path) -> Any:
    """Reject files llama.cpp would reject (or crash on) with a specific message, before loading."""
    try:
        header = read_header(path, keep_arrays=False)
    except GGUFHeaderError as exc:
        raise ModelLoadError(exc.kind, str(path), str(exc)) from exc
    n_layer = header.arch_value("block_count")
    if isinstance(n_layer, int) and not 0 < n_layer <= MAX_LAYERS:
        raise ModelLoadError("bad_metadata", str(path),
                             f"{path.name} declares {n_layer} layers (llama.cpp supports 1 to {MAX_LAYERS})")
    return header


def _explain_load_failure(path: str, architecture: str, lines: Sequence[str]) -> ModelLoadError:
    text = "\n".join(lines)
    tail = tuple(lines[-20:])
    if "unknown model architecture" in text:
        return ModelLoadError(
            "unsupported_arch", path, f"unsupported model architecture '{architecture}'", tail
        )
    if "failed to allocate" in text.lower() or "out of memory" in text.lower():
        return ModelLoadError(
            "out_of_memory", path, "not enough memory to load the model — try fewer GPU layers", tail
        )
    # The specific reason ("error loading model: … invalid n_rot") sits above the generic "failed to load model".
    detail = next((ln.split("error loading model:")[-1].strip() for ln in reversed(lines)
                   if "error loading model:" in ln), "")
    if not detail:
        detail = next((ln.strip() for ln in reversed(lines) if "error" in ln.lower() or "failed" in ln.lower()), "")
    message = f"llama.cpp could not load {Path(path).name}" + (f": {detail}" if detail else "")
    return ModelLoadError("load_failed", path, message, tail)




class ModelContext:
    """A llama.cpp context (one sequence) with a reusable batch and exact KV-cache rollback.

    Invariant: ``n_past`` is the number of positions in the KV cache, always ``positions 0 .. n_past-1``.
    """

    def __init__(self, model: LoadedModel, settings: ContextSettings) -> None:
        self.model = model
        self.settings = settings
        params = ll.llama_context_default_params()
        params.n_ctx = settings.n_ctx
        params.n_batch = settings.n_batch
        params.n_ubatch = min(settings.n_batch, 512)
        params.n_seq_max = 1
        if settings.threads > 0:
            params.n_threads = settings.threads
            params.n_threads_batch = settings.threads
        params.flash_attn_type = {"auto": ll.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": ll.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                                  "off": ll.LLAMA_FLASH_ATTN_TYPE_DISABLED}[settings.flash_attention]
        params.no_perf = True
        self._abort_requested = threading.Event()
        self._abort_cb = ll.ggml_abort_callback(lambda _data: self._abort_requested.is_set())
        log = model.backend.log
        mark = log.mark()
        ctx = ll.llama_init_from_model(model.handle, params)
        if not ctx:
            lines = log.since(mark)
            raise ModelLoadError(
                "out_of_memory",
                model.path,
                f"not enough memory for context {settings.n_ctx} — try a smaller context or fewer GPU layers",
                tuple(lines[-20:]),
            )
        self._ctx: Any = ctx
        self._mem: Any = ll.llama_get_memory(ctx)
        self.n_ctx: int = int(ll.llama_n_ctx(ctx))
        self.n_batch: int = int(ll.llama_n_batch(ctx))
        self.n_vocab = model.n_vocab
        self._batch = ll.llama_batch_init(self.n_batch, 0, 1)
        self.n_past = 0

    # -- evaluation -----------------------------------------------------------------------------------------
    def decode(self, tokens: Sequence[int], *, logits: str | int = "last", abortable: bool = False) -> None:
        """Evaluate ``tokens`` at positions ``n_past ..``; ``logits`` is ``last``, ``all``, ``none`` or a count n:
        the last n positions (the output head costs a vocabulary-sized product per position that has logits).

        Longer inputs are split into ``n_batch`` chunks (logits then only for the final chunk). On failure
        the cache is rolled back to where it was and DecodeError is raised.
        """
        start = self.n_past
        n = len(tokens)
        if start + n > self.n_ctx:
            raise DecodeError(1, f"context full: {start + n} > {self.n_ctx} tokens")
        if abortable:
            # The flag is cleared only when a request starts (``clear_abort``): clearing it here would swallow a
            # cancel that arrived between the request's start and this call.
            ll.llama_set_abort_callback(self._ctx, self._abort_cb, None)
        try:
            for chunk_start in range(0, n, self.n_batch):
                # llama.cpp's abort callback is honoured by CPU backends only: check between chunks as well.
                if abortable and self._abort_requested.is_set():
                    self.truncate(start)
                    raise DecodeError(2, "cancelled")
                chunk = tokens[chunk_start : chunk_start + self.n_batch]
                final = chunk_start + self.n_batch >= n
                self._fill_batch(chunk, self.n_past, logits if final else "none")
                status = ll.llama_decode(self._ctx, self._batch)
                if status != 0:
                    self.truncate(start)
                    reason = "cancelled" if status == 2 else f"llama_decode returned {status}"
                    raise DecodeError(status, reason, self.model.backend.log.tail(10))
                self.n_past += len(chunk)
        finally:
            if abortable:
                ll.llama_set_abort_callback(self._ctx, ll.ggml_abort_callback(0), None)

    def request_abort(self) -> None:
        """Ask a running abortable decode (prompt evaluation) to stop; safe from another thread."""
        self._abort_requested.set()

    def clear_abort(self) -> None:
        """Forget an earlier abort request (called when a new request starts)."""
        self._abort_requested.clear()

    def synchronize(self) -> None:
        """Wait until the device has finished the submitted work (``decode`` may return before on a GPU)."""
        ll.llama_synchronize(self._ctx)

    def _fill_batch(self, tokens: Sequence[int], pos0: int, logits: str | int) -> None:
        b = self._batch
        n = len(tokens)
        b.n_tokens = n
        tok, pos, nseq, seq, out = b.token, b.pos, b.n_seq_id, b.seq_id, b.logits
        if isinstance(logits, int):
            first_out = n - max(0, min(logits, n))
        else:
            first_out = {"all": 0, "last": n - 1}.get(logits, n)
        for i, t in enumerate(tokens):
            tok[i] = t
            pos[i] = pos0 + i
            nseq[i] = 1
            seq[i][0] = 0
            out[i] = i >= first_out

    def logits_row(self, i: int) -> FloatArray:
        """A read-only numpy *view* of the logits of output ``i`` of the last decode (negative from the end).

        Valid until the next decode. Never copies the vocabulary-sized row.
        """
        ptr = ll.llama_get_logits_ith(self._ctx, i)
        if not ptr:
            raise DecodeError(-1, f"no logits for output {i}")
        arr: FloatArray = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        return arr

    def truncate(self, n_keep: int) -> None:
        """Remove cache positions >= n_keep (exact rollback of rejected or stale tokens)."""
        if n_keep >= self.n_past:
            return
        if not ll.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
            raise DecodeError(-2, "this model's memory cannot be partially rolled back")
        self.n_past = n_keep

    def clear(self) -> None:
        ll.llama_memory_clear(self._mem, True)
        self.n_past = 0

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ctx)
            self._ctx = None

    def __enter__(self) -> ModelContext:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
