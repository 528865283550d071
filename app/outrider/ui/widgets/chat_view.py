"""The chat: one QTextBrowser document for the conversation, a composer, and the reply controls.

Streaming is O(1) per batch: ``reply_grew`` asks the streaming reply's body (``reply_stream.ReplyStream``) to show
the pieces it has not shown yet, at most ``reply_stream.APPEND_CHARS_PER_TURN`` characters per ``FRAME_MS`` frame.
Only the message being streamed is ever re-rendered (its Markdown, at most a few times a second by a timer, and
once at the end); earlier messages are rendered when a conversation opens or the theme / provenance view changes.

With provenance on, each token's background shows where it came from (accepted draft token vs target token,
docs/metrics.md "Provenance"): while a reply streams, as streamed text; once it ended, as rendered Markdown with
the backgrounds laid over it (``chat_format.paint_provenance``).

The view follows the end of the conversation while a reply streams, unless the user scrolled up; an empty chat
shows sample prompts (``chat_format.welcome_html``); a reply says how it ended in its header.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QObject, Qt, QUrl, Signal, Slot
from PySide6.QtGui import QGuiApplication, QKeyEvent, QTextBlock, QTextCursor
from PySide6.QtWidgets import (
    QLabel,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from outrider.conversation.reply_text import ReplyText
from outrider.ui.theme import LIGHT, ThemeColours
from outrider.ui.widgets.chat_format import (
    HEADER_PROPERTY,
    SAMPLE_PROMPTS,
    RunFormats,
    can_continue,
    header_html,
    insert_body,
    insert_header,
    mark_header,
    run_formats,
    welcome_html,
)
from outrider.ui.widgets.chat_items import MessageItem
from outrider.ui.widgets.composer import Composer
from outrider.ui.widgets.markdown import code_blocks
from outrider.ui.widgets.reply_controls import ReplyControls
from outrider.ui.widgets.reply_stream import ReplyStream

FOLLOW_SLACK_PX = 4  # the view counts as "at the end" this close to the bottom


class ChatView(QWidget):
    """Conversation document, composer and reply controls. Holds no engine or store: it asks by signals.

    Signals:
        send_requested(str): send a new message.
        edit_resend_requested(int, str): replace the user message with this id and everything after it.
        stop_requested(): stop the reply being streamed.
        regenerate_requested(): produce the last reply again.
        continue_requested(int): continue the reply with this id (it was cut at the token limit).
        provenance_toggled(bool): the provenance view was switched.
    """

    send_requested = Signal(str)
    edit_resend_requested = Signal(int, str)
    stop_requested = Signal()
    regenerate_requested = Signal()
    continue_requested = Signal(int)
    provenance_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.colours: ThemeColours = LIGHT
        self.messages: list[MessageItem] = []
        self._provenance = True
        self._editing_id: int | None = None
        self._follow = True  # keep the end of the conversation in view (off while the user reads further up)
        self._busy = False
        self._headers: dict[int, QTextBlock] = {}  # header block of each message index, as drawn
        self._scrolling = False  # the view itself is moving the scroll bar
        self._formats: RunFormats = {}  # None: plain; True/False: draft/target token

        self.browser = QTextBrowser(self)
        self.browser.setObjectName("chatView")
        self.browser.setOpenLinks(False)
        self.browser.setOpenExternalLinks(False)
        self.browser.anchorClicked.connect(self._on_browser_anchor_clicked)
        self.browser.setAccessibleName("Conversation")
        self.browser.document().setDocumentMargin(12)
        self.browser.document().setUndoRedoEnabled(False)  # read-only: an undo stack would only cost time and memory
        self._stream = ReplyStream(self.browser.document(), self._follow_end, self)  # the streaming reply's body

        self.composer = Composer(self)
        self.composer.setAccessibleName("Message")
        self.composer.submitted.connect(self._on_composer_submitted)
        self.composer.installEventFilter(self)

        self.controls = ReplyControls(self)
        # The row's widgets under their own names: the window, its shortcuts and the tests reach them here.
        self.send_button = self.controls.send_button
        self.stop_button = self.controls.stop_button
        self.regenerate_button = self.controls.regenerate_button
        self.continue_button = self.controls.continue_button
        self.provenance_box = self.controls.provenance_box
        self.legend_draft = self.controls.legend_draft
        self.legend_target = self.controls.legend_target
        self.send_button.clicked.connect(self._on_composer_submitted)
        self.stop_button.clicked.connect(self.stop_requested)
        self.regenerate_button.clicked.connect(self.regenerate_requested)
        self.continue_button.clicked.connect(self._on_continue_button_clicked)
        self.provenance_box.toggled.connect(self._on_provenance_box_toggled)
        self.edit_label = QLabel("", self)
        self.edit_label.hide()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.browser, 1)
        layout.addWidget(self.edit_label)
        layout.addWidget(self.composer)
        layout.addWidget(self.controls)
        self.setTabOrder(self.composer, self.send_button)
        self.setTabOrder(self.send_button, self.stop_button)
        self.setTabOrder(self.stop_button, self.continue_button)
        self.setTabOrder(self.continue_button, self.regenerate_button)
        self.setTabOrder(self.regenerate_button, self.provenance_box)
        self.setTabOrder(self.provenance_box, self.browser)

        bar = self.browser.verticalScrollBar()
        bar.valueChanged.connect(self._on_scroll_value_changed)
        bar.rangeChanged.connect(self._on_scroll_range_changed)
        self.set_busy(False)
        self._update_legend()
        self.render_all()

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def provenance(self) -> bool:
        return self._provenance

    @property
    def streaming(self) -> bool:
        return self._stream.item is not None

    def set_colours(self, colours: ThemeColours) -> None:
        self.colours = colours
        self._update_legend()
        self.render_all()

    def set_drafters(self, draft_mode: str) -> None:
        """The loaded pair's drafters (``LoadedPair.draft_mode``: ``model``, ``history+lookup+model``, …): the
        legend names each drafter of a chain in its colour."""
        self.controls.set_drafters(tuple(k for k in draft_mode.split("+") if k and k != "none"))
        self._update_legend()

    def set_provenance(self, on: bool) -> None:
        if self.provenance_box.isChecked() != on:
            self.provenance_box.setChecked(on)  # re-enters through the toggled slot
            return
        if on != self._provenance:
            self._provenance = on
            self.render_all()

    def set_busy(self, busy: bool) -> None:
        """Engine busy with a reply: Stop on, Send and Regenerate off (Regenerate needs a question to answer)."""
        self._busy = busy
        self.controls.set_state(busy=busy, can_regenerate=any(m.role == "user" for m in self.messages),
                                can_continue=self._continuable() is not None)

    def _continuable(self) -> int | None:
        """The id of the last message when it is a reply that stopped early (``chat_format.can_continue``)."""
        last = self.messages[-1] if self.messages else None
        if last is not None and can_continue(last) and not self.streaming:
            return last.message_id
        return None

    @Slot()
    def _on_continue_button_clicked(self) -> None:
        message_id = self._continuable()
        if message_id is not None:
            self.continue_requested.emit(message_id)

    def _update_legend(self) -> None:
        self.controls.set_colours(self.colours, provenance=self._provenance)

    # -- whole document ---------------------------------------------------------------------------------------
    def set_messages(self, messages: Sequence[MessageItem]) -> None:
        self.messages = list(messages)
        self._stream.stop()
        self._stream.item = None
        self._follow = True
        self.render_all()
        self.set_busy(False)

    def render_all(self) -> None:
        """Rebuild the whole document (conversation opened, theme or provenance view changed); an empty chat
        shows the first-run page with sample prompts."""
        self._rebuild_formats()
        self._update_legend()
        self._stream.stop()
        doc = self.browser.document()
        doc.clear()
        self._headers.clear()
        doc.setDefaultStyleSheet(f"a {{ color: {self.colours.link}; }}")
        cursor = QTextCursor(doc)
        cursor.beginEditBlock()
        if not self.messages:
            cursor.insertHtml(welcome_html(self.colours))
        last = len(self.messages) - 1
        for index, item in enumerate(self.messages):
            item.flush()
            self._insert_header(cursor, index, item, last=index == last)
            start = cursor.position()
            self._insert_body(cursor, index, item)
            if item is self._stream.item:
                self._stream.redrawn(index, start, cursor)
        cursor.endEditBlock()
        self._stream.reset_markdown()
        self._scroll_to_end()

    def _rebuild_formats(self) -> None:
        self._formats = run_formats(self.colours, self._provenance)
        self._stream.set_style(self.colours, self._formats, provenance=self._provenance)

    def _insert_header(self, cursor: QTextCursor, index: int, item: MessageItem, *, last: bool = True) -> None:
        insert_header(cursor, index, item, self.colours, self._formats, last=last)
        self._headers[index] = cursor.block().previous()

    def _insert_body(self, cursor: QTextCursor, index: int, item: MessageItem) -> None:
        insert_body(cursor, index, item, self.colours, self._formats, provenance=self._provenance,
                    streaming=item is self._stream.item)

    def _header_block(self, index: int) -> QTextBlock:
        """The header block of message ``index``: remembered when drawn, else searched from the end."""
        block = self._headers.get(index, QTextBlock())
        if block.isValid() and block.blockFormat().property(HEADER_PROPERTY) == index:
            return block
        block = self.browser.document().lastBlock()
        while block.isValid():
            if block.blockFormat().property(HEADER_PROPERTY) == index:
                return block
            block = block.previous()
        return block

    def _redraw_header(self, index: int) -> None:
        """Redo the header line of message ``index`` in place (its id, status or end changed)."""
        block = self._header_block(index)
        if not block.isValid():
            return
        cursor = QTextCursor(block)
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertHtml(header_html(index, self.messages[index], self.colours,
                                      last=index == len(self.messages) - 1))
        mark_header(cursor, index)

    def _redraw_previous_reply(self) -> None:
        """A message was just appended: the reply before it is no longer the last one (no Continue link)."""
        if len(self.messages) > 1 and can_continue(self.messages[-2]):
            self._redraw_header(len(self.messages) - 2)

    # -- streaming --------------------------------------------------------------------------------------------
    def add_user_message(self, text: str, message_id: int | None = None) -> None:
        """Show the user's message now; its id (for Edit & resend) may follow with ``set_last_user_id``."""
        item = MessageItem("user", text, message_id=message_id)
        self.messages.append(item)
        self._follow = True
        if len(self.messages) == 1:
            self.render_all()  # the first message replaces the first-run page
        else:
            self._redraw_previous_reply()
            cursor = QTextCursor(self.browser.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            self._insert_header(cursor, len(self.messages) - 1, item)
            self._insert_body(cursor, len(self.messages) - 1, item)
            self._scroll_to_end()
        self.set_busy(self._busy)

    def set_last_user_id(self, message_id: int) -> None:
        """The last user message was stored as ``message_id``: its header gains Edit & resend."""
        for index in range(len(self.messages) - 1, -1, -1):
            item = self.messages[index]
            if item.role == "user":
                item.message_id = message_id
                self._redraw_header(index)
                return

    def begin_reply(self, reply: ReplyText | None = None) -> ReplyText:
        """Show a new streaming reply whose text is ``reply`` (a new one when None; returned). Until text arrives
        its body says ``PLACEHOLDER``; text already in ``reply`` (a continued reply's start) is shown at once."""
        reply = reply if reply is not None else ReplyText()
        item = MessageItem("assistant", "", status="streaming", reply=reply)
        self.messages.append(item)
        self._redraw_previous_reply()
        self._follow = True
        cursor = QTextCursor(self.browser.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self._insert_header(cursor, len(self.messages) - 1, item)
        self._stream.begin(item, len(self.messages) - 1, cursor)
        self.set_busy(True)
        self._scroll_to_end()
        if reply.pieces:
            self.reply_grew()
        return reply

    def continue_reply(self, reply: ReplyText) -> None:
        """The last message (a reply cut at the token limit) streams on: it is redrawn as the streaming ``reply``,
        which starts with its text."""
        if self.messages and self.messages[-1].role == "assistant":
            self.messages.pop()
            self.render_all()
        self.begin_reply(reply)

    def reply_grew(self) -> None:
        """The streaming reply has new pieces: they reach the document on the next frame (``ReplyStream.grew``)."""
        self._stream.grew()

    def end_reply(self, status: str, text: str | None = None, message_id: int | None = None, end: str = "") -> None:
        """The reply ended (``end``: how, an ``EndReason`` value): its header says so; in the Markdown view its
        unrendered tail is rendered. The whole message is re-rendered only when it must be: the engine's final
        text differs from what streamed, it ended empty, or the provenance view lays its colours over Markdown.
        """
        item = self._stream.item
        if item is None:
            return
        final = item.flush().text if text is None else text
        kept = self._stream.end(final)  # the body shows all of ``final`` when it can keep what streamed
        item.finish(status, final, end)
        item.message_id = message_id
        if kept:
            self._redraw_header(len(self.messages) - 1)
        else:
            self._rerender_last()
        self.set_busy(False)

    def _rerender_last(self) -> None:
        """Replace the last message (header and body) in place: the only re-render during a conversation."""
        if not self.messages:
            return
        index = len(self.messages) - 1
        doc = self.browser.document()
        cursor = QTextCursor(doc)
        header_block = self._header_block(index)
        cursor.setPosition(header_block.position() if header_block.isValid() else 0)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.beginEditBlock()
        cursor.removeSelectedText()
        if index > 0:
            cursor.deletePreviousChar()  # the block separator; _insert_header adds it back
        self._insert_header(cursor, index, self.messages[index])
        self._insert_body(cursor, index, self.messages[index])
        cursor.endEditBlock()
        if self._follow:
            self._scroll_to_end()

    # -- following the end ------------------------------------------------------------------------------------
    def _follow_end(self) -> None:
        """Text reached the document: keep its end in view unless the user scrolled up."""
        if self._follow:
            self._scroll_to_end()

    def _scroll_to_end(self) -> None:
        bar = self.browser.verticalScrollBar()
        self._scrolling = True
        try:
            bar.setValue(bar.maximum())
        finally:
            self._scrolling = False

    @Slot(int)
    def _on_scroll_value_changed(self, value: int) -> None:
        if not self._scrolling:  # the user moved it: follow again only once back at the end
            self._follow = value >= self.browser.verticalScrollBar().maximum() - FOLLOW_SLACK_PX

    @Slot(int, int)
    def _on_scroll_range_changed(self, _minimum: int, _maximum: int) -> None:
        if self._follow:  # the document grew (or was laid out late): keep its end in view
            self._scroll_to_end()

    # -- user actions -----------------------------------------------------------------------------------------
    def composer_text(self) -> str:
        return self.composer.toPlainText()

    @Slot()
    def _on_composer_submitted(self) -> None:
        text = self.composer.toPlainText().strip()
        if not text or self.streaming:
            return
        self.composer.clear()
        editing, self._editing_id = self._editing_id, None
        self.edit_label.hide()
        if editing is not None:
            self.edit_resend_requested.emit(editing, text)
        else:
            self.send_requested.emit(text)

    @Slot(bool)
    def _on_provenance_box_toggled(self, on: bool) -> None:
        if on != self._provenance:
            self._provenance = on
            self.render_all()
        self.provenance_toggled.emit(on)

    @Slot(QUrl)
    def _on_browser_anchor_clicked(self, url: QUrl) -> None:
        kind, _, rest = url.toString().partition(":")
        try:
            numbers = [int(x) for x in rest.split(":")]
        except ValueError:
            return
        if kind == "sample":
            if 0 <= numbers[0] < len(SAMPLE_PROMPTS) and not self.streaming:
                self.send_requested.emit(SAMPLE_PROMPTS[numbers[0]].text)
            return
        try:
            item = self.messages[numbers[0]]
        except IndexError:
            return
        item.flush()
        if kind == "copy":
            QGuiApplication.clipboard().setText(item.text)
        elif kind == "copy-code" and len(numbers) == 2:
            blocks = code_blocks(item.text)
            if numbers[1] < len(blocks):
                QGuiApplication.clipboard().setText(blocks[numbers[1]].code)
        elif kind == "edit" and item.message_id is not None and not self.streaming:
            self.start_edit(item)
        elif kind == "continue" and item.message_id is not None and not self.streaming:
            self.continue_requested.emit(item.message_id)

    def start_edit(self, item: MessageItem) -> None:
        self._editing_id = item.message_id
        self.composer.setPlainText(item.text)
        self.edit_label.setText("Editing an earlier message: sending replaces it and everything after it "
                                "(Esc cancels)")
        self.edit_label.show()
        self.composer.setFocus()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Esc in the composer cancels an edit. While editing, the composer claims Esc (``ShortcutOverride``) so the
        window's Esc shortcut (stop the reply) does not swallow it."""
        editing_esc = (watched is self.composer and isinstance(event, QKeyEvent)
                       and event.key() == Qt.Key.Key_Escape and self._editing_id is not None and not self.streaming)
        if editing_esc and event.type() == QEvent.Type.ShortcutOverride:
            event.accept()
            return True
        if editing_esc and event.type() == QEvent.Type.KeyPress:
            self._editing_id = None
            self.edit_label.hide()
            self.composer.clear()
            return True
        return super().eventFilter(watched, event)
