"""The settings for the GUI: ``QtSettings`` wraps the plain settings of ``outrider.settings`` (``AppSettings``,
``load_settings``, ``save_settings``) with change signals: ``set(**changes)`` writes the file and emits
``changed`` only for keys whose value really changed (a no-op set must not reload a pair or redraw).
``drafting_text`` and ``reload_needed`` say what a change of the drafting settings means for the status bar
and the loaded pair.
"""

from __future__ import annotations

import dataclasses
import threading
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
    elif loaded.draft_mode == "mtp":
        name = f"MTP head {Path(loaded.draft.path).name}" if loaded.draft is not None else "MTP heads"
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
                           choice.mtp, history="history")
    return spec.draft_mode != loaded.draft_mode


class QtSettings(QObject):
    """The settings the GUI reads and writes.

    ``value`` changes at once; the file is written on a background thread (a save fsyncs the file and its folder:
    13 ms typical, 63 ms seen, on every conversation switch and theme toggle — never on the GUI thread). Saves are
    written in order and coalesced (a burst of changes is one write of the latest value); ``flush`` waits for them
    (the app calls it before it exits; so does a test that reads the file).

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
        # The writer: one short-lived thread per burst of changes, gone as soon as the file holds the latest value
        # (an executor's idle worker would outlive every window and keep the app from exiting cleanly).
        self._write_lock = threading.Lock()
        self._writer: threading.Thread | None = None
        self._dirty = False  # guarded by _write_lock: a change the writer has not written yet

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
        self._save_later()
        self.changed.emit(names)
        return names

    def _save_later(self) -> None:
        with self._write_lock:
            self._dirty = True
            if self._writer is not None:
                return  # the running writer sees the flag and writes the latest value once more
            self._writer = threading.Thread(target=self._write_until_clean, name="outrider-settings")
            self._writer.start()

    def _write_until_clean(self) -> None:
        """On the writer thread: write the latest value until no change came in meanwhile, then end."""
        while True:
            with self._write_lock:
                if not self._dirty:
                    self._writer = None
                    return
                self._dirty = False
                value = self._value
            try:
                save_settings(self.path, value)
            except (OSError, ValueError) as exc:  # delivered on the GUI thread (a queued signal)
                self.save_failed.emit(f"settings could not be saved to {self.path}: {exc}")

    def flush(self) -> None:
        """Wait until every change so far is in the file (a failure was reported through ``save_failed``)."""
        while True:
            with self._write_lock:
                writer = self._writer
            if writer is None:
                return
            writer.join()

    def replace(self, value: AppSettings) -> list[str]:
        return self.set(**value.to_json())
