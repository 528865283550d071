"""The streaming reply's body at the end of the chat document: how its text reaches the document while it grows.

Streaming is O(1) per batch: the reply's text lives in one ``ReplyText`` (``chat_items``), which ``ChatController``
appends to; ``ReplyStream.grew`` inserts the pieces not shown yet with a ``QTextCursor`` at the end of the
document, at most ``APPEND_CHARS_PER_TURN`` characters per ``FRAME_MS`` frame. In the Markdown view the body is
re-rendered by ``MarkdownTail`` at most every ``MARKDOWN_INTERVAL_MS``, only from its last stable boundary on
(the head up to the last block boundary outside a code fence, ``markdown.stable_prefix``, is rendered once and
kept), so a render costs the size of the newest paragraph, not of the message. Until the first text the body
says ``PLACEHOLDER``.

The view (``chat_view.ChatView``) owns the document, the messages and the headers; this owns where the streaming
body starts and how much of the reply it shows.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QElapsedTimer, QObject, QTimer, Slot
from PySide6.QtGui import QTextCharFormat, QTextCursor, QTextDocument

from outrider.conversation.reply_text import merge_runs
from outrider.ui.theme import LIGHT, ThemeColours
from outrider.ui.widgets.chat_format import (
    PLACEHOLDER,
    PROVENANCE_MARKDOWN_MAX_CHARS,
    RunFormats,
    format_of,
    muted_format,
)
from outrider.ui.widgets.chat_items import MessageItem
from outrider.ui.widgets.markdown import code_blocks, render_markdown, stable_prefix

MARKDOWN_INTERVAL_MS = 350  # re-render the streaming message's Markdown tail at most ~3 times a second
FRAME_MS = 16  # streamed text reaches the document at most once per frame (one layout and repaint per frame)
APPEND_CHARS_PER_TURN = 2048  # a drain inserts at most this much text per event-loop turn; the rest waits a turn
MARKDOWN_TAIL_CHARS = 3000  # a streaming paragraph longer than this is frozen at a line break (see stable_prefix)


class MarkdownTail:
    """Where the streaming reply's rendered Markdown stands in the document.

    Invariant: the document from ``tail_pos`` to its end is the rendering of ``text[frozen:]`` of the last render
    (the tail); everything before ``tail_pos`` down to the body's start is ``text[:frozen]``, rendered for good.
    """

    def __init__(self) -> None:
        self.frozen = 0  # characters of the streaming text rendered as Markdown for good
        self.blocks = 0  # code blocks in that frozen head (numbers the copy links of the tail)
        self.tail_pos = 0  # document position where the re-rendered Markdown tail starts
        self.dirty = False  # text arrived since the last render

    def reset(self, body_start: int) -> None:
        """A new (or re-drawn) streaming body starting at document position ``body_start``."""
        self.frozen = 0
        self.blocks = 0
        self.tail_pos = body_start
        self.dirty = True

    def render(self, document: QTextDocument, text: str, *, index: int, colours: ThemeColours, final: bool,
               body_start: int, plain: QTextCharFormat) -> None:
        """Re-render the tail of ``text`` (message ``index``); ``final``: the reply ended, render all that is
        left, freezing nothing more."""
        cut = len(text) if final else stable_prefix(text, self.frozen, MARKDOWN_TAIL_CHARS)
        cursor = QTextCursor(document)
        cursor.beginEditBlock()
        cursor.setPosition(self.tail_pos)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if cut > self.frozen:
            head = text[self.frozen:cut]
            html = render_markdown(head, index, colours, self.blocks)
            if html:
                cursor.insertHtml(html)
                if not final:
                    cursor.insertBlock()  # keeps the tail out of the head's last block
                self.tail_pos = cursor.position()
            self.frozen = cut
            self.blocks += len(code_blocks(head))
        tail = text[cut:]
        if tail:
            cursor.insertHtml(render_markdown(tail, index, colours, self.blocks) or "&nbsp;")
        elif cursor.position() == body_start:
            cursor.insertHtml("&nbsp;")
        cursor.setCharFormat(plain)
        cursor.endEditBlock()
        self.dirty = False


class ReplyStream(QObject):
    """The body of the reply being streamed, always the last thing in ``document``.

    Invariant while a reply streams: the document from ``body_start`` to its end shows ``PLACEHOLDER`` (no text
    yet), the first ``shown`` pieces of the reply as streamed runs (provenance view), or its Markdown
    (``MarkdownTail``).
    ``text_added`` is called after text reached the document (the view then follows the end if it should).
    """

    def __init__(self, document: QTextDocument, text_added: Callable[[], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._document = document
        self._text_added = text_added
        self.item: MessageItem | None = None  # the streaming reply, None when no reply streams
        self.index = 0  # its message index in the view
        self.body_start = 0  # document position where its body starts
        self.shown = 0  # pieces of the reply already in the document
        self.placeholder = False  # the body shows PLACEHOLDER (no text yet)
        self.colours: ThemeColours = LIGHT
        self.formats: RunFormats = {}  # None: plain; True/False: draft/target token
        self.provenance = True
        self._md = MarkdownTail()
        self._markdown_timer = QTimer(self)
        self._markdown_timer.setInterval(MARKDOWN_INTERVAL_MS)
        self._markdown_timer.timeout.connect(self._on_markdown_timer_timeout)
        self._drain_timer = QTimer(self)
        self._drain_timer.setSingleShot(True)
        self._drain_timer.timeout.connect(self._on_drain_timer_timeout)
        self._since_drain = QElapsedTimer()
        self._since_drain.start()

    def set_style(self, colours: ThemeColours, formats: RunFormats, *, provenance: bool) -> None:
        """The view's colours, run formats and provenance view (takes effect at the next insertion)."""
        self.colours, self.formats, self.provenance = colours, formats, provenance

    # -- lifetime of one streaming body -----------------------------------------------------------------------
    def begin(self, item: MessageItem, index: int, cursor: QTextCursor) -> None:
        """``item`` (message ``index``) starts streaming; its body starts at ``cursor``, the document's end."""
        self.item, self.index = item, index
        self.body_start = cursor.position()
        self.shown = 0
        self.placeholder = False
        self._insert_placeholder(cursor)
        self._md.reset(self.body_start)
        self._md.dirty = False
        self._markdown_timer.start()

    def redrawn(self, index: int, body_start: int, cursor: QTextCursor) -> None:
        """The whole document was redrawn with the streaming reply's body (all its pieces) from ``body_start`` to
        ``cursor``; a reply with no text yet gets its placeholder back."""
        item = self.item
        if item is None:
            return
        self.index, self.body_start = index, body_start
        self.shown = len(item.reply.pieces) if item.reply is not None else 0
        self.placeholder = False
        if not item.text:
            self._insert_placeholder(cursor)

    def reset_markdown(self) -> None:
        """The Markdown view starts over from the body's start (after a redraw)."""
        self._md.reset(self.body_start)

    def stop(self) -> None:
        """No more drains or Markdown renders (the reply ended, or the document is being redrawn)."""
        self._markdown_timer.stop()
        self._drain_timer.stop()

    def end(self, final: str) -> bool:
        """The reply ended with ``final`` as its text: show the rest of it in place when the body can keep what
        streamed (True: its text is ``final``, non-empty, and no provenance colours must be laid over Markdown
        afterwards); False: the view must re-render the message."""
        self.stop()
        item = self.item
        streamed = item.flush().text if item is not None else ""
        kept = final == streamed and bool(final) and (not self.provenance or len(final) > PROVENANCE_MARKDOWN_MAX_CHARS)
        if kept:
            if self.provenance:
                self._drain(len(final) + 1)  # a very long reply keeps its streamed runs: the rest, at once
            else:
                self.render_markdown(final=True)  # the Markdown view: only the unrendered tail is left
        self.item = None
        self.placeholder = False
        return kept

    # -- text reaching the document ---------------------------------------------------------------------------
    def grew(self) -> None:
        """The reply has new pieces: append (part of) them at the end of the document (no re-render).

        One drain inserts at most ``APPEND_CHARS_PER_TURN`` characters, consecutive pieces of one provenance as
        one insertion, inside one edit block (one layout pass); the rest follows on a later event-loop turn.
        Drains are paced to one per ``FRAME_MS``: new text arriving sooner waits for the frame's timer.
        """
        if self.item is None:
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
        reply = self.item.reply if self.item is not None else None
        if reply is None or self.shown >= len(reply.pieces):
            return
        self._since_drain.restart()
        pieces = reply.pieces
        first = self.shown
        while self.shown < len(pieces) and budget > 0:
            budget -= len(pieces[self.shown][0])
            self.shown += 1
        taken = pieces[first:self.shown]
        runs = merge_runs(taken) if self.provenance else [("".join(t for t, _ in taken), None)]
        self._remove_placeholder()
        cursor = QTextCursor(self._document)
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        for text, kind in runs:
            cursor.insertText(text, format_of(self.formats, kind))
        cursor.endEditBlock()
        self._text_added()
        if self.shown < len(pieces):
            self._drain_timer.start(0)  # the next event-loop turn: input, paints and other timers go first

    @Slot()
    def _on_drain_timer_timeout(self) -> None:
        self._drain(APPEND_CHARS_PER_TURN)

    @Slot()
    def _on_markdown_timer_timeout(self) -> None:
        if self.item is None or not self._md.dirty or self.provenance:
            return  # provenance view shows the streamed tokens themselves
        self.render_markdown(final=False)

    def render_markdown(self, final: bool) -> None:
        """Render the streaming message's Markdown, only from its last stable boundary on (``MarkdownTail``).
        ``final``: the reply ended, render all that is left."""
        item = self.item
        if item is None:
            return
        text = item.flush().text
        if not text:
            return  # the placeholder stays until the first text
        self._remove_placeholder()
        self.shown = len(item.reply.pieces) if item.reply is not None else 0  # the tail covers every piece
        self._drain_timer.stop()
        self._md.render(self._document, text, index=self.index, colours=self.colours, final=final,
                        body_start=self.body_start, plain=self.formats[None])
        self._text_added()

    def _insert_placeholder(self, cursor: QTextCursor) -> None:
        cursor.insertText(PLACEHOLDER, muted_format(self.colours))
        cursor.setCharFormat(self.formats[None])
        self.placeholder = True

    def _remove_placeholder(self) -> None:
        if not self.placeholder:
            return
        cursor = QTextCursor(self._document)
        cursor.setPosition(self.body_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        cursor.setCharFormat(self.formats[None])
        self.placeholder = False
