"""``QtServerBridge`` starts and stops the local server on its ``QtTaskRunner`` (the house's one task runner), never
on raw threads: a stop waits for the start before it, a failed start is said in words and forgotten, and
``shutdown`` waits for a start still under way. The server itself is a stand-in here (the real one, with the
panel and a reply, is tests/gui/test_serve_dialog.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from outrider.server.runner import BindError
from outrider.ui.bridges.server_bridge import QtServerBridge

START_S = 0.3  # how long the stand-in takes to accept connections


class _FakeServer:
    """What the bridge uses of ``LocalServer``: bound at construction, ``start`` waits, ``stop`` ends it."""

    instances: ClassVar[list[_FakeServer]] = []
    start_error: ClassVar[Exception | None] = None

    def __init__(self, client: Any, config: Any, *, host: str, port: int, on_finished: Any) -> None:
        self.url = f"http://{host}:{port}"
        self.port = port
        self.events: list[tuple[str, str]] = []  # (what, thread name)
        self.stop_timeouts: list[float | None] = []
        _FakeServer.instances.append(self)

    def _note(self, what: str) -> None:
        self.events.append((what, threading.current_thread().name))

    def start(self) -> None:
        self._note("start begins")
        time.sleep(START_S)
        if _FakeServer.start_error is not None:
            raise _FakeServer.start_error
        self._note("start ends")

    def stop(self, timeout: float | None = None) -> None:
        self._note("stop")
        self.stop_timeouts.append(timeout)


class _Client:
    loaded = None


@pytest.fixture
def bridge(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[QtServerBridge]:
    import outrider.server.local

    _FakeServer.instances = []
    _FakeServer.start_error = None
    monkeypatch.setattr(outrider.server.local, "LocalServer", _FakeServer)
    server = QtServerBridge(_Client())  # type: ignore[arg-type]
    yield server
    server.shutdown()


def _signals(bridge: QtServerBridge) -> list[tuple[str, Any]]:
    got: list[tuple[str, Any]] = []
    bridge.started.connect(lambda url: got.append(("started", url)))
    bridge.stopped.connect(lambda: got.append(("stopped", None)))
    bridge.failed.connect(lambda text: got.append(("failed", text)))
    return got


def test_start_and_stop_run_in_order_on_the_task_runner(qtbot: Any, bridge: QtServerBridge) -> None:
    got = _signals(bridge)
    gui = threading.current_thread().name
    bridge.start("127.0.0.1", 8098)
    qtbot.waitUntil(lambda: bool(got), timeout=5_000)
    assert got == [("started", "http://127.0.0.1:8098/v1")] and bridge.running
    bridge.stop()
    qtbot.waitUntil(lambda: len(got) == 2, timeout=5_000)
    assert got[1] == ("stopped", None) and not bridge.running
    (server,) = _FakeServer.instances
    assert [what for what, _ in server.events] == ["start begins", "start ends", "stop"]
    threads = {name for _, name in server.events}
    assert len(threads) == 1 and threads != {gui} and next(iter(threads)).startswith("outrider-server-control")


def test_a_stop_right_after_the_start_waits_for_it_and_it_is_not_announced(
    qtbot: Any, bridge: QtServerBridge
) -> None:
    got = _signals(bridge)
    gui = threading.current_thread().name
    assert bridge.start("127.0.0.1", 8099)  # returns at once: the wait for start-up is on the runner
    assert bridge.running and bridge.url == "http://127.0.0.1:8099/v1"
    bridge.stop()
    assert not bridge.running and bridge.url is None
    qtbot.waitUntil(lambda: ("stopped", None) in got, timeout=5_000)
    (server,) = _FakeServer.instances
    assert [what for what, _ in server.events] == ["start begins", "start ends", "stop"]
    threads = {name for _, name in server.events}
    assert len(threads) == 1 and threads != {gui} and next(iter(threads)).startswith("outrider-server-control")
    qtbot.wait(50)
    assert got == [("stopped", None)]  # never "started" for a server the user had already stopped


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (BindError("port 8099 on 127.0.0.1 is in use"), "port 8099 on 127.0.0.1 is in use"),
        (RuntimeError("uvicorn exploded"), "the server could not start: uvicorn exploded"),
    ],
)
def test_a_start_that_fails_is_said_in_words_and_forgotten(
    qtbot: Any, bridge: QtServerBridge, error: Exception, said: str
) -> None:
    _FakeServer.start_error = error
    got = _signals(bridge)
    assert bridge.start("127.0.0.1", 8099)
    qtbot.waitUntil(lambda: bool(got), timeout=5_000)
    qtbot.wait(50)  # nothing else follows
    assert got == [("failed", said)]
    assert not bridge.running and bridge.url is None and bridge.warning is None
    assert bridge.start("127.0.0.1", 8099)  # and it can be started again
    assert len(_FakeServer.instances) == 2


def test_shutdown_waits_for_a_start_under_way_and_nothing_follows(qtbot: Any, bridge: QtServerBridge) -> None:
    got = _signals(bridge)
    bridge.start("127.0.0.1", 8099)
    qtbot.waitUntil(lambda: bool(_FakeServer.instances and _FakeServer.instances[0].events), timeout=5_000)
    began = time.monotonic()
    bridge.shutdown()
    (server,) = _FakeServer.instances
    assert time.monotonic() - began < START_S + 2.0
    assert "start ends" in [what for what, _ in server.events]  # the start finished before shutdown returned
    assert server.stop_timeouts == [5.0] and not bridge.running
    assert not [t for t in threading.enumerate() if t.name.startswith("outrider-server-control")]
    qtbot.wait(50)
    assert got == []  # neither "started" for the stopped server nor "stopped": the window is going away
