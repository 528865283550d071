"""The in-reply speed-up through the real window (scripted engine client behind the real ``QtEngineBridge``):
shown with its error, stored exactly as the engine reported it, and the "slower than plain" warning never outlives
the reply it is about (a new reply or a new chat clears it)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QKeySequence

from outrider.engine.events import DoneEvent, LoadedPair, ModelFacts, StepBatch, StepEvent
from outrider.engine.stats import GenerationStats
from outrider.history import HistoryStore, MessageStatus
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.main_window import ACTION_NEW_CHAT, ACTION_SETTINGS, MainWindow
from support.gui_windows import open_loaded_window
from support.stats import measured_stats


def reply_stats(**kw: Any) -> GenerationStats:
    """64 tok/s, acceptance 0.6, token acceptance 0.75, 3.2 tokens per pass, k_mean 2, plain 20 tok/s."""
    base: dict[str, Any] = {"generated": 64, "drafted": 40, "accepted": 24, "rejections": 8, "passes": 20,
                            "pass_tokens": 64, "k_sum": 40, "decode_s": 1.0, "step_s": 1.0, "draft_mode": "model",
                            "plain_steps": 3, "plain_tps": 20.0}
    return measured_stats(**{**base, **kw})


class _Reply:
    def __init__(self, final: GenerationStats, hold: threading.Event | None) -> None:
        self.final = final
        self.hold = hold

    def __enter__(self) -> _Reply:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __iter__(self) -> Iterator[Any]:
        early = GenerationStats(generated=4, drafted=4, accepted=3, rejections=1, passes=1, pass_tokens=4,
                                decode_s=0.05, draft_mode=self.final.draft_mode)  # no plain step measured yet
        yield StepBatch((StepEvent([1, 2, 3, 4], [True, True, True, False], ["o", "ne", " t", "wo"], 3),), early)
        if self.hold is not None:
            self.hold.wait(30.0)
        yield StepBatch((StepEvent([5], [False], [" three"], 0),), self.final)
        yield DoneEvent("stop", self.final, "one two three")


class ScriptedClient:
    """Stands in for ``EngineClient``: loads at once; each reply ends with the next of ``finals``."""

    pid = None
    log_path = None
    loaded = None

    def __init__(self, finals: list[GenerationStats]) -> None:
        self.backend: dict[str, Any] = {"name": "CPU"}
        self.finals = list(finals)
        self.hold: threading.Event | None = None
        self.requests: list[Any] = []

    def load(self, spec: Any, **_: Any) -> LoadedPair:
        return LoadedPair(ModelFacts(path=str(spec.target)), ModelFacts(path="draft.gguf"), "model", 2048, "CPU",
                          False, "chatml", 0, 0, ())

    def generate(self, request: Any) -> _Reply:
        self.requests.append(request)
        return _Reply(self.finals.pop(0), self.hold)

    def cancel(self) -> None:
        if self.hold is not None:
            self.hold.set()

    def stop(self, timeout: float = 10.0) -> None:
        self.cancel()

    def unload(self) -> None: ...


@pytest.fixture
def scripted(qtbot: Any, tmp_path: Path) -> Iterator[tuple[MainWindow, ScriptedClient]]:
    store = QtStoreBridge(HistoryStore.open())
    client = ScriptedClient([])
    win = open_loaded_window(qtbot, store, client, tmp_path)
    yield win, client
    win.close()
    win.bridge.shutdown()
    store.close()


def _send(qtbot: Any, win: MainWindow, text: str) -> tuple[str, str, Any]:
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000) as blocker:
        win.chat.composer.setPlainText(text)
        win.chat.send_button.click()
    status, reply, message_id = blocker.args
    return status, reply, message_id


def _stored(qtbot: Any, win: MainWindow) -> Any:
    cid = win.controller.conversation_id
    assert cid is not None
    store = win.controller.store.store
    qtbot.waitUntil(lambda: store.get_conversation(cid).messages[-1].status is MessageStatus.COMPLETE, timeout=5000)
    return store.get_conversation(cid).messages[-1]


def test_speedup_with_error_shown_and_stored_as_the_engine_reported(qtbot: Any, scripted: Any) -> None:
    win, client = scripted
    client.finals = [reply_stats(speedup=1.8512, speedup_low=1.7878, speedup_high=1.9146, plain_tps=20.04)]
    status, _, message_id = _send(qtbot, win, "hi")
    assert status == "complete"
    win.stats.refresh()
    assert win.stats.speedup_label.text() == "1.85× (1.79–1.91)"
    assert win.stats.values["plain_tps"].text() == "20.0 tok/s"
    assert "plain 20.0 tok/s" in win.engine_label.text() and "baseline" not in win.engine_label.text()
    done = win.controller.last_done
    assert done is not None
    reply = _stored(qtbot, win)
    assert reply.id == message_id and reply.stats is not None
    assert reply.stats.speedup == done.stats.speedup == pytest.approx(1.8512)  # the engine's figure, as is
    assert reply.stats.speedup_low == done.stats.speedup_low == pytest.approx(1.7878)
    assert reply.stats.speedup_high == done.stats.speedup_high == pytest.approx(1.9146)
    assert reply.stats.k_mean == 2.0  # the mean draft length the engine used, not the setting


def test_a_wide_interval_shows_the_range_not_a_bold_figure_and_is_stored_as_is(qtbot: Any, scripted: Any) -> None:
    """A short reply whose interval is wider than ±20 %: the panel shows the range, unbolded, never one figure."""
    win, client = scripted
    client.finals = [reply_stats(speedup=1.9, speedup_low=1.3, speedup_high=2.6)]
    client.hold = threading.Event()
    with qtbot.waitSignal(win.controller.steps_received, timeout=10_000):
        win.chat.composer.setPlainText("hi")
        win.chat.send_button.click()
    win.stats.refresh()
    assert win.stats.speedup_label.text() == "measuring…"  # the first batch: nothing measured yet
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000):
        client.hold.set()
    win.stats.refresh()
    assert win.stats.speedup_label.text() == "1.30–2.60×, uncertain"
    assert win.stats.speedup_label.property("settled") is False
    stored = _stored(qtbot, win).stats
    assert (stored.speedup, stored.speedup_low, stored.speedup_high) == (1.9, 1.3, 2.6)


def test_measuring_until_a_plain_step_then_not_measured(qtbot: Any, scripted: Any) -> None:
    win, client = scripted
    client.finals = [reply_stats(generated=5, speedup=None, plain_steps=0, plain_tps=None)]
    client.hold = threading.Event()
    with qtbot.waitSignal(win.controller.steps_received, timeout=10_000):
        win.chat.composer.setPlainText("hi")
        win.chat.send_button.click()
    win.stats.refresh()
    assert win.stats.speedup_label.text() == "measuring…"
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000):
        client.hold.set()
    win.stats.refresh()
    assert win.stats.speedup_label.text() == "not measured"
    assert _stored(qtbot, win).stats.speedup is None


def test_slower_warning_cleared_by_a_new_reply_and_a_new_chat(qtbot: Any, scripted: Any) -> None:
    win, client = scripted
    slow = reply_stats(speedup=0.62, speedup_low=0.59, speedup_high=0.65, decode_tps=12.0)
    client.finals = [slow, reply_stats(speedup=1.9, speedup_low=1.85, speedup_high=1.95), slow]
    _send(qtbot, win, "first")
    win.stats.refresh()
    assert win.stats.warning.isVisibleTo(win) and "0.62× (0.59–0.65)" in win.stats.warning_label.text()

    client.hold = threading.Event()  # the next reply begins: the last reply's verdict goes at once
    with qtbot.waitSignal(win.controller.steps_received, timeout=10_000):
        win.chat.composer.setPlainText("second")
        win.chat.send_button.click()
    win.stats.refresh()
    assert not win.stats.warning.isVisibleTo(win) and win.stats.speedup_label.text() == "measuring…"
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000):
        client.hold.set()
    client.hold = None
    win.stats.refresh()
    assert not win.stats.warning.isVisibleTo(win) and win.stats.speedup_label.text() == "1.90× (1.85–1.95)"

    _send(qtbot, win, "third")
    win.stats.refresh()
    assert win.stats.warning.isVisibleTo(win)
    new_chat = win.actions_by_id[ACTION_NEW_CHAT]
    assert new_chat.shortcut() == QKeySequence(QKeySequence.StandardKey.New)  # Ctrl+N
    new_chat.trigger()
    win.stats.refresh()
    assert not win.stats.warning.isVisibleTo(win) and win.stats.speedup_label.text() == "–"


def test_draft_off_from_the_warning_reaches_the_status_bar_and_the_next_request(qtbot: Any, scripted: Any) -> None:
    win, client = scripted
    client.finals = [reply_stats(speedup=0.62, speedup_low=0.59, speedup_high=0.65),
                     reply_stats(speedup=1.0, drafted=0, accepted=0)]
    _send(qtbot, win, "first")
    win.stats.refresh()
    assert "draft draft.gguf (k auto ≤ 16)" in win.engine_label.text()
    assert win.stats.warning.isVisibleTo(win)
    win.stats.draft_off_button.click()
    assert win.settings.value.draft_source == "none"
    assert "draft off (plain decoding)" in win.engine_label.text() and "draft.gguf" not in win.engine_label.text()
    _send(qtbot, win, "second")
    assert client.requests[-1].draft.k == 0  # plain decoding, with no reload of the pair
    assert "draft off (plain decoding)" in win.engine_label.text()


def test_edit_and_resend_leaves_only_the_remaining_replies_in_the_conversation_chart(qtbot: Any,
                                                                                     scripted: Any) -> None:
    win, client = scripted
    client.finals = [reply_stats(decode_tps=10.0 * (i + 1)) for i in range(4)]
    for text in ("one", "two", "three"):
        _send(qtbot, win, text)
    assert [p[0] for p in win.meter.conversation_series] == [1, 2, 3]
    cid = win.controller.conversation_id
    store = win.controller.store.store
    qtbot.waitUntil(lambda: len(store.get_conversation(cid).messages) == 6, timeout=5000)
    second = next(m for m in store.get_conversation(cid).messages if m.text == "two")
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000):
        assert win.controller.edit_resend(second.id, "two, again")
        assert [p[0] for p in win.meter.conversation_series] == [1]  # at once: replies 2 and 3 are gone
    assert [p[0] for p in win.meter.conversation_series] == [1, 2]
    assert win.meter.conversation_series[1][1] == pytest.approx(40.0)


def test_settings_opened_from_the_window_know_the_engines_backend(qtbot: Any, scripted: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from outrider.ui.dialogs.settings_dialog import SettingsDialog

    win, client = scripted
    client.backend = {"name": "CPU", "gpu_offload": False}  # as the engine's hello said
    opened: list[SettingsDialog] = []

    def fake_exec(dialog: SettingsDialog) -> int:
        opened.append(dialog)
        dialog.k_max.setValue(9)
        return 1

    monkeypatch.setattr(SettingsDialog, "exec", fake_exec)
    win.actions_by_id[ACTION_SETTINGS].trigger()
    assert opened and "no GPU backend" in opened[0].gpu_note.text()
    assert win.settings.value.k_max == 9 and "draft.gguf (k auto ≤ 9)" in win.engine_label.text()


def test_draft_off_on_the_real_demo_pair_decodes_plainly_without_a_reload(qtbot: Any, window: MainWindow) -> None:
    """The demo pair (SmolLM2 + prompt lookup) through the real engine: Draft off keeps the pair loaded and the
    next reply drafts nothing, its speed-up 1.00× (docs/metrics.md)."""
    win = window
    loaded = win.controller.loaded
    win.controller.max_tokens_override = 24
    with qtbot.assertNotEmitted(win.controller.engine_changed):
        win.stats.draft_off_requested.emit()
    assert win.controller.loaded is loaded and "draft off (plain decoding)" in win.engine_label.text()
    with qtbot.waitSignal(win.controller.reply_ended, timeout=120_000):
        win.chat.composer.setPlainText("Repeat after me: the cat sat on the mat, the cat sat on the mat.")
        win.chat.send_button.click()
    done = win.controller.last_done
    assert done is not None and done.stats.generated > 0
    # 1.00× as shown: the loaded drafter's bookkeeping (it still indexes the text) is the only difference
    assert done.stats.drafted == 0 and done.stats.speedup == pytest.approx(1.0, abs=0.005)
    win.stats.refresh()
    assert win.stats.speedup_label.text().startswith("1.00×") and not win.stats.warning.isVisibleTo(win)


def test_the_warning_offers_automatic_k_only_while_k_is_fixed(qtbot: Any, scripted: Any) -> None:
    win, client = scripted
    slow = reply_stats(speedup=0.62, speedup_low=0.59, speedup_high=0.65)
    client.finals = [slow, slow]
    _send(qtbot, win, "under automatic k")
    win.stats.refresh()
    assert win.stats.warning.isVisibleTo(win) and win.stats.draft_off_button.isVisibleTo(win)
    assert not win.stats.draft_auto_button.isVisibleTo(win)  # already automatic: drafting off is what is left
    win.settings.set(k_policy="fixed", k=8)
    _send(qtbot, win, "with a fixed k")
    win.stats.refresh()
    assert win.stats.draft_auto_button.isVisibleTo(win)
    win.stats.draft_auto_button.click()
    assert win.settings.value.k_policy == "auto" and "k auto ≤ 16" in win.engine_label.text()


def test_the_status_bar_says_where_an_rpc_target_lives(qtbot: Any, scripted: Any) -> None:
    """With the target on llama.cpp RPC workers, the engine line names the workers' buffers and their free memory,
    the same line as the CLI's load note; a local pair's line says nothing of RPC."""
    import dataclasses

    win, _client = scripted
    loaded = win.controller.loaded
    assert loaded is not None and not loaded.uses_rpc
    assert "RPC" not in win.engine_label.text() and "workers' memory" not in win.engine_label.text()
    target = dataclasses.replace(
        loaded.target, buffers=(("RPC0[10.0.0.2:50052]", 2 * 2**30), ("CPU_Mapped", 200 * 2**20)),
        remote_devices=(("RPC0", "10.0.0.2:50052", 11 * 2**30, 16 * 2**30),))
    remote = dataclasses.replace(loaded, target=target)
    win._on_controller_engine_changed(remote)
    text = win.engine_label.text()
    assert "target: RPC0[10.0.0.2:50052] 2.0 GiB, CPU_Mapped 200.0 MiB; draft on this machine" in text
    assert "workers' memory: 10.0.0.2:50052 11.0 GiB free of 16.0 GiB" in text
    assert remote.placement_text() in text


def test_the_status_bar_shows_the_cpu_threads_of_the_last_reply(qtbot: Any, scripted: Any) -> None:
    """Automatic threads are re-chosen before each reply (engine/threads.py): the status bar shows the count the
    last reply ran with (from its stats), not only the one at load."""
    win, client = scripted
    assert "CPU thread" not in win.engine_label.text()  # this scripted load reports no count
    client.finals = [reply_stats(threads=1), reply_stats(threads=2)]
    _send(qtbot, win, "hi")
    assert "· 1 CPU thread ·" in win.engine_label.text() + " ·"
    _send(qtbot, win, "again")
    assert "· 2 CPU threads" in win.engine_label.text()
