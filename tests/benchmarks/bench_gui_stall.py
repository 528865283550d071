# ruff: noqa: B023, RUF012  (benchmark harness: closures read per-iteration state on purpose)
"""Event-loop stall while a reply streams at full speed into the real main window (goal: p99 < 8 ms).

The engine is replaced by a client that yields synthetic steps as fast as the worker thread can (one token per
step, provenance alternating), so the GUI path is measured alone: bridge coalescing, document appends, the
Markdown timer, the 4 Hz statistics panel and charts, the checkpoint timer and store writes. A 1 ms probe timer
records how late each tick fires. With frequent writes (the default), every 100 ms the settings change (a save: a
file and folder fsync) and the conversation list is read back, as switching chats and toggling the theme do, on top
of the reply's own checkpoints: none of that may touch the disk on the GUI thread.
Usage: python tests/benchmarks/bench_gui_stall.py [--tokens N] [--no-writes]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OUTRIDER_HOME", tempfile.mkdtemp(prefix="outrider-bench-"))

from PySide6.QtCore import QElapsedTimer, QTimer
from PySide6.QtWidgets import QApplication

import outrider.ui  # noqa: F401 (applies the Qt work-arounds)
from outrider.engine.events import DoneEvent, LoadedPair, ModelFacts, StepBatch, StepEvent
from outrider.engine.stats import GenerationStats
from outrider.history import HistoryStore
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.main_window import MainWindow
from outrider.ui.settings import QtSettings

RATE_CHUNK = 4
WORDS = "the quick brown fox jumps over the lazy dog and then `code` **bold** text\n".split(" ")


class _Gen:
    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> _Gen:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __iter__(self) -> Iterator[Any]:
        t0 = time.perf_counter()
        text = ""
        for i in range(self.n):
            piece = WORDS[i % len(WORDS)] + " "
            text += piece
            dt = time.perf_counter() - t0
            st = GenerationStats(generated=i + 1, drafted=i, accepted=i // 2, passes=i // 2 + 1,
                                 pass_tokens=i + 1, decode_s=dt, draft_mode="model", draft_s=dt * 0.2,
                                 verify_s=dt * 0.7)
            yield StepBatch((StepEvent([i], [i % 2 == 0], [piece], 4),), st)
            if i % RATE_CHUNK == 0:
                time.sleep(0.001)  # ~RATE_CHUNK tokens per ms at most: faster than any real decode, GIL shared
        yield DoneEvent("length", st, text)


class FastClient:
    """Stands in for EngineClient: no process, steps at full speed."""

    backend = {"name": "synthetic"}
    pid = None
    log_path = None
    loaded = None

    def __init__(self, n: int) -> None:
        self.n = n

    def load(self, spec: Any, **_: Any) -> LoadedPair:
        return LoadedPair(ModelFacts(path="synthetic.gguf"), None, "model", 4096, "synthetic", False, "model", 0, 0,
                          ())

    def generate(self, request: Any) -> _Gen:
        return _Gen(self.n)

    def cancel(self) -> None: ...
    def stop(self, timeout: float = 10.0) -> None: ...
    def unload(self) -> None: ...


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=20000)
    parser.add_argument("--no-writes", action="store_true", help="no settings saves and list reads meanwhile")
    args = parser.parse_args()
    app = QApplication(sys.argv[:1])
    store = QtStoreBridge(HistoryStore.open())
    bridge = QtEngineBridge(FastClient(args.tokens))  # type: ignore[arg-type]
    win = MainWindow(bridge, store, QtSettings())
    win.resize(1280, 800)
    win.show()
    from pathlib import Path

    from outrider.ui.picker.choice import PairChoice

    results: dict[str, Any] = {}
    for provenance in (True, False):
        win.chat.set_provenance(provenance)
        win.controller.open_conversation(None)
        gaps: list[float] = []
        clock = QElapsedTimer()
        probe = QTimer()
        probe.setInterval(1)
        last = [0]

        def tick() -> None:
            now = clock.elapsed()
            gaps.append(now - last[0])
            last[0] = now

        probe.timeout.connect(tick)
        writes = QTimer()
        writes.setInterval(100)
        count = [0]

        def write_and_read() -> None:
            count[0] += 1
            win.settings.set(system_prompt=f"prompt {count[0]}")
            store.conversations()

        writes.timeout.connect(write_and_read)
        loop_done = {"v": False}
        win.controller.reply_ended.connect(lambda *a: loop_done.__setitem__("v", True))
        if not win.controller.ready:
            win.load_pair(PairChoice(Path("synthetic.gguf"), None, False, "", "synthetic"))
            while not win.controller.ready:
                app.processEvents()  # benchmark harness only
        t0 = time.perf_counter()
        clock.start()
        probe.start()
        if not args.no_writes:
            writes.start()
        win.controller.send("stream as fast as you can")
        while not loop_done["v"]:
            app.processEvents()
        probe.stop()
        writes.stop()
        elapsed = time.perf_counter() - t0
        gaps.sort()
        p = lambda q: gaps[min(len(gaps) - 1, int(q * len(gaps)))]  # noqa: E731
        results["provenance" if provenance else "markdown"] = (len(gaps), p(0.5), p(0.99), gaps[-1],
                                                              args.tokens / elapsed)
    print(f"{'view':<11} {'ticks':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'tok/s':>9}")
    for name, (n, p50, p99, mx, tps) in results.items():
        print(f"{name:<11} {n:>6} {p50:>7.1f} {p99:>7.1f} {mx:>7.1f} {tps:>9.0f}")
    ok = all(r[2] < 8 for r in results.values())
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs;",
          "writes every 100 ms" if not args.no_writes else "no writes")
    print("goal p99 < 8 ms:", "met" if ok else "NOT met")
    win.close()
    win.settings.flush()
    bridge.shutdown()
    store.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
