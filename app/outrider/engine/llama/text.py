"""Bytes to text, safely: incremental UTF-8 decoding and stop strings that are never shown in part."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import Any


def clean_text(text: str) -> str:
    """Text safe to tokenise: surrogate pairs (from UTF-16 clipboards) joined, lone surrogates -> U+FFFD, no NUL."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", "")


class IncrementalDetokenizer:
    """Turns token pieces (bytes) into text without ever showing a multi-byte character broken in two.

    Bytes of an incomplete UTF-8 sequence are held until the next piece completes them; truly invalid bytes
    become U+FFFD.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return self._decoder.decode(piece)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class StopStringFilter:
    """Holds back text that could be the start of a stop string; reports a full match.

    Invariant: text returned by ``feed`` never contains any part of a stop string that later completes, even
    when the stop string straddles token boundaries.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        """Return the text that is safe to show; after a match, ``matched`` is set and the rest is dropped."""
        if self.matched is not None:
            return ""
        if not self.stops:
            return text
        buf = self._held + text
        first: tuple[int, str] | None = None
        for stop in self.stops:
            i = buf.find(stop)
            if i >= 0 and (first is None or i < first[0]):
                first = (i, stop)
        if first is not None:
            self.matched = first[1]
            self._held = ""
            return buf[: first[0]]
        hold = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buf)), 0, -1):
                if buf.endswith(stop[:n]):
                    hold = max(hold, n)
                    break
        self._held = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold]

    def flush(self) -> str:
        """At the end of generation the held text was not a stop string after all."""
        out, self._held = self._held, ""
        return "" if self.matched is not None else out


def token_logprobs(model: Any, logits: Any, token: int, top: int) -> list[Any]:
    """``[text, bytes, logprob, [[text, bytes, logprob], …top alternatives]]`` of ``token`` in the target's own
    distribution at its position: the log-softmax of the raw logits row (no sampling filter, temperature or
    grammar: the model's view, as OpenAI's ``logprobs`` are). Text is the token's piece (invalid UTF-8 replaced;
    ``bytes`` has the exact bytes). The wire form of ``StepEvent.logprobs``."""
    import numpy as np

    row = np.asarray(logits, dtype=np.float64)
    peak = float(row.max())
    log_z = peak + float(np.log(np.exp(row - peak).sum()))

    def entry(t: int) -> list[Any]:
        piece = model.piece(t)
        return [piece.decode("utf-8", errors="replace"), list(piece), float(row[t]) - log_z]

    alternatives: list[list[Any]] = []
    if top > 0:
        best = np.argpartition(-row, top - 1)[:top]
        alternatives = [entry(int(t)) for t in sorted(best.tolist(), key=lambda t: (-row[t], t))]
    return [*entry(token), alternatives]
