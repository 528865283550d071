"""The chat through the real window, with a scripted engine client behind the real ``QtEngineBridge``: no stale
state (Edit & resend on a message sent now, a placeholder while the prompt is read, Esc in that phase, Regenerate
only with a question, the last conversation reopened), replies that say how they ended (stopped, cut at the token
limit with a Continue that really continues, the engine stopped), never a broken character stored, and the
first-run sample prompts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QKeySequence

from outrider.engine.events import DoneEvent, LoadedPair, ModelFacts, StepBatch, StepEvent
from outrider.engine.stats import GenerationStats
from outrider.history import HistoryStore, MessageStatus, Role
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.chat_controller import NoticeScope
from outrider.ui.main_window import ACTION_NEW_CHAT, MainWindow
from outrider.ui.picker.choice import PairChoice
from outrider.ui.settings import QtSettings
from outrider.ui.widgets.chat_format import PLACEHOLDER, SAMPLE_PROMPTS
from outrider.worker.errors import EngineCrashed
from support.gui_windows import open_loaded_window


class Script:
    """One scripted reply: ``pieces`` (text, drafted) streamed one step each, then the end.

    ``hold``: wait (like a prompt being read) until the test releases it or the reply is cancelled; ``crash``: the
    engine dies after the pieces; ``stop``: the engine's stop reason.
    """

    def __init__(self, pieces: list[tuple[str, bool]], stop: str = "stop", *, hold: bool = False,
                 crash: bool = False, stats: GenerationStats | None = None, ids: list[int] | None = None) -> None:
        self.pieces, self.stop, self.hold, self.crash = pieces, stop, hold, crash
        self.stats = stats
        self.ids = ids or [1] * len(pieces)  # each piece's token id


class _Reply:
    def __init__(self, script: Script, client: ScriptedClient) -> None:
        self.script, self.client = script, client

    def __enter__(self) -> _Reply:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def cancel(self) -> None:
        self.client.cancel()

    def __iter__(self) -> Iterator[Any]:
        stats = self.script.stats or GenerationStats(generated=len(self.script.pieces), draft_mode="model")
        if self.script.hold:
            self.client.release.wait(30.0)
        if self.client.cancelled.is_set():
            yield DoneEvent("cancelled", stats, "")
            return
        for (text, drafted), token in zip(self.script.pieces, self.script.ids, strict=True):
            yield StepBatch((StepEvent([token], [drafted], [text], 2),), stats)
        if self.script.crash:
            raise EngineCrashed("SIGKILL", "generating")
        yield DoneEvent(self.script.stop, stats, "".join(t for t, _ in self.script.pieces))


class ScriptedClient:
    """Stands in for ``EngineClient``: loads at once; each reply follows the next script; requests are kept."""

    pid = None
    log_path = None
    loaded = None

    def __init__(self) -> None:
        self.backend: dict[str, Any] = {"name": "CPU"}
        self.scripts: list[Script] = []
        self.requests: list[Any] = []
        self.release = threading.Event()
        self.cancelled = threading.Event()

    def load(self, spec: Any, **_: Any) -> LoadedPair:
        return LoadedPair(ModelFacts(path=str(spec.target)), ModelFacts(path="draft.gguf"), "model", 2048, "CPU",
                          False, "chatml", 0, 0, ())

    def generate(self, request: Any) -> _Reply:
        self.requests.append(request)
        self.cancelled.clear()
        self.release.clear()
        return _Reply(self.scripts.pop(0), self)

    def cancel(self) -> None:
        self.cancelled.set()
        self.release.set()

    def stop(self, timeout: float = 10.0) -> None:
        self.cancel()

    def unload(self) -> None: ...


@pytest.fixture
def chat(qtbot: Any, tmp_path: Path) -> Iterator[tuple[MainWindow, ScriptedClient]]:
    store = QtStoreBridge(HistoryStore.open())
    client = ScriptedClient()
    win = open_loaded_window(qtbot, store, client, tmp_path)
    yield win, client
    win.close()
    win.bridge.shutdown()
    store.close()


def _send(qtbot: Any, win: MainWindow, text: str, script: Script, client: ScriptedClient) -> tuple[Any, ...]:
    client.scripts.append(script)
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000) as blocker:
        win.chat.composer.setPlainText(text)
        qtbot.keyClick(win.chat.composer, Qt.Key.Key_Return)
    return tuple(blocker.args)


def _stored(win: MainWindow) -> list[Any]:
    cid = win.controller.conversation_id
    assert cid is not None
    return list(win.store.store.get_conversation(cid).messages)


def _settled(qtbot: Any, win: MainWindow) -> None:
    """The store thread has written the reply's end."""
    qtbot.waitUntil(lambda: _stored(win)[-1].status is not MessageStatus.STREAMING, timeout=5000)


def test_edit_and_resend_is_offered_on_a_message_sent_now(qtbot: Any, chat: Any) -> None:
    win, client = chat
    _send(qtbot, win, "Hello there", Script([("Hi", False)]), client)
    assert "edit:0" in win.chat.browser.toHtml()  # the header was redrawn once the id was known
    user = win.chat.messages[0]
    assert user.message_id == _stored(win)[0].id
    win.chat._on_browser_anchor_clicked(QUrl("edit:0"))
    assert win.chat.composer.toPlainText() == "Hello there" and win.chat.edit_label.isVisibleTo(win)


def test_placeholder_while_the_prompt_is_read_and_esc_then_says_stopped(qtbot: Any, chat: Any) -> None:
    win, client = chat
    client.scripts.append(Script([("never", False)], hold=True))
    win.chat.composer.setPlainText("A long question")
    qtbot.keyClick(win.chat.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(client.requests))
    assert PLACEHOLDER in win.chat.browser.toPlainText()
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000) as blocker:
        qtbot.keyClick(win, Qt.Key.Key_Escape)
    assert blocker.args[0] == "interrupted"
    shown = win.chat.browser.toPlainText()
    assert PLACEHOLDER not in shown and "— stopped" in shown and "(stopped before any text)" in shown
    assert "interrupted" not in shown  # "stopped" by the user, not a word that reads like a crash
    _settled(qtbot, win)
    reply = _stored(win)[-1]
    assert reply.status is MessageStatus.INTERRUPTED and reply.stats is not None
    assert reply.stats.stop_reason == "cancelled"
    win.controller.open_conversation(win.controller.conversation_id)  # reopened: it still says so
    assert "— stopped" in win.chat.browser.toPlainText()


def test_esc_before_the_question_is_stored_ends_the_reply_as_stopped(qtbot: Any, chat: Any) -> None:
    win, client = chat
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000) as blocker:
        assert win.controller.send("Quick question")
        win.controller.stop()  # the store thread has not answered yet: the engine never starts
    assert blocker.args[0] == "interrupted" and not client.requests
    assert "(stopped before any text)" in win.chat.browser.toPlainText()
    assert win.chat.send_button.isEnabled() and not win.chat.stop_button.isEnabled()


def test_a_reply_cut_at_the_token_limit_says_so_and_continue_really_continues(qtbot: Any, chat: Any) -> None:
    win, client = chat
    _send(qtbot, win, "Tell me about foxes", Script([("The quick", True), (" brown", False)], stop="length"),
          client)
    shown = win.chat.browser.toPlainText()
    assert "cut at the token limit" in shown and "continue:1" in win.chat.browser.toHtml()
    assert win.chat.continue_button.isVisibleTo(win)  # also a button, reachable with Tab
    _settled(qtbot, win)
    reply_id = _stored(win)[-1].id
    client.scripts.append(Script([(" fox", True), (" jumps.", False)]))
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000) as blocker:
        qtbot.mouseClick(win.chat.continue_button, Qt.MouseButton.LeftButton)
    request = client.requests[-1]
    assert request.continue_reply  # the engine continues the reply's text, no new turn
    assert request.messages[-1].role == "assistant" and request.messages[-1].content == "The quick brown"
    assert list(blocker.args) == ["complete", "The quick brown fox jumps.", reply_id]
    _settled(qtbot, win)
    stored = _stored(win)
    assert [m.role for m in stored] == [Role.USER, Role.ASSISTANT]  # the same message, grown
    assert stored[-1].id == reply_id and stored[-1].text == "The quick brown fox jumps."
    assert stored[-1].status is MessageStatus.COMPLETE and stored[-1].stats.stop_reason == "stop"
    shown = win.chat.browser.toPlainText()
    assert "The quick brown fox jumps." in shown and "cut at the token limit" not in shown
    assert "continue:" not in win.chat.browser.toHtml() and not win.chat.continue_button.isVisibleTo(win)


def test_an_engine_crash_says_the_engine_stopped_and_keeps_the_text(qtbot: Any, chat: Any) -> None:
    win, client = chat
    _send(qtbot, win, "Go", Script([("Partial ", False), ("answer", True)], crash=True), client)
    assert "interrupted — the engine stopped" in win.chat.browser.toPlainText()
    _settled(qtbot, win)
    reply = _stored(win)[-1]
    assert reply.text == "Partial answer" and reply.stats is not None and reply.stats.stop_reason == "crashed"


def test_a_reply_cut_inside_a_character_is_stored_without_the_broken_piece(qtbot: Any, chat: Any) -> None:
    win, client = chat
    args = _send(qtbot, win, "Emoji?", Script([("Sure ", False), ("\ufffd", False)], stop="length"), client)
    assert args[1] == "Sure "
    _settled(qtbot, win)
    assert _stored(win)[-1].text == "Sure "
    assert "\ufffd" not in win.chat.browser.toPlainText()


def test_regenerate_needs_a_question_and_new_chat_clears_it(qtbot: Any, chat: Any) -> None:
    win, client = chat
    assert not win.chat.regenerate_button.isEnabled()  # an empty chat
    _send(qtbot, win, "Hi", Script([("Hello", False)]), client)
    assert win.chat.regenerate_button.isEnabled()
    qtbot.keySequence(win, QKeySequence(QKeySequence.StandardKey.New))
    assert not win.chat.regenerate_button.isEnabled() and not win.chat.messages
    win.actions_by_id[ACTION_NEW_CHAT].trigger()
    assert not win.chat.regenerate_button.isEnabled()


def test_the_stop_button_looks_disabled_when_it_is(qtbot: Any, chat: Any) -> None:
    win, _client = chat
    button = win.chat.stop_button

    def mean_colour() -> tuple[float, float, float]:
        image = button.grab().toImage()
        pixels = [image.pixelColor(x, y) for x in range(0, image.width(), 2) for y in range(0, image.height(), 2)]
        return tuple(sum(getattr(p, c)() for p in pixels) / len(pixels) for c in ("red", "green", "blue"))  # type: ignore[return-value]

    disabled = mean_colour()
    button.setEnabled(True)
    enabled = mean_colour()
    button.setEnabled(False)
    assert sum(abs(a - b) for a, b in zip(disabled, enabled, strict=True)) > 60  # clearly different, not a tint


def test_the_last_open_conversation_is_reopened_at_start(qtbot: Any, tmp_path: Path) -> None:
    store = QtStoreBridge(HistoryStore.open())
    client = ScriptedClient()
    win = open_loaded_window(qtbot, store, client, tmp_path)
    _send(qtbot, win, "Remember me", Script([("I will", False)]), client)
    _settled(qtbot, win)
    cid = win.controller.conversation_id
    win.close()
    win.settings.flush()  # as the app does before it exits
    win.bridge.shutdown()
    again = open_loaded_window(qtbot, store, ScriptedClient(), tmp_path)  # the next start: same data folder
    try:
        qtbot.waitUntil(lambda: again.controller.conversation_id == cid)  # once the window has painted
        assert [m.text for m in again.chat.messages] == ["Remember me", "I will"]
        again.controller.open_conversation(None)  # a new chat is what the next start shows
        again.settings.flush()
        assert QtSettings().value.last_conversation_id == 0
    finally:
        again.close()
        again.bridge.shutdown()
        store.close()


def test_a_sample_prompt_of_an_empty_chat_is_sent_when_clicked(qtbot: Any, chat: Any) -> None:
    win, client = chat
    html = win.chat.browser.toHtml()
    assert "sample:0" in html and "sample:1" in html and "acceptance" in win.chat.browser.toPlainText()
    client.scripts.append(Script([("The lighthouse keeper", True)]))
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000):
        win.chat._on_browser_anchor_clicked(QUrl("sample:0"))
    assert client.requests[-1].messages[-1].content == SAMPLE_PROMPTS[0].text
    assert "sample:0" not in win.chat.browser.toHtml()  # the first message replaced the first-run page


def test_a_message_that_cannot_be_stored_is_given_back_and_said_why(qtbot: Any, chat: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from outrider.history import DiskFullError

    win, client = chat

    def full(*_: Any, **__: Any) -> Any:
        raise DiskFullError(Path("history.sqlite3"))

    monkeypatch.setattr(HistoryStore, "start_conversation", full)
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000) as blocker:
        win.chat.composer.setPlainText("Important thought")
        qtbot.keyClick(win.chat.composer, Qt.Key.Key_Return)
    assert blocker.args[0] == "error" and not client.requests  # the engine never started
    assert win.chat.composer.toPlainText() == "Important thought"  # given back, to send again
    assert "Your message could not be stored" in win.notice_label.text()
    assert win.chat.send_button.isEnabled() and not win.controller.streaming


def test_esc_cancels_an_edit_in_the_window(qtbot: Any, chat: Any) -> None:
    win, client = chat
    _send(qtbot, win, "First words", Script([("Reply", False)]), client)
    win.chat._on_browser_anchor_clicked(QUrl("edit:0"))
    assert win.chat.edit_label.isVisibleTo(win) and win.chat.composer.hasFocus()
    qtbot.keyClick(win.chat.composer, Qt.Key.Key_Escape)
    assert not win.chat.edit_label.isVisibleTo(win) and win.chat.composer.toPlainText() == ""


def test_regenerate_in_a_long_conversation_keeps_the_new_reply_in_view(qtbot: Any, chat: Any) -> None:
    win, client = chat
    for n in range(4):
        _send(qtbot, win, f"Question {n}", Script([(f"Answer {n}. " + "Some text. " * 60 + "\n\n", False)] * 3),
              client)
    bar = win.chat.browser.verticalScrollBar()
    assert bar.maximum() > 0
    client.scripts.append(Script([("A new answer, ", True)] + [("line after line.\n\n", False)] * 40))
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000):
        qtbot.mouseClick(win.chat.regenerate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum())
    assert "A new answer" in win.chat.browser.toPlainText() and len(win.chat.messages) == 8


@pytest.mark.parametrize("ending", ["stopped", "crashed"])
def test_a_reply_that_stopped_early_can_be_continued_also_after_reopening(qtbot: Any, chat: Any,
                                                                          ending: str) -> None:
    """Before: Continue was offered only for a reply cut at the token limit (not after Stop/Esc or a crash)."""
    win, client = chat
    script = Script([("The quick", True), (" brown", False)], stop="cancelled", crash=ending == "crashed")
    _send(qtbot, win, "Tell me about foxes", script, client)
    if ending == "crashed":
        with qtbot.waitSignal(win.controller.engine_changed, timeout=10_000,
                              check_params_cb=lambda info: info is not None):
            win.controller.reload()
    _settled(qtbot, win)
    reply_id = _stored(win)[-1].id
    cid = win.controller.conversation_id
    win.controller.open_conversation(None)
    win.controller.open_conversation(cid)  # reopened (as after a restart): the stored end says it can go on
    assert win.chat.continue_button.isVisibleTo(win) and "continue:1" in win.chat.browser.toHtml()
    client.scripts.append(Script([(" fox", True), (" jumps.", False)]))
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000) as blocker:
        qtbot.mouseClick(win.chat.continue_button, Qt.MouseButton.LeftButton)
    request = client.requests[-1]
    assert request.continue_reply and request.messages[-1].content == "The quick brown"
    assert list(blocker.args) == ["complete", "The quick brown fox jumps.", reply_id]
    assert not win.chat.continue_button.isVisibleTo(win)  # a reply that ended by itself: nothing to continue


def test_every_notice_goes_with_what_it_is_about(qtbot: Any, chat: Any) -> None:
    """Before: "Conversation exported to …" stayed across chats, "Drafting: … (applies from the next reply)" after
    that reply, and after a crash Send said "No model is loaded yet." instead of what to do."""
    win, client = chat
    _send(qtbot, win, "First", Script([("One", False)]), client)
    _settled(qtbot, win)
    first = win.controller.conversation_id
    win.show_notice("Conversation exported to /tmp/x.md", NoticeScope.CHAT)
    win.controller.open_conversation(None)
    assert not win.notice_label.isVisible()  # another chat: the export notice went with the old one
    win.controller.open_conversation(first)
    win.show_notice("Drafting: draft off (plain decoding) (applies from the next reply)", NoticeScope.REPLY)
    client.scripts.append(Script([("Two", False)]))
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000):
        win.chat.composer.setPlainText("Second")
        qtbot.keyClick(win.chat.composer, Qt.Key.Key_Return)
    assert not win.notice_label.isVisible()  # that reply came: the note is no longer news
    win.show_notice("A note about the pair", NoticeScope.PAIR)
    _send(qtbot, win, "Third", Script([("Partial", False)], crash=True), client)
    assert not win.notice_label.isVisible() or "A note about the pair" not in win.notice_label.text()
    with qtbot.waitSignal(win.controller.notice, timeout=5000) as blocker:
        win.chat.composer.setPlainText("Are you there?")
        qtbot.keyClick(win.chat.composer, Qt.Key.Key_Return)
    assert "press Reload" in blocker.args[0] and "No model is loaded yet" not in blocker.args[0]
    assert win.notice_label.text() == blocker.args[0]
    with qtbot.waitSignal(win.controller.engine_changed, timeout=10_000, check_params_cb=lambda info: info is not None):
        win.controller.reload()
    assert not win.notice_label.isVisible()  # the pair is back: "press Reload" is stale


def test_the_status_bar_speaks_the_picker_s_units_and_no_gpu_on_a_cpu_build(qtbot: Any, chat: Any) -> None:
    """Before: "182 MiB" beside the picker's "192.7 MB" for the same files, and "GPU layers 0/0" on a CPU build."""
    win, _client = chat
    text = win.engine_label.text()
    assert "MiB" not in text and "GPU layers" not in text
    assert "(weights + KV" in text


def test_provenance_colours_come_back_on_reopening_and_on_a_continued_reply(qtbot: Any, chat: Any) -> None:
    """Before: a reopened conversation (or one after a restart) and the first part of a continued reply were
    drawn without colours: only the reply streamed since the app started had them."""
    win, client = chat
    _send(qtbot, win, "Tell me", Script([("The quick", True), (" brown", False)], stop="length"), client)
    _settled(qtbot, win)
    cid = win.controller.conversation_id
    win.controller.open_conversation(None)
    win.controller.open_conversation(cid)  # reopened, as after a restart
    reply = win.chat.messages[-1]
    assert reply.provenance_runs() == [("The quick", "draft"), (" brown", "target")]
    client.scripts.append(Script([(" fox", True)]))
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000):
        qtbot.mouseClick(win.chat.continue_button, Qt.MouseButton.LeftButton)
    _settled(qtbot, win)
    win.controller.open_conversation(None)
    win.controller.open_conversation(cid)
    runs = win.chat.messages[-1].provenance_runs()
    assert runs is not None and [k for _, k in runs] == ["draft", "target", "draft"]  # the old part kept its colours
    assert "".join(t for t, _ in runs) == "The quick brown fox"


def test_drafting_off_is_shown_after_a_restart_and_undone_in_one_click(qtbot: Any, chat: Any,
                                                                        tmp_path: Path) -> None:
    """Before: "Draft off" survived restarts silently (only the status line's text said "draft off")."""
    win, _client = chat
    assert win.draft_on_button.isHidden()
    win.settings.set(draft_source="none")
    assert not win.draft_on_button.isHidden()
    win.settings.flush()
    again = MainWindow(win.bridge, win.store, QtSettings())  # the next start reads the setting
    qtbot.addWidget(again)
    assert not again.draft_on_button.isHidden()
    qtbot.mouseClick(again.draft_on_button, Qt.MouseButton.LeftButton)
    assert again.settings.value.draft_source == "model" and again.draft_on_button.isHidden()


def _slow_stats(plain_tps: float = 50.0) -> GenerationStats:
    """A reply measured slower than plain decoding (0.7×, its interval under 1), plain decoding measured."""
    return GenerationStats(generated=64, drafted=60, accepted=6, rejections=20, passes=40, pass_tokens=64,
                           decode_s=2.0, step_s=2.0, draft_mode="model", speedup=0.7, speedup_low=0.6,
                           speedup_high=0.8, plain_tps=plain_tps)


def _slow_reply(qtbot: Any, win: MainWindow, client: ScriptedClient, **script: Any) -> None:
    _send(qtbot, win, "Slow", Script([("a", True), ("b", False)], stats=_slow_stats(), **script), client)
    win.stats.refresh()


def test_the_slower_than_plain_warning_goes_with_its_pair_and_its_draft_off_never_acts_on_another(
        qtbot: Any, chat: Any, tmp_path: Path) -> None:
    """Before: the warning survived a switch to another pair, and its Draft off then turned off the new pair's
    drafting. Broken on purpose (``pair_changed`` not connected): the warning was still shown after the load and
    a click on Draft off set the draft source to none."""
    win, client = chat
    _slow_reply(qtbot, win, client)
    assert win.stats.warning.isVisibleTo(win) and win.stats.draft_off_button.isEnabled()
    with qtbot.waitSignal(win.controller.engine_changed, check_params_cb=lambda info: info is not None):
        win.load_pair(PairChoice(tmp_path / "other.gguf", tmp_path / "other-draft.gguf", False, "o+d", "O + D"))
    win.stats.refresh()
    assert not win.stats.warning.isVisibleTo(win)
    win.stats.draft_off_button.click()  # even if something still pressed it, another pair's drafting stays on
    assert win.settings.value.draft_source != "none"
    _slow_reply(qtbot, win, client)  # a slow reply on the new pair warns again, with working buttons
    assert win.stats.warning.isVisibleTo(win)
    qtbot.mouseClick(win.stats.draft_off_button, Qt.MouseButton.LeftButton)
    assert win.settings.value.draft_source == "none"


def test_the_slower_than_plain_warning_goes_when_the_engine_stops(qtbot: Any, chat: Any) -> None:
    """Before: after a crash the warning of the crashed engine's last reply stayed under the crash banner.
    Broken on purpose (``pair_changed`` not connected): it was still visible after the crash."""
    win, client = chat
    _slow_reply(qtbot, win, client)
    assert win.stats.warning.isVisibleTo(win)
    _send(qtbot, win, "More", Script([("x", False)], crash=True, stats=_slow_stats()), client)
    win.stats.refresh()
    assert win.crash_banner.isVisibleTo(win) and not win.stats.warning.isVisibleTo(win)


def test_the_status_bar_plain_rate_is_this_chats(qtbot: Any, chat: Any) -> None:
    """Before: the status bar's "plain … tok/s (last reply)" was the last reply of whichever chat ran last, also
    shown in another chat (at another context length it says nothing there). Broken on purpose (the figure read
    from the controller's last reply): a new chat showed "plain 42.0 tok/s"."""
    win, client = chat
    _send(qtbot, win, "One", Script([("a", True)], stats=_slow_stats(plain_tps=42.0)), client)
    _settled(qtbot, win)
    first = win.controller.conversation_id
    assert "plain 42.0 tok/s" in win.engine_label.text()
    win.controller.open_conversation(None)
    assert "plain" not in win.engine_label.text()
    win.controller.open_conversation(first)
    assert "plain 42.0 tok/s" in win.engine_label.text()


def test_the_status_bar_text_is_elided_not_cut_in_a_half_screen_window(qtbot: Any, chat: Any,
                                                                      tmp_path: Path) -> None:
    """At 960 x 700 the status bar's engine line (a long target name, drafting off, the plain rate) must end inside
    the window, shortened with "…", the whole line in its tooltip. Before: a plain ``QLabel`` asked for its whole
    text's width, the status bar outgrew the window and the text was cut at its right edge; broken on purpose
    (a ``QLabel`` again) the line was never shortened to fit (the wait for "…" timed out)."""
    win, client = chat
    name = "a-rather-long-target-model-name-Instruct-Q4_K_M-with-a-suffix"
    with qtbot.waitSignal(win.controller.engine_changed, check_params_cb=lambda info: info is not None):
        win.load_pair(PairChoice(tmp_path / f"{name}.gguf", tmp_path / "draft.gguf", False, "l+d", "L + D"))
    win.settings.set(draft_source="none")
    _send(qtbot, win, "One", Script([("a", False)], stats=_slow_stats(plain_tps=42.0)), client)
    win.resize(960, 700)
    qtbot.waitUntil(lambda: win.width() == 960)
    label = win.engine_label
    qtbot.waitUntil(lambda: label.width() > 0 and label.shown_text() != label.text())
    right = label.mapTo(win, label.rect().topRight()).x()
    assert right <= win.width()
    assert label.fontMetrics().horizontalAdvance(label.shown_text()) <= label.contentsRect().width()
    assert label.shown_text().endswith("…") and label.text() in label.toolTip()
    assert name in label.text() and "plain 42.0 tok/s" in label.text()
    assert win.draft_on_button.isVisible()
    button_right = win.draft_on_button.mapTo(win, win.draft_on_button.rect().topRight()).x()
    assert button_right <= win.width()


def _restarted(qtbot: Any, win: MainWindow, client: ScriptedClient, tmp_path: Path) -> MainWindow:
    """A new window over the same history with a fresh engine client, the last conversation reopened: the app
    after a restart."""
    win.settings.flush()
    again = open_loaded_window(qtbot, win.store, client, tmp_path)
    assert again.controller.restore_last_conversation()
    return again


def test_continue_after_a_restart_resumes_from_the_stored_token_ids(qtbot: Any, chat: Any, tmp_path: Path) -> None:
    """A reply cut at the token limit keeps its token ids in the history; after a restart Continue sends them
    (``TextRequest.continue_tokens``), so the engine resumes the reply as generated, not its text re-read (which
    can tokenise differently: tests/integration/engine/test_continue_tokens.py). A second Continue sends the ids
    of both parts. Before: only the text was stored (broken on purpose, the ids not kept, the stored reply had no
    ``tokens``: KeyError)."""
    win, client = chat
    _send(qtbot, win, "Count", Script([("One", False), ("\n", True), ("\n", True)], stop="length",
                                      ids=[101, 198, 198]), client)
    _settled(qtbot, win)
    stored = _stored(win)[-1]
    assert stored.stats is not None and stored.stats.extra["tokens"] == {"ids": [101, 198, 198], "chars": 5}
    again = _restarted(qtbot, win, client, tmp_path)
    client.scripts.append(Script([("Two", False)], stop="length", ids=[202]))
    with qtbot.waitSignal(again.controller.reply_ended, timeout=10_000):
        qtbot.mouseClick(again.chat.continue_button, Qt.MouseButton.LeftButton)
    request = client.requests[-1]
    assert request.continue_reply and request.continue_tokens == (101, 198, 198)
    _settled(qtbot, again)
    client.scripts.append(Script([("Three", False)], ids=[303]))
    with qtbot.waitSignal(again.controller.reply_ended, timeout=10_000):
        qtbot.mouseClick(again.chat.continue_button, Qt.MouseButton.LeftButton)
    assert client.requests[-1].continue_tokens == (101, 198, 198, 202)
    _settled(qtbot, again)
    last = _stored(again)[-1]
    assert last.text == "One\n\nTwoThree" and last.stats is not None
    assert "tokens" not in last.stats.extra  # it ended by itself: never continued, its ids take no room
    again.close()
    again.bridge.shutdown()  # its engine thread (the fixture shuts down the first window's only)


def test_a_reply_stored_without_token_ids_is_continued_from_its_text(qtbot: Any, chat: Any, tmp_path: Path) -> None:
    """A reply stored by a version that kept no token ids (its statistics without ``tokens``) is continued from
    its text (continue_tokens None), and the continued reply keeps no ids: part of its ids would not spell it."""
    from outrider.history import ReplyStats

    win, client = chat
    store = win.store.store
    cid, _uid = store.start_conversation("Old", "Tell me", system=None, pair_id=None)
    reply_id = store.begin_reply(cid)
    store.finish_reply(reply_id, "Once upon", MessageStatus.COMPLETE, ReplyStats(generated=2, stop_reason="length"))
    win.controller.open_conversation(cid)
    client.scripts.append(Script([(" a time", False)], stop="length", ids=[7]))
    with qtbot.waitSignal(win.controller.reply_ended, timeout=10_000):
        qtbot.mouseClick(win.chat.continue_button, Qt.MouseButton.LeftButton)
    assert client.requests[-1].continue_reply and client.requests[-1].continue_tokens is None
    _settled(qtbot, win)
    last = _stored(win)[-1]
    assert last.text == "Once upon a time" and last.stats is not None and "tokens" not in last.stats.extra
