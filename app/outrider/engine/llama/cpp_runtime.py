"""One C++ runtime for every llama.cpp library in the process, loaded before llama.cpp itself.

A CUDA build of llama.cpp can leave ``libllama`` without a dependency on ``libstdc++``: the linker drops it
(``--as-needed``) when ``libggml-cuda``, listed first, already exports the C++ library functions ``libllama``
calls (template instances such as ``std::ostream::_M_insert<long>``). ``libllama`` then binds them to
``libggml-cuda``'s copies, and the rest of the C++ runtime (locales, the facets they hold) to ``libstdc++``; with
that mix, loading a model crashed inside ``llama_model::print_info`` (seen with CUDA 13 on an H200, every model,
while the same libraries loaded fine from a bare script). Loading ``libstdc++`` into the global symbol scope
first makes every library bind to the one runtime, which is what the dynamic linker's preload
(``LD_PRELOAD=libstdc++.so.6``) did to make the same process work.

It must run before ``llama_cpp`` is imported: data references (vtables, locale ids) are bound when a library is
loaded, not at the first call. ``outrider.engine`` runs it on import, so every module that reaches llama.cpp does
so after it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

CPP_RUNTIMES = ("libstdc++.so.6", "libc++.so.1")
"""The C++ runtimes tried, by their sonames (no search program run): GNU's, then LLVM's (where a system builds with
it). ``ctypes.util.find_library`` is asked only when neither loads by its soname."""


def share_cpp_runtime() -> str | None:
    """Load the C++ runtime into the global symbol scope (Linux and other ELF systems); the library's name, or
    None where there is nothing to do (Windows and macOS resolve symbols per library) or none was found."""
    if sys.platform in ("win32", "darwin"):
        return None
    for name in CPP_RUNTIMES:
        if _load_globally(name):
            return name
    for name in ("stdc++", "c++"):
        found = ctypes.util.find_library(name)
        if found is not None and _load_globally(found):
            return found
    return None


def _load_globally(name: str) -> bool:
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    return True
