"""Start-up: the window is painted first and the rest loads after it (the pair, the catalogue, the charts, the last
conversation); nothing heavy is imported before the first paint; the app's command line builds no command parser.
Timings themselves are measured by tests/benchmarks/bench_startup.py, not asserted here (a shared CI box varies)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from outrider.ui.app import HEAVY_MODULES


def _probe(home: Path) -> dict[str, Any]:
    env = {**os.environ, "OUTRIDER_HOME": str(home)}
    env.setdefault("QT_QPA_PLATFORM", "offscreen")  # under `make test-xcb`: the xcb platform on Xvfb
    proc = subprocess.run([sys.executable, "-m", "outrider.cli", "--startup-probe"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.strip()]
    report: dict[str, Any] = json.loads(line)
    return report


@pytest.mark.smollm
def test_the_window_is_painted_before_anything_heavy_loads_and_the_pair_after_it(tmp_path: Path) -> None:
    report = _probe(tmp_path)
    marks, cpu = report["startup_probe"], report["cpu"]
    assert marks["main"] < marks["imported"] < marks["window"] < marks["ready"]
    assert cpu["window"] <= cpu["ready"]
    # the charts, Markdown highlighting, the GGUF reader, the Hub client and the server are not on the path
    assert report["heavy_at_window"] == []
    assert set(HEAVY_MODULES) >= {"pyqtgraph", "numpy", "pygments", "gguf", "huggingface_hub", "fastapi"}


def test_launching_the_app_loads_no_command_module() -> None:
    code = (
        "import sys\n"
        "import outrider.ui.app as app\n"
        "app.main = lambda **flags: print(sorted(m for m in sys.modules if m.startswith('outrider.commands.')"
        " and m != 'outrider.commands.base'), flags) or 0\n"
        "from outrider.cli import main\n"
        "main(['--startup-probe'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[] {'smoke_test': False, 'startup_probe': True}"


def test_the_startup_probe_is_hidden_from_help_and_the_commands_still_parse() -> None:
    from outrider.cli import build_parser

    parser = build_parser()
    assert "--startup-probe" not in parser.format_help() and "--smoke-test" in parser.format_help()
    assert parser.parse_args(["chats", "list"]).command == "chats"


def test_first_paint_watcher_emits_once_after_the_window_is_painted(qtbot: Any) -> None:
    from PySide6.QtWidgets import QLabel

    from outrider.ui.first_paint import FirstPaintWatcher

    label = QLabel("painted?")
    qtbot.addWidget(label)
    watcher = FirstPaintWatcher(label)
    seen: list[bool] = []
    watcher.painted.connect(lambda: seen.append(label.isVisible()))
    with qtbot.waitSignal(watcher.painted, timeout=1000):  # well before the 2 s fallback: a real paint
        label.show()
    label.update()
    qtbot.wait(50)
    assert seen == [True]


def test_a_cancelled_watcher_never_emits(qtbot: Any) -> None:
    from PySide6.QtWidgets import QLabel

    from outrider.ui.first_paint import FirstPaintWatcher

    label = QLabel("quitting")
    qtbot.addWidget(label)
    watcher = FirstPaintWatcher(label)
    seen: list[int] = []
    watcher.painted.connect(lambda: seen.append(1))
    label.show()
    watcher.cancel()  # the app quit before its first paint: nothing may start loading
    qtbot.wait(100)
    assert seen == []


def test_the_picker_waits_for_the_catalogue_read_after_the_paint(qtbot: Any, app_parts: dict[str, Any]) -> None:
    from outrider.ui.main_window import ACTION_CHOOSE_PAIR, MainWindow

    win = MainWindow(app_parts["bridge"], app_parts["store"], app_parts["settings"])
    qtbot.addWidget(win)
    action = win.actions_by_id[ACTION_CHOOSE_PAIR]
    assert not action.isEnabled()
    win.set_catalogue_service(object())
    assert action.isEnabled()
    win.set_catalogue_service(None)  # the catalogue could not be read
    assert not action.isEnabled()
    assert win.stats._plots is None  # the charts are not made with the window (app.py makes them after the paint)
    win.close()


def test_a_window_never_shown_or_closed_first_never_starts_loading(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QLabel

    from outrider.ui import first_paint

    monkeypatch.setattr(first_paint, "FALLBACK_MS", 50)
    hidden, closed = QLabel("never shown"), QLabel("closed at once")
    seen: list[str] = []
    for label in (hidden, closed):
        qtbot.addWidget(label)
        watcher = first_paint.FirstPaintWatcher(label)
        watcher.painted.connect(lambda text=label.text(): seen.append(text))
    closed.show()
    closed.close()  # before the event loop could paint it
    qtbot.wait(200)  # four times the fallback
    assert seen == []
