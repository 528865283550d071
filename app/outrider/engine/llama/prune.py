"""Writing a self-draft: llama.cpp's own ``llama_model_quantize`` with ``prune_layers``.

``llama_model_quantize_params.prune_layers`` is a ``const int32_t *`` to a list of block numbers ended by ``-1``
(``llama-quant.cpp`` reads until the sentinel into a ``std::vector<int>``; llama-cpp-python 0.3.36 binds it as
``POINTER(c_int32)``, so a ctypes array passes as is). llama.cpp drops those blocks' tensors, renumbers the
remaining ``blk.N`` in order and rewrites ``block_count``; its renumbering compares block numbers with the first
pruned one, so the list must be sorted. The same call re-quantises the copy (Q8_0 / Q4_0: the draft stays small
and quick); ``allow_requantize`` lets it start from an already quantised target.

Blocking, with no progress callback and no way to stop it: it runs in the self-draft build process, which is
terminated to cancel. A write error (a full disk) makes llama.cpp throw, log the reason and return 1.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Sequence
from pathlib import Path

import llama_cpp.llama_cpp as ll

from outrider.engine.llama.runtime import Backend
from outrider.engine.selfdraft import DraftType, SelfDraftError

_FAILED = re.compile(r"failed to quantize:\s*(.*)")


def write_pruned(backend: Backend, target: Path, out: Path, prune: Sequence[int], draft_type: DraftType,
                 *, threads: int = 0) -> None:
    """Write ``target`` without the blocks ``prune`` to ``out``, re-quantised to ``draft_type``.

    ``threads`` 0 = llama.cpp's default. Raises ``SelfDraftError('build_failed')`` with llama.cpp's own reason.
    """
    if not prune:
        raise SelfDraftError("bad_layers", "nothing to prune")
    params = ll.llama_model_quantize_default_params()
    params.ftype = draft_type.llama_ftype
    params.nthread = threads
    params.allow_requantize = True
    params.quantize_output_tensor = True
    blocks = sorted(set(prune))
    array = (ctypes.c_int32 * (len(blocks) + 1))(*blocks, -1)  # kept alive until the call returns
    params.prune_layers = ctypes.cast(array, ctypes.POINTER(ctypes.c_int32))
    mark = backend.log.mark()
    status = ll.llama_model_quantize(os.fsencode(str(target)), os.fsencode(str(out)), ctypes.byref(params))
    if status != 0:
        raise SelfDraftError("build_failed", f"llama.cpp could not write the draft: {_reason(backend.log.since(mark))}")


def _reason(lines: Sequence[str]) -> str:
    """llama.cpp's own words from its log (``llama_model_quantize: failed to quantize: <why>``)."""
    for line in reversed(lines):
        if (m := _FAILED.search(line)) is not None:
            return m.group(1).strip()
    return "llama_model_quantize failed"
