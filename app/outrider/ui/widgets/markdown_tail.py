"""The streaming reply's Markdown, rendered incrementally: a frozen head and a re-rendered tail.

The head up to the last block boundary outside a code fence (``markdown.stable_prefix``) is rendered once and
kept ("frozen"); each render removes and re-renders only the tail after it, so a render costs the size of the
newest paragraph, not of the message.
"""

from __future__ import annotations

from PySide6.QtGui import QTextCharFormat, QTextCursor, QTextDocument

from outrider.ui.theme import ThemeColours
from outrider.ui.widgets.markdown import code_blocks, render_markdown, stable_prefix

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
