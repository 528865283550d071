"""The chat: one QTextBrowser document for the conversation, a composer, and the reply controls.

Streaming is O(1) per batch: the streaming reply's text lives in one ``ReplyText`` (``chat_items``), which
``ChatSession`` appends to; ``reply_grew`` asks this view to show the pieces it has not shown yet, inserted with a
``QTextCursor`` at the end of the document, at most ``APPEND_CHARS_PER_TURN`` characters per ``FRAME_MS`` frame.
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

from PySide6.QtCore import QElapsedTimer, QEvent, QObject, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import QGuiApplication, QKeyEvent, QTextBlock, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QLabel,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from outrider.ui.theme import LIGHT, ThemeColours
from outrider.ui.widgets.chat_format import (
    HEADER_PROPERTY,
    PLACEHOLDER,
    PROVENANCE_MARKDOWN_MAX_CHARS,
    SAMPLE_PROMPTS,
    RunFormats,
    header_html,
    insert_body,
    insert_header,
    mark_header,
    muted_format,
    run_formats,
    welcome_html,
)
from outrider.ui.widgets.chat_items import MessageItem, ReplyText, merge_runs
from outrider.ui.widgets.composer import Composer
from outrider.ui.widgets.markdown import code_blocks
from outrider.ui.widgets.markdown_tail import MarkdownTail
from outrider.ui.widgets.reply_controls import ReplyControls

MARKDOWN_INTERVAL_MS = 350  # re-render the streaming message's Markdown tail at most ~3 times a second
FRAME_MS = 16  # streamed text reaches the document at most once per frame (one layout and repaint per frame)
APPEND_CHARS_PER_TURN = 2048  # a drain inserts at most this much text per event-loop turn; the rest waits a turn
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
        self._streaming: MessageItem | None = None
        self._body_start = 0
        self._editing_id: int | None = None
        self._shown = 0  # pieces of the streaming reply already in the document
        self._placeholder = False  # the streaming reply's body shows PLACEHOLDER (no text yet)
        self._follow = True  # keep the end of the conversation in view (off while the user reads further up)
        self._busy = False
        self._headers: dict[int, QTextBlock] = {}  # header block of each message index, as drawn
        self._scrolling = False  # the view itself is moving the scroll bar
        self._formats: RunFormats = {}  # None: plain; True/False: draft/target token
        self._md = MarkdownTail()  # the streaming reply's rendered Markdown (head frozen, tail re-rendered)

        self.browser = QTextBrowser(self)
        self.browser.setObjectName("chatView")
        self.browser.setOpenLinks(False)
        self.browser.setOpenExternalLinks(False)
        self.browser.anchorClicked.connect(self._on_browser_anchor_clicked)
        self.browser.setAccessibleName("Conversation")
        self.browser.document().setDocumentMargin(12)
        self.browser.document().setUndoRedoEnabled(False)  # read-only: an undo stack would only cost time and memory

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

        self._markdown_timer = QTimer(self)
        self._markdown_timer.setInterval(MARKDOWN_INTERVAL_MS)
        self._markdown_timer.timeout.connect(self._on_markdown_timer_timeout)
        self._drain_timer = QTimer(self)
        self._drain_timer.setSingleShot(True)
        self._drain_timer.timeout.connect(self._on_drain_timer_timeout)
        self._since_drain = QElapsedTimer()
        self._since_drain.start()
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
        return self._streaming is not None

    def set_colours(self, colours: ThemeColours) -> None:
        self.colours = colours
        self._update_legend()
        self.render_all()

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
        """The id of the last message when it is a reply cut at the token limit (it can be continued)."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == "assistant" and last.end == "length" and self._streaming is None:
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
        self._streaming = None
        self._markdown_timer.stop()
        self._drain_timer.stop()
        self._follow = True
        self.render_all()
        self.set_busy(False)

    def render_all(self) -> None:
        """Rebuild the whole document (conversation opened, theme or provenance view changed); an empty chat
        shows the first-run page with sample prompts."""
        self._rebuild_formats()
        self._update_legend()
        self._drain_timer.stop()
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
            if item is self._streaming:
                self._body_start = start
                self._shown = len(item.reply.pieces) if item.reply is not None else 0
                self._placeholder = False
                if not item.text:
                    self._insert_placeholder(cursor)
        cursor.endEditBlock()
        self._reset_markdown_tail()
        self._scroll_to_end()

    def _rebuild_formats(self) -> None:
        self._formats = run_formats(self.colours, self._provenance)

    def _plain_format(self) -> QTextCharFormat:
        return self._formats[None]

    def _insert_header(self, cursor: QTextCursor, index: int, item: MessageItem, *, last: bool = True) -> None:
        insert_header(cursor, index, item, self.colours, self._formats, last=last)
        self._headers[index] = cursor.block().previous()

    def _insert_body(self, cursor: QTextCursor, index: int, item: MessageItem) -> None:
        insert_body(cursor, index, item, self.colours, self._formats, provenance=self._provenance,
                    streaming=item is self._streaming)

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
        if len(self.messages) > 1 and self.messages[-2].role == "assistant" and self.messages[-2].end == "length":
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
        self._streaming = item
        self._follow = True
        cursor = QTextCursor(self.browser.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self._insert_header(cursor, len(self.messages) - 1, item)
        self._body_start = cursor.position()
        self._shown = 0
        self._placeholder = False
        self._insert_placeholder(cursor)
        self._reset_markdown_tail()
        self._md.dirty = False
        self._markdown_timer.start()
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

    def _insert_placeholder(self, cursor: QTextCursor) -> None:
        cursor.insertText(PLACEHOLDER, muted_format(self.colours))
        cursor.setCharFormat(self._plain_format())
        self._placeholder = True

    def _remove_placeholder(self) -> None:
        if not self._placeholder:
            return
        cursor = QTextCursor(self.browser.document())
        cursor.setPosition(self._body_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        cursor.setCharFormat(self._plain_format())
        self._placeholder = False

    def reply_grew(self) -> None:
        """The streaming reply has new pieces: append (part of) them at the end of the document (no re-render).

        One drain inserts at most ``APPEND_CHARS_PER_TURN`` characters, consecutive pieces of one provenance as
        one insertion, inside one edit block (one layout pass); the rest follows on a later event-loop turn.
        Drains are paced to one per ``FRAME_MS``: new text arriving sooner waits for the frame's timer.
        """
        if self._streaming is None:
            return
        self._md.dirty = True
        if self._drain_timer.isActive():
            return
        wait = FRAME_MS - self._since_drain.elapsed()
        if wait <= 0:
            self._drain(APPEND_CHARS_PER_TURN)
        else:
            self._drain_timer.start(int(wait))

    def _drain(self, budget: int) -> None:
        item = self._streaming
        reply = item.reply if item is not None else None
        if reply is None or self._shown >= len(reply.pieces):
            return
        self._since_drain.restart()
        pieces = reply.pieces
        first = self._shown
        while self._shown < len(pieces) and budget > 0:
            budget -= len(pieces[self._shown][0])
            self._shown += 1
        taken = pieces[first:self._shown]
        runs = merge_runs(taken) if self._provenance else [("".join(t for t, _ in taken), None)]
        self._remove_placeholder()
        cursor = QTextCursor(self.browser.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        for text, drafted in runs:
            cursor.insertText(text, self._formats[drafted])
        cursor.endEditBlock()
        if self._follow:
            self._scroll_to_end()
        if self._shown < len(pieces):
            self._drain_timer.start(0)  # the next event-loop turn: input, paints and other timers go first

    @Slot()
    def _on_drain_timer_timeout(self) -> None:
        self._drain(APPEND_CHARS_PER_TURN)

    def end_reply(self, status: str, text: str | None = None, message_id: int | None = None, end: str = "") -> None:
        """The reply ended (``end``: how, an ``EndReason`` value): its header says so; in the Markdown view its
        unrendered tail is rendered. The whole message is re-rendered only when it must be: the engine's final
        text differs from what streamed, it ended empty, or the provenance view lays its colours over Markdown.
        """
        item = self._streaming
        if item is None:
            return
        self._markdown_timer.stop()
        self._drain_timer.stop()
        streamed = item.flush().text
        final = streamed if text is None else text
        index = len(self.messages) - 1
        if final == streamed and final and (not self._provenance or len(final) > PROVENANCE_MARKDOWN_MAX_CHARS):
            if self._provenance:
                self._drain(len(final) + 1)  # a very long reply keeps its streamed runs: the rest, at once
            else:
                self._render_markdown_tail(final=True)  # the Markdown view: only the unrendered tail is left
            item.finish(status, final, end)
            item.message_id = message_id
            self._streaming = None
            self._redraw_header(index)
        else:
            item.finish(status, final, end)
            item.message_id = message_id
            self._streaming = None
            self._placeholder = False
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
        self._body_start = cursor.position()
        self._insert_body(cursor, index, self.messages[index])
        cursor.endEditBlock()
        if self._follow:
            self._scroll_to_end()

    @Slot()
    def _on_markdown_timer_timeout(self) -> None:
        item = self._streaming
        if item is None or not self._md.dirty or self._provenance:
            return  # provenance view shows the streamed tokens themselves
        self._render_markdown_tail(final=False)

    def _reset_markdown_tail(self) -> None:
        self._md.reset(self._body_start)

    def _render_markdown_tail(self, final: bool) -> None:
        """Render the streaming message's Markdown, only from its last stable boundary on (``MarkdownTail``).
        ``final``: the reply ended, render all that is left."""
        item = self._streaming
        if item is None:
            return
        text = item.flush().text
        if not text:
            return  # the placeholder stays until the first text
        self._remove_placeholder()
        self._shown = len(item.reply.pieces) if item.reply is not None else 0  # the tail covers every piece
        self._drain_timer.stop()
        self._md.render(self.browser.document(), text, index=len(self.messages) - 1, colours=self.colours,
                        final=final, body_start=self._body_start, plain=self._plain_format())
        if self._follow:
            self._scroll_to_end()

    # -- following the end ------------------------------------------------------------------------------------
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
