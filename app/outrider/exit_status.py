"""The ``outrider`` command's exit statuses and ``CliError``, the failure reported as one line on stderr.

A leaf module (it imports nothing of Outrider) so that any layer may raise a ``CliError`` — ``outrider.paths``
does for an unusable data folder — without importing the CLI. ``outrider.commands.base`` re-exports it.
"""

from __future__ import annotations

EXIT_RUNTIME = 1
EXIT_BAD_INPUT = 2
EXIT_ENGINE_CRASHED = 3


class CliError(Exception):
    """A failure to report as one line on stderr with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code
