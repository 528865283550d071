"""The PySide6 desktop app: the only package that imports Qt (an import-linter contract keeps the core Qt-free).

Importing it applies the Qt bindings' work-arounds (``outrider.ui.qtcompat``) before any signal is emitted.
"""

from __future__ import annotations

from outrider.ui.qtcompat import apply_workarounds

apply_workarounds()
