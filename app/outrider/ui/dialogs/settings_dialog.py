"""The settings dialog: edits an ``AppSettings`` copy; OK hands it to ``QtSettings`` (which persists it).

The fields come in four groups — Drafting, Sampling, Hardware, Context — each with its unit (as a suffix) and a
one-line help under it. What does not apply is disabled, with the reason in the help line: the fixed k under
automatic k, the automatic-k ceiling under a fixed k, every drafting knob with no draft source, p-min with prompt
lookup (it has no probabilities), draft GPU layers with prompt lookup, top-k / top-p / min-p / seed at
temperature 0 (greedy). The RPC workers and the target split are checked as typed, by the engine's own parsers: a
bad value says why under its field and OK waits, so nothing typed is lost. On a llama.cpp build
without a GPU backend (the engine says so in its hello: ``EngineClient.backend``) the GPU-layer fields say that
"all" runs on the CPU and how to get a GPU build.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from outrider.engine.params import SAMPLERS, parse_rpc_list, parse_split
from outrider.settings import (
    DRAFT_SOURCE_LABELS,
    DRAFT_SOURCES,
    K_POLICIES,
    K_POLICY_LABELS,
    SAMPLER_LABELS,
    AppSettings,
)
from outrider.ui.settings import RELOAD_KEYS

__all__ = ["GROUPS", "RELOAD_KEYS", "SettingsDialog"]
GROUPS = ("Drafting", "Sampling", "Hardware", "Context")
RPC_HELP = "Other machines running outrider rpc-worker (docs/rpc.md)."
SPLIT_HELP = "Layers per device: local GPUs, then the workers."
NO_GPU_HELP = ("This llama.cpp build has no GPU backend ({name}): “all” runs every layer on the CPU. For a GPU, "
               "rebuild llama-cpp-python with CUDA, Metal or Vulkan (README, “GPU builds”).")


def _spin(lo: int, hi: int, value: int, tip: str, special: str = "", suffix: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setValue(value)
    box.setToolTip(tip)
    if special:
        box.setSpecialValueText(special)
    if suffix:
        box.setSuffix(suffix)
    return box


def _dspin(lo: float, hi: float, step: float, value: float, tip: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    box.setDecimals(2)
    box.setValue(value)
    box.setToolTip(tip)
    return box


def _line(text: str, placeholder: str, tip: str) -> QLineEdit:
    box = QLineEdit(text)
    box.setPlaceholderText(placeholder)
    box.setToolTip(tip)
    box.setClearButtonEnabled(True)
    return box


def _combo(values: tuple[str, ...], labels: Mapping[str, str], current: str, tip: str) -> QComboBox:
    box = QComboBox()
    for value in values:
        box.addItem(labels[value], value)
    box.setCurrentIndex(values.index(current))
    box.setToolTip(tip)
    return box


class SettingsDialog(QDialog):
    """Model, drafting and sampling settings. ``result_settings()`` is the edited copy.

    Attributes:
        groups: the four ``QGroupBox``es by title (``GROUPS``).
        help_labels: the one-line help under each field, by setting name.
        gpu_note: the "no GPU backend" line of the Hardware group (hidden on a GPU build or when unknown).
    """

    def __init__(self, settings: AppSettings, parent: QWidget | None = None, *,
                 backend: Mapping[str, Any] | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._original = settings
        self._backend = dict(backend or {})
        self.help_labels: dict[str, QLabel] = {}
        self.groups: dict[str, QGroupBox] = {}
        self._build_fields(settings)
        self._build_layout()
        self.draft_source.currentIndexChanged.connect(self._on_field_changed)
        self.rpc_servers.textChanged.connect(self._on_text_field_changed)
        self.target_split.textChanged.connect(self._on_text_field_changed)
        self.k_policy.currentIndexChanged.connect(self._on_field_changed)
        self.temperature.valueChanged.connect(self._on_field_changed)
        self._on_field_changed()
        self._on_text_field_changed()

    # -- construction -----------------------------------------------------------------------------------------
    def _build_fields(self, s: AppSettings) -> None:
        self.draft_source = _combo(DRAFT_SOURCES, DRAFT_SOURCE_LABELS, s.draft_source,
                                   "Where draft tokens come from: the pair's draft model (prompt lookup for a pair "
                                   "without one), prompt lookup (n-grams of the conversation), or none")
        self.lookup_history = QCheckBox("Draft from your chat history", self)
        self.lookup_history.setChecked(s.lookup_history)
        self.lookup_history.setToolTip("History lookup: text of your earlier chats (a file edited again, a repeated "
                                       "tool call) proposed as a draft, before prompt lookup and the draft model. "
                                       "The index stays on this computer, next to the history.")
        self.k_policy = _combo(K_POLICIES, K_POLICY_LABELS, s.k_policy,
                               "How the draft length k is chosen: by the cost model every step (k = 0 is a plain "
                               "step), or always the same k")
        self.k = _spin(1, 64, s.k, "Tokens drafted per step with a fixed k", suffix=" tokens")
        self.k_max = _spin(1, 64, s.k_max, "The longest draft automatic k may choose", suffix=" tokens")
        self.draft_min = _spin(0, 64, s.draft_min, "Drafts shorter than this are dropped (0 = keep all)",
                               suffix=" tokens")
        self.p_min = _dspin(0.0, 1.0, 0.05, s.p_min, "Stop drafting when the draft model's probability of its own "
                            "choice falls below this")
        self.temperature = _dspin(0.0, 5.0, 0.1, s.temperature, "0 = greedy (output identical to the target alone)")
        self.top_k = _spin(0, 100000, s.top_k, "Sample among the k most likely tokens (0 = off)", "off",
                           " tokens")
        self.top_p = _dspin(0.0, 1.0, 0.05, s.top_p, "Nucleus: the smallest set of tokens whose probability "
                            "reaches this")
        self.min_p = _dspin(0.0, 1.0, 0.01, s.min_p, "Drop tokens less likely than this × the top token")
        self.seed = _spin(-1, 2**31 - 1, s.seed, "Sampling seed (-1 = random)", "random")
        self.sampler = _combo(SAMPLERS, SAMPLER_LABELS, s.sampler,
                              "How the target checks a sampled draft; both give exactly the target's distribution. "
                              "Coupled: a seeded reply is the same text with or without drafting, whatever k; "
                              "rejection: higher acceptance with a draft model; automatic: coupled with a seed")
        self.target_gpu_layers = _spin(-1, 999, s.target_gpu_layers, "Target layers offloaded to the GPU "
                                       "(-1 = all)", "all", " layers")
        self.draft_gpu_layers = _spin(-1, 999, s.draft_gpu_layers, "Draft layers offloaded to the GPU (-1 = all)",
                                      "all", " layers")
        self.threads = _spin(0, 1024, s.threads, "CPU threads (0 = automatic)", "auto", " threads")
        self.rpc_servers = _line(s.rpc_servers, "host:port, host:port",
                                 "llama.cpp RPC workers (outrider rpc-worker on other machines) that hold part of "
                                 "the target's offloaded layers; empty = this machine only")
        self.target_split = _line(s.target_split, "auto", "Share of the target's offloaded layers per device, local "
                                  "GPUs first, then the RPC workers in order (e.g. 3,1); empty = automatic")
        self.context_size = _spin(256, 1 << 20, s.context_size, "Context size of both models", suffix=" tokens")
        self.context_size.setSingleStep(1024)
        self.max_tokens = _spin(1, 1 << 20, s.max_tokens, "Longest reply", suffix=" tokens")
        self.system_prompt = QPlainTextEdit(s.system_prompt)
        self.system_prompt.setToolTip("Sent first in every new conversation")
        self.system_prompt.setTabChangesFocus(True)
        self.system_prompt.setMaximumHeight(72)
        self.gpu_note = QLabel("", self)
        self.gpu_note.setObjectName("gpuBackendNote")
        self.gpu_note.setWordWrap(True)
        backend_name = str(self._backend.get("name") or "")
        if backend_name and not self._backend.get("gpu_offload"):
            self.gpu_note.setText(NO_GPU_HELP.format(name=backend_name))
            for box in (self.target_gpu_layers, self.draft_gpu_layers):
                box.setSpecialValueText("all (CPU: no GPU backend)")
        self.gpu_note.setVisible(bool(self.gpu_note.text()))

    def _rows(self) -> dict[str, tuple[tuple[str, str, QWidget, str], ...]]:
        """Per group: (setting name, label, widget, one-line help)."""
        return {
            "Drafting": (
                ("draft_source", "Draft source", self.draft_source, ""),
                ("lookup_history", "History lookup", self.lookup_history, "Kept on this computer; reloads the pair."),
                ("k_policy", "Draft length k", self.k_policy, ""),
                ("k", "Fixed k", self.k, "Tokens drafted each step."),
                ("k_max", "Automatic k up to", self.k_max, "Automatic k chooses from 0 to this."),
                ("draft_min", "Draft min", self.draft_min, "Shorter drafts are dropped."),
                ("p_min", "Draft p-min", self.p_min, "Probability 0–1: the draft stops below it."),
            ),
            "Sampling": (
                ("temperature", "Temperature", self.temperature, ""),
                ("top_k", "Top-k", self.top_k, ""),
                ("top_p", "Top-p", self.top_p, "Probability 0–1."),
                ("min_p", "Min-p", self.min_p, "Share 0–1 of the top token's probability."),
                ("seed", "Seed", self.seed, "The same seed repeats a sampled reply."),
                ("sampler", "Sampler", self.sampler, "Both exact; coupled repeats a seeded reply with any draft."),
            ),
            "Hardware": (
                ("target_gpu_layers", "Target GPU layers", self.target_gpu_layers, ""),
                ("draft_gpu_layers", "Draft GPU layers", self.draft_gpu_layers, ""),
                ("threads", "CPU threads", self.threads,
                 "Auto: the CPUs other programs leave free (one fewer than the cores when they are busy), "
                 "re-chosen before each reply; the status bar shows the count."),
                ("rpc_servers", "RPC workers", self.rpc_servers, RPC_HELP),
                ("target_split", "Target split", self.target_split, SPLIT_HELP),
            ),
            "Context": (
                ("context_size", "Context size", self.context_size, "Prompt + reply; more costs memory."),
                ("max_tokens", "Max reply length", self.max_tokens, "A reply stops at this many tokens."),
                ("system_prompt", "System prompt", self.system_prompt, "Sent first in every new conversation."),
            ),
        }

    def _build_layout(self) -> None:
        grid = QGridLayout()
        for i, (title, rows) in enumerate(self._rows().items()):
            box = QGroupBox(title, self)
            form = QFormLayout(box)
            form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
            for name, label, widget, help_text in rows:
                hint = QLabel(help_text, box)
                hint.setObjectName("settingHelp")
                hint.setTextFormat(Qt.TextFormat.PlainText)  # one short line: no wrapping to squeeze
                font = hint.font()
                font.setPointSizeF(font.pointSizeF() * 0.9)
                hint.setFont(font)
                hint.setForegroundRole(QPalette.ColorRole.PlaceholderText)
                self.help_labels[name] = hint
                cell = QVBoxLayout()
                cell.setSpacing(1)
                cell.addWidget(widget)
                cell.addWidget(hint)
                caption = QLabel(label, box)
                caption.setBuddy(widget)
                form.addRow(caption, cell)
            if title == "Hardware":
                form.addRow(self.gpu_note)
            self.groups[title] = box
            grid.addWidget(box, i % 2, i // 2)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        layout = QVBoxLayout(self)
        layout.addLayout(grid)
        layout.addWidget(buttons)

    # -- what applies -----------------------------------------------------------------------------------------
    @Slot()
    def _on_field_changed(self) -> None:
        """Enable what applies to the chosen source, k policy and temperature; say why the rest does not."""
        source = str(self.draft_source.currentData())
        fixed = self.k_policy.currentData() == "fixed"
        drafting = source != "none"
        greedy = self.temperature.value() == 0.0
        self.k_policy.setEnabled(drafting)
        self.lookup_history.setEnabled(drafting)
        self.k.setEnabled(drafting and fixed)
        self.k_max.setEnabled(drafting and not fixed)
        self.draft_min.setEnabled(drafting)
        self.p_min.setEnabled(source == "model")
        self.draft_gpu_layers.setEnabled(source != "lookup")  # prompt lookup loads no draft model
        for box in (self.top_k, self.top_p, self.min_p, self.seed, self.sampler):
            box.setEnabled(not greedy)
        h = self.help_labels
        h["draft_source"].setText({
            "model": "The pair's draft model proposes (prompt lookup for a pair without one), the target checks.",
            "lookup": "Drafts copied from earlier text (no draft model).",
            "none": "Plain decoding: the target alone (1.00×).",
        }[source])
        h["k_policy"].setText("Drafting is off." if not drafting else "Always the fixed k below." if fixed else
                              "The cost model picks k each step (0 = plain).")
        h["k"].setText("Tokens drafted each step." if fixed or not drafting else
                       "Not used: automatic k chooses the length.")
        h["k_max"].setText("Not used: k is fixed." if fixed and drafting else "Automatic k chooses from 0 to this.")
        h["p_min"].setText("Probability 0–1: the draft stops below it." if source == "model" else
                           "Only for a draft model (lookup has none).")
        h["temperature"].setText("0 = greedy; top-k, top-p, min-p, seed do not apply." if greedy else
                                 "Higher = more varied (same distribution as target).")
        h["top_k"].setText("Not used at temperature 0." if greedy else "Sample among this many top tokens.")
        self._refresh_gpu_help()

    def _refresh_gpu_help(self) -> None:
        cpu_only = bool(self.gpu_note.text())
        for name in ("target_gpu_layers", "draft_gpu_layers"):
            self.help_labels[name].setText("On the CPU: this build has no GPU backend." if cpu_only else
                                           "All = every layer on the GPU; 0 = CPU only.")
        if not self.draft_gpu_layers.isEnabled():
            self.help_labels["draft_gpu_layers"].setText("Not used: prompt lookup loads no draft model.")

    @Slot()
    def _on_text_field_changed(self) -> None:
        """Check the typed fields as they are typed: a bad one says why under itself and OK waits (nothing the
        user typed is thrown away)."""
        errors = self.field_errors()
        for name, ok_text in (("rpc_servers", RPC_HELP), ("target_split", SPLIT_HELP)):
            label = self.help_labels[name]
            label.setText(errors.get(name, ok_text))
            label.setStyleSheet("color: #c62828;" if name in errors else "")
        self.ok_button.setEnabled(not errors)

    def field_errors(self) -> dict[str, str]:
        """The typed fields that cannot be used, by setting name, with why (the engine's own parsers)."""
        errors: dict[str, str] = {}
        for name, parse in (("rpc_servers", parse_rpc_list), ("target_split", parse_split)):
            text = getattr(self, name).text()
            if not text.strip():
                continue
            try:
                parse(text)
            except ValueError as exc:
                errors[name] = str(exc)[:1].upper() + str(exc)[1:] + "."
        return errors

    def accept(self) -> None:  # Qt override: never close with a value that would be thrown away
        if self.field_errors():
            self._on_text_field_changed()
            return
        super().accept()

    # -- result -----------------------------------------------------------------------------------------------
    def result_settings(self) -> AppSettings:
        return dataclasses.replace(
            self._original,
            target_gpu_layers=self.target_gpu_layers.value(), draft_gpu_layers=self.draft_gpu_layers.value(),
            context_size=self.context_size.value(), threads=self.threads.value(),
            draft_source=str(self.draft_source.currentData()), k_policy=str(self.k_policy.currentData()),
            lookup_history=self.lookup_history.isChecked(),
            k=self.k.value(), k_max=self.k_max.value(),
            draft_min=self.draft_min.value(), p_min=self.p_min.value(), temperature=self.temperature.value(),
            top_k=self.top_k.value(), top_p=self.top_p.value(), min_p=self.min_p.value(), seed=self.seed.value(),
            sampler=str(self.sampler.currentData()),
            max_tokens=self.max_tokens.value(), system_prompt=self.system_prompt.toPlainText(),
            rpc_servers=self.rpc_servers.text().strip(), target_split=self.target_split.text().strip(),
        ).validated()
