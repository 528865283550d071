"""What is checked and explained around a model load: a file llama.cpp would reject (or crash on) is refused
before it is loaded, and a failed load becomes a ``ModelLoadError`` with a specific kind and message read from
llama.cpp's log. Also the load parameters derived from the file and the machine (tensor split, extra buffers).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as ll

from outrider.engine.errors import ModelLoadError
from outrider.engine.llama import rpc
from outrider.engine.llama.gguf_header import GGUFHeader, GGUFHeaderError, read_header
from outrider.engine.llama.runtime import BackendInfo

_FILE_TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
                    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
                    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
                    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
                    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
                    38: "MXFP4"}


def quantisation_name(file_type: Any) -> str:
    """The name of a GGUF ``general.file_type`` number (``15`` -> ``Q4_K_M``); the number as text if unknown."""
    return _FILE_TYPE_NAMES.get(int(file_type), str(file_type)) if file_type is not None else "unknown"


def tensor_split(split: Sequence[float], placement: rpc.Placement | None, path: str) -> Any:
    """``llama_model_params.tensor_split``: one proportion per offload device, padded to llama_max_devices()."""
    if not split:
        return None
    n_devices = len(placement.handles) if placement is not None else len(split)
    if len(split) > n_devices:
        raise ModelLoadError("bad_split", path, f"a split of {len(split)} parts for {n_devices} devices")
    size = int(ll.llama_max_devices())
    return (ctypes.c_float * size)(*split[:size])


MAX_LAYERS = 512  # LLAMA_MAX_LAYERS: llama.cpp aborts (GGML_ASSERT) on more
# ggml types with AMX kernels (ggml-cpu/amx/common.h qtype_has_amx_kernels): Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K,
# IQ4_XS — the ones whose AMX matmul crashes in this llama.cpp (see ModelSettings).
AMX_TYPES = frozenset({2, 3, 8, 12, 13, 14, 23})


def extra_buffers_safe(info: BackendInfo, header: GGUFHeader, wanted: bool | None) -> bool:
    if wanted is not None:
        return wanted
    has_amx = "AMX_INT8 = 1" in info.system_info
    return not (has_amx and any(t.ggml_type in AMX_TYPES for t in header.tensors))


def precheck(path: Path) -> GGUFHeader:
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


def explain_load_failure(path: str, architecture: str, lines: Sequence[str]) -> ModelLoadError:
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
