"""Read a Parquet footer's key-value metadata without reading its large values.

A Hudi base file's footer is mostly its bloom filter (about 430 KB of base64 by default),
which an index needs only for the few files whose key range admits the batch's keys. The
footer (Thrift compact protocol) is walked here, skipping what it does not need: values
longer than `inline_limit` bytes are not read but located (file offset and length), so
reading the key range of a file costs a few kilobytes, not the whole footer.

Files this reader does not handle (encrypted footers, anything it cannot parse) make it
return None; callers then read the footer with pyarrow, which reports damage properly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa

MAGIC = b"PAR1"
#: Bytes read at a time from the footer; the schema and row groups of a base file fit in one.
_CHUNK = 16 * 1024
#: FileMetaData field holding `list<KeyValue>` (parquet.thrift).
_KEY_VALUE_METADATA = 5
# Thrift compact protocol types.
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


@dataclass(frozen=True)
class Located:
    """A footer value left unread: `length` bytes at `offset` of the file."""

    offset: int
    length: int

    def read(self, source: pa.NativeFile) -> bytes:
        source.seek(self.offset)
        data = source.read(self.length)
        if len(data) != self.length:
            raise OSError(f"footer value cut short: {len(data)} of {self.length} bytes")
        return bytes(data)


class _Malformed(Exception):
    """The footer is not plain Thrift compact FileMetaData as expected."""


class _Cursor:
    """Sequential reads over the footer bytes, fetched from the file a chunk at a time."""

    def __init__(self, source: pa.NativeFile, start: int, end: int):
        self.source = source
        self.pos = start
        self.end = end
        self.buf = b""
        self.buf_start = start

    def _fill(self, size: int) -> None:
        if self.pos + size > self.end:
            raise _Malformed("footer ends early")
        self.source.seek(self.pos)
        self.buf = self.source.read(min(self.end - self.pos, max(size, _CHUNK)))
        self.buf_start = self.pos

    def read(self, size: int) -> bytes:
        at = self.pos - self.buf_start
        if at < 0 or at + size > len(self.buf):
            self._fill(size)
            at = 0
        self.pos += size
        return self.buf[at : at + size]

    def byte(self) -> int:
        return self.read(1)[0]

    def skip(self, size: int) -> None:
        if self.pos + size > self.end:
            raise _Malformed("footer ends early")
        self.pos += size

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise _Malformed("varint too long")


def _field_header(cursor: _Cursor, last_id: int) -> tuple[int, int]:
    """(field id, type) of the next struct field; type 0 ends the struct."""
    header = cursor.byte()
    kind = header & 0x0F
    if kind == 0:
        return 0, 0
    delta = header >> 4
    if delta:
        return last_id + delta, kind
    raw = cursor.varint()
    return (raw >> 1) ^ -(raw & 1), kind


def _collection_header(cursor: _Cursor) -> tuple[int, int]:
    """(size, element type) of a list or set."""
    header = cursor.byte()
    size = header >> 4
    if size == 15:
        size = cursor.varint()
    return size, header & 0x0F


def _skip(cursor: _Cursor, kind: int, in_collection: bool = False) -> None:
    if kind in (_BOOL_TRUE, _BOOL_FALSE):
        if in_collection:
            cursor.skip(1)  # a struct field carries its boolean in the header; a list element does not
    elif kind == _BYTE:
        cursor.skip(1)
    elif kind in (_I16, _I32, _I64):
        cursor.varint()
    elif kind == _DOUBLE:
        cursor.skip(8)
    elif kind == _BINARY:
        cursor.skip(cursor.varint())
    elif kind in (_LIST, _SET):
        size, element = _collection_header(cursor)
        for _ in range(size):
            _skip(cursor, element, in_collection=True)
    elif kind == _MAP:
        size = cursor.varint()
        if size:
            types = cursor.byte()
            for _ in range(size):
                _skip(cursor, types >> 4, in_collection=True)
                _skip(cursor, types & 0x0F, in_collection=True)
    elif kind == _STRUCT:
        last = 0
        while True:
            last, field_kind = _field_header(cursor, last)
            if field_kind == 0:
                return
            _skip(cursor, field_kind)
    else:
        raise _Malformed(f"unknown thrift type {kind}")


def _key_value(cursor: _Cursor, inline_limit: int) -> tuple[bytes | None, bytes | Located | None]:
    key: bytes | None = None
    value: bytes | Located | None = None
    last = 0
    while True:
        last, kind = _field_header(cursor, last)
        if kind == 0:
            return key, value
        if last in (1, 2) and kind == _BINARY:
            size = cursor.varint()
            if last == 1:
                key = cursor.read(size)
            elif size > inline_limit:
                value = Located(cursor.pos, size)
                cursor.skip(size)
            else:
                value = cursor.read(size)
        else:
            _skip(cursor, kind)


def footer_key_values(source: pa.NativeFile, inline_limit: int = 4096) -> dict[bytes, bytes | Located] | None:
    """The footer's key-value metadata, values over `inline_limit` bytes located, not read.

    None when the file is not a plain Parquet file this reader walks (then read the footer
    with pyarrow). A key without a value (optional in Parquet) maps to b"", as pyarrow reads it.
    """
    try:
        size = source.size()
        if size < 12:
            return None
        source.seek(size - 8)
        tail = source.read(8)
        if tail[4:] != MAGIC:
            return None  # encrypted footer (PARE) or not Parquet
        (length,) = struct.unpack("<i", tail[:4])
        if length <= 0 or length > size - 12:
            return None
        cursor = _Cursor(source, size - 8 - length, size - 8)
        out: dict[bytes, bytes | Located] = {}
        last = 0
        while True:
            last, kind = _field_header(cursor, last)
            if kind == 0:
                return out
            if last != _KEY_VALUE_METADATA or kind != _LIST:
                _skip(cursor, kind)
                continue
            count, element = _collection_header(cursor)
            if element != _STRUCT:
                return None
            for _ in range(count):
                key, value = _key_value(cursor, inline_limit)
                if key is None:
                    return None
                out[key] = value if value is not None else b""
    except (_Malformed, IndexError, OSError, struct.error):
        return None
