"""The ``outrider`` entry point: every command family registered, and the terminal commands never load Qt
(``outrider.cli`` imports the GUI only to launch it)."""

from __future__ import annotations

import subprocess
import sys


def test_the_commands_never_load_qt() -> None:
    code = (
        "import sys\n"
        "from outrider.cli import build_parser\n"
        "parser = build_parser()\n"
        "parser.parse_args(['generate', '--target', 't.gguf', '--prompt', 'x'])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph')"
        " or m.startswith('outrider.ui'))\n"
        "print(','.join(loaded))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert r.stdout.strip() == ""


def test_every_command_family_is_registered() -> None:
    from outrider.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {"generate", "bench", "models", "chats", "ask", "verify"} <= set(sub.choices)  # type: ignore[arg-type]
