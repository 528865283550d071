"""The import contracts of pyproject.toml mean what they say: an indirect import of llama_cpp from the GUI breaks
"The GUI never imports llama_cpp". Before (``allow_indirect_imports = true``), an import of the llama backend inside
``ChatController._start`` passed every contract and 31 tests; this test ran lint-imports on a copy of the package with
such an import and saw exit 0."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


@pytest.mark.slow
@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_an_indirect_import_of_llama_cpp_from_the_gui_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "app", tmp_path / "app", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    sneaky = tmp_path / "app" / "outrider" / "ui" / "sneaky.py"
    sneaky.write_text('"""Reaches llama_cpp through the engine, never naming it."""\n\n\n'
                      "def start() -> None:\n    from outrider.engine.engine import Engine  # noqa: F401\n",
                      encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "app")}
    broken = subprocess.run([str(LINT_IMPORTS)], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert broken.returncode == 1, broken.stdout
    assert "The GUI never imports llama_cpp" in broken.stdout and "outrider.ui.sneaky" in broken.stdout
    sneaky.unlink()
    kept = subprocess.run([str(LINT_IMPORTS)], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    # the one legitimate link (worker.launch -> worker.engine_process) is allowed
    assert kept.returncode == 0, kept.stdout
