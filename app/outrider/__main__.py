"""``python -m outrider``: the same as the ``outrider`` command (the app, or a subcommand)."""

from __future__ import annotations

from outrider.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
