"""HFile cells as arrays: read every cell of a file into offsets over one buffer, and gather
encoded cells for the writer, without a Python object per cell.

The metadata table's compaction rewrites every cell of a record-index file group (millions a
file): reading them as `(key, value)` byte strings, merging dicts, sorting and re-encoding cell by
cell cost about 3 us a key. Here a file's data blocks are decompressed into one buffer, a walk
finds where each cell starts (cells have variable lengths, so it is sequential; it runs in lanes
over the file, one numpy step per cell for every lane at once: `_walk_single_byte_memstore`), and
everything else — keys, values, the re-encoded cells of the output — is numpy offsets and byte
gathers (`gather`). The cell layout is `hfile`'s: `keyLen(4) valueLen(4) rowLen(2) row
family(1) timestamp(8) type(1) value memstoreTs(vlong)`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.hfile import KEY_SUFFIX, KEY_TAIL, HFileReader

_LENGTHS = struct.Struct(">ii")


def be_int(data: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """The big-endian signed integers of `width` bytes (2 or 4) at `positions` of `data`, as int64.

    One gather through a view of `data` as overlapping big-endian integers, one at every byte
    (numpy reads them unaligned)."""
    if width not in (2, 4):
        raise ValueError(f"width {width}: 2 or 4 bytes")
    dtype = np.dtype(">i4" if width == 4 else ">i2")
    data = np.ascontiguousarray(data, np.uint8)
    windows = np.ndarray((max(len(data) - width + 1, 0),), dtype=dtype, buffer=data, strides=(1,))
    return windows[positions].astype(np.int64)


def gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The byte ranges `[starts[i], starts[i] + lengths[i])` of `data`, back to back (one numpy gather)."""
    lengths = lengths.astype(np.int64, copy=False)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
    ends = np.cumsum(lengths)
    shift = np.repeat(starts.astype(np.int64, copy=False) - (ends - lengths), lengths)
    return data[shift + np.arange(total, dtype=np.int64)]


def binary_array(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.LargeBinaryArray:
    """The byte ranges `[starts[i], starts[i] + lengths[i])` of `data` as an Arrow `large_binary` array.

    Ranges that do not overlap (cells, keys and values of cells) are cut from `data` without a copy
    (`pieces`: the ranges and the gaps between them, by start) and picked by one Arrow `take`,
    which copies each range with one memcpy; overlapping ranges are gathered byte by byte."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.large_binary())
    starts = starts.astype(np.int64, copy=False)
    order = np.argsort(starts, kind="stable")
    first, end = starts[order], starts[order] + lengths[order]
    if (first[1:] < end[:-1]).any():
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        body = gather(data, starts, lengths)
        return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(body)])
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2], bounds[1::2] = first, end
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    return pieces(data, bounds).take(pa.array(2 * rank))


def pieces(data: np.ndarray, bounds: np.ndarray) -> pa.LargeBinaryArray:
    """`data` cut at the ascending offsets `bounds` (piece i: `[bounds[i], bounds[i + 1])`), as an
    Arrow `large_binary` array over `data` itself (no copy)."""
    bounds = np.ascontiguousarray(bounds, np.int64)
    return pa.Array.from_buffers(pa.large_binary(), len(bounds) - 1, [None, pa.py_buffer(bounds), pa.py_buffer(data)])


def encoded(array: pa.LargeBinaryArray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of a `large_binary` array back to back and its offsets (from 0): zero-copy views."""
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int64)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return data[offsets[0] : offsets[-1]], offsets - offsets[0]


@dataclass(frozen=True)
class CellColumns:
    """Every cell of one HFile: offsets into `data`, the data blocks' payloads back to back."""

    data: np.ndarray
    #: Where each cell starts (its 4-byte key length), in key order.
    starts: np.ndarray
    key_lengths: np.ndarray
    value_lengths: np.ndarray
    row_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def row_starts(self) -> np.ndarray:
        return self.starts + 10

    @property
    def value_starts(self) -> np.ndarray:
        return self.starts + 8 + self.key_lengths

    def rows(self) -> pa.LargeBinaryArray:
        """The row keys (Hudi's record keys) as an Arrow array."""
        return binary_array(self.data, self.row_starts, self.row_lengths)

    def values(self) -> pa.LargeBinaryArray:
        """The cells' values as an Arrow array."""
        return binary_array(self.data, self.value_starts, self.value_lengths)


#: Lanes of the walk (`_lane_starts`) are `sqrt(_LANE_FACTOR * bytes)` bytes apart, at least
#: `_MIN_LANE_BYTES`: a numpy step per cell of the longest lane against a search per lane, measured
#: best on record-index files (27 MB: about 29 KiB; a 300 KB log block: about 3 KiB).
_LANE_FACTOR = 32
_MIN_LANE_BYTES = 1024
#: Row lengths a lane start is searched back over from a key tail (longer rows: no lane there).
_LANE_ROW_SEARCH = 256
_HEAD = np.arange(8, dtype=np.int64)


def _lane_starts(data: bytes, buffer: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray:
    """Where the walk's lanes start: every block's start, and inside blocks, about every
    `sqrt(_LANE_FACTOR * len(data))` bytes, a likely cell start: the first `KEY_TAIL` from there (what
    ends the key of every cell Hudi and lakeward write) whose row length and key length agree with a
    cell starting before it. A guess may be wrong (a tail inside a value): `_walk_single_byte_memstore`
    keeps a lane only when the one before it lands exactly on its start."""
    starts = np.array([pos for pos, _ in bounds], np.int64)
    found_tails = []
    find = data.find
    step = max(_MIN_LANE_BYTES, int((_LANE_FACTOR * len(data)) ** 0.5))
    for pos, end in bounds:
        for offset in range(pos + step, end, step):
            tail = find(KEY_TAIL, offset, end)
            if tail < 0:
                break
            found_tails.append(tail)
    if not found_tails:
        return starts
    tails = np.array(found_tails, np.int64)
    rows = np.arange(_LANE_ROW_SEARCH, dtype=np.int64)
    row_at = tails[:, None] - 2 - rows  # where the row length sits for a row of `rows` bytes
    inside = row_at >= 0
    row_at = np.where(inside, row_at, 0)
    agree = inside & ((buffer[row_at].astype(np.int64) << 8 | buffer[row_at + 1]) == rows)
    has_row = agree.any(axis=1)
    row = np.argmax(agree, axis=1)[has_row]
    cells = tails[has_row] - 10 - row
    fits = cells >= 0
    cells, row = cells[fits], row[fits]
    cells = cells[be_int(buffer, cells, 4) == row + 2 + KEY_SUFFIX]
    return np.unique(np.concatenate([starts, cells]))


def _walk_single_byte_memstore(data: bytes, buffer: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray | None:
    """Cell starts assuming every memstore timestamp is one byte (Hudi writes 0); None when the
    walk does not land on the blocks' ends or on its own lanes' starts.

    A cell's size is `9 + keyLen + valueLen`, so finding the next cell needs the one before: the
    walk is sequential. It runs in lanes, one numpy step per cell for all lanes at once: a lane from
    every block's start and from likely cell starts inside blocks (`_lane_starts`), each walking up
    to the next lane's start. Every lane must land on the next one's start exactly; then, by
    induction from the first block's start, each lane started on a real cell."""
    if not bounds or bounds[-1][1] == 0:
        return np.zeros(0, np.int64)
    lanes = _lane_starts(data, buffer, bounds)
    stops = np.append(lanes[1:], bounds[-1][1])
    limit = len(buffer) - 8
    pos, live = lanes, lanes < stops
    visited: list[np.ndarray] = []
    for _ in range(int((stops - lanes).max()) // 10 + 1):  # a cell takes 10 bytes at least
        heads = buffer[np.minimum(pos, limit)[:, None] + _HEAD].view(">i4").astype(np.int64)
        visited.append(pos)
        pos = pos + (heads[:, 0] + heads[:, 1] + 9) * live
        live = pos < stops
        if not live.any():
            break
    if not np.array_equal(pos, stops):
        return None
    found = np.stack(visited, axis=1)  # lane by lane: the cells in file order
    found = found[found < stops[:, None]]
    if len(found) and (found.max() > limit or (np.diff(found) <= 9).any()):
        return None  # a head read past the data, or a cell too short: not this layout
    return found


def _walk(data: bytes, bounds: list[tuple[int, int]], name: str) -> list[int]:
    """Cell starts with any memstore VInt; CorruptTableError on a truncated cell."""
    unpack = _LENGTHS.unpack_from
    starts: list[int] = []
    for pos, end in bounds:
        while pos < end:
            if pos + 10 > end:
                raise CorruptTableError(f"{name}: truncated cell in a data block")
            key_len, value_len = unpack(data, pos)
            starts.append(pos)
            pos += 8 + key_len + value_len
            if key_len < 2 + KEY_SUFFIX or value_len < 0 or pos >= end:
                raise CorruptTableError(f"{name}: truncated cell in a data block")
            first = data[pos] - 256 if data[pos] > 127 else data[pos]
            pos += 1 if first >= -112 else (-119 - first if first < -120 else -111 - first)
    return starts


def joined_blocks(reader: HFileReader) -> tuple[bytes, list[tuple[int, int]]]:
    """The HFile's decompressed data blocks as one buffer, and each block's (start, end) in it."""
    return _joined(list(reader.data_blocks()))


def _joined(payloads: Sequence[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
    bounds, pos = [], 0
    for payload in payloads:
        bounds.append((pos, pos + len(payload)))
        pos += len(payload)
    return b"".join(payloads), bounds


def cell_columns(reader: HFileReader) -> CellColumns:
    """Every cell of the HFile `reader` reads, as arrays (the module doc); the same cells, in the
    same order, as `reader.items()`."""
    return block_cells(list(reader.data_blocks()), reader.name)


def block_cells(payloads: Sequence[bytes], name: str) -> CellColumns:
    """Every cell of these decompressed HFile data blocks (of the file `name`, for errors), in order."""
    data, bounds = _joined(payloads)
    buffer = np.frombuffer(data, np.uint8)
    found = _walk_single_byte_memstore(data, buffer, bounds)
    if found is not None:
        starts = found
        key_lengths, value_lengths = be_int(buffer, starts, 4), be_int(buffer, starts + 4, 4)
        memstore = buffer[starts + 8 + key_lengths + value_lengths] if len(starts) else buffer[:0]
        if (
            (key_lengths < 2 + KEY_SUFFIX).any()
            or (value_lengths < 0).any()
            or ((memstore >= 128) & (memstore < 144)).any()
        ):
            found = None
    if found is None:
        starts = np.array(_walk(data, bounds, name), np.int64)
        key_lengths, value_lengths = be_int(buffer, starts, 4), be_int(buffer, starts + 4, 4)
    row_lengths = be_int(buffer, starts + 8, 2)
    if ((row_lengths < 0) | (row_lengths > key_lengths - 2)).any():
        raise CorruptTableError(f"{name}: a cell's row is longer than its key")
    return CellColumns(buffer, starts, key_lengths, value_lengths, row_lengths)


@dataclass(frozen=True)
class EncodedCells:
    """Cells already encoded as the data blocks hold them (`HFileWriter.extend_encoded`), back to back
    in `data`, in strictly ascending key order; `starts` has one more entry, the end of the last."""

    data: np.ndarray
    starts: np.ndarray
    row_starts: np.ndarray
    row_lengths: np.ndarray
    value_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.row_lengths)

    def row(self, i: int) -> bytes:
        start = int(self.row_starts[i])
        return self.data[start : start + int(self.row_lengths[i])].tobytes()

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every (row key, value), in order (for checks; the writer takes the encoded bytes)."""
        data = self.data.tobytes()
        rows = zip(self.row_starts.tolist(), self.row_lengths.tolist(), self.value_lengths.tolist())
        return [(data[r : r + n], data[r + n + KEY_SUFFIX : r + n + KEY_SUFFIX + v]) for r, n, v in rows]


__all__ = [
    "CellColumns",
    "EncodedCells",
    "be_int",
    "binary_array",
    "block_cells",
    "cell_columns",
    "encoded",
    "gather",
    "joined_blocks",
    "pieces",
]
