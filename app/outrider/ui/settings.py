"""The settings for the GUI: ``QtSettings`` wraps the plain settings of ``outrider.settings`` (``AppSettings``,
``load_settings``, ``save_settings``) with change signals: ``set(**changes)`` writes the file and emits
``changed`` only for keys whose value really changed (STYLE.md §10). ``drafting_text`` and ``reload_needed`` say
what a change of the drafting settings means for the status bar and the loaded pair.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from outrider.engine.events import LoadedPair
from outrider.settings import AppSettings, load_settings, save_settings, settings_path
from outrider.ui.picker.choice import PairChoice

# Settings whose change reloads the pair (they are fixed when the models are loaded).
RELOAD_KEYS = ("target_gpu_layers", "draft_gpu_layers", "context_size", "threads", "rpc_servers", "target_split",
               "lookup_history")
# Settings of drafting: a change applies from the next reply (the status bar and a notice say so).
DRAFT_KEYS = ("draft_source", "k_policy", "k", "k_max", "draft_min", "p_min")


def drafting_text(value: AppSettings, loaded: LoadedPair | None) -> str:
    """How the next reply drafts, in words for the status bar: ``draft off (plain decoding)``, ``draft prompt
    lookup (k auto ≤ 16)``, ``draft d.gguf (k 4)``. The settings win over what is loaded: with no draft source the
    loaded drafter stays loaded but drafts nothing (k = 0)."""
    if value.draft_source == "none" or (loaded is not None and loaded.draft_mode == "none"):
        return "draft off (plain decoding)"
    if loaded is None:
        name = "prompt lookup" if value.draft_source == "lookup" else "model"
    elif loaded.draft_mode == "lookup":
        name = "prompt lookup"
    else:
        name = Path(loaded.draft.path).name if loaded.draft is not None else "model"
    if loaded is not None and loaded.draft_mode.startswith("history+"):  # a chain (engine/chain_draft.py)
        name = "history + prompt lookup" + (f" + {name}" if loaded.draft is not None else "")
    k = f"k auto ≤ {value.k_max}" if value.k_policy == "auto" else f"k {value.k}"
    return f"draft {name} ({k})"


def reload_needed(value: AppSettings, names: list[str], choice: PairChoice | None,
                  loaded: LoadedPair | None) -> bool:
    """Whether the settings ``names`` just changed need the pair loaded again: a ``RELOAD_KEYS`` setting, or a
    draft source whose drafter differs from the loaded one (prompt lookup vs the draft model is chosen at load
    time; no draft source keeps the loaded drafter, drafting nothing)."""
    if choice is None:
        return False
    if any(n in RELOAD_KEYS for n in names):
        return True
    if "draft_source" not in names or value.draft_source == "none":
        return False
    if loaded is None:
        return True  # loading (or crashed): load again with the new source
    # Only the drafter's kind is compared: any history path gives the kind a history database would.
    spec = value.pair_spec(str(choice.target), str(choice.draft) if choice.draft else None, choice.lookup,
                           history="history")
    return spec.draft_mode != loaded.draft_mode


class QtSettings(QObject):
    """The settings the GUI reads and writes.

    Signals:
        changed(list[str]): the names of the settings whose values changed (never emitted for a no-op set).
        save_failed(str): the file could not be written (the in-memory value still changed).

    Attributes:
        path: the JSON file.
        notice: set when the file was damaged (kept aside, defaults in use): the GUI shows ``notice.message``.
    """

    changed = Signal(list)
    save_failed = Signal(str)

    def __init__(self, path: Path | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.path = path if path is not None else settings_path()
        self._value, self.notice = load_settings(self.path)
        # A damaged file that could not be moved aside stays as it is: changes are kept in memory only.
        self._keep_file = self.notice is not None and self.notice.kept_at is None

    @property
    def value(self) -> AppSettings:
        return self._value

    def set(self, **changes: Any) -> list[str]:
        """Change some settings; returns (and emits) the names that really changed."""
        new = dataclasses.replace(self._value, **changes).validated()
        names = [f.name for f in dataclasses.fields(AppSettings) if getattr(new, f.name) != getattr(self._value,
                                                                                                     f.name)]
        if not names:
            return []
        self._value = new
        if self._keep_file:
            self.save_failed.emit(f"settings were not saved: {self.path} could not be read and is left untouched")
            self.changed.emit(names)
            return names
        try:
            save_settings(self.path, new)
        except (OSError, ValueError) as exc:
            self.save_failed.emit(f"settings could not be saved to {self.path}: {exc}")
        self.changed.emit(names)
        return names

    def replace(self, value: AppSettings) -> list[str]:
        return self.set(**value.to_json())
