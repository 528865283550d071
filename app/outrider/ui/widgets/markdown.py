"""Markdown of one message to the HTML subset QTextDocument understands, with highlighted code blocks.

Prose goes through Qt's own Markdown reader (``QTextDocument.setMarkdown``, CommonMark + GitHub tables); fenced
code blocks are cut out first and highlighted with Pygments when it is installed (inline styles: the document
has no stylesheet classes), or shown plain. Each code block gets a "Copy" link ``copy-code:<msg>:<n>``.
An unclosed fence (a reply still streaming) is shown as code up to the end.
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import re
from typing import Any

from PySide6.QtGui import QTextDocument

from outrider.ui.theme import ThemeColours

_FENCE = re.compile(r"^(```|~~~)[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^\1[ \t]*$|\Z)", re.M | re.S)


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    language: str
    code: str


def split_code(text: str) -> list[str | CodeBlock]:
    """Prose strings and code blocks, in order."""
    parts: list[str | CodeBlock] = []
    pos = 0
    for m in _FENCE.finditer(text):
        if m.start() > pos:
            parts.append(text[pos:m.start()])
        parts.append(CodeBlock(m.group(2), m.group(3).rstrip("\n")))
        pos = m.end()
    if pos < len(text):
        parts.append(text[pos:])
    return parts


def code_blocks(text: str) -> list[CodeBlock]:
    return [p for p in split_code(text) if isinstance(p, CodeBlock)]


def _highlight(block: CodeBlock, colours: ThemeColours) -> str:
    try:  # optional: Pygments has no type stubs, hence the dynamic imports
        pygments: Any = importlib.import_module("pygments")
        formatters: Any = importlib.import_module("pygments.formatters")
        lexers: Any = importlib.import_module("pygments.lexers")
        util: Any = importlib.import_module("pygments.util")
    except ImportError:
        return html.escape(block.code)
    try:
        lexer = lexers.get_lexer_by_name(block.language) if block.language else lexers.guess_lexer(block.code)
    except util.ClassNotFound:
        return html.escape(block.code)
    formatter = formatters.HtmlFormatter(noclasses=True, nowrap=True, style=colours.pygments_style)
    return str(pygments.highlight(block.code, lexer, formatter)).rstrip("\n")


def _prose(text: str) -> str:
    if not text.strip():
        return ""
    doc = QTextDocument()
    doc.setMarkdown(text)
    out = doc.toHtml()
    body = re.search(r"<body[^>]*>(.*)</body>", out, re.S)
    return body.group(1) if body else html.escape(text)


def stable_prefix(text: str, start: int = 0, tail_max: int = 0) -> int:
    """Where a streaming message can be cut so that its head never needs rendering again.

    Scans ``text`` from ``start`` (which must lie outside a code fence) and returns the end of the longest prefix
    that ends at a block boundary outside any fence: after a blank line or after a closing fence line. Markdown
    rendered in pieces cut there reads the same as rendered whole (lists split by a blank line restart). With
    ``tail_max`` > 0, a tail longer than that with no such boundary (one endless paragraph) is cut at its last
    line break outside a fence, or else at its last space: a soft break then shows as a paragraph break.
    """
    fence: str | None = None
    best = last_break = start
    pos = start
    while (nl := text.find("\n", pos)) >= 0:
        line = text[pos:nl]
        if fence is None:
            if line.startswith(("```", "~~~")):
                fence = line[:3]
            elif not line.strip():
                best = nl + 1
            else:
                last_break = nl + 1
        elif line.rstrip(" \t") == fence:
            fence = None
            best = nl + 1
        pos = nl + 1
    if tail_max > 0 and fence is None and len(text) - best > tail_max:
        if last_break > best:
            best = last_break
        elif (space := text.rfind(" ", best + 1)) > best and not text.startswith(("```", "~~~"), pos):
            best = space + 1
    return best


def render_markdown(text: str, message_index: int, colours: ThemeColours, first_block: int = 0) -> str:
    """HTML for one message body (or a piece of one: ``first_block`` numbers its first code block)."""
    pieces: list[str] = []
    n = first_block
    for part in split_code(text):
        if isinstance(part, CodeBlock):
            label = html.escape(part.language or "code")
            pieces.append(
                f'<p style="margin:6px 0 0 0; color:{colours.muted};">{label} · '
                f'<a href="copy-code:{message_index}:{n}">Copy</a></p>'
                f'<table width="100%" cellpadding="6" style="background:{colours.code_bg};">'
                f'<tr><td><pre style="margin:0;">{_highlight(part, colours)}</pre></td></tr></table>'
            )
            n += 1
        else:
            pieces.append(_prose(part))
    return "".join(pieces)
