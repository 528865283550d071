"""The row under the composer: the provenance switch with its legend, and Continue, Regenerate, Stop, Send.

A passive widget: ``ChatView`` connects the buttons and decides what is enabled (``set_state``); this module only
builds the row and draws it in the theme's colours.
"""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QPushButton, QWidget

from outrider.ui.theme import ThemeColours
from outrider.ui.widgets.flow_layout import FlowLayout, wrapping_policy
from outrider.ui.widgets.live_stats import TOOLTIPS

LEGEND_DRAFTERS = {"history": "history lookup", "lookup": "prompt lookup", "mtp": "MTP"}


class ReplyControls(QWidget):
    """Provenance switch and legend on the left; Continue, Regenerate, Stop and Send on the right."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.send_button = self._button("Send", "sendButton", "Send the message (Enter)")
        self.stop_button = self._button("Stop", "stopButton", "Stop the reply (Esc); the text so far is kept")
        self.regenerate_button = self._button("Regenerate", "regenerateButton", "Produce the last reply again")
        self.continue_button = self._button(
            "Continue", "continueButton",
            "The last reply stopped before its end (the token limit, Stop, a crash): write on from where it stopped")
        self.provenance_box = QCheckBox("Show provenance", self)
        self.provenance_box.setToolTip(TOOLTIPS["provenance"])
        self.provenance_box.setChecked(True)
        self.legend_draft = QLabel("accepted draft token", self)
        self.legend_target = QLabel("target token", self)
        # One label per drafter of a chain (engine/chain_draft.py), shown while that drafter is loaded.
        self.legend_drafters = {kind: QLabel(text, self) for kind, text in LEGEND_DRAFTERS.items()}
        self.drafters: tuple[str, ...] = ()
        for label in (self.legend_draft, self.legend_target, *self.legend_drafters.values()):
            label.setToolTip(TOOLTIPS["provenance"])

        # One line when there is room; in a narrow window the legend wraps and the buttons go to a line of their
        # own, at the right (a single row made the window at least ~1,100 px wide).
        row = FlowLayout(self, right_align_last=True)
        row.addWidget(self.provenance_box)
        row.addWidget(self.legend_draft)
        for label in self.legend_drafters.values():
            row.addWidget(label)
        row.addWidget(self.legend_target)
        buttons = QWidget(self)
        button_row = QHBoxLayout(buttons)
        button_row.setContentsMargins(0, 0, 0, 0)
        for button in (self.continue_button, self.regenerate_button, self.stop_button, self.send_button):
            button_row.addWidget(button)
        row.addWidget(buttons)
        self.setSizePolicy(wrapping_policy())

    def _button(self, text: str, name: str, tip: str) -> QPushButton:
        button = QPushButton(text, self)
        button.setObjectName(name)
        button.setToolTip(tip)
        return button

    def set_state(self, *, busy: bool, can_regenerate: bool, can_continue: bool) -> None:
        """Engine busy with a reply: Stop on, Send and Regenerate off; Continue shown only when it applies."""
        self.stop_button.setEnabled(busy)
        self.send_button.setEnabled(not busy)
        self.regenerate_button.setEnabled(not busy and can_regenerate)
        self.continue_button.setVisible(not busy and can_continue)

    def set_colours(self, c: ThemeColours, *, provenance: bool) -> None:
        """A disabled button looks disabled (muted text, no fill, dashed border); Stop, when it can stop, stands
        out in the warning colour. The legend shows the provenance colours, only while provenance is shown."""
        self.setStyleSheet(
            f"QPushButton#sendButton:disabled, QPushButton#stopButton:disabled, "
            f"QPushButton#regenerateButton:disabled {{ color: {c.muted}; background: transparent; "
            f"border: 1px dashed {c.muted}; border-radius: 3px; padding: 3px 10px; font-weight: normal; }}"
            f"QPushButton#stopButton:enabled {{ color: {c.background}; background: {c.warning}; "
            f"border: 1px solid {c.warning}; border-radius: 3px; padding: 3px 10px; font-weight: bold; }}")
        self.legend_draft.setStyleSheet(f"background:{c.draft_bg}; color:{c.text}; padding:1px 4px;")
        self.legend_target.setStyleSheet(f"background:{c.target_bg}; color:{c.text}; padding:1px 4px;")
        # Each loaded drafter's label in its colour; the draft model's (or an unnamed drafter's) is the green one.
        named = [k for k in self.drafters if k in self.legend_drafters]
        self.legend_draft.setText("draft model" if named else "accepted draft token")
        self.legend_draft.setVisible(provenance and ("model" in self.drafters or not named))
        self.legend_target.setVisible(provenance)
        for kind, label in self.legend_drafters.items():
            label.setStyleSheet(f"background:{c.provenance_bg(kind)}; color:{c.text}; padding:1px 4px;")
            label.setVisible(provenance and kind in named)

    def set_drafters(self, kinds: tuple[str, ...]) -> None:
        """The loaded drafters' kinds (``LoadedPair.draft_mode`` split at ``+``); call ``set_colours`` after."""
        self.drafters = kinds
