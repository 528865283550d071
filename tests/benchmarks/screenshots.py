"""Screenshots of the main window mid-reply, light and dark, for the README (docs/screenshots/main-*.png).

No model is needed: a scripted client stands in for ``EngineClient`` behind the real ``QtEngineBridge`` (the
same path as ``bench_gui_stall.py``) and streams speculative steps with plausible statistics — a few accepted
draft tokens then the target's own token per step — so the conversation list, the provenance colouring, the
statistics panel and both charts show what a real session shows. Two replies finish, the third is held
mid-stream while the window is grabbed (offscreen ``QWidget.grab()``).

Usage: python tests/benchmarks/screenshots.py [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication

import outrider.ui  # noqa: F401 (applies the Qt work-arounds)
from outrider.engine.events import DoneEvent, LoadedPair, ModelFacts, StepBatch, StepEvent
from outrider.engine.stats import GenerationStats
from outrider.history import HistoryStore, Role
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.main_window import MainWindow
from outrider.ui.picker.choice import PairChoice
from outrider.ui.settings import QtSettings
from support.stats import measured_stats

PLAIN_TPS = 19.6  # plain decoding of the pictured pair (the engine measures it on interleaved plain steps)
SPEC_TPS = 43.0  # what the speculative replies reach
K = 4
PROMPTS = [
    "What is speculative decoding, in two sentences?",
    "Does it change the output?",
    "Show me a tiny Python example of the accept/reject loop.",
]
REPLIES = [
    "A small **draft** model guesses the next few tokens and the large **target** model checks all of them in "
    "one pass. Every guess the target agrees with is a token you get almost for free.",
    "No. With greedy decoding the text is exactly what the target alone would write; with sampling, the "
    "accept/reject rule keeps the target's distribution unchanged.",
    "Here is the core of it:\n\n```python\ndef step(target, draft, ctx, k=4):\n    guess = draft.propose(ctx, k)\n"
    "    logits = target.verify(ctx, guess)  # one pass over k + 1 positions\n    out = []\n"
    "    for tok, row in zip(guess, logits):\n        best = row.argmax()\n        if best != tok:\n"
    "            out.append(best)  # the target's own token\n            return out\n        out.append(tok)\n"
    "    out.append(logits[-1].argmax())  # bonus token\n    return out\n```\n\nEach call costs one read of "
    "the target's weights but can emit up to k + 1 tokens, which is where the speed-up comes from.",
]
HOLD_AT = 0.62  # the third reply is pictured at this share of its text


def tokens_of(text: str) -> list[str]:
    """Word-ish pieces, like a BPE vocabulary would cut them (long words in two)."""
    pieces = []
    for m in re.finditer(r"\s*\S+|\s+", text):
        word = m.group(0)
        if len(word.strip()) > 7:
            pieces += [word[: len(word) // 2], word[len(word) // 2:]]
        else:
            pieces.append(word)
    return pieces


class _Reply:
    """A generation: speculative steps at about ``SPEC_TPS`` (statistics on the engine's clock)."""

    def __init__(self, client: ScriptedClient, text: str, hold: bool) -> None:
        self.client, self.text, self.hold = client, text, hold

    def __enter__(self) -> _Reply:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __iter__(self) -> Iterator[Any]:
        rng = random.Random(len(self.text))
        pieces = tokens_of(self.text)
        stop_at = int(len(pieces) * HOLD_AT) if self.hold else len(pieces)
        i = generated = drafted = accepted = passes = 0
        decode_s = 0.0
        st = GenerationStats()
        while i < stop_at:
            if self.client.cancelled.is_set():
                break
            n_acc = min(rng.choices(range(K + 1), weights=(1, 1, 2, 3, 5))[0], stop_at - i - 1)
            n_acc = max(n_acc, 0)
            step_pieces = pieces[i:i + n_acc + 1]
            flags = [True] * n_acc + [False] * (len(step_pieces) - n_acc)
            i += len(step_pieces)
            generated += len(step_pieces)
            drafted += K
            accepted += n_acc
            passes += 1
            decode_s += len(step_pieces) / SPEC_TPS * rng.uniform(0.8, 1.2)
            st = measured_stats(
                prompt_tokens=38, prompt_s=0.09, generated=generated, drafted=drafted, accepted=accepted,
                passes=passes, k_sum=K * passes, draft_s=decode_s * 0.31, verify_s=decode_s * 0.61,
                decode_s=decode_s, ttft_s=0.14, draft_mode="model", rejections=passes // 2, pass_tokens=generated,
                plain_steps=1 + passes // 32, plain_tps=PLAIN_TPS,  # a plain probe every 32 steps
                speedup=generated / decode_s / PLAIN_TPS,
                speedup_error=0.25 / (1 + passes // 32) ** 0.5 if passes >= 32 else None)
            yield StepBatch((StepEvent(list(range(len(step_pieces))), flags, step_pieces, K),), st)
            time.sleep(0.06)  # a few seconds of streaming: points for the reply chart
        if self.hold:
            self.client.cancelled.wait(60.0)  # held mid-reply until the window is closed
        text = "".join(pieces[:i])
        yield DoneEvent("cancelled" if self.client.cancelled.is_set() else "stop", st, text)


class ScriptedClient:
    """Stands in for ``EngineClient``: a pair that loads at once and replies from ``REPLIES``."""

    pid = None
    log_path = None
    loaded = None

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.turn = 0
        self.backend = {"name": "CUDA", "gpu_offload": True}

    def load(self, spec: Any, **_: Any) -> LoadedPair:
        target = ModelFacts(path="Qwen2.5-7B-Instruct-Q4_K_M.gguf", size_bytes=4_680_000_000,
                           gpu_layers_offloaded=29)
        draft = ModelFacts(path="Qwen2.5-0.5B-Instruct-Q8_0.gguf", size_bytes=531_000_000, gpu_layers_offloaded=25)
        return LoadedPair(target, draft, "model", 8192, "CUDA", True, "chatml", 470_000_000, 100_000_000, ())

    def generate(self, request: Any) -> _Reply:
        turn = self.turn
        self.turn += 1
        self.cancelled.clear()
        return _Reply(self, REPLIES[turn % len(REPLIES)], hold=turn == len(REPLIES) - 1)

    def cancel(self) -> None:
        self.cancelled.set()

    def stop(self, timeout: float = 10.0) -> None:
        self.cancelled.set()

    def unload(self) -> None: ...


def wait(app: QApplication, condition: Any, timeout_s: float = 30.0) -> None:
    """Run the event loop until ``condition()`` holds (script harness; the app itself never does this)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the window did not reach the pictured state")
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)


def settle(app: QApplication, ms: int) -> None:
    done = {"v": False}
    QTimer.singleShot(ms, lambda: done.__setitem__("v", True))
    wait(app, lambda: done["v"])


def shoot(app: QApplication, theme: str, out: Path) -> Path:
    os.environ["OUTRIDER_HOME"] = tempfile.mkdtemp(prefix=f"outrider-shots-{theme}-")  # fresh history each
    store = QtStoreBridge(HistoryStore.open())
    client = ScriptedClient()
    bridge = QtEngineBridge(client)  # type: ignore[arg-type]
    settings = QtSettings()
    settings.set(theme=theme, show_provenance=True)
    win = MainWindow(bridge, store, settings)
    win.resize(1440, 900)
    win.show()
    try:
        for title in ("Trip to Lisbon — packing list", "Regex for ISO dates", "Summarise the Q3 report"):
            cid = store.store.create_conversation(title=title)
            store.store.add_message(cid, Role.USER, title)
        win.refresh_conversations()
        win.load_pair(PairChoice(Path("Qwen2.5-7B-Instruct-Q4_K_M.gguf"), Path("Qwen2.5-0.5B-Instruct-Q8_0.gguf"),
                                 False, "qwen2.5-7b+0.5b", "Qwen2.5 7B + 0.5B"))
        wait(app, lambda: win.session.ready)
        ended = {"n": 0}
        win.session.reply_ended.connect(lambda *_: ended.__setitem__("n", ended["n"] + 1))
        for n, prompt in enumerate(PROMPTS):
            win.chat.composer.setPlainText(prompt)
            win.chat.send_button.click()
            if n < len(PROMPTS) - 1:
                wait(app, lambda n=n: ended["n"] > n)
            else:
                wait(app, lambda: client.turn == len(PROMPTS) and win.meter.streaming
                     and win.meter.snapshot().generated > 60)
        settle(app, 1500)  # the 4 Hz panel and the 1 Hz charts catch up with the held reply
        win.stats.refresh()
        win.stats._draw()
        win.chat.composer.setPlainText("")
        path = out / f"main-{theme}.png"
        win.grab().save(str(path), "PNG")
        return path
    finally:
        win.close()
        bridge.shutdown()
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "docs" / "screenshots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    app = QApplication(sys.argv[:1])
    for theme in ("light", "dark"):
        path = shoot(app, theme, args.out)
        print(f"{path} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
