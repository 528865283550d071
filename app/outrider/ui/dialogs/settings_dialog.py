"""The settings dialog: edits an ``AppSettings`` copy; OK hands it to ``QtSettings`` (which persists it)."""

from __future__ import annotations

import dataclasses

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from outrider.settings import DRAFT_MODE_LABELS, DRAFT_MODES, AppSettings

RELOAD_KEYS = ("target_gpu_layers", "draft_gpu_layers", "context_size", "threads")


def _spin(lo: int, hi: int, value: int, tip: str, special: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setValue(value)
    box.setToolTip(tip)
    if special:
        box.setSpecialValueText(special)
    return box


def _dspin(lo: float, hi: float, step: float, value: float, tip: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    box.setDecimals(2)
    box.setValue(value)
    box.setToolTip(tip)
    return box


class SettingsDialog(QDialog):
    """Model, drafting and sampling settings. ``result_settings()`` is the edited copy."""

    def __init__(self, settings: AppSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._original = settings
        s = settings
        self.target_gpu_layers = _spin(-1, 999, s.target_gpu_layers, "Target layers offloaded to the GPU "
                                       "(-1 = all)", "all")
        self.draft_gpu_layers = _spin(-1, 999, s.draft_gpu_layers, "Draft layers offloaded to the GPU (-1 = all)",
                                      "all")
        self.context_size = _spin(256, 1 << 20, s.context_size, "Context size in tokens (both models)")
        self.context_size.setSingleStep(1024)
        self.threads = _spin(0, 1024, s.threads, "CPU threads (0 = automatic)", "auto")
        self.draft_mode = QComboBox()
        for mode in DRAFT_MODES:
            self.draft_mode.addItem(DRAFT_MODE_LABELS[mode], mode)
        self.draft_mode.setCurrentIndex(DRAFT_MODES.index(s.draft_mode))
        self.draft_mode.setToolTip("auto: the cost model picks k per step (k = 0 is plain decoding); fixed: always "
                                   "k; off: the target alone; prompt lookup: n-gram drafts from the conversation")
        self.k = _spin(1, 64, s.k, "Draft length k when the mode is fixed")
        self.draft_min = _spin(0, 64, s.draft_min, "Drafts shorter than this are dropped")
        self.p_min = _dspin(0.0, 1.0, 0.05, s.p_min, "Stop drafting when the draft's probability of its own choice "
                            "falls below this")
        self.temperature = _dspin(0.0, 5.0, 0.1, s.temperature, "0 = greedy (output identical to the target alone)")
        self.top_k = _spin(0, 100000, s.top_k, "Top-k (0 = off)")
        self.top_p = _dspin(0.0, 1.0, 0.05, s.top_p, "Top-p (nucleus)")
        self.min_p = _dspin(0.0, 1.0, 0.01, s.min_p, "Min-p")
        self.seed = _spin(-1, 2**31 - 1, s.seed, "Sampling seed (-1 = random)", "random")
        self.max_tokens = _spin(1, 1 << 20, s.max_tokens, "Longest reply, in tokens")
        self.system_prompt = QPlainTextEdit(s.system_prompt)
        self.system_prompt.setToolTip("Sent first in every new conversation")
        self.system_prompt.setTabChangesFocus(True)
        self.system_prompt.setMaximumHeight(90)

        form = QFormLayout()
        rows = (("Target GPU layers", self.target_gpu_layers), ("Draft GPU layers", self.draft_gpu_layers),
                ("Context size", self.context_size), ("Threads", self.threads), ("Draft mode", self.draft_mode),
                ("Fixed k", self.k), ("Draft min", self.draft_min), ("Draft p-min", self.p_min),
                ("Temperature", self.temperature), ("Top-k", self.top_k), ("Top-p", self.top_p),
                ("Min-p", self.min_p), ("Seed", self.seed), ("Max reply tokens", self.max_tokens),
                ("System prompt", self.system_prompt))
        for label, widget in rows:
            form.addRow(label, widget)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(buttons)

    def result_settings(self) -> AppSettings:
        return dataclasses.replace(
            self._original,
            target_gpu_layers=self.target_gpu_layers.value(), draft_gpu_layers=self.draft_gpu_layers.value(),
            context_size=self.context_size.value(), threads=self.threads.value(),
            draft_mode=str(self.draft_mode.currentData()), k=self.k.value(),
            draft_min=self.draft_min.value(), p_min=self.p_min.value(), temperature=self.temperature.value(),
            top_k=self.top_k.value(), top_p=self.top_p.value(), min_p=self.min_p.value(), seed=self.seed.value(),
            max_tokens=self.max_tokens.value(), system_prompt=self.system_prompt.toPlainText(),
        ).validated()
