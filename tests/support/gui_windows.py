"""Real main windows for GUI tests: one without an engine (lists, menus, export), one on a scripted engine client
with a pair loaded (what a reply does on screen)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from outrider.history import HistoryStore
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.main_window import MainWindow
from outrider.ui.picker.choice import PairChoice
from outrider.ui.settings import QtSettings


class NoEngine:
    """An engine client that is never asked to do anything."""

    def __init__(self) -> None:
        self.backend: dict[str, Any] = {}

    pid = None
    log_path = None
    loaded = None

    def cancel(self) -> None: ...
    def stop(self, timeout: float = 10.0) -> None: ...


@contextmanager
def offline_main_window(qtbot: Any) -> Iterator[tuple[MainWindow, QtStoreBridge, QtEngineBridge]]:
    """A ``MainWindow`` on a fresh history (``OUTRIDER_HOME``) and no engine; closed, with its store, on exit
    (closing twice is harmless, so a test may close it early to let the command line open the history)."""
    store = QtStoreBridge(HistoryStore.open())
    bridge = QtEngineBridge(NoEngine())  # type: ignore[arg-type]
    window = MainWindow(bridge, store, QtSettings())
    qtbot.addWidget(window)
    try:
        yield window, store, bridge
    finally:
        window.close()
        bridge.shutdown()
        store.close()


def open_loaded_window(qtbot: Any, store: QtStoreBridge, client: Any, folder: Path) -> MainWindow:
    """A shown ``MainWindow`` on ``store`` whose engine is the scripted ``client``, once the pair ``folder``/target.gguf
    + draft.gguf has loaded (the client's ``load`` answers; nothing is read from disk). The caller closes it and
    shuts its bridge down."""
    bridge = QtEngineBridge(client)
    window = MainWindow(bridge, store, QtSettings())
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.controller.engine_changed, check_params_cb=lambda info: info is not None):
        window.load_pair(PairChoice(folder / "target.gguf", folder / "draft.gguf", False, "t+d", "T + D"))
    return window
