""""Make a draft from this model's own layers": the self-draft of the target in the "Add my own pair" tab.

For the target in the tab, the panel finds a self-draft already in the store (``ModelStore.self_drafts_of``) and
offers it, or builds one (``catalogue.selfdraft``): the header check and the memory the pair will need come first,
in a question; then progress and Cancel while the build process writes and measures the candidates. A finished
draft is handed to the tab (``draft_ready``), which checks the pair as any other: the pair is then usable.

Everything that reads the disk runs on the picker's ``QtTaskRunner``; the build runs on its own thread and process
(``SelfDraftBuild``), whose callbacks reach the GUI thread through queued signals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMessageBox, QProgressBar, QPushButton, QVBoxLayout, QWidget

from outrider.catalogue.memory import format_bytes
from outrider.catalogue.selfdraft import SelfDraftBuild, SelfDraftEvent, SelfDraftPreview, neutral_prompts, preview
from outrider.catalogue.store import ModelStore, SelfDraftRecord
from outrider.engine.selfdraft import SelfDraftError
from outrider.ui.bridges.tasks import QtTaskRunner

PromptSource = Callable[[], tuple[Sequence[str], str]]
"""Calibration prompts and where they come from (``history``, ``bundled``); called on the GUI thread."""


def bundled_prompts() -> tuple[Sequence[str], str]:
    return neutral_prompts(), "bundled"


class SelfDraftPanel(QWidget):
    """The self-draft row of the own-pair tab.

    Signals:
        draft_ready(str): the path of a self-draft to use with the target (just built, or found in the store).
        build_finished(object): the build ended: the ``SelfDraftResult``, or the words of why not (str).

    Attributes:
        make_button / cancel_button / use_found_button: the actions; progress: the build's progress bar;
        status_label: what is happening, or what went wrong, in words; build: the running ``SelfDraftBuild``.
    """

    draft_ready = Signal(str)
    build_finished = Signal(object)
    _progressed = Signal(object)  # SelfDraftEvent, from the build thread
    _ended = Signal(object)  # SelfDraftBuild, from the build thread

    def __init__(self, store: ModelStore, runner: QtTaskRunner, prompts: PromptSource | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self._runner = runner
        self._prompts = prompts or bundled_prompts
        self._target = ""
        self.build: SelfDraftBuild | None = None
        self.found: list[SelfDraftRecord] = []
        self.make_button = QPushButton("Make a draft from this model's own &layers", self)
        self.make_button.setToolTip("No second download: a smaller copy of the target without some of its middle "
                                    "layers, measured on your recent prompts. Takes a few minutes.")
        self.make_button.setEnabled(False)
        self.use_found_button = QPushButton("Use its &self-draft", self)
        self.use_found_button.setToolTip("A self-draft of this model is already in the model store")
        self.use_found_button.setVisible(False)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setToolTip("Stop building; nothing is kept")
        self.cancel_button.setVisible(False)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 100)
        self.progress.setVisible(False)
        self.status_label = QLabel("", self)
        self.status_label.setObjectName("selfDraftStatus")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        row = QHBoxLayout()
        row.addWidget(self.make_button)
        row.addWidget(self.use_found_button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.status_label)

        self.make_button.clicked.connect(self.make_draft)
        self.use_found_button.clicked.connect(self._on_use_found_button_clicked)
        self.cancel_button.clicked.connect(self.cancel)
        self._progressed.connect(self._on_progressed)
        self._ended.connect(self._on_ended)

    @property
    def running(self) -> bool:
        return self.build is not None

    # -- the target ---------------------------------------------------------------------------------------
    def set_target(self, target: str) -> None:
        """Look up the store's self-drafts of ``target`` (off the GUI thread) and offer the newest."""
        self._target = target.strip()
        self.found = []
        self.use_found_button.setVisible(False)
        self.make_button.setEnabled(bool(self._target) and not self.running)
        if not self.running:
            self.status_label.setText("")
        if not self._target:
            return
        key = self._target

        def done(found: list[SelfDraftRecord]) -> None:
            if key != self._target:
                return  # the target changed meanwhile
            self.found = found
            if found and not self.running:
                self.use_found_button.setVisible(True)
                self.status_label.setText(f"In the store: {found[0].describe()}.")

        self._runner.submit(lambda: self.store.self_drafts_of(Path(key), hash_if_needed=False), done,
                            lambda _exc: None)

    def _on_use_found_button_clicked(self) -> None:
        if self.found:
            self.draft_ready.emit(str(self.found[0].path))

    # -- building -----------------------------------------------------------------------------------------
    @Slot()
    def make_draft(self) -> None:
        """Check the target and estimate (off the GUI thread), ask, then build."""
        if self.running or not self._target:
            return
        target = self._target
        self.make_button.setEnabled(False)
        self.status_label.setText("Checking the model…")

        def failed(exc: BaseException) -> None:
            self.make_button.setEnabled(bool(self._target))
            self._show_failure(_words(exc))

        self._runner.submit(lambda: preview(self.store, Path(target)), self._on_previewed, failed)

    def confirm_box(self, plan: SelfDraftPreview) -> QMessageBox:
        """The question before building: what is built, its size and the memory the pair needs."""
        box = QMessageBox(QMessageBox.Icon.Question, "Make a draft from this model's own layers?",
                          f"{plan.describe()}.\n\nOutrider measures {len(plan.plans)} layer subsets on your "
                          "recent prompts and keeps the fastest. This takes a few minutes; the draft needs "
                          f"{format_bytes(plan.disk_needed)} of disk while it is built.", parent=self)
        box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        box.setDefaultButton(QMessageBox.StandardButton.Yes)
        box.button(QMessageBox.StandardButton.Yes).setText("Make the draft")
        box.button(QMessageBox.StandardButton.No).setText("Don't make it")
        return box

    def _on_previewed(self, plan: SelfDraftPreview) -> None:
        if str(plan.target) != self._target:
            self.make_button.setEnabled(bool(self._target))
            return  # the target changed meanwhile
        if self.confirm_box(plan).exec() != QMessageBox.StandardButton.Yes:
            self.make_button.setEnabled(True)
            self.status_label.setText("No draft made.")
            return
        self.start(plan)

    def start(self, plan: SelfDraftPreview) -> None:
        """Build ``plan`` now (no question): progress, Cancel, then ``draft_ready`` or the reason it failed."""
        prompts, source = self._prompts()
        if not prompts:
            prompts, source = bundled_prompts()
        self.make_button.setEnabled(False)
        self.use_found_button.setVisible(False)
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)
        self.cancel_button.setEnabled(True)
        self.status_label.setText(f"Starting ({len(plan.plans)} layer subsets, {len(prompts)} {source} prompts)…")
        self.build = SelfDraftBuild(self.store, plan, prompts, calibration=source, on_event=self._progressed.emit,
                                    on_finished=self._ended.emit)

    @Slot()
    def cancel(self) -> None:
        """Stop the running build; the panel says so when the build process has ended."""
        if self.build is not None:
            self.cancel_button.setEnabled(False)
            self.status_label.setText("Cancelling…")
            self.build.cancel(wait=False)

    def shutdown(self) -> None:
        """The dialog closes: a running build is cancelled and waited for (its process and scratch files gone)."""
        build, self.build = self.build, None
        if build is not None:
            build.cancel(wait=True)

    def _on_progressed(self, event: SelfDraftEvent) -> None:
        if self.build is None:
            return
        if event.total:
            self.progress.setValue(round(100 * event.fraction))
        self.status_label.setText(event.message)

    def _on_ended(self, build: SelfDraftBuild) -> None:
        if build is not self.build:
            return  # shut down meanwhile
        self.build = None
        self.progress.setVisible(False)
        self.cancel_button.setVisible(False)
        self.make_button.setEnabled(bool(self._target))
        if build.result is not None:
            record = build.result.record
            slow = ("" if (record.predicted_speedup or 0.0) >= 1.0 else
                    " It is not predicted to be faster than the model alone on this machine: automatic k will "
                    "mostly leave it unused.")
            self.status_label.setText(f"Made a {record.describe()}.{slow}")
            self.build_finished.emit(build.result)
            if str(build.preview.target) == self._target:
                self.draft_ready.emit(str(record.path))
        else:
            self._show_failure(_words(build.error))

    def _show_failure(self, text: str) -> None:
        self.status_label.setText(text)
        self.build_finished.emit(text)


def _words(exc: BaseException | None) -> str:
    """A failed build or check in words (the typed error's message; never a raw exception class)."""
    if isinstance(exc, SelfDraftError):
        if exc.kind == "cancelled":
            return "Cancelled: no draft was made, nothing was kept."
        return f"No draft made: {exc}."
    if isinstance(exc, OSError):
        return f"No draft made: {exc.strerror or 'the file cannot be read'} ({exc.filename or ''})."
    return f"No draft made: {exc}."
