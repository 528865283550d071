"""The settings for the GUI: ``QtSettings`` wraps the plain settings of ``outrider.settings`` (``AppSettings``,
``load_settings``, ``save_settings``) with change signals: ``set(**changes)`` writes the file and emits
``changed`` only for keys whose value really changed (STYLE.md §10).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from outrider.settings import AppSettings, load_settings, save_settings, settings_path


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
