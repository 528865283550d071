"""The main window: conversations | chat | live statistics, engine status always visible in the status bar.

It composes the views and wires them to the ``ChatController`` controller; it holds no chat logic itself.
The pair picker and the benchmark dialog come from their own modules.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from outrider.catalogue.memory import format_bytes
from outrider.conversation.meter import ReplyMeter
from outrider.settings import PAIR_RECOMMENDED, AppSettings
from outrider.ui.bridges.engine_bridge import QtEngineBridge
from outrider.ui.bridges.store_bridge import QtStoreBridge
from outrider.ui.chat_controller import ChatController, NoticeScope
from outrider.ui.first_paint import FirstPaintWatcher
from outrider.ui.picker.choice import PairChoice, pair_choice_of
from outrider.ui.settings import DRAFT_KEYS, QtSettings, drafting_text, reload_needed
from outrider.ui.theme import app_icon, apply_theme
from outrider.ui.widgets.chat_view import ChatView
from outrider.ui.widgets.conversation_list import ConversationListModel, ConversationListView, ConversationRow
from outrider.ui.widgets.elided_label import ElidedLabel
from outrider.ui.widgets.stats_panel import StatsPanel

ACTION_NEW_CHAT = "new_chat"
ACTION_CHOOSE_PAIR = "choose_pair"
ACTION_BENCHMARK = "benchmark"
ACTION_SETTINGS = "settings"
ACTION_DARK = "dark_theme"
ACTION_QUIT = "quit"
ACTION_ABOUT = "about"
ACTION_PROVENANCE = "provenance"
ACTION_SEND = "send"
ACTION_STOP = "stop"
ACTION_REGENERATE = "regenerate"
ACTION_CONTINUE = "continue"
ACTION_COPY_REPLY = "copy_reply"
ACTION_FOCUS_COMPOSER = "focus_composer"
ACTION_FOCUS_SEARCH = "focus_search"
ACTION_SHOW_CONVERSATIONS = "show_conversations"
ACTION_SHOW_STATISTICS = "show_statistics"


def _banner(name: str, parent: QWidget) -> tuple[QFrame, QLabel, QHBoxLayout]:
    frame = QFrame(parent)
    frame.setObjectName(name)
    layout = QHBoxLayout(frame)
    label = QLabel("", frame)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    layout.addWidget(label, 1)
    frame.hide()
    return frame, label, layout


class MainWindow(QMainWindow):
    """Attributes:
        controller: the ``ChatController`` controller.
        chat, stats, conversations: the three panes.
        actions: the window's actions by id (``ACTION_*``).
    """

    def __init__(self, bridge: QtEngineBridge, store: QtStoreBridge, settings: QtSettings,
                 catalogue_service: Any = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Outrider")
        self.setWindowIcon(app_icon())
        self.resize(1280, 800)
        self.bridge = bridge
        self.store = store
        self.settings = settings
        self.catalogue_service = catalogue_service
        self._applying_pair = False
        self.meter = ReplyMeter()
        self.controller = ChatController(bridge, store, settings, self.meter, self)

        self.list_model = ConversationListModel(self)
        self.conversations = ConversationListView(self.list_model, self)
        self.chat = ChatView(self)
        self.stats = StatsPanel(self.meter, self, settings=settings)

        self.crash_banner, self.crash_label, crash_layout = _banner("crashBanner", self)
        self.reload_button = QPushButton("Reload", self.crash_banner)
        self.reload_button.setToolTip("Start the engine again with the same pair; the conversation is kept")
        self.reload_button.clicked.connect(self._on_reload_clicked)
        crash_layout.addWidget(self.reload_button)
        self.invite_banner, self.invite_label, invite_layout = _banner("inviteBanner", self)
        self.invite_button = QPushButton("Choose a pair…", self.invite_banner)
        self.invite_button.clicked.connect(self._on_choose_pair)
        invite_layout.addWidget(self.invite_button)
        self.notice_label = QLabel("", self)
        self._notice_scope = NoticeScope.APP
        self.notice_label.setWordWrap(True)
        self.notice_label.hide()

        center = QWidget(self)
        cl = QVBoxLayout(center)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addWidget(self.crash_banner)
        cl.addWidget(self.invite_banner)
        cl.addWidget(self.notice_label)
        cl.addWidget(self.chat, 1)
        splitter = QSplitter(self)
        splitter.addWidget(self.conversations)
        splitter.addWidget(center)
        splitter.addWidget(self.stats)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([230, 700, 340])
        self.setCentralWidget(splitter)

        # Elided at the right in a narrow window (a QLabel's minimum width is its whole text: at 960 px the status
        # bar outgrew the window and the text was cut off); the whole text is in its tooltip.
        self.engine_label = ElidedLabel("Engine: starting…", self, explanation=(
            "Backend and device, models loaded, memory for weights + KV cache; plain tok/s: plain decoding "
            "measured in this chat's last reply, at the same context length and load"))
        self._plain: tuple[int | None, float] | None = None  # (chat, plain tok/s) of the last reply measured
        self.statusBar().addPermanentWidget(self.engine_label, 1)
        # Drafting turned off stays off across restarts (a setting): the status bar says so and undoes it in one
        # click, so a user who pressed "Draft off" once is never left wondering why nothing speeds up.
        self.draft_on_button = QPushButton("Drafting is off — turn it on", self)
        self.draft_on_button.setObjectName("draftOnButton")
        self.draft_on_button.setToolTip("Draft again with this pair's own drafter (Settings > Drafting)")
        self.draft_on_button.setFlat(True)
        self.draft_on_button.clicked.connect(lambda: self.settings.set(draft_source="model"))
        self.statusBar().addPermanentWidget(self.draft_on_button)
        self._sync_draft_on_button()

        self.actions_by_id: dict[str, QAction] = {}
        self._build_menus()
        self._set_tab_order()
        esc = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        esc.activated.connect(self.controller.stop)

        self._wire()
        self.apply_settings_theme()
        self.refresh_conversations()
        self.chat.set_provenance(settings.value.show_provenance)
        # Paint first: the conversation open last is reopened (its Markdown rendered, code highlighted) once the
        # window is on the screen, after what else waits for the first paint (app.py starts the pair's load).
        self.first_paint = FirstPaintWatcher(self)
        self.first_paint.painted.connect(
            lambda: QTimer.singleShot(0, self.controller, self.controller.restore_last_conversation))
        self.chat.composer.setFocus()

    # -- construction -----------------------------------------------------------------------------------------
    def _action(self, ident: str, text: str, slot: Any,
                shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        self.actions_by_id[ident] = action
        return action

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        file.addAction(self._action(ACTION_NEW_CHAT, "&New chat", self._on_new_chat, QKeySequence.StandardKey.New))
        from outrider.ui.widgets.conversation_export import add_export_action  # Markdown/JSON, as `chats export`

        add_export_action(self, file)
        file.addAction(self._action(ACTION_QUIT, "&Quit", self.close, QKeySequence.StandardKey.Quit))
        models = bar.addMenu("&Models")
        models.addAction(self._action(ACTION_CHOOSE_PAIR, "&Choose pair…", self._on_choose_pair, "Ctrl+P"))
        models.addAction(self._action(ACTION_BENCHMARK, "&Benchmark this pair…", self._on_benchmark, "Ctrl+B"))
        models.addAction(self._action(ACTION_SETTINGS, "&Settings…", self._on_settings, "Ctrl+,"))
        from outrider.ui.dialogs.serve_dialog import add_serve_action  # the OpenAI-compatible server (docs/server.md)

        add_serve_action(self, models)
        self._build_chat_menu()
        view = bar.addMenu("&View")
        dark = self._action(ACTION_DARK, "&Dark theme", self._on_dark_toggled, "Ctrl+Shift+D")
        dark.setCheckable(True)
        dark.setChecked(self.settings.value.theme == "dark")
        view.addAction(dark)
        provenance = self._action(ACTION_PROVENANCE, "Show &provenance", self._on_provenance_action,
                                  "Ctrl+Shift+P")
        provenance.setCheckable(True)
        provenance.setChecked(self.chat.provenance_box.isChecked())
        self.chat.provenance_box.toggled.connect(provenance.setChecked)
        view.addAction(provenance)
        view.addSeparator()
        # The side panels can be hidden (a narrow, tiled window: the chat gets the room) and come back as they were.
        panes = ((ACTION_SHOW_CONVERSATIONS, "&Conversations", self.conversations, "Ctrl+Shift+L"),
                 (ACTION_SHOW_STATISTICS, "&Statistics", self.stats, "Ctrl+Shift+S"))
        for ident, text, pane, key in panes:
            toggle = self._action(ident, text, lambda: None, key)
            toggle.setCheckable(True)
            toggle.setChecked(True)
            toggle.toggled.connect(pane.setVisible)
            view.addAction(toggle)
        help_menu = bar.addMenu("&Help")
        help_menu.addAction(self._action(ACTION_ABOUT, "&About Outrider", self._on_about))
        self.actions_by_id[ACTION_CHOOSE_PAIR].setEnabled(self.catalogue_service is not None)

    def _build_chat_menu(self) -> None:
        """Chat: every button and link of the chat reachable from the keyboard, with its shortcut shown.

        The actions press the chat's own buttons, so they do exactly what a click does, and nothing when the
        button is disabled; their enabled state is synced with the buttons whenever the menu opens.
        """
        c = self.chat
        chat = self.menuBar().addMenu("&Chat")
        chat.addAction(self._action(ACTION_SEND, "&Send", c.send_button.click, "Ctrl+Return"))
        chat.addAction(self._action(ACTION_STOP, "S&top\tEsc", c.stop_button.click))  # Esc: the window's shortcut
        chat.addAction(self._action(ACTION_REGENERATE, "&Regenerate last reply", c.regenerate_button.click, "Ctrl+R"))
        chat.addAction(self._action(ACTION_CONTINUE, "C&ontinue the last reply", c.continue_button.click,
                                    "Ctrl+Shift+Return"))
        chat.addAction(self._action(ACTION_COPY_REPLY, "&Copy last reply", self._copy_last_reply, "Ctrl+Shift+C"))
        chat.addSeparator()
        chat.addAction(self._action(ACTION_FOCUS_COMPOSER, "&Message box", self._focus_composer, "Ctrl+L"))
        chat.addAction(self._action(ACTION_FOCUS_SEARCH, "Search &conversations", self._focus_search,
                                    QKeySequence.StandardKey.Find))
        chat.aboutToShow.connect(self._sync_chat_actions)

    @Slot(bool)
    def _on_provenance_action(self, on: bool) -> None:
        self.chat.provenance_box.setChecked(on)

    @Slot()
    def _sync_chat_actions(self) -> None:
        c, a = self.chat, self.actions_by_id
        for ident, button in ((ACTION_SEND, c.send_button), (ACTION_STOP, c.stop_button),
                              (ACTION_REGENERATE, c.regenerate_button), (ACTION_CONTINUE, c.continue_button)):
            a[ident].setEnabled(button.isEnabled() and not button.isHidden())
        a[ACTION_COPY_REPLY].setEnabled(self._last_reply_text() is not None)

    def _last_reply_text(self) -> str | None:
        replies = [m.text for m in self.chat.messages if m.role == "assistant" and m.text]
        return replies[-1] if replies else None

    @Slot()
    def _copy_last_reply(self) -> None:
        text = self._last_reply_text()
        if text is not None:
            QApplication.clipboard().setText(text)
            self.statusBar().showMessage("Last reply copied", 3000)

    @Slot()
    def _focus_composer(self) -> None:
        self.chat.composer.setFocus(Qt.FocusReason.ShortcutFocusReason)

    @Slot()
    def _focus_search(self) -> None:
        self.conversations.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.conversations.search.selectAll()

    def _set_tab_order(self) -> None:
        """Tab: composer → Send (→ the reply's buttons) → the conversation search and list → the statistics → the
        chat → back.

        The chat view orders its own row (composer, Send, Stop, Continue, Regenerate, provenance); this joins it to
        the list and the statistics, and puts the chat last: inside it Tab walks every Copy and Edit link of every
        message, and in a long chat that came before the search box. Disabled or hidden widgets are skipped by Qt.
        """
        conv, stats = self.conversations, self.stats
        chain = [self.chat.provenance_box, conv.search, conv.list, conv.new_button, conv.rename_button,
                 conv.delete_button, conv.undo_button, stats.draft_off_button, stats.draft_auto_button, stats.numbers,
                 self.chat.browser, self.chat.composer]
        for before, after in itertools.pairwise(chain):
            self.setTabOrder(before, after)

    def _wire(self) -> None:
        s, c = self.controller, self.chat
        c.send_requested.connect(self._on_chat_send_requested)
        c.edit_resend_requested.connect(s.edit_resend)
        c.stop_requested.connect(s.stop)
        c.regenerate_requested.connect(s.regenerate)
        c.provenance_toggled.connect(lambda on: self.settings.set(show_provenance=on))
        s.conversation_opened.connect(self._on_controller_conversation_opened)
        s.user_message_added.connect(c.add_user_message)
        s.user_message_stored.connect(c.set_last_user_id)
        s.message_not_stored.connect(c.composer.setPlainText)  # nothing typed is lost
        s.reply_started.connect(c.begin_reply)
        s.reply_continued.connect(c.continue_reply)
        s.reply_grew.connect(c.reply_grew)
        c.continue_requested.connect(s.continue_reply)
        s.reply_ended.connect(self._on_controller_reply_ended)
        s.engine_changed.connect(self._on_controller_engine_changed)
        s.notice.connect(self.show_notice)
        s.crashed.connect(self._on_controller_crashed)
        s.load_failed.connect(self._on_controller_load_failed)
        s.busy_changed.connect(c.set_busy)
        s.busy_changed.connect(lambda busy: self._notice_is_stale(NoticeScope.REPLY) if busy else None)
        s.engine_changed.connect(lambda _info: self._notice_is_stale(NoticeScope.PAIR))
        # The pair the "slower than plain" warning was about is gone (another pair, a failed load, a crash).
        s.engine_changed.connect(lambda info: self.stats.pair_changed() if info is None else None)
        s.conversation_opened.connect(lambda *_: self._notice_is_stale(NoticeScope.CHAT, NoticeScope.REPLY))
        self.stats.draft_off_requested.connect(lambda: self.settings.set(draft_source="none"))
        self.stats.draft_auto_requested.connect(lambda: self.settings.set(k_policy="auto"))
        self.settings.changed.connect(self._on_settings_changed)
        self.settings.save_failed.connect(self.show_notice)
        self.store.conversations_changed.connect(self.refresh_conversations)
        v = self.conversations
        v.conversation_selected.connect(s.open_conversation)
        v.new_requested.connect(self._on_new_chat)
        v.rename_requested.connect(self.store.rename)
        v.delete_requested.connect(self._on_conversation_deleted)
        v.restore_requested.connect(self.store.restore)
        v.search_changed.connect(lambda _: self.refresh_conversations())

    def set_catalogue_service(self, service: Any) -> None:
        """The catalogue service, built on a background thread after the first paint (None: it could not be
        read; the picker stays unavailable and the terminal's `outrider models` is offered instead)."""
        self.catalogue_service = service
        self.actions_by_id[ACTION_CHOOSE_PAIR].setEnabled(service is not None)

    # -- engine -----------------------------------------------------------------------------------------------
    def load_pair(self, choice: PairChoice, *, automatic: bool = False) -> None:
        """Load ``choice``; ``automatic`` (start-up) refuses a model whose load crashed the engine before."""
        self.crash_banner.hide()
        demo = choice.demo
        self.invite_label.setText(
            "You are chatting with the offline demo pair (SmolLM2-135M + prompt lookup). For real speed-ups, "
            "choose a verified target + draft pair from the catalogue.")
        self.invite_banner.setVisible(demo)
        self.controller.load_pair(choice, automatic=automatic)

    def choose_pair(self, picked: Any) -> None:
        """A pair confirmed in the pair picker: apply its recommended settings, remember it, load it.

        The recommended draft max (fixed k or auto), draft min, p-min and context size replace the current
        settings except those the user set in the settings dialog (``AppSettings.user_overrides``). The pair
        is saved in the settings, so the next start loads it.
        """
        service = self.catalogue_service
        demo = getattr(getattr(service, "catalogue", None), "demo", None)
        choice = pair_choice_of(picked, demo_id=demo.id if demo else None)
        s = self.settings.value
        changes: dict[str, Any] = {}
        rec = getattr(picked, "settings", None)
        if rec is not None:
            n_ctx = int(getattr(picked, "n_ctx", 0) or s.context_size)
            changes = s.recommended(rec.k, int(rec.draft_min), float(rec.p_min), n_ctx)
        changes.update(pair_id=choice.pair_id or "", pair_target=str(choice.target),
                       pair_draft=str(choice.draft) if choice.draft else "", pair_lookup=choice.lookup,
                       pair_mtp=choice.mtp,
                       pair_name=choice.name)
        self._applying_pair = True  # the load below uses the new settings: no reload of the old pair
        try:
            self.settings.set(**changes)
        finally:
            self._applying_pair = False
        self.load_pair(choice)

    @Slot(object)
    def _on_controller_engine_changed(self, info: Any) -> None:
        st = self.controller.engine_status()
        backend = st["backend"] + (" (GPU offload)" if st.get("gpu_offload") else "")
        if info is None:
            self._plain = None  # measured with the engine that is gone
            self.engine_label.setText(f"Engine: {backend} · {st['state']}")
            return
        self.chat.set_drafters(str(getattr(info, "draft_mode", "")))
        mem = st.get("memory_bytes", 0)
        layers = st.get("gpu_layers", (0, 0))
        plain = self._plain_of_this_chat()  # measured in this chat's last reply (docs/metrics.md: plain_tps)
        last = self.controller.last_done  # automatic threads are re-chosen per reply: the last reply's count first
        threads = (last.stats.threads if last is not None and last.stats.threads else 0) or getattr(info, "threads", 0)
        self.engine_label.setText(
            f"Engine: {backend} · target {st.get('target')} · {drafting_text(self.settings.value, info)} · "
            f"{format_bytes(mem)} "  # the picker's units (decimal), so one model reads the same size everywhere
            f"(weights + KV, ctx {st.get('n_ctx')})"
            + (f" · GPU layers {layers[0]}/{layers[1]}" if st.get("gpu_offload") else "")  # none on a CPU build
            + (f" · {threads} CPU thread{'s' if threads != 1 else ''}" if threads else "")
            + (f" · plain {plain:.1f} tok/s (last reply)" if plain else "")
            + (f" · {info.placement_text()}" if info.uses_rpc else ""))

    def _plain_of_this_chat(self) -> float | None:
        """Plain tok/s measured in the last reply of the chat shown, with this engine (None in another chat: a
        figure of another conversation, at another context length, said nothing about this one)."""
        if self._plain is None or self._plain[0] != self.controller.conversation_id:
            return None
        return self._plain[1]

    @Slot(str)
    def _on_controller_crashed(self, reason: str) -> None:
        self.crash_label.setText(f"The engine stopped: {reason}. Your conversation is safe; the reply so far was "
                                 f"kept as interrupted.")
        self.reload_button.setText("Reload")
        self.reload_button.setVisible(True)
        self.crash_banner.show()

    @Slot(str)
    def _on_controller_load_failed(self, reason: str) -> None:
        self.crash_label.setText(f"Could not load the pair: {reason}")
        self.reload_button.setText("Retry")
        self.crash_banner.show()

    @Slot()
    def _on_reload_clicked(self) -> None:
        self.crash_banner.hide()
        self.controller.reload()

    # -- conversations ----------------------------------------------------------------------------------------
    def refresh_conversations(self) -> None:
        query = self.conversations.search.text().strip()
        if query:
            rows = ConversationListModel.rows_from_hits(self.store.search(query))
            rows = self._with_open_conversation(rows)
        else:
            rows = [ConversationRow.of(c) for c in self.store.conversations()]
        self.list_model.set_rows(rows)
        self.conversations.select(self.controller.conversation_id)

    def _with_open_conversation(self, rows: list[ConversationRow]) -> list[ConversationRow]:
        """The search results, with the open conversation first when it does not match: a chat started while the
        list is filtered must not vanish from it (it did: the new chat had no message matching yet)."""
        open_id = self.controller.conversation_id
        if open_id is None or any(r.id == open_id for r in rows):
            return rows
        current = next((c for c in self.store.conversations() if c.id == open_id), None)
        if current is None:
            return rows
        return [dataclasses.replace(ConversationRow.of(current), snippet="open now · no match"), *rows]

    @Slot(object, list)
    def _on_controller_conversation_opened(self, conversation_id: int | None, items: list[Any]) -> None:
        self.chat.set_messages(items)
        self.conversations.select(conversation_id)
        if self.controller.loaded is not None:
            self._on_controller_engine_changed(self.controller.loaded)  # the plain rate shown is this chat's or none

    @Slot(str, str, object)
    def _on_controller_reply_ended(self, status: str, text: str, message_id: Any) -> None:
        end = self.controller.last_end
        self.chat.end_reply(status, text, message_id, str(end.reason) if end is not None else "")
        done = self.controller.last_done
        if done is not None and done.stats.plain_tps:
            self._plain = (self.controller.conversation_id, done.stats.plain_tps)
        if self.controller.loaded is not None:
            self._on_controller_engine_changed(self.controller.loaded)  # the plain rate this reply measured

    @Slot(str)
    def _on_chat_send_requested(self, text: str) -> None:
        if not self.controller.send(text):
            self.chat.composer.setPlainText(text)

    @Slot(int)
    def _on_conversation_deleted(self, conversation_id: int) -> None:
        self.store.delete(conversation_id)
        if conversation_id == self.controller.conversation_id:
            self.controller.open_conversation(None)

    @Slot()
    def _on_new_chat(self) -> None:
        self.controller.open_conversation(None)
        self.chat.composer.setFocus()

    # -- dialogs and settings ---------------------------------------------------------------------------------
    def show_notice(self, text: str, scope: str = NoticeScope.APP) -> None:
        """Show ``text`` above the chat until what it belongs to (``scope``, a ``NoticeScope``) changes."""
        self._notice_scope = NoticeScope(scope)
        self.notice_label.setText(text)
        self.notice_label.setVisible(bool(text))
        self.statusBar().showMessage(text, 8000)

    def _notice_is_stale(self, *scopes: NoticeScope) -> None:
        """What the shown notice belongs to changed (one of ``scopes``): it goes."""
        if self.notice_label.text() and self._notice_scope in scopes:
            self.show_notice("", NoticeScope.APP)
            self.statusBar().clearMessage()

    @Slot()
    def _on_choose_pair(self) -> None:
        if self.catalogue_service is None:
            self.show_notice("The pair picker is not available; use `outrider models` in a terminal.")
            return
        from outrider.ui.picker.dialog import PairPickerDialog  # here: the picker's imports wait until it is used

        dialog = PairPickerDialog(self.catalogue_service, self, calibration_prompts=self._calibration_prompts)
        dialog.pair_chosen.connect(self.choose_pair)
        dialog.open()

    def _calibration_prompts(self) -> tuple[list[str], str]:
        """The user's recent prompts, which a self-draft is measured on (read on the GUI thread, as the list of
        conversations is); none when the history cannot be read (the picker then uses its bundled prompts)."""
        from outrider.history import StoreError
        from outrider.history.recent import recent_user_prompts

        try:
            return recent_user_prompts(self.store.store), "history"
        except StoreError:
            return [], "history"

    @Slot()
    def _on_benchmark(self) -> None:
        if not self.controller.ready or self.controller.streaming:
            self.show_notice("Load a pair and let the reply finish before benchmarking.", NoticeScope.PAIR)
            return
        prompts = [m.text for m in self.chat.messages if m.role == "user"][-5:]
        name = self.controller.choice.name if self.controller.choice else ""
        from outrider.ui.dialogs.benchmark_dialog import BenchmarkDialog  # here: not needed to paint the window

        dialog = BenchmarkDialog(self.bridge, prompts, self, pair_name=name, draft=self.settings.value.draft_params())
        dialog.open()

    @Slot()
    def _on_about(self) -> None:
        from outrider.ui.dialogs.about_dialog import AboutDialog  # opened rarely: not on the start-up path

        self.about_dialog = AboutDialog(self.bridge.client.backend, self)
        self.about_dialog.open()

    def _on_settings(self) -> None:
        from outrider.ui.dialogs.settings_dialog import SettingsDialog

        dialog = SettingsDialog(self.settings.value, self, backend=self.bridge.client.backend)
        if dialog.exec():
            self.apply_user_settings(dialog.result_settings())

    def apply_user_settings(self, value: AppSettings) -> list[str]:
        """Settings from the dialog; the pair-recommended ones the user changed are kept over a pair's advice."""
        old = self.settings.value
        changed = {n for n in PAIR_RECOMMENDED if getattr(value, n) != getattr(old, n)}
        overrides = ",".join(sorted(old.overridden() | changed))
        return self.settings.replace(dataclasses.replace(value, user_overrides=overrides))

    @Slot(bool)
    def _on_dark_toggled(self, on: bool) -> None:
        self.settings.set(theme="dark" if on else "light")

    @Slot(list)
    def _sync_draft_on_button(self) -> None:
        self.draft_on_button.setVisible(self.settings.value.draft_source == "none")

    def _on_settings_changed(self, names: list[str]) -> None:
        if "theme" in names:
            self.apply_settings_theme()
        if "draft_source" in names:
            self._sync_draft_on_button()
        if self._applying_pair:
            return
        value = self.settings.value
        if reload_needed(value, names, self.controller.choice, self.controller.loaded):
            self.controller.reload()  # prompt lookup vs model draft, layers, context: chosen at load time
        if any(n in DRAFT_KEYS for n in names):
            self.show_notice(f"Drafting: {drafting_text(value, self.controller.loaded)} (applies from the next reply)",
                             NoticeScope.REPLY)
            self._on_controller_engine_changed(self.controller.loaded)

    def apply_settings_theme(self) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            colours = apply_theme(app, self.settings.value.theme)
            self.chat.set_colours(colours)
            self.stats.set_colours(colours)
            self.actions_by_id[ACTION_DARK].setChecked(colours.name == "dark")

    def closeEvent(self, event: QCloseEvent) -> None:  # Qt override
        self.controller.stop()
        self.stats.timer.stop()
        super().closeEvent(event)
