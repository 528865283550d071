"""The "Add my own pair" tab: two local GGUFs (or one with prompt lookup or its own MTP heads), checked before
anything loads. A draft that is an MTP head file is recognised from its header and checked as one.

The header-only compatibility check and the memory estimate (``CatalogueService.check_own_pair``) run on the
picker's ``QtTaskRunner``; a mismatch is explained by the rule it breaks and both values. A target without a draft
can get one cut from its own layers (``SelfDraftPanel``, under the target): once built, it fills the draft field.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from outrider.catalogue.memory import MemoryInfo, describe_memory
from outrider.catalogue.service import CatalogueService, OwnPairReport
from outrider.engine.llama.gguf_header import GGUFHeaderError, read_header
from outrider.ui.bridges.tasks import QtTaskRunner
from outrider.ui.picker.choice import PairChoice
from outrider.ui.picker.self_draft_panel import PromptSource, SelfDraftPanel

GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"


class _OwnFileError(Exception):
    """One of the two files is not a usable GGUF: which one (``role``: target or draft) and why."""

    def __init__(self, role: str, path: str, cause: GGUFHeaderError | OSError) -> None:
        super().__init__(f"The {role} is not a usable GGUF — {Path(path).name}: {cause}")
        self.role = role


def _read_each(files: list[tuple[str, str | None]]) -> None:
    """Read each file's header on its own, so that a problem is blamed on the file that has it (the pair check
    reads both and its error named the target for a draft that did not exist)."""
    for role, path in files:
        if path is None:
            continue
        try:
            read_header(Path(path), keep_arrays=False)
        except (GGUFHeaderError, OSError) as exc:
            raise _OwnFileError(role, path, exc) from exc


class OwnPairTab(QWidget):
    """Target, draft (or prompt lookup) and context; Check, then Use these files.

    Signals:
        checked(object): the ``OwnPairReport``, or an error message (str).
        chosen(object): the ``PairChoice`` of a pair that passed the check.
    """

    checked = Signal(object)
    chosen = Signal(object)

    def __init__(self, service: CatalogueService, runner: QtTaskRunner, memory: Callable[[], MemoryInfo],
                 parent: QWidget | None = None, *, calibration_prompts: PromptSource | None = None) -> None:
        super().__init__(parent)
        self.service = service
        self._runner = runner
        self._memory = memory  # the free memory last measured by the picker's scan
        self.report: OwnPairReport | None = None
        intro = QLabel("Pick a target and a smaller draft of the same family. Their headers are compared with "
                       "llama.cpp's rules before anything is loaded.", self)
        intro.setWordWrap(True)
        self.target_edit = QLineEdit(self)
        self.target_edit.setPlaceholderText("/path/to/target.gguf")
        self.target_edit.setToolTip("The large model whose output you get (it verifies every token)")
        self.target_browse = QPushButton("Browse…", self)
        self.target_browse.setToolTip("Choose the target GGUF")
        self.draft_edit = QLineEdit(self)
        self.draft_edit.setPlaceholderText("/path/to/draft.gguf")
        self.draft_edit.setToolTip("The small model that proposes tokens; it must share the target's vocabulary")
        self.draft_browse = QPushButton("Browse…", self)
        self.draft_browse.setToolTip("Choose the draft GGUF")
        self.self_draft = SelfDraftPanel(service.store, runner, calibration_prompts, self)
        self.lookup_check = QCheckBox("&Prompt lookup instead of a draft model", self)
        self.lookup_check.setToolTip("Draft by copying n-grams from the conversation: no second model, no memory")
        self.mtp_check = QCheckBox("&MTP heads in this model instead of a draft model", self)
        self.mtp_check.setToolTip("Draft with the target's own multi-token-prediction (NextN) heads, when its file "
                                  "carries them: no second model")
        self.ctx_spin = QSpinBox(self)
        self.ctx_spin.setRange(256, 1_048_576)
        self.ctx_spin.setSingleStep(1024)
        self.ctx_spin.setValue(4096)
        self.ctx_spin.setSuffix(" tokens")
        self.ctx_spin.setToolTip("Context size used for the memory estimate and the load")
        self.check_button = QPushButton("C&heck", self)
        self.check_button.setToolTip("Compare the headers and estimate memory (nothing is loaded)")
        self.own_result = QLabel("", self)
        self.own_result.setObjectName("ownPairResult")
        self.own_result.setWordWrap(True)
        self.own_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.own_use_button = QPushButton("Use these &files", self)
        self.own_use_button.setToolTip("Load this pair (only once the check passed)")
        self.own_use_button.setEnabled(False)

        form = QFormLayout()
        t_row = QHBoxLayout()
        t_row.addWidget(self.target_edit, 1)
        t_row.addWidget(self.target_browse)
        d_row = QHBoxLayout()
        d_row.addWidget(self.draft_edit, 1)
        d_row.addWidget(self.draft_browse)
        t_label = QLabel("&Target:", self)
        t_label.setBuddy(self.target_edit)
        d_label = QLabel("D&raft:", self)
        d_label.setBuddy(self.draft_edit)
        c_label = QLabel("Conte&xt:", self)
        c_label.setBuddy(self.ctx_spin)
        form.addRow(t_label, t_row)
        form.addRow("", self.self_draft)
        form.addRow(d_label, d_row)
        form.addRow("", self.lookup_check)
        form.addRow("", self.mtp_check)
        form.addRow(c_label, self.ctx_spin)
        buttons = QHBoxLayout()
        buttons.addWidget(self.check_button)
        buttons.addStretch(1)
        buttons.addWidget(self.own_use_button)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.own_result, 1)
        layout.addLayout(buttons)

        self.target_browse.clicked.connect(self._on_target_browse_clicked)
        self.draft_browse.clicked.connect(self._on_draft_browse_clicked)
        self.lookup_check.toggled.connect(self._on_lookup_check_toggled)
        self.mtp_check.toggled.connect(self._on_mtp_check_toggled)
        self.check_button.clicked.connect(self.check)
        self.own_use_button.clicked.connect(self._on_own_use_button_clicked)
        for w in (self.target_edit, self.draft_edit):
            w.textChanged.connect(self._on_input_changed)
        self.ctx_spin.valueChanged.connect(self._on_input_changed)
        self.target_edit.textChanged.connect(self.self_draft.set_target)
        self.self_draft.draft_ready.connect(self.set_draft)

    # -- filling in -----------------------------------------------------------------------------------------
    def set_pair(self, target: str | Path, draft: str | Path | None) -> None:
        """Fill the fields (``draft=None``: prompt lookup) and run the check."""
        self.target_edit.setText(str(target))
        self.lookup_check.setChecked(draft is None)
        if draft is not None:
            self.draft_edit.setText(str(draft))
        self.check()

    def set_target(self, path: str) -> None:
        self.target_edit.setText(path)
        self.check_if_ready()

    def set_draft(self, path: str) -> None:
        self.lookup_check.setChecked(False)
        self.draft_edit.setText(path)
        self.check_if_ready()

    def _no_draft_file(self) -> bool:
        """Prompt lookup or the target's own MTP heads: nothing to read in the draft field."""
        return self.lookup_check.isChecked() or self.mtp_check.isChecked()

    def check_if_ready(self) -> None:
        if self.target_edit.text().strip() and (self._no_draft_file() or self.draft_edit.text().strip()):
            self.check()

    def _on_target_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose the target model", self.target_edit.text(),
                                              GGUF_FILTER)
        if path:
            self.target_edit.setText(path)
            self.check_if_ready()

    def _on_draft_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose the draft model", self.draft_edit.text(), GGUF_FILTER)
        if path:
            self.draft_edit.setText(path)
            self.check_if_ready()

    def _on_lookup_check_toggled(self, on: bool) -> None:
        if on:
            self.mtp_check.setChecked(False)
        self._sync_draft_field()

    def _on_mtp_check_toggled(self, on: bool) -> None:
        if on:
            self.lookup_check.setChecked(False)
        self._sync_draft_field()

    def _sync_draft_field(self) -> None:
        needs_file = not self._no_draft_file()
        self.draft_edit.setEnabled(needs_file)
        self.draft_browse.setEnabled(needs_file)
        self._on_input_changed()

    def _on_input_changed(self, *_args: object) -> None:
        self.report = None
        self.own_use_button.setEnabled(False)

    # -- the check ------------------------------------------------------------------------------------------
    def check(self) -> None:
        """Header-only compatibility and memory estimate (off the GUI thread)."""
        target = self.target_edit.text().strip()
        draft = None if self._no_draft_file() else self.draft_edit.text().strip()
        mtp = self.mtp_check.isChecked()
        if not target or draft == "":
            self._show_error("Choose a target" + ("" if draft is None else " and a draft") + " first.")
            return
        n_ctx = self.ctx_spin.value()
        measured = self._memory()
        memory = measured if measured.ram_total else None
        self.own_result.setText("Checking the headers…")
        self.check_button.setEnabled(False)
        key = (target, draft, n_ctx, mtp)

        def work() -> OwnPairReport:
            _read_each([("target", target), ("draft", draft)])
            return self.service.check_own_pair(Path(target), None if draft is None else Path(draft), n_ctx, memory,
                                               mtp=mtp)

        def done(report: OwnPairReport) -> None:
            self.check_button.setEnabled(True)
            now = (self.target_edit.text().strip(),
                   None if self._no_draft_file() else self.draft_edit.text().strip(), self.ctx_spin.value(),
                   self.mtp_check.isChecked())
            if now != key:
                return  # the inputs changed meanwhile: this answer is about other files
            self._show_report(report)

        def failed(exc: BaseException) -> None:
            self.check_button.setEnabled(True)
            if isinstance(exc, _OwnFileError):
                self._show_error(str(exc))
            elif isinstance(exc, GGUFHeaderError | OSError):
                self._show_error(f"Not a usable GGUF — {exc}")
            else:
                self._show_error(f"Check failed: {exc}")

        self._runner.submit(work, done, failed)

    def _show_report(self, report: OwnPairReport) -> None:
        self.report = report
        mem = describe_memory(report.memory, self._memory())
        if report.mtp_problem:
            head = f"✘ MTP drafting is not possible: {report.mtp_problem}."
        elif report.mtp:
            head = ("✔ MTP heads in this model: it drafts for itself, no second model." if report.draft is None
                    else "✔ MTP head file for this target: it drafts from the target's own hidden states.")
        elif report.compatibility is None:
            head = "✔ Prompt lookup needs no draft model."
        elif report.compatibility.ok:
            head = "✔ Compatible: the draft can speculate for this target."
        else:
            head = (f"✘ Not compatible ({report.compatibility.rule}): {report.compatibility.reason}. "
                    "llama.cpp would refuse this pair; pick a draft from the target's family.")
        fit = {"too_big": " ⚠ It does not fit in the free memory.", "tight": " It barely fits."}.get(
            report.fit.value, "")
        hint = ("\nThis model carries MTP heads: tick “MTP heads in this model” to draft with them."
                if report.target_has_mtp and not report.mtp else "")
        self.own_result.setText(f"{head}\nMemory: {mem}.{fit}{hint}")
        self.own_result.setToolTip(mem)
        self.own_use_button.setEnabled(report.ok)
        self.checked.emit(report)

    def _show_error(self, text: str) -> None:
        self.report = None
        self.own_result.setText(text)
        self.own_use_button.setEnabled(False)
        self.checked.emit(text)

    def _on_own_use_button_clicked(self) -> None:
        report = self.report
        if report is not None and report.ok:
            self.chosen.emit(PairChoice.own(report.target, report.draft, report.memory.n_ctx, mtp=report.mtp))
