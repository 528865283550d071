"""Where Outrider keeps its data. ``OUTRIDER_HOME`` relocates everything (tests, portable installs).

The data, models and logs folders are private: created ``0700`` whatever the umask, and an existing folder
that others can read is narrowed to ``0700`` when it is looked up (POSIX only). Files inside (the history
database and its WAL, settings) are ``0600``: see ``private_file``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import platformdirs

from outrider.exit_status import EXIT_BAD_INPUT, CliError

APP_NAME = "Outrider"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_POSIX = os.name == "posix"


class DataDirError(CliError):
    """A data folder cannot be created or is not a folder (e.g. ``OUTRIDER_HOME`` names a file).

    A ``CliError`` (exit status 2, one line) so that every command reports it the same way.

    Attributes:
        path: the folder that could not be used.
        reason: why, in words.
    """

    def __init__(self, path: Path, reason: str, what: str = "data directory") -> None:
        super().__init__(f"cannot use the {what} {path}: {reason}", EXIT_BAD_INPUT)
        self.path = path
        self.reason = reason


def _narrow(path: Path, mode: int) -> None:
    """Take away group/other permission bits (owner bits are kept: a read-only file stays read-only)."""
    if not _POSIX:
        return
    with contextlib.suppress(OSError):  # not ours (another owner) or gone: nothing we may do
        current = stat.S_IMODE(path.stat().st_mode)
        wanted = current & mode
        if current != wanted:
            os.chmod(path, wanted)


def private_dir(path: Path, *, what: str = "data directory") -> Path:
    """Create ``path`` (and missing parents) as a ``0700`` folder, or narrow an existing one to ``0700``.

    Raises:
        DataDirError: it exists and is not a folder, or it cannot be created.
    """
    path = Path(path)
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except OSError as exc:  # a folder above it cannot be searched
        raise DataDirError(path, exc.strerror or str(exc), what) from None
    if exists and not is_dir:
        raise DataDirError(path, "it is a file, not a folder", what)
    if not is_dir:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if not path.is_dir():
                where = "it is" if path.exists() else "a folder above it is"
                raise DataDirError(path, f"{where} a file, not a folder", what) from None
        except OSError as exc:
            raise DataDirError(path, exc.strerror or str(exc), what) from None
        else:
            if _POSIX:
                with contextlib.suppress(OSError):
                    os.chmod(path, PRIVATE_DIR_MODE)  # mkdir's mode is reduced by the umask, never widened
    _narrow(path, PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> None:
    """Narrow an existing file to owner-only permissions (``0644`` → ``0600``); missing files are ignored."""
    _narrow(Path(path), PRIVATE_FILE_MODE)


def create_private_file(path: Path) -> bool:
    """Create an empty ``0600`` file if ``path`` does not exist (umask-independent). Returns whether it did."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    try:
        if _POSIX:
            os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    return True


def data_dir(environ: dict[str, str] | None = None) -> Path:
    """The root of all Outrider data: ``$OUTRIDER_HOME`` or the platform's user data directory (``0700``)."""
    env = os.environ if environ is None else environ
    home = env.get("OUTRIDER_HOME")
    path = Path(home) if home else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    return private_dir(path)


def learned_draft_file(environ: dict[str, str] | None = None) -> Path:
    """Where automatic draft length keeps what it learned about each pair across loads (engine/learned_draft.py)."""
    return data_dir(environ) / "draft-length.json"


def models_dir(environ: dict[str, str] | None = None) -> Path:
    return private_dir(data_dir(environ) / "models", what="models directory")


def log_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("OUTRIDER_HOME"):
        path = data_dir(environ) / "logs"
    else:
        path = Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))
    return private_dir(path, what="log directory")
