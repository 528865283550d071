"""``QtEngineBridge`` delivers what its worker thread reported in the order it happened, coalescing steps.

A fake client stands in for the engine process; the GUI thread is kept busy while the worker runs two replies
back to back, so everything arrives in one drain: the first reply's steps (joined into one batch), its end, then
the second reply's steps and end — never a step of the next reply before the end of the last.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from outrider.engine.events import DoneEvent, LoadedPair, ModelFacts, StepBatch, StepEvent
from outrider.engine.stats import GenerationStats
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.worker.errors import EngineCrashed


class _Generation:
    def __init__(self, reply: int, steps: int, crash: bool) -> None:
        self.reply, self.steps, self.crash = reply, steps, crash

    def __enter__(self) -> _Generation:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def cancel(self) -> None: ...

    def __iter__(self) -> Iterator[Any]:
        stats = GenerationStats()
        for i in range(self.steps):
            yield StepBatch((StepEvent([self.reply * 100 + i], [False], [f"{self.reply}.{i} "], 0),), stats)
        if self.crash:
            raise EngineCrashed("SIGSEGV", phase="generating")
        yield DoneEvent("length", stats, "")


class _Client:
    """EngineClient's surface as the bridge uses it; ``generate`` can be held until ``release`` is set."""

    pid = None
    loaded = None

    def __init__(self) -> None:
        self.release = threading.Event()
        self.replies = 0
        self.crash_on: int | None = None

    def load(self, spec: Any, *, on_progress: Any = None, **_: Any) -> LoadedPair:
        on_progress("reading")
        return LoadedPair(ModelFacts(path="t.gguf"), None, "none", 256, "synthetic", False, "none", 0, 0, ())

    def generate(self, request: Any) -> _Generation:
        self.release.wait(10)
        self.replies += 1
        return _Generation(self.replies, 3, crash=self.crash_on == self.replies)

    def cancel(self) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...

    def unload(self) -> None: ...


@pytest.fixture
def bridge_and_client(qtbot: QtBot) -> Iterator[tuple[QtEngineBridge, _Client]]:
    client = _Client()
    bridge = QtEngineBridge(client)  # type: ignore[arg-type]
    yield bridge, client
    client.release.set()
    bridge.shutdown()


def _record(bridge: QtEngineBridge) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []
    bridge.step_received.connect(lambda b: seen.append(("steps", [s.tokens[0] for s in b.steps])))
    bridge.generation_finished.connect(lambda d: seen.append(("finished", d.stop_reason)))
    bridge.crashed.connect(lambda e: seen.append(("crashed", type(e).__name__)))
    bridge.error.connect(lambda e: seen.append(("error", str(e))))
    bridge.busy_changed.connect(lambda b: seen.append(("busy", b)))
    bridge.loaded.connect(lambda info: seen.append(("loaded", info.n_ctx)))
    bridge.load_progress.connect(lambda p: seen.append(("progress", p)))
    bridge.unloaded.connect(lambda: seen.append(("unloaded", None)))
    return seen


def _run_while_the_gui_is_busy(bridge: QtEngineBridge, client: _Client, seconds: float = 0.5) -> None:
    """Let the worker run two replies while the GUI thread handles no event, then let the GUI drain."""
    bridge.generate("first")
    bridge.generate("second")
    client.release.set()
    time.sleep(seconds)  # the GUI thread is busy: the worker's reports pile up in the buffer


def test_two_replies_arrive_in_order_with_their_steps_coalesced(
    qtbot: QtBot, bridge_and_client: tuple[QtEngineBridge, _Client]
) -> None:
    bridge, client = bridge_and_client
    seen = _record(bridge)
    _run_while_the_gui_is_busy(bridge, client)
    qtbot.waitUntil(lambda: len([s for s in seen if s[0] == "finished"]) == 2, timeout=5000)
    qtbot.wait(50)
    assert seen == [
        ("busy", True),
        ("steps", [100, 101, 102]),
        ("finished", "length"),
        ("busy", False),
        ("busy", True),
        ("steps", [200, 201, 202]),
        ("finished", "length"),
        ("busy", False),
    ]
    assert not bridge.busy


def test_a_crash_follows_the_steps_read_before_it(
    qtbot: QtBot, bridge_and_client: tuple[QtEngineBridge, _Client]
) -> None:
    bridge, client = bridge_and_client
    client.crash_on = 1
    seen = _record(bridge)
    _run_while_the_gui_is_busy(bridge, client)
    qtbot.waitUntil(lambda: ("finished", "length") in seen, timeout=5000)
    qtbot.wait(50)
    assert [s for s in seen if s[0] != "busy"] == [
        ("steps", [100, 101, 102]), ("crashed", "EngineCrashed"), ("steps", [200, 201, 202]), ("finished", "length"),
    ]


def test_load_progress_then_loaded_then_unloaded(
    qtbot: QtBot, bridge_and_client: tuple[QtEngineBridge, _Client]
) -> None:
    bridge, _ = bridge_and_client
    seen = _record(bridge)
    with qtbot.waitSignal(bridge.unloaded, timeout=5000):
        bridge.load(object())
        bridge.unload()
    assert seen == [("busy", True), ("progress", "reading"), ("loaded", 256), ("busy", False), ("unloaded", None)]
