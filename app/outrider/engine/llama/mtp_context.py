"""llama.cpp's MTP (multi-token prediction, "NextN") contexts, through the staging API llama-cpp-python 0.3.36
binds in ``llama_cpp.llama_cpp_ext`` (``llama_set_embeddings_nextn``, ``llama_get_embeddings_nextn(_ith)``).

An MTP context (``ctx_type = LLAMA_CONTEXT_TYPE_MTP``) runs only a model's NextN block(s): on a target file loaded
with ``load_mtp``, or on a separate head file (an "MTP-only" GGUF of the same architecture). Each of its positions
p takes two inputs, the token at p and a hidden state (the target's at p - 1 while catching up, its own last
output while drafting ahead), and its logits at p predict the token at p + 1. It keeps its own KV cache of the
NextN block's attention, which rolls back exactly (``llama_memory_seq_rm``) whatever the target's memory is.

The target side: ``expose_hidden_states`` makes a target context output its last hidden state (before the output
norm for most architectures, the nextn input llama.cpp's own MTP drafter uses) for every token of every batch,
read with ``hidden_states`` right after its ``llama_decode``.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import llama_cpp.llama_cpp as ll
import llama_cpp.llama_cpp_ext as ext
import numpy as np

from outrider.engine.errors import DecodeError, ModelLoadError
from outrider.engine.llama.backend import FloatArray, LoadedModel, ModelContext
from outrider.engine.params import ContextSettings

MTP_BATCH = 64  # positions per MTP decode: a catch-up after a plain streak is split into batches of this size


def expose_hidden_states(context: ModelContext, on: bool = True) -> None:
    """Make ``context`` (a target) output the hidden state of every batch token (``on``), or stop (unmasked:
    one row per token, not only per output row)."""
    ext.llama_set_embeddings_nextn(context.handle, on, False)


def hidden_states(context: ModelContext, n_tokens: int, n_embd: int) -> FloatArray:
    """A copy of the hidden states of the ``n_tokens`` tokens of ``context``'s last decode, one row each."""
    ptr = ext.llama_get_embeddings_nextn(context.handle)
    if not ptr:
        raise DecodeError(-1, "the target gave no hidden states for the MTP drafter")
    rows: FloatArray = np.ctypeslib.as_array(ptr, shape=(n_tokens, n_embd)).copy()
    return rows


def n_nextn_layers(model: LoadedModel) -> int:
    """How many MTP (NextN) blocks the loaded model declares."""
    return int(ll.llama_model_n_layer_nextn(model.handle))


def n_embd(model: LoadedModel) -> int:
    return int(ll.llama_model_n_embd(model.handle))


class MtpContext:
    """An MTP context of ``model`` (one sequence): decode rows of (token, hidden state) at given positions.

    Invariant: ``n_past`` positions (0 .. n_past - 1) are in its KV cache.
    """

    def __init__(self, model: LoadedModel, settings: ContextSettings) -> None:
        self.model = model
        self.n_embd = n_embd(model)
        params = ll.llama_context_default_params()
        params.n_ctx = settings.n_ctx
        params.n_batch = MTP_BATCH
        params.n_ubatch = MTP_BATCH
        params.n_seq_max = 1
        params.ctx_type = ll.LLAMA_CONTEXT_TYPE_MTP
        if settings.threads > 0:
            params.n_threads = settings.threads
            params.n_threads_batch = settings.threads
        params.flash_attn_type = {"auto": ll.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": ll.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                                  "off": ll.LLAMA_FLASH_ATTN_TYPE_DISABLED}[settings.flash_attention]
        params.no_perf = True
        log = model.backend.log
        mark = log.mark()
        ctx = ll.llama_init_from_model(model.handle, params)
        if not ctx:
            lines = log.since(mark)
            raise ModelLoadError("load_failed", model.path,
                                 "llama.cpp could not create the MTP context of this model (no MTP layers loaded, "
                                 "or not enough memory)", tuple(lines[-20:]))
        self._ctx: Any = ctx
        self._mem: Any = ll.llama_get_memory(ctx)
        # Masked: the hidden state of output rows only, which is all drafting ahead reads.
        ext.llama_set_embeddings_nextn(ctx, True, True)
        self.n_ctx = int(ll.llama_n_ctx(ctx))
        self.n_batch = int(ll.llama_n_batch(ctx))
        self.n_vocab = model.n_vocab
        self._batch = ll.llama_batch_init(self.n_batch, self.n_embd, 1)
        # llama_batch_init allocates either token ids or embeddings; this graph reads both.
        self._tokens = (ll.llama_token * self.n_batch)()
        self._batch.token = self._tokens
        self._embd: FloatArray = np.ctypeslib.as_array(self._batch.embd, shape=(self.n_batch, self.n_embd))
        self._abort = threading.Event()
        self._abort_cb = ll.ggml_abort_callback(lambda _data: self._abort.is_set())
        ll.llama_set_abort_callback(ctx, self._abort_cb, None)
        self.n_past = 0

    def decode(self, tokens: Sequence[int], hidden: FloatArray, *, outputs: int = 1) -> None:
        """Evaluate ``tokens`` at positions ``n_past ..`` with ``hidden[i]`` beside ``tokens[i]``; logits (and the
        hidden state) for the last ``outputs`` rows (0: none). Longer inputs go in ``n_batch`` chunks, and only
        rows of the final chunk have outputs."""
        n = len(tokens)
        start = self.n_past
        if start + n > self.n_ctx:
            raise DecodeError(1, f"MTP context full: {start + n} > {self.n_ctx} tokens")
        b = self._batch
        for chunk_start in range(0, n, self.n_batch):
            if self._abort.is_set():
                self.truncate(start)
                raise DecodeError(2, "cancelled")
            end = min(n, chunk_start + self.n_batch)
            m = end - chunk_start
            b.n_tokens = m
            for j in range(m):
                self._tokens[j] = tokens[chunk_start + j]
                b.pos[j] = self.n_past + j
                b.n_seq_id[j] = 1
                b.seq_id[j][0] = 0
                b.logits[j] = chunk_start + j >= n - outputs
            self._embd[:m] = hidden[chunk_start:end]
            status = ll.llama_decode(self._ctx, b)
            if status != 0:
                self.truncate(start)
                raise DecodeError(status, "cancelled" if status == 2 else f"MTP llama_decode returned {status}",
                                  self.model.backend.log.tail(10))
            self.n_past += m

    def logits(self, i: int = -1) -> FloatArray:
        """A read-only view of output ``i``'s logits of the last decode (valid until the next decode)."""
        ptr = ll.llama_get_logits_ith(self._ctx, i)
        if not ptr:
            raise DecodeError(-1, "no MTP logits")
        arr: FloatArray = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        return arr

    def hidden(self) -> FloatArray:
        """A copy of the last decode's hidden state (the input of the next drafted position)."""
        ptr = ext.llama_get_embeddings_nextn_ith(self._ctx, -1)
        if not ptr:
            raise DecodeError(-1, "no MTP hidden state")
        row: FloatArray = np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).copy()
        return row

    def truncate(self, n_keep: int) -> None:
        if n_keep >= self.n_past:
            return
        if not ll.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
            raise DecodeError(-2, "the MTP context could not be rolled back")
        self.n_past = n_keep

    def clear(self) -> None:
        ll.llama_memory_clear(self._mem, True)
        self.n_past = 0

    def request_abort(self) -> None:
        self._abort.set()

    def clear_abort(self) -> None:
        self._abort.clear()

    @property
    def n_threads(self) -> int:
        """The CPU threads llama.cpp uses for this context's passes (like ``ModelContext.n_threads``)."""
        return int(ll.llama_n_threads(self._ctx))

    def set_threads(self, n: int) -> None:
        """Use ``n`` CPU threads from the next pass on (automatic threads retune every context of the pair)."""
        ll.llama_set_n_threads(self._ctx, n, n)

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self._batch.token = ctypes.POINTER(ll.llama_token)()  # ours, not llama_batch_init's: not freed there
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ctx)
            self._ctx = None
