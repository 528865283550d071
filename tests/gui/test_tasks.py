"""``QtTaskRunner``, the GUI's one background runner: results on the GUI thread, nothing delivered after close(),
usable again after close (a dialog shown again), errors to ``on_error`` or the ``error`` signal."""

from __future__ import annotations

import threading
import time
from typing import Any

from outrider.ui.bridges.tasks import QtTaskRunner


def test_results_errors_close_and_reuse(qtbot: Any) -> None:
    runner = QtTaskRunner("outrider-test-tasks", max_workers=2)
    gui = threading.get_ident()
    got: list[Any] = []
    runner.submit(threading.get_ident, lambda tid: got.append(("thread", tid != gui, threading.get_ident() == gui)))
    runner.submit(lambda: 1 / 0, None, lambda exc: got.append(("error", type(exc).__name__)))
    qtbot.waitUntil(lambda: len(got) == 2)
    assert sorted(got) == [("error", "ZeroDivisionError"), ("thread", True, True)]
    with qtbot.waitSignal(runner.error):
        runner.submit(lambda: int("x"))  # no on_error: the error signal
    assert not runner.busy

    late: list[int] = []
    runner.submit(lambda: (time.sleep(0.2), 1)[1], late.append)
    assert runner.busy
    runner.close()  # waits for the task; its result is not delivered
    qtbot.wait(50)
    assert late == [] and not runner.busy
    assert not [t for t in threading.enumerate() if t.name.startswith("outrider-test-tasks")]

    runner.submit(lambda: 2, late.append)  # used again: threads start again
    qtbot.waitUntil(lambda: late == [2])
    runner.close(cancel_pending=True)
