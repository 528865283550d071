"""A reader of SQLite's file format that finds table rows without SQLite: for history files SQLite cannot open.

Why our own: the kept tools cannot do it here. Debian 12's ``sqlite3`` shell (3.40.1) has ``.recover``, but it
reads pages through the ``sqlite_dbpage`` virtual table, which Debian's libsqlite3 is built without
(``SQLITE_ENABLE_DBPAGE_VTAB`` is not in its compile options), so ``.recover`` stops with "SQL logic error" on
any file, an undamaged history included; Python's ``sqlite3`` binds no recovery API. And SQLite's own read
path needs the 100-byte header, page 1 (the schema) and every interior page above a row: damage to any of those
made the whole history unreadable although every message was still on its leaf page.

What it does (the format is SQLite's documented one, https://www.sqlite.org/fileformat2.html): it walks every
page, keeps the table b-tree leaf pages (type 13), follows each cell's overflow chain, and decodes the record.
Pages on the freelist are skipped when the header still names it (deleted rows must not come back); frames of
a ``-wal`` file replace the pages they hold, up to its last commit. When the header is damaged, the page size is
the one under which the most pages parse as b-tree pages.

Nothing here raises on damage: a page or cell that does not parse is skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

_MAGIC: Final = b"SQLite format 3\x00"
_HEADER_SIZE: Final = 100
_TABLE_LEAF: Final = 13
_BTREE_TYPES: Final = frozenset({2, 5, 10, 13})
_PAGE_SIZES: Final = tuple(1 << n for n in range(9, 17))  # 512 .. 65536
_WAL_HEADER: Final = 32
_WAL_FRAME_HEADER: Final = 24
_WAL_MAGICS: Final = frozenset({0x377F0682, 0x377F0683})
_MAX_OVERFLOW_PAGES: Final = 1_000_000  # a cycle in a damaged overflow chain must end

# A value as read: (SQLite type name, value); text stays bytes, as the SQL path of the salvage reads it.
Cell = tuple[str, Any]


@dataclass(frozen=True)
class ScannedRow:
    """One row found on a table leaf page.

    Attributes:
        page: the page it was found on (counted from 1).
        rowid: its rowid (for Outrider's tables, the ``id`` column).
        values: its stored values in column order (an ``INTEGER PRIMARY KEY`` column is stored as NULL).
    """

    page: int
    rowid: int
    values: tuple[Cell, ...]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's big-endian variable-length integer at ``at``: (value, offset after it). IndexError if cut."""
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def decode_record(payload: bytes) -> tuple[Cell, ...] | None:
    """The values of one record (header of serial types, then the values); None when it does not parse."""
    try:
        header_size, at = _varint(payload, 0)
        if header_size < 1 or header_size > len(payload):
            return None
        types: list[int] = []
        while at < header_size:
            serial, at = _varint(payload, at)
            types.append(serial)
        if at != header_size:
            return None
        body = header_size
        cells: list[Cell] = []
        for serial in types:
            cell, body = _value(payload, body, serial)
            cells.append(cell)
        if body != len(payload):
            return None  # a record fills its payload exactly
        return tuple(cells)
    except (IndexError, struct.error, ValueError):
        return None


_INT_BYTES: Final = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def _value(payload: bytes, at: int, serial: int) -> tuple[Cell, int]:
    if serial == 0:
        return ("null", None), at
    if serial in _INT_BYTES:
        n = _INT_BYTES[serial]
        raw = payload[at:at + n]
        if len(raw) != n:
            raise ValueError("cut integer")
        return ("integer", _signed(int.from_bytes(raw, "big"), 8 * n)), at + n
    if serial == 7:
        return ("real", struct.unpack(">d", payload[at:at + 8])[0]), at + 8
    if serial in (8, 9):
        return ("integer", serial - 8), at
    if serial >= 12:
        n = (serial - 12) // 2
        raw = payload[at:at + n]
        if len(raw) != n:
            raise ValueError("cut text or blob")
        return ("blob" if serial % 2 == 0 else "text", bytes(raw)), at + n
    raise ValueError(f"reserved serial type {serial}")


class _Pages:
    """The file's pages by number, with the ``-wal``'s committed frames laid over them."""

    def __init__(self, data: bytes, page_size: int, wal: dict[int, bytes]) -> None:
        self.data = data
        self.size = page_size
        self.wal = wal
        self.count = max(len(data) // page_size, max(wal, default=0))

    def get(self, number: int) -> bytes | None:
        if number in self.wal:
            return self.wal[number]
        if number < 1 or number * self.size > len(self.data):
            return None
        return self.data[(number - 1) * self.size:number * self.size]


def _header_page_size(data: bytes) -> int | None:
    if len(data) < _HEADER_SIZE or not data.startswith(_MAGIC):
        return None
    raw = int.from_bytes(data[16:18], "big")
    size = 65536 if raw == 1 else raw
    return size if size in _PAGE_SIZES else None


def _btree_pages(data: bytes, page_size: int) -> int:
    """How many pages would parse as b-tree pages under ``page_size`` (a sample of up to 2,000)."""
    count = len(data) // page_size
    step = max(1, count // 2000)
    hits = 0
    for number in range(2, count + 1, step):
        start = (number - 1) * page_size
        kind = data[start]
        if kind not in _BTREE_TYPES:
            continue
        cells = int.from_bytes(data[start + 3:start + 5], "big")
        content = int.from_bytes(data[start + 5:start + 7], "big") or 65536
        header = 8 if kind in (10, 13) else 12
        if cells > 0 and header + 2 * cells <= content <= page_size:
            hits += 1
    return hits * step


def guess_page_size(data: bytes) -> int:
    """The header's page size, or (header damaged) the size under which most pages look like b-tree pages."""
    stated = _header_page_size(data)
    if stated is not None:
        return stated
    scored = [(_btree_pages(data, size), -size, size) for size in _PAGE_SIZES if size <= max(len(data), 512)]
    return max(scored)[2] if scored else 4096


def _wal_pages(wal: bytes, page_size: int) -> dict[int, bytes]:
    """Pages of the ``-wal``'s committed transactions, latest frame per page; nothing when it does not match."""
    if len(wal) < _WAL_HEADER:
        return {}
    magic, _version, wal_page_size = struct.unpack(">III", wal[:12])
    salts = wal[16:24]
    if magic not in _WAL_MAGICS or wal_page_size != page_size:
        return {}
    committed: dict[int, bytes] = {}
    pending: dict[int, bytes] = {}
    frame = _WAL_HEADER
    while frame + _WAL_FRAME_HEADER + page_size <= len(wal):
        number, db_size = struct.unpack(">II", wal[frame:frame + 8])
        if wal[frame + 8:frame + 16] != salts:
            break  # a frame of an older generation of the log: the valid part ended
        pending[number] = wal[frame + _WAL_FRAME_HEADER:frame + _WAL_FRAME_HEADER + page_size]
        if db_size:  # a commit frame
            committed.update(pending)
            pending.clear()
        frame += _WAL_FRAME_HEADER + page_size
    return committed


def _free_pages(pages: _Pages, header: bytes) -> set[int]:
    """Pages on the freelist, as the (intact) header names it; empty when the header is damaged."""
    if not header.startswith(_MAGIC):
        return set()
    trunk = int.from_bytes(header[32:36], "big")
    total = int.from_bytes(header[36:40], "big")
    free: set[int] = set()
    seen: set[int] = set()
    while trunk and trunk not in seen and len(free) <= total:
        seen.add(trunk)
        page = pages.get(trunk)
        if page is None:
            break
        free.add(trunk)
        leaves = int.from_bytes(page[4:8], "big")
        for i in range(min(leaves, (pages.size - 8) // 4)):
            free.add(int.from_bytes(page[8 + 4 * i:12 + 4 * i], "big"))
        trunk = int.from_bytes(page[0:4], "big")
    return free


def _payload(pages: _Pages, page: bytes, at: int, usable: int) -> tuple[int, bytes] | None:
    """(rowid, whole payload) of the table-leaf cell at ``at``, overflow pages followed; None if damaged."""
    try:
        size, at = _varint(page, at)
        rowid, at = _varint(page, at)
    except IndexError:
        return None
    rowid = _signed(rowid, 64)
    most_local = usable - 35
    if size <= most_local:
        local = page[at:at + size]
        return (rowid, local) if len(local) == size else None
    least_local = (usable - 12) * 32 // 255 - 23
    local_size = least_local + (size - least_local) % (usable - 4)
    if local_size > most_local:
        local_size = least_local
    parts = [page[at:at + local_size]]
    got = len(parts[0])
    following = int.from_bytes(page[at + local_size:at + local_size + 4], "big")
    hops = 0
    while got < size and following and hops < _MAX_OVERFLOW_PAGES:
        overflow = pages.get(following)
        if overflow is None:
            return None
        chunk = overflow[4:4 + min(usable - 4, size - got)]
        parts.append(chunk)
        got += len(chunk)
        following = int.from_bytes(overflow[0:4], "big")
        hops += 1
    return (rowid, b"".join(parts)) if got == size else None


def _leaf_rows(pages: _Pages, number: int, usable: int) -> Iterator[ScannedRow]:
    page = pages.get(number)
    if page is None:
        return
    start = _HEADER_SIZE if number == 1 else 0
    if len(page) < start + 8 or page[start] != _TABLE_LEAF:
        return
    cells = int.from_bytes(page[start + 3:start + 5], "big")
    for i in range(cells):
        pointer_at = start + 8 + 2 * i
        if pointer_at + 2 > len(page):
            return
        offset = int.from_bytes(page[pointer_at:pointer_at + 2], "big")
        if offset < start + 8 or offset >= len(page):
            continue
        found = _payload(pages, page, offset, usable)
        if found is None:
            continue
        values = decode_record(found[1])
        if values is not None:
            yield ScannedRow(page=number, rowid=found[0], values=values)


def scan_rows(path: Path) -> Iterator[ScannedRow]:
    """Every row on every table leaf page of the SQLite file at ``path`` (and its ``-wal``), in page order.

    Rows of every table come out (the caller tells its own by their shape). An unreadable file yields nothing.
    """
    try:
        data = path.read_bytes()
    except OSError:
        return
    page_size = guess_page_size(data)
    reserved = data[20] if len(data) > 20 and data.startswith(_MAGIC) else 0
    usable = page_size - reserved
    try:
        wal = path.with_name(path.name + "-wal").read_bytes()
    except OSError:
        wal = b""
    pages = _Pages(data, page_size, _wal_pages(wal, page_size))
    header = pages.get(1) or b""
    free = _free_pages(pages, header)
    for number in range(1, pages.count + 1):
        if number not in free:
            yield from _leaf_rows(pages, number, usable)
