"""Where Outrider keeps its data. ``OUTRIDER_HOME`` relocates everything (tests, portable installs)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "Outrider"


def data_dir(environ: dict[str, str] | None = None) -> Path:
    """The root of all Outrider data: ``$OUTRIDER_HOME`` or the platform's user data directory."""
    env = os.environ if environ is None else environ
    home = env.get("OUTRIDER_HOME")
    path = Path(home) if home else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir(environ: dict[str, str] | None = None) -> Path:
    path = data_dir(environ) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def log_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("OUTRIDER_HOME"):
        path = Path(env["OUTRIDER_HOME"]) / "logs"
    else:
        path = Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path
