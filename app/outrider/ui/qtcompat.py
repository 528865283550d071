"""Work-arounds for bugs of the Qt bindings, applied once when ``outrider.ui`` is imported.

WORKAROUND for PySide6 6.12.0 (CPython 3.11 and older): ``SignalInstance.emit()`` returns ``True`` without
taking a new reference, so every ``emit`` from Python (ours, pyqtgraph's, pytest-qt's) drops one reference to
``True``; likewise every binding that returns nothing (``QTimer.setInterval``, ``processEvents``, …) drops one
reference to ``None``. After about a thousand emits the count reaches zero and the interpreter aborts with "Fatal Python
error: bool_dealloc: deallocating True or False". On Python 3.12+ ``True`` is immortal and nothing happens.
We detect the leaks with probe calls and, if present, give ``True``, ``False`` and ``None`` a reserve of 2**40
references (one write; they are never freed anyway), which outlasts any session. Remove when PySide6 is fixed.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, Signal

_RESERVE = 1 << 40
_applied = False


class _Probe(QObject):
    fired = Signal(int)


def emit_leaks_true() -> bool:
    """Whether ``Signal.emit`` drops a reference to ``True`` in this PySide6 build."""
    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(8):
        probe.fired.emit(0)
    return sys.getrefcount(True) < before - 4


def void_call_leaks_none() -> bool:
    """Whether a binding returning nothing drops a reference to ``None`` in this PySide6 build."""
    probe = _Probe()
    before = sys.getrefcount(None)
    for _ in range(8):
        probe.setObjectName("probe")
    return sys.getrefcount(None) < before - 4


def apply_workarounds() -> bool:
    """Apply the work-around if needed (idempotent). Returns whether the reserve was added."""
    global _applied
    if _applied or sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    if not (emit_leaks_true() or void_call_leaks_none()):
        return False
    for value in (True, False, None):
        ctypes.c_ssize_t.from_address(id(value)).value += _RESERVE
    _applied = True
    return True
