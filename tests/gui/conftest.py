"""GUI test fixtures: offscreen Qt, Qt warnings fail the test, a private OUTRIDER_HOME, no dangling threads,
and a real main window on the real engine process with the SmolLM2 demo pair."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Qt warnings fail every test of this directory (pytest-qt's qt_log_level_fail); the picker has its own."""
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if HERE in path.parents and "picker" not in path.parts:
            item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
            item.add_marker(pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints"))


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("OUTRIDER_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def _collect_on_the_gui_thread() -> Iterator[None]:
    """Collect each test's garbage on the GUI thread when it ends. Qt objects kept alive only by reference cycles
    (a window and the lambdas connected to its children) are otherwise freed by whichever thread next triggers a
    collection, e.g. a test's HTTP client thread, and Qt warns "Timers cannot be started from another thread"
    in a later, unrelated test."""
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def _no_dangling_threads() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    left = [t for t in threading.enumerate() if t.ident not in before and t.is_alive() and not t.daemon]
    for t in left:
        t.join(5.0)
    assert not [t.name for t in left if t.is_alive()], "threads left running"


@pytest.fixture
def app_parts(qtbot: object) -> Iterator[dict[str, object]]:
    """Bridge, store and settings of a fresh data directory (closed after the test)."""
    from outrider.history import HistoryStore
    from outrider.ui.bridges.engine_bridge import QtEngineBridge
    from outrider.ui.bridges.store_bridge import QtStoreBridge
    from outrider.ui.settings import QtSettings

    store = QtStoreBridge(HistoryStore.open())
    bridge = QtEngineBridge()
    parts: dict[str, object] = {"store": store, "bridge": bridge, "settings": QtSettings()}
    yield parts
    bridge.shutdown()
    store.close()


@pytest.fixture
def window(qtbot, app_parts: dict[str, object], smollm_path: Path):  # type: ignore[no-untyped-def]
    """The main window with the demo pair loaded."""
    from outrider.ui.main_window import MainWindow
    from outrider.ui.picker.choice import PairChoice

    win = MainWindow(app_parts["bridge"], app_parts["store"], app_parts["settings"])  # type: ignore[arg-type]
    qtbot.addWidget(win)
    win.show()
    # On a real display (xcb) window shortcuts (Esc, Ctrl+N) reach only the active window; offscreen activates itself.
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=60_000)  # generous: a loaded CI machine can take seconds
    loaded = win.controller.engine_changed
    with qtbot.waitSignal(loaded, timeout=120_000, check_params_cb=lambda info: info is not None):
        win.load_pair(PairChoice(smollm_path, None, True, "smollm2-135m-lookup", "demo", demo=True))
    yield win
    win.close()
