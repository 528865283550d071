"""A pair chosen in the picker: recommended settings applied (unless overridden), the pair remembered for the
next start, and an automatic load refuses a model that crashed the engine before, saying why."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from outrider.catalogue.schema import DraftSettings
from outrider.engine.events import ErrorKind, LoadedPair, ModelFacts
from outrider.history import HistoryStore
from outrider.ui.app import _startup_choice
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.main_window import MainWindow
from outrider.ui.picker.choice import PairChoice
from outrider.ui.settings import QtSettings
from outrider.worker.errors import EngineRequestError


class _RecordingClient:
    """Records load requests; refuses ``unsafe`` paths when asked to (as ``EngineClient`` does)."""

    pid = None
    log_path = None
    loaded = None

    def __init__(self, unsafe: set[str] | None = None) -> None:
        self.backend: dict[str, Any] = {"name": "CPU"}
        self.loads: list[tuple[Any, bool]] = []
        self.unsafe = unsafe or set()
        self.lock = threading.Lock()

    def load(self, spec: Any, *, refuse_unsafe: bool = False, **_: Any) -> LoadedPair:
        with self.lock:
            self.loads.append((spec, refuse_unsafe))
        if refuse_unsafe and spec.target in self.unsafe:
            raise EngineRequestError(ErrorKind.UNSAFE_MODEL, f"{Path(spec.target).name} is not loaded "
                                     "automatically: its load crashed the engine (SIGSEGV)")
        return LoadedPair(ModelFacts(path=spec.target), None, "lookup", spec.context.n_ctx, "CPU", False, "", 0, 0,
                          ())

    def cancel(self) -> None: ...
    def stop(self, timeout: float = 10.0) -> None: ...


@pytest.fixture
def parts(qtbot: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"GGUF")
    draft.write_bytes(b"GGUF")
    store = QtStoreBridge(HistoryStore.open())
    client = _RecordingClient({str(target)})
    bridge = QtEngineBridge(client)  # type: ignore[arg-type]
    settings = QtSettings()
    win = MainWindow(bridge, store, settings)
    qtbot.addWidget(win)
    win.show()
    yield {"win": win, "client": client, "settings": settings, "target": target, "draft": draft}
    win.close()
    bridge.shutdown()
    store.close()


def _loaded(info: Any) -> bool:
    return info is not None


def _picked(target: Path, draft: Path, k: int | str = 6, n_ctx: int = 8192) -> PairChoice:
    return PairChoice(target, draft, False, "t+d", "Target + draft", DraftSettings(k, 2, 0.6), n_ctx)


def test_chosen_pair_loads_with_recommended_settings_and_is_remembered(qtbot: Any, parts: dict[str, Any]) -> None:
    win, client, settings = parts["win"], parts["client"], parts["settings"]
    with qtbot.waitSignal(win.controller.engine_changed, check_params_cb=_loaded):
        win.choose_pair(_picked(parts["target"], parts["draft"]))
    assert len(client.loads) == 1  # one load, with the new settings (no reload of a previous pair)
    spec, refuse = client.loads[0]
    assert spec.target == str(parts["target"]) and spec.draft == str(parts["draft"]) and not refuse
    assert spec.context.n_ctx == 8192
    # History lookup is on by default and drafts from the app's own history (engine/history_draft.py).
    assert spec.lookup_history == str(win.controller.store.store.db_path)
    # Automatic draft length starts from what it learned at the pair's last load (engine/learned_draft.py).
    assert spec.learned_draft == str(Path(os.environ["OUTRIDER_HOME"]) / "draft-length.json")
    v = settings.value
    assert (v.draft_source, v.k_policy, v.k, v.draft_min, v.p_min, v.context_size) == ("model", "fixed", 6, 2, 0.6,
                                                                                         8192)
    assert v.draft_params().k == 6
    settings.flush()  # as the app does before it exits
    again = QtSettings(settings.path).value  # next start
    choice = _startup_choice(again)
    assert choice.target == parts["target"] and choice.draft == parts["draft"] and choice.pair_id == "t+d"


def test_user_overrides_are_kept(qtbot: Any, parts: dict[str, Any]) -> None:
    win, settings = parts["win"], parts["settings"]
    win.apply_user_settings(__import__("dataclasses").replace(settings.value, p_min=0.9, context_size=2048))
    assert settings.value.overridden() == {"context_size", "p_min"}
    with qtbot.waitSignal(win.controller.engine_changed, check_params_cb=_loaded):
        win.choose_pair(_picked(parts["target"], parts["draft"], k="auto"))
    v = settings.value
    assert (v.k_policy, v.draft_min, v.p_min, v.context_size) == ("auto", 2, 0.9, 2048)
    assert parts["client"].loads[-1][0].context.n_ctx == 2048


def test_automatic_load_refuses_an_unsafe_model_and_says_why(qtbot: Any, parts: dict[str, Any]) -> None:
    win, client = parts["win"], parts["client"]
    choice = PairChoice(parts["target"], parts["draft"], False, "t+d", "Target + draft")
    with qtbot.waitSignal(win.controller.load_failed) as blocker:
        win.load_pair(choice, automatic=True)
    assert client.loads[-1][1] is True
    assert "not loaded automatically" in blocker.args[0] and "SIGSEGV" in blocker.args[0]
    assert win.crash_banner.isVisibleTo(win) and "choose the pair again" in win.crash_label.text()
    # choosing it by hand loads it anyway
    with qtbot.waitSignal(win.controller.engine_changed, check_params_cb=_loaded):
        win.choose_pair(_picked(parts["target"], parts["draft"]))
    assert client.loads[-1][1] is False and win.controller.ready
