"""Thin, typed wrappers over llama-cpp-python's low-level ctypes API (``llama_cpp.llama_cpp``): a loaded model
(``LoadedModel``) and the context that evaluates it (``ModelContext``), the two objects the decoder drives.

The per-token path (``ModelContext.decode`` + ``logits_row``) hands out numpy *views* of llama.cpp's logits
buffer: nothing the size of the vocabulary is copied into Python objects. Process-wide initialisation lives in
``runtime.py``, the checks and explanations around a load in ``load_checks.py``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as ll
import numpy as np
import numpy.typing as npt

from outrider.engine.compat import ROLLBACK_TOKENS, VocabFacts
from outrider.engine.errors import DecodeError, ModelLoadError
from outrider.engine.events import ModelFacts
from outrider.engine.llama import rpc
from outrider.engine.llama.load_checks import (
    explain_load_failure,
    extra_buffers_safe,
    precheck,
    quantisation_name,
    tensor_split,
)
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, ModelSettings

FloatArray = npt.NDArray[np.float32]

_CHECKPOINT_FLAGS = ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY | ll.LLAMA_STATE_SEQ_FLAGS_ON_DEVICE
"""A checkpoint holds the recurrent part of the sequence only (the KV cache rolls back by itself) and stays in the
device's memory (llama.cpp copies it buffer to buffer: no round trip through host memory)."""


class LoadedModel:
    """A llama.cpp model and its vocabulary. Call ``close()`` (or use as a context manager) to free it."""

    def __init__(self, backend: Backend, path: str | os.PathLike[str], settings: ModelSettings, *,
                 load_mtp: bool = False) -> None:
        """``load_mtp``: also load the file's MTP (NextN) layers, which llama.cpp skips unless asked (they are
        only used by an MTP drafter, ``engine/mtp.py``)."""
        self.backend = backend
        self.path = str(path)
        self.settings = settings
        header = precheck(Path(path))
        mark = backend.log.mark()
        params = ll.llama_model_default_params()
        params.n_gpu_layers = settings.gpu_layers if settings.gpu_layers >= 0 else 999
        params.use_mmap = settings.use_mmap
        params.load_mtp = load_mtp
        params.use_extra_bufts = extra_buffers_safe(backend.info, header, settings.cpu_extra_buffers)
        placement = rpc.connect(backend.ggml, settings.rpc, self.path) if settings.rpc else rpc.local_only(backend.ggml)
        if placement is not None:  # NULL-terminated; left NULL, llama.cpp would keep every layer local
            params.devices = ctypes.cast(placement.array, ctypes.c_void_p).value
        split = tensor_split(settings.split, placement, self.path)
        if split is not None:
            params.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))
        model = ll.llama_model_load_from_file(os.fsencode(self.path), params)
        if not model:
            lines = backend.log.since(mark)
            raise explain_load_failure(self.path, header.architecture, lines)
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
        quant = quantisation_name(file_type)
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
    @property
    def vocab(self) -> Any:
        """llama.cpp's ``llama_vocab`` pointer (for the grammar sampler, ``engine/grammar.py``)."""
        return self._vocab

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


def _logged_mib(lines: Sequence[str], label: str) -> int:
    """Bytes summed over llama.cpp log lines "<label> = <x> MiB" (one per buffer type)."""
    total = 0.0
    for line in lines:
        match = re.search(re.escape(label) + r"\s*=\s*([0-9.]+) MiB", line)
        if match:
            total += float(match.group(1))
    return int(total * 1024 * 1024)


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


class ModelContext:
    """A llama.cpp context (one sequence) with a reusable batch and exact rollback of its memory.

    Invariant: ``n_past`` is the number of positions in the memory, always ``positions 0 .. n_past-1``.

    Rollback (``truncate``). Attention layers forget positions exactly (``llama_memory_seq_rm``). A recurrent
    layer holds one state per sequence, so on a recurrent or hybrid model a rollback needs a saved earlier state:

    * **snapshots** (``n_rs_seq`` = ``rollback_tokens``, on the architectures of ``llm_arch_supports_rs_rollback``;
      llama.cpp clamps it to 0 elsewhere): every decode also stores the state after each of its last
      ``n_rs_seq + 1`` tokens, and ``seq_rm`` of the last r positions then selects snapshot r. That is valid only
      for r <= ``n_rs_seq`` and r < the length of the latest decode (llama.cpp checks the first bound only and
      otherwise silently restores a stale state), once per decode (a second ``seq_rm`` before the next decode is
      refused): ``_rollback_room`` tracks both.
    * **a checkpoint** (``checkpoint()``: the recurrent part of the sequence state, saved on the device): a later
      ``truncate`` to a position at or after it restores it, and ``n_past`` then stops at the checkpoint; the
      caller re-evaluates the tokens between (it keeps them).
    * otherwise the memory is cleared (``n_past`` = 0).

    So ``truncate(n)`` may leave ``n_past`` below ``n`` on a recurrent model; callers read ``n_past`` after it.
    """

    def __init__(self, model: LoadedModel, settings: ContextSettings, *,
                 rollback_tokens: int = ROLLBACK_TOKENS) -> None:
        """``rollback_tokens``: snapshots to keep on a recurrent/hybrid model (see the class docstring); 0 for a
        context that rolls back through checkpoints only (a draft model's, whose drafts are one-token decodes)."""
        self.model = model
        self.settings = settings
        self.is_recurrent = model.is_recurrent
        params = ll.llama_context_default_params()
        params.n_ctx = settings.n_ctx
        params.n_batch = settings.n_batch
        params.n_ubatch = min(settings.n_batch, 512)
        params.n_seq_max = 1
        params.n_rs_seq = max(0, rollback_tokens) if self.is_recurrent else 0
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
        # What llama.cpp allocated for recurrent states (its own state and the snapshots), from its load log.
        self.recurrent_bytes = _logged_mib(log.since(mark), "RS buffer size")
        self.n_ctx: int = int(ll.llama_n_ctx(ctx))
        self.n_batch: int = int(ll.llama_n_batch(ctx))
        self.n_vocab = model.n_vocab
        self._batch = ll.llama_batch_init(self.n_batch, 0, 1)
        self.n_past = 0
        self.n_rs_seq: int = int(ll.llama_n_rs_seq(ctx))  # 0: clamped by llama.cpp (no snapshots for this arch)
        self._rollback_room = 0  # trailing positions the snapshots can remove now (see the class docstring)
        self._checkpoint: _Checkpoint | None = None
        self.rollbacks = 0  # rollbacks served by snapshots / by a checkpoint (benchmarks report them)
        self.restores = 0
        # Called as after_decode(first position, count) after each llama_decode of this context succeeded, while
        # its outputs are still readable: an MTP drafter copies the target's hidden states from there.
        self.after_decode: Callable[[int, int], None] | None = None

    @property
    def recurrent_state_bytes(self) -> int:
        """One sequence's recurrent state (0 without recurrent layers); a checkpoint costs as much again."""
        return self.recurrent_bytes // (1 + self.n_rs_seq)

    @property
    def rollback_limit(self) -> int | None:
        """The most trailing tokens of a decode that the next ``truncate`` removes exactly without a checkpoint:
        None for a model without recurrent layers (any number), ``n_rs_seq`` on a recurrent or hybrid model."""
        return self.n_rs_seq if self.is_recurrent else None

    @property
    def handle(self) -> Any:
        """The ``llama_context *`` (for the MTP drafter's staging-API calls)."""
        return self._ctx

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
                    self._undo_failed_decode(start)
                    reason = "cancelled" if status == 2 else f"llama_decode returned {status}"
                    raise DecodeError(status, reason, self.model.backend.log.tail(10))
                self.n_past += len(chunk)
                if self.is_recurrent:
                    self._rollback_room = min(self.n_rs_seq, len(chunk) - 1)
                if self.after_decode is not None:
                    self.after_decode(self.n_past - len(chunk), len(chunk))
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
        """Remove positions >= n_keep (exact rollback of rejected or stale tokens).

        Without recurrent layers ``n_past`` becomes ``n_keep``; with them it may end lower (class docstring).
        """
        if n_keep >= self.n_past:
            return
        if not self.is_recurrent:
            if not ll.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
                raise DecodeError(-2, "this model's memory cannot be partially rolled back")
            self.n_past = n_keep
            return
        if self._checkpoint is not None and n_keep < self._checkpoint.n_past:
            self._checkpoint = None  # it holds the state of positions about to be removed
        # llama.cpp refuses p0 = 0 and a second rollback before a decode; a refused seq_rm changes nothing.
        if n_keep > 0 and self.n_past - n_keep <= self._rollback_room and ll.llama_memory_seq_rm(
                self._mem, 0, n_keep, -1):
            self._rollback_room = 0
            self.n_past = n_keep
            self.rollbacks += 1
            return
        if self._checkpoint is not None and self._restore(self._checkpoint):
            return
        self.clear()

    def checkpoint(self) -> None:
        """Save the recurrent state at ``n_past`` for a later ``truncate`` (a no-op without recurrent layers).

        One checkpoint is kept; it costs one sequence's recurrent state of device memory.
        """
        if not self.is_recurrent:
            return
        size = int(ll.llama_state_seq_get_size_ext(self._ctx, 0, _CHECKPOINT_FLAGS))
        held = self._checkpoint
        buf = held.data if held is not None and len(held.data) == size else (ctypes.c_uint8 * size)()
        written = int(ll.llama_state_seq_get_data_ext(self._ctx, buf, size, 0, _CHECKPOINT_FLAGS))
        if written == 0:
            raise DecodeError(-3, "llama.cpp could not save the recurrent state", self.model.backend.log.tail(10))
        self._checkpoint = _Checkpoint(self.n_past, buf, written)

    def _restore(self, checkpoint: _Checkpoint) -> bool:
        """Back to ``checkpoint`` (recurrent state restored, later KV positions removed); False if refused."""
        if not ll.llama_state_seq_set_data_ext(self._ctx, checkpoint.data, checkpoint.size, 0, _CHECKPOINT_FLAGS):
            self._checkpoint = None
            return False
        # The restored recurrent cell ends at checkpoint.n_past - 1, so this removes attention positions only.
        if not ll.llama_memory_seq_rm(self._mem, 0, checkpoint.n_past, -1):
            self._checkpoint = None
            return False
        self.n_past = checkpoint.n_past
        self._rollback_room = 0
        self.restores += 1
        return True

    def _undo_failed_decode(self, start: int) -> None:
        """After a failed or cancelled decode: back to ``start``. A recurrent state may have advanced through
        the ubatches llama.cpp finished before stopping, which no rollback can tell apart: start afresh."""
        if self.is_recurrent:
            self.clear()
        else:
            self.truncate(start)

    def clear(self) -> None:
        ll.llama_memory_clear(self._mem, True)
        self.n_past = 0
        self._rollback_room = 0
        self._checkpoint = None

    @property
    def n_threads(self) -> int:
        """The CPU threads llama.cpp uses for this context's passes (one token and batches alike)."""
        return int(ll.llama_n_threads(self._ctx))

    def set_threads(self, n: int) -> None:
        """Use ``n`` CPU threads from the next pass on (between requests: ``engine/threads.py``)."""
        ll.llama_set_n_threads(self._ctx, n, n)

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ctx)
            self._ctx = None

    def __enter__(self) -> ModelContext:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@dataclasses.dataclass(frozen=True)
class _Checkpoint:
    """A saved recurrent state: the sequence held positions ``0 .. n_past-1``; ``size`` bytes of ``data`` used."""

    n_past: int
    data: ctypes.Array[ctypes.c_uint8]
    size: int
