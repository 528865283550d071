"""The C++ runtime is in the global symbol scope before llama.cpp loads (engine/llama/cpp_runtime.py says why)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A libstdc++ function that a CUDA build's libggml-cuda also exports; the global scope must offer libstdc++'s.
CPP_SYMBOL = "_ZNSo9_M_insertIlEERSoT_"  # std::ostream& std::ostream::_M_insert<long>(long)

PROBE = f"""
import ctypes, sys
scope = ctypes.CDLL(None)  # the global scope: what a library's unresolved references bind to first
before = hasattr(scope, {CPP_SYMBOL!r})
import outrider.engine.engine  # noqa: F401  (imports llama_cpp)
print(before, hasattr(scope, {CPP_SYMBOL!r}), "llama_cpp" in sys.modules)
"""


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="ELF dynamic linking only")
def test_importing_the_engine_puts_the_cpp_runtime_in_the_global_scope() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    before, after, llama_loaded = out.stdout.split()
    assert before == "False"  # a bare interpreter has no C++ runtime in its global scope: the probe can tell
    assert llama_loaded == "True"
    assert after == "True"


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="ELF dynamic linking only")
def test_the_runtime_is_shared_before_any_engine_module_imports_llama_cpp() -> None:
    probe = ("import sys; import outrider.engine; "
             "print('llama_cpp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False"]


def test_a_runtime_not_found_by_its_soname_is_searched_for_and_none_found_is_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from outrider.engine.llama import cpp_runtime

    monkeypatch.setattr(cpp_runtime.sys, "platform", "linux")
    monkeypatch.setattr(cpp_runtime, "CPP_RUNTIMES", ("libno-such-runtime.so.9",))
    monkeypatch.setattr(cpp_runtime.ctypes.util, "find_library",
                        lambda name: "libstdc++.so.6" if name == "stdc++" else None)
    assert cpp_runtime.share_cpp_runtime() == "libstdc++.so.6"
    monkeypatch.setattr(cpp_runtime.ctypes.util, "find_library", lambda name: None)
    assert cpp_runtime.share_cpp_runtime() is None
    monkeypatch.setattr(cpp_runtime.sys, "platform", "darwin")  # symbols resolve per library there: nothing to do
    assert cpp_runtime.share_cpp_runtime() is None
