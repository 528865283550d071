"""The engine-process protocol: framing and request encoding (events: ``outrider.engine.events``).

One message is one JSON object (ASCII-escaped, so lone surrogates survive) framed by a 4-byte length
(``FramedPipe``) on the engine process's stdin (requests) and its original stdout (events). JSON, not pickle,
in both directions: the engine process parses untrusted model files, and a compromised engine must not be
able to run code in the app by sending a crafted pickle.

Requests (app -> engine), each with an ``id``:
    load(spec), generate(request), cancel(target id), unload, shutdown, bench(n_tokens).
Events (engine -> app), encoded and decoded by ``outrider.engine.events``:
    hello(version, pid, backend), load_progress(stage, path), loaded(info), steps(batch of steps + stats),
    note(text), done(stop_reason, stats, text), result(value), error(kind, message, log_tail, details), and
    heartbeat (no id: sent every ``--heartbeat`` seconds by its own thread, so the app can tell a stopped or
    frozen engine from a slow one).

This module is pure data: it never imports llama_cpp (the app process must not load it). Requests use the
engine's own pure-data types from ``outrider.engine.params``; events are the engine's own types too, with their
wire form, in ``outrider.engine.events`` (one set of types on both sides: nothing here mirrors them).
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from outrider.engine.events import ProtocolError as ProtocolError
from outrider.engine.llama.text import clean_text
from outrider.engine.params import ChatMessage, PairSpec, TextRequest

PROTOCOL_VERSION = 2  # 2: a step's text travels once, as its pieces (engine/events.py)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a longer message from the engine is a protocol violation
MAX_REQUEST_BYTES = 48 * 1024 * 1024  # requests above this are refused before being sent


# -- encoding -------------------------------------------------------------------------------------------------
def encode(message: Mapping[str, Any]) -> bytes:
    """One message to bytes. ``ensure_ascii`` keeps lone surrogates representable."""
    return json.dumps(message, separators=(",", ":"), allow_nan=True).encode("ascii")


def decode(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not a JSON message: {exc}") from exc
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ProtocolError("a message must be a JSON object with a 'type'")
    return value


def spec_to_wire(spec: PairSpec) -> dict[str, Any]:
    """A pair to a JSON-able dict (paths as strings)."""
    data = dataclasses.asdict(spec)
    for key in ("target", "draft", "mtp_head"):
        if data.get(key) is not None:
            data[key] = str(data[key])
    return data


def request_to_wire(request: TextRequest) -> dict[str, Any]:
    """A request to a JSON-able dict, with all text cleaned (``clean_text``: lone surrogates and NULs)."""
    data = dataclasses.asdict(request)
    if data.get("prompt") is not None:
        data["prompt"] = clean_text(str(data["prompt"]))
    if data.get("messages") is not None:
        data["messages"] = [
            {"role": str(m["role"]), "content": clean_text(str(m["content"])),
             **{k: clean_text(str(m[k])) for k in ("tool_calls", "tool_call_id") if m.get(k) is not None}}
            for m in data["messages"]
        ]
    data["stop"] = [clean_text(str(s)) for s in data.get("stop", ())]
    return data


def messages_of(data: Sequence[Any]) -> tuple[ChatMessage, ...]:
    return tuple(ChatMessage(m["role"], m["content"], m.get("tool_calls"), m.get("tool_call_id")) for m in data)


# -- transport ------------------------------------------------------------------------------------------------
_HEADER = struct.Struct("<I")


class FramedPipe:
    """Length-prefixed messages over a pair of raw pipe file descriptors (portable: plain ``os.read/write``).

    One reader thread at a time; ``send`` is thread-safe (a lock keeps each frame whole: a heartbeat sent by
    another thread can never land inside a message).
    """

    def __init__(self, read_fd: int | None, write_fd: int | None, *, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.max_bytes = max_bytes
        self._write_lock = threading.Lock()

    def send(self, data: bytes) -> None:
        frame = _HEADER.pack(len(data)) + data
        with self._write_lock:
            if self.write_fd is None:
                raise OSError("pipe closed")
            view = memoryview(frame)
            while view:
                n = os.write(self.write_fd, view)
                view = view[n:]

    def _read_exactly(self, n: int) -> bytes:
        if self.read_fd is None:
            raise EOFError("pipe closed")
        chunks = []
        while n > 0:
            chunk = os.read(self.read_fd, min(n, 1 << 20))
            if not chunk:
                raise EOFError("end of pipe")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv(self) -> bytes:
        (n,) = _HEADER.unpack(self._read_exactly(_HEADER.size))
        if n > self.max_bytes:
            raise ProtocolError(f"message of {n:,} bytes exceeds the limit of {self.max_bytes:,}")
        return self._read_exactly(n)
