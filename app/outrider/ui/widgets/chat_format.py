"""How a message looks in the chat document: its header line, its body blocks, and the streamed text's formats.

Stateless helpers of ``ChatView``: the view decides when a message is (re)drawn, these decide how. A body is
the streamed runs with their provenance formats (provenance view, or any message still streaming) or the
message's rendered Markdown; the header is one line of HTML (who, status, Copy / Edit & resend links).
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QTextBlockFormat, QTextCharFormat, QTextCursor

from outrider.ui.theme import ThemeColours
from outrider.ui.widgets.chat_items import MessageItem
from outrider.ui.widgets.markdown import render_markdown

RunFormats = dict[bool | None, QTextCharFormat]  # None: plain text; True/False: accepted draft / target token


def run_formats(colours: ThemeColours, provenance: bool) -> RunFormats:
    """The three character formats of streamed text, built once per theme / view (never per token)."""
    plain = QTextCharFormat()
    plain.setForeground(QColor(colours.text))
    formats: RunFormats = {None: plain}
    for drafted in (True, False):
        fmt = QTextCharFormat(plain)
        if provenance:
            fmt.setBackground(QColor(colours.draft_bg if drafted else colours.target_bg))
            fmt.setProperty(QTextCharFormat.Property.UserProperty, "draft" if drafted else "target")
        formats[drafted] = fmt
    return formats


def header_html(index: int, item: MessageItem, colours: ThemeColours) -> str:
    """The header line of message ``index``: who wrote it, its status, and its action links."""
    who = {"user": "You", "assistant": "Outrider", "system": "System"}.get(item.role, item.role)
    links = [f'<a href="copy:{index}">Copy</a>']
    if item.role == "user" and item.message_id is not None:
        links.append(f'<a href="edit:{index}">Edit &amp; resend</a>')
    status = ""
    if item.status == "interrupted":
        status = f' <span style="color:{colours.warning};">— interrupted</span>'
    elif item.status == "error":
        status = f' <span style="color:{colours.warning};">— failed</span>'
    elif item.status == "streaming":
        status = f' <span style="color:{colours.muted};">— writing…</span>'
    return (f'<b>{who}</b>{status} '
            f'<span style="color:{colours.muted};">· {" · ".join(links)}</span>')


def insert_header(cursor: QTextCursor, index: int, item: MessageItem, colours: ThemeColours,
                  formats: RunFormats) -> None:
    """The header line in a block of its own (spacing above it), then an empty block for the body."""
    plain = formats[None]
    header = QTextBlockFormat()
    header.setTopMargin(12 if index > 0 else 0)
    header.setBottomMargin(4)
    if index > 0 or not cursor.atStart():
        cursor.insertBlock(header, plain)
    else:
        cursor.setBlockFormat(header)
    cursor.insertHtml(header_html(index, item, colours))
    cursor.insertBlock(QTextBlockFormat(), plain)  # no margins for the body's lines
    cursor.setCharFormat(plain)


def insert_body(cursor: QTextCursor, index: int, item: MessageItem, colours: ThemeColours, formats: RunFormats, *,
                provenance: bool, streaming: bool) -> None:
    """The message's text: provenance runs, rendered Markdown (a finished reply), or plain text."""
    if item.role == "assistant" and provenance and item.runs is not None:
        for text, drafted in item.runs:
            cursor.insertText(text, formats[drafted])
    elif item.role == "assistant" and not streaming:
        cursor.insertHtml(render_markdown(item.text, index, colours) or "&nbsp;")
    else:
        cursor.insertText(item.text, formats[None])
    cursor.setCharFormat(formats[None])
