"""How a message looks in the chat document: its header line, its body blocks, the streamed text's formats, and
the first-run page of an empty chat.

Stateless helpers of ``ChatView``: the view decides when a message is (re)drawn, these decide how. A body is
the streamed runs with their provenance formats (a reply still streaming in the provenance view), the message's
rendered Markdown (with provenance backgrounds laid over it when its tokens are known and the view asks), or
plain text; the header is one line of HTML (who, how a reply ended, Copy / Edit & resend / Continue links).
"""

from __future__ import annotations

import dataclasses
import html

from PySide6.QtGui import QColor, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFormat

from outrider.ui.theme import ThemeColours
from outrider.ui.widgets.chat_items import MessageItem, Provenance
from outrider.ui.widgets.markdown import render_markdown

RunFormats = dict[Provenance, QTextCharFormat]  # None: plain text; True/False: accepted draft / target token
HEADER_PROPERTY = QTextFormat.Property.UserProperty + 1  # on a header block: the index of its message
PLACEHOLDER = "Reading the conversation…"  # the streaming reply's body until its first text arrives

# How a reply ended (``EndReason`` values) as its header says it; a complete reply says nothing.
END_LABELS = {
    "length": "cut at the token limit",
    "cancelled": "stopped",
    "crashed": "interrupted — the engine stopped",
    "error": "failed",
    "interrupted": "interrupted",
}
EMPTY_REPLY = {  # the body of a reply that ended before any text
    "cancelled": "(stopped before any text)",
    "crashed": "(the engine stopped before any text)",
    "error": "(no reply: the engine reported an error)",
}


@dataclasses.dataclass(frozen=True)
class SamplePrompt:
    """A first-run prompt: what it is, the text sent, and what it shows about speculative decoding."""

    title: str
    text: str
    lesson: str


SAMPLE_PROMPTS = (
    SamplePrompt(
        "Copy a paragraph",
        "Repeat the following paragraph exactly, word for word:\n\n"
        "The lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the clockwork, trimmed "
        "the wick and polished the great lens until it shone. Ships passing the rocks at night never knew his "
        "name, but every one of them steered by his light.",
        "Copying: the draft (or prompt lookup) guesses whole runs of tokens right — watch acceptance and the "
        "speed-up climb.",
    ),
    SamplePrompt(
        "Ask a free question",
        "Why is the sky blue? Answer in three sentences.",
        "Free writing: fewer guesses are right, so the speed-up is smaller — it can even fall below 1× when "
        "drafting costs more than it saves.",
    ),
)


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


def header_html(index: int, item: MessageItem, colours: ThemeColours, *, last: bool = False) -> str:
    """The header line of message ``index``: who wrote it, how a reply ended, and its action links.

    ``last``: it is the conversation's last message (only that reply, cut at the token limit, can be continued).
    """
    who = {"user": "You", "assistant": "Outrider", "system": "System"}.get(item.role, item.role)
    links = [f'<a href="copy:{index}">Copy</a>']
    if item.role == "user" and item.message_id is not None:
        links.append(f'<a href="edit:{index}">Edit &amp; resend</a>')
    if item.role == "assistant" and item.end == "length" and last and item.message_id is not None:
        links.append(f'<a href="continue:{index}">Continue</a>')
    status = ""
    label = END_LABELS.get(item.end) if item.role == "assistant" else None
    if item.status == "streaming":
        status = f' <span style="color:{colours.muted};">— writing…</span>'
    elif label is None and item.status == "interrupted":
        label = END_LABELS["interrupted"]
    elif label is None and item.status == "error":
        label = END_LABELS["error"]
    if label and item.status != "streaming":
        status = f' <span style="color:{colours.warning};">— {html.escape(label)}</span>'
    return (f'<b>{who}</b>{status} '
            f'<span style="color:{colours.muted};">· {" · ".join(links)}</span>')


def insert_header(cursor: QTextCursor, index: int, item: MessageItem, colours: ThemeColours,
                  formats: RunFormats, *, last: bool = False) -> None:
    """The header line in a block of its own (spacing above it, ``HEADER_PROPERTY`` = ``index``), then an empty
    block for the body."""
    plain = formats[None]
    header = QTextBlockFormat()
    header.setTopMargin(12 if index > 0 else 0)
    header.setBottomMargin(4)
    header.setProperty(HEADER_PROPERTY, index)
    if index > 0 or not cursor.atStart():
        cursor.insertBlock(header, plain)
    else:
        cursor.setBlockFormat(header)
    cursor.insertHtml(header_html(index, item, colours, last=last))
    mark_header(cursor, index)
    cursor.insertBlock(QTextBlockFormat(), plain)  # no margins for the body's lines
    cursor.setCharFormat(plain)


def mark_header(cursor: QTextCursor, index: int) -> None:
    """Tag the cursor's block as the header of message ``index`` (inserted HTML may replace the block format)."""
    fmt = QTextBlockFormat()
    fmt.setTopMargin(12 if index > 0 else 0)
    fmt.setBottomMargin(4)
    fmt.setProperty(HEADER_PROPERTY, index)
    cursor.mergeBlockFormat(fmt)


def muted_format(colours: ThemeColours) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(colours.muted))
    fmt.setFontItalic(True)
    return fmt


def insert_body(cursor: QTextCursor, index: int, item: MessageItem, colours: ThemeColours, formats: RunFormats, *,
                provenance: bool, streaming: bool) -> None:
    """The message's text: provenance runs (streaming), rendered Markdown (a reply; with provenance backgrounds
    over it when asked and its tokens are known), a note for a reply that ended empty, or plain text."""
    runs = item.provenance_runs() if item.role == "assistant" and provenance else None
    if item.role == "assistant" and not item.flush().text and not streaming:
        note = EMPTY_REPLY.get(item.end, "(no text)")
        cursor.insertText(note, muted_format(colours))
    elif item.role == "assistant" and streaming and runs is not None:
        for text, drafted in runs:
            cursor.insertText(text, formats[drafted])
    elif item.role == "assistant" and not streaming:
        start = cursor.position()
        cursor.insertHtml(render_markdown(item.text, index, colours) or "&nbsp;")
        if runs is not None:
            paint_provenance(cursor, start, runs, formats)
    else:
        cursor.insertText(item.text, formats[None])
    cursor.setCharFormat(formats[None])


def paint_provenance(cursor: QTextCursor, start: int, runs: list[tuple[str, Provenance]],
                     formats: RunFormats) -> None:
    """Lay each token's provenance background over rendered Markdown from ``start`` to ``cursor``'s position.

    Markdown drops its syntax (``**``, fences, link targets) but keeps the order of the source's characters, so
    the rendered characters are matched to the source's in order (whitespace to whitespace): the next source
    character when it matches, else the next place where the following 8, or else 4 (``RESYNC_CHARS``), rendered
    characters occur together (within ``RESYNC_WINDOW``). A rendered character with no match (a code block's
    label line) is left unpainted. Consecutive characters of one provenance are painted as one range.
    """
    end = cursor.position()
    doc = cursor.document()
    rendered = "".join(_norm(doc.characterAt(p)) for p in range(start, end))
    source = "".join(_norm(ch) for text, _ in runs for ch in text)
    kinds = [drafted for text, drafted in runs for _ in text]
    paint = QTextCursor(doc)
    j = 0
    span_start, span_kind = -1, None
    for i, ch in enumerate(rendered):
        kind: Provenance = None
        k = j if j < len(source) and source[j] == ch else -1
        for size in RESYNC_CHARS:
            if k >= 0:
                break
            k = source.find(rendered[i:i + size], j, j + RESYNC_WINDOW)
        if k >= 0:
            kind, j = kinds[k], k + 1
        if kind is not span_kind:
            _paint_span(paint, start, span_start, i, span_kind, formats)
            span_start, span_kind = i, kind
    _paint_span(paint, start, span_start, len(rendered), span_kind, formats)


RESYNC_CHARS = (8, 4)  # a match elsewhere must be confirmed by this many rendered characters in a row
RESYNC_WINDOW = 2000


def _norm(ch: str) -> str:
    return " " if ch.isspace() or ch in "\u2029\u2028\u00a0\ufffc" else ch


def _paint_span(cursor: QTextCursor, base: int, begin: int, end: int, kind: Provenance, formats: RunFormats) -> None:
    if begin < 0 or kind is None or end <= begin:
        return
    cursor.setPosition(base + begin)
    cursor.setPosition(base + end, QTextCursor.MoveMode.KeepAnchor)
    fmt = QTextCharFormat()
    source = formats[kind]
    fmt.setBackground(source.background())
    fmt.setProperty(QTextCharFormat.Property.UserProperty, source.property(QTextCharFormat.Property.UserProperty))
    cursor.mergeCharFormat(fmt)


def welcome_html(colours: ThemeColours) -> str:
    """The page of an empty chat: what the app shows, and sample prompts to click (``sample:<n>`` links)."""
    items = "".join(
        f'<p style="margin:10px 0 0 0;"><a href="sample:{n}"><b>{html.escape(p.title)}</b></a><br/>'
        f'<span style="color:{colours.muted};">{html.escape(p.lesson)}</span></p>'
        for n, p in enumerate(SAMPLE_PROMPTS))
    return (f'<p><b>Start a conversation</b></p>'
            f'<p style="color:{colours.muted};">A small draft proposes several tokens, the model checks them in '
            f'one pass and keeps the ones it would have written itself. The panel on the right shows how many '
            f'it kept (acceptance) and what that gained (speed-up against plain decoding). Try:</p>{items}')
