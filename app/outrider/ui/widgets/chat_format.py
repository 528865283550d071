"""How a message looks in the chat document: its header line, its body blocks, the streamed text's formats, and
the first-run page of an empty chat.

Stateless helpers of ``ChatView``: the view decides when a message is (re)drawn, these decide how. A body is
the streamed runs with their provenance formats (a reply still streaming in the provenance view), the message's
rendered Markdown (with provenance backgrounds laid over it when its tokens are known and the view asks), or
plain text; the header is one line of HTML (who, how a reply ended, Copy / Edit & resend / Continue links).
"""

from __future__ import annotations

import bisect
import dataclasses
import html
import itertools

from PySide6.QtGui import QColor, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFormat

from outrider.conversation.reply_text import Provenance, merge_runs
from outrider.history.models import END_REASON_WORDS
from outrider.ui.theme import ThemeColours
from outrider.ui.widgets.chat_items import MessageItem
from outrider.ui.widgets.markdown import render_markdown

RunFormats = dict[Provenance, QTextCharFormat]  # None: plain text; else a PROVENANCE_KINDS kind
# Every provenance a piece can have (``chat_items.Provenance``); the tag (UserProperty) of a drafted token's
# format is "draft" for all drafters, so "which tokens were drafted" reads the same whoever drafted them.
PROVENANCE_KINDS = ("target", "model", "lookup", "history", "mtp", "draft")
HEADER_PROPERTY = QTextFormat.Property.UserProperty + 1  # on a header block: the index of its message
PROVENANCE_PROPERTY = QTextFormat.Property.UserProperty + 2  # on a token's text: its drafter's kind, or "target"
PLACEHOLDER = "Reading the conversation…"  # the streaming reply's body until its first text arrives
# A finished reply in the provenance view is drawn as Markdown with its colours laid over it (about 2 ms per 1,000
# characters on one core); a longer one is drawn as its streamed text, tokens coloured, without Markdown.
PROVENANCE_MARKDOWN_MAX_CHARS = 30_000

# How a reply ended (``EndReason`` values) as its header says it; a complete reply says nothing.
END_LABELS = END_REASON_WORDS
# Ends after which a reply can be continued: every reply that did not finish by itself (the model's end of turn)
# or was not refused — cut at the limit, stopped with Stop/Esc, cut by a crash of the engine or of the app.
CONTINUABLE_ENDS = frozenset({"length", "cancelled", "crashed", "interrupted"})
CALM_ENDS = frozenset({"length", "cancelled"})  # ends the user asked for (a limit, Esc): said quietly, not as errors
EMPTY_REPLY = {  # the body of a reply that ended before any text
    "cancelled": "(stopped before any text)",
    "crashed": "(the engine stopped before any text)",
    "error": "(no reply — why is shown above the conversation)",
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
    """The character formats of streamed text (plain, and one per provenance kind), built once per theme / view
    (never per token). A kind this version does not know is drawn as a drafted token (``format_of``)."""
    plain = QTextCharFormat()
    plain.setForeground(QColor(colours.text))
    formats: RunFormats = {None: plain}
    for kind in PROVENANCE_KINDS:
        fmt = QTextCharFormat(plain)
        if provenance:
            fmt.setBackground(QColor(colours.provenance_bg(kind)))
            fmt.setProperty(QTextCharFormat.Property.UserProperty, "target" if kind == "target" else "draft")
            fmt.setProperty(PROVENANCE_PROPERTY, kind)
        formats[kind] = fmt
    return formats


def format_of(formats: RunFormats, kind: Provenance) -> QTextCharFormat:
    """The format of a run of this provenance (an unknown drafter's kind: the generic drafted token's)."""
    found = formats.get(kind)
    return found if found is not None else formats["draft"]


def can_continue(item: MessageItem) -> bool:
    """A stored reply that stopped before its end (``CONTINUABLE_ENDS``): Continue writes on from its text."""
    return (item.role == "assistant" and item.end in CONTINUABLE_ENDS and item.message_id is not None
            and item.status != "streaming")


def header_html(index: int, item: MessageItem, colours: ThemeColours, *, last: bool = False) -> str:
    """The header line of message ``index``: who wrote it, how a reply ended, and its action links.

    ``last``: it is the conversation's last message (only that reply, if it stopped early, can be continued).
    """
    who = {"user": "You", "assistant": "Outrider", "system": "System"}.get(item.role, item.role)
    links = [f'<a href="copy:{index}">Copy</a>']
    if item.role == "user" and item.message_id is not None:
        links.append(f'<a href="edit:{index}">Edit &amp; resend</a>')
    if can_continue(item) and last:
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
        colour = colours.muted if item.end in CALM_ENDS else colours.warning
        status = f' <span style="color:{colour};">— {html.escape(label)}</span>'
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
    """Tag the cursor's block as the header of message ``index`` (inserted HTML may replace the block format; a
    block format change lays the rest of the document out again, so only when it did)."""
    if cursor.blockFormat().property(HEADER_PROPERTY) == index:
        return
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
    """The message's text: provenance runs (streaming, or a reply too long to paint over Markdown), rendered
    Markdown (a reply; with provenance backgrounds over it when asked and its tokens are known), a note for a reply
    that ended empty, or plain text."""
    runs = item.provenance_runs() if item.role == "assistant" and provenance else None
    if item.role == "assistant" and not item.flush().text and not streaming:
        note = EMPTY_REPLY.get(item.end, "(no text)")
        cursor.insertText(note, muted_format(colours))
    elif runs is not None and (streaming or len(item.text) > PROVENANCE_MARKDOWN_MAX_CHARS):
        for text, kind in merge_runs(runs):
            cursor.insertText(text, format_of(formats, kind))
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
    the rendered text (its blocks, joined by one space) is matched to the source's in order, whitespace to
    whitespace: the longest common run at the current places, else the next place where the following 8, or
    else 4 (``RESYNC_CHARS``), rendered characters occur together (within ``RESYNC_WINDOW``). A rendered character
    with no match (a code block's label line) is left unpainted. Matching is by whole runs (string compares in C),
    so plain paragraphs cost one compare each; painting is one format merge per provenance change.
    """
    end = cursor.position()
    doc = cursor.document()
    blocks: list[tuple[int, int, int]] = []  # (index in rendered, document position, length) of each block
    parts: list[str] = []
    at = 0
    block = doc.findBlock(start)
    while block.isValid() and block.position() < end:
        lo, hi = max(start, block.position()), min(end, block.position() + block.length() - 1)
        if hi > lo:
            text = block.text()[lo - block.position():hi - block.position()]
            blocks.append((at, lo, len(text)))
            parts.append(text)
            at += len(text) + 1
        block = block.next()
    rendered = " ".join(parts).translate(_SPACES)
    source = "".join(text for text, _ in runs).translate(_SPACES)
    run_ends = list(itertools.accumulate(len(text) for text, _ in runs))
    kinds = [kind for _, kind in runs]
    matched: list[tuple[int, int, int]] = []  # (rendered index, source index, length)
    i = j = 0
    while i < len(rendered):
        n = _common_length(rendered, i, source, j)
        if n:
            matched.append((i, j, n))
            i, j = i + n, j + n
            continue
        for size in RESYNC_CHARS:
            k = source.find(rendered[i:i + size], j, j + RESYNC_WINDOW)
            if k >= 0:
                j = k
                break
        else:
            i += 1
    painter = _Painter(QTextCursor(doc), formats)
    for r, src, n in matched:
        for doc_pos, src_at, length in _in_document(blocks, r, n):
            _paint_source_range(painter, doc_pos, src + src_at, length, run_ends, kinds)
    painter.flush()


RESYNC_CHARS = (8, 4)  # a match elsewhere must be confirmed by this many rendered characters in a row
RESYNC_WINDOW = 2000
_SPACES = str.maketrans({c: " " for c in "\n\t\r\x0b\x0c\u2028\u2029\u00a0\ufffc"})


def _common_length(a: str, i: int, b: str, j: int) -> int:
    """The length of the common prefix of ``a[i:]`` and ``b[j:]`` (binary search over C string compares)."""
    lo, hi = 0, min(len(a) - i, len(b) - j)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if b.startswith(a[i:i + mid], j):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _in_document(blocks: list[tuple[int, int, int]], r: int, n: int) -> list[tuple[int, int, int]]:
    """The rendered range ``r``..``r + n`` as (document position, offset in the range, length) per block (the
    spaces joining blocks are no characters of the document)."""
    out = []
    index = bisect.bisect_right(blocks, r, key=lambda b: b[0]) - 1
    while index < len(blocks) and n > 0:
        at, pos, length = blocks[index]
        lo = max(r, at)
        hi = min(r + n, at + length)
        if hi > lo:
            out.append((pos + lo - at, lo - r, hi - lo))
        if r + n <= at + length + 1:
            break
        index += 1
    return out


def _paint_source_range(painter: _Painter, doc_pos: int, src: int, length: int, run_ends: list[int],
                        kinds: list[Provenance]) -> None:
    """Paint ``length`` document characters from ``doc_pos`` with the provenance of source characters
    ``src``.. (split where the source's runs change)."""
    index = bisect.bisect_right(run_ends, src)
    while length > 0 and index < len(run_ends):
        take = min(length, run_ends[index] - src)
        painter.add(doc_pos, take, kinds[index])
        doc_pos, src, length, index = doc_pos + take, src + take, length - take, index + 1


class _Painter:
    """Merges adjacent ranges of one provenance, then applies one format merge per range."""

    def __init__(self, cursor: QTextCursor, formats: RunFormats) -> None:
        self.cursor = cursor
        self.formats: dict[Provenance, QTextCharFormat] = {}
        for kind in PROVENANCE_KINDS:
            fmt = QTextCharFormat()
            fmt.setBackground(formats[kind].background())
            for prop in (QTextCharFormat.Property.UserProperty, PROVENANCE_PROPERTY):
                fmt.setProperty(prop, formats[kind].property(prop))
            self.formats[kind] = fmt
        self.pending: tuple[int, int, Provenance] | None = None

    def add(self, pos: int, length: int, kind: Provenance) -> None:
        if self.pending is not None:
            start, end, current = self.pending
            if current == kind and end == pos:
                self.pending = (start, pos + length, kind)
                return
            self.flush()
        self.pending = (pos, pos + length, kind)

    def flush(self) -> None:
        if self.pending is None:
            return
        start, end, kind = self.pending
        self.pending = None
        if kind is None:
            return
        self.cursor.setPosition(start)
        self.cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        self.cursor.mergeCharFormat(self.formats.get(kind) or self.formats["draft"])


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
