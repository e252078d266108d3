"""The `bitmap` index: an exact inverted index, value -> row ids of one base file, per column.

File layout (one file per base file and index; every column of the index in it):

    b"LWBM1\\n"
    blocks          Arrow IPC streams (zstd), each a sorted run of distinct values:
                    `value` (the column's type), `rows` (list<uint32>: the row ids, for
                    values with few rows) and `bitmap` (binary: a serialised roaring
                    bitmap, for values with many rows)
    directories     one Arrow IPC stream per column: per block its first and last
                    value, row count, byte offset and length
    bitmaps         per column the roaring bitmap of null rows (and of NaN rows)
    footer          JSON: num_rows, row group sizes, the definition id and, per column,
                    where its directory and null bitmap are
    trailer         footer length (uint64, little endian) + b"LWBM"

A point lookup reads the trailer and footer (one read of the file's tail), then one
block: a few kilobytes, whatever the size of the base file. Range predicates read the
blocks their range covers. Row ids are positions in the base file (0-based, in file
order, so row group boundaries follow from the row group sizes).

Floating-point columns: -0.0 is indexed as 0.0 and NaN rows are kept apart (no
comparison selects NaN, `!=` and `not in` keep it), as Arrow compares them.
"""

from __future__ import annotations

import bisect
import io
import json
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.index.secondary.predicates import RANGE_OPS, ColumnPredicate, like_prefix, literal

MAGIC = b"LWBM1\n"
TRAILER_MAGIC = b"LWBM"
FORMAT_VERSION = 1
#: Values with at least this many rows keep a roaring bitmap; fewer: a plain list of row ids.
ROARING_MIN_ROWS = 32
BLOCK_MAX_VALUES = 1024
BLOCK_MAX_BYTES = 64 * 1024
_TAIL_GUESS = 16 * 1024
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


def _plain_values(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    return values


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _read_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _bitmap_bytes(positions: np.ndarray) -> bytes:
    bm = BitMap(positions.astype(np.uint32, copy=False))
    bm.run_optimize()
    return bytes(bm.serialize())


class _Writer:
    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        self.buffer.write(MAGIC)

    def add(self, data: bytes) -> list[int]:
        offset = self.buffer.tell()
        self.buffer.write(data)
        return [offset, len(data)]


def _index_column(writer: _Writer, values: pa.Array) -> dict[str, Any]:
    n = len(values)
    positions = np.arange(n, dtype=np.int64)
    null_mask = pc.is_null(values).to_numpy(zero_copy_only=False)
    nan_section = None
    valid_mask = ~null_mask
    if pa.types.is_floating(values.type):
        values = pc.add(values, pa.scalar(0.0, values.type))  # -0.0 -> 0.0
        nan_mask = pc.fill_null(pc.is_nan(values), False).to_numpy(zero_copy_only=False)
        nan_section = writer.add(_bitmap_bytes(positions[nan_mask]))
        valid_mask &= ~nan_mask
    nulls_section = writer.add(_bitmap_bytes(positions[null_mask]))
    kept = positions[valid_mask]
    data = values.filter(pa.array(valid_mask)) if not valid_mask.all() else values
    order = pc.sort_indices(data).to_numpy()
    sorted_values = data.take(pa.array(order))
    row_ids = kept[order].astype(np.uint32)
    m = len(sorted_values)
    if m:
        changes = pc.not_equal(sorted_values.slice(1), sorted_values.slice(0, m - 1)).to_numpy(zero_copy_only=False)
        starts = np.concatenate([[0], np.flatnonzero(changes) + 1]).astype(np.int64)
    else:
        starts = np.zeros(0, dtype=np.int64)
    ends = np.append(starts[1:], m).astype(np.int64)
    counts = ends - starts
    distinct = sorted_values.take(pa.array(starts))
    dense = counts >= ROARING_MIN_ROWS
    blob: list[bytes | None] = [None] * len(starts)
    for i in np.flatnonzero(dense):
        blob[i] = _bitmap_bytes(row_ids[starts[i] : ends[i]])
    small_rows = np.repeat(~dense, counts)
    list_lengths = np.where(dense, 0, counts)
    offsets = np.concatenate([[0], np.cumsum(list_lengths)]).astype(np.int32)
    rows_child = pa.array(row_ids[small_rows], pa.uint32())
    rows_col = pa.ListArray.from_arrays(pa.array(offsets), rows_child)
    bitmap_col = pa.array(blob, pa.binary())
    cost = np.where(dense, [len(b) if b is not None else 0 for b in blob], 4 * counts) + 16
    cumulative = np.cumsum(cost)
    directory: dict[str, list[Any]] = {"first": [], "last": [], "rows": [], "values": [], "offset": [], "length": []}
    start = 0
    total = len(starts)
    while start < total:
        base = cumulative[start - 1] if start else 0
        end = int(np.searchsorted(cumulative, base + BLOCK_MAX_BYTES, side="right"))
        end = max(start + 1, min(end, start + BLOCK_MAX_VALUES, total))
        block = pa.table(
            {
                "value": distinct.slice(start, end - start),
                "rows": rows_col.slice(start, end - start),
                "bitmap": bitmap_col.slice(start, end - start),
            }
        )
        offset, length = writer.add(_ipc(block))
        directory["first"].append(distinct[start])
        directory["last"].append(distinct[end - 1])
        directory["rows"].append(int(counts[start:end].sum()))
        directory["values"].append(end - start)
        directory["offset"].append(offset)
        directory["length"].append(length)
        start = end
    dir_table = pa.table(
        {
            "first": pa.array([s.as_py() for s in directory["first"]], distinct.type),
            "last": pa.array([s.as_py() for s in directory["last"]], distinct.type),
            "rows": pa.array(directory["rows"], pa.int64()),
            "values": pa.array(directory["values"], pa.int64()),
            "offset": pa.array(directory["offset"], pa.int64()),
            "length": pa.array(directory["length"], pa.int64()),
        }
    )
    return {
        "type": str(values.type),
        "directory": writer.add(_ipc(dir_table)),
        "nulls": nulls_section,
        "nans": nan_section,
        "null_count": int(null_mask.sum()),
        "distinct": int(len(starts)),
    }


def build_bitmap_index(
    columns: pa.Table, row_group_rows: Sequence[int], definition_id: str, index_name: str, base_file: str
) -> bytes:
    """The bitmap index file of one base file: `columns` holds the indexed columns, all rows, in file order."""
    writer = _Writer()
    sections = {name: _index_column(writer, _plain_values(columns.column(name))) for name in columns.column_names}
    footer = {
        "version": FORMAT_VERSION,
        "kind": "bitmap",
        "index_name": index_name,
        "definition_id": definition_id,
        "base_file": base_file,
        "num_rows": columns.num_rows,
        "row_groups": list(row_group_rows),
        "columns": sections,
    }
    text = json.dumps(footer).encode()
    writer.buffer.write(text)
    writer.buffer.write(struct.pack("<Q", len(text)) + TRAILER_MAGIC)
    return writer.buffer.getvalue()


# -- reading --------------------------------------------------------------------------------
@dataclass
class _Directory:
    data_type: pa.DataType
    first: list[Any]
    last: list[Any]
    rows: list[int]
    offset: list[int]
    length: list[int]


class BitmapIndexFile:
    """An open bitmap index file: answers predicates on its columns with sets of row ids."""

    def __init__(self, source: Any, size: int, path: str = ""):
        self._source = source
        self.path = path
        tail_size = min(size, _TAIL_GUESS)
        tail = source.read_at(tail_size, size - tail_size)
        if len(tail) < 12 or tail[-4:] != TRAILER_MAGIC:
            raise CorruptTableError(f"{path} is not a lakeward bitmap index file")
        (footer_len,) = struct.unpack("<Q", tail[-12:-4])
        if footer_len + 12 > len(tail):
            tail = source.read_at(footer_len + 12, size - footer_len - 12)
        self.footer = json.loads(tail[-12 - footer_len : -12])
        self.bytes_read = len(tail)
        self.num_rows: int = int(self.footer["num_rows"])
        self.row_groups: list[int] = list(self.footer["row_groups"])
        self.definition_id: str = str(self.footer.get("definition_id") or "")
        self._directories: dict[str, _Directory] = {}
        self._lock = threading.Lock()

    @property
    def columns(self) -> list[str]:
        return list(self.footer["columns"])

    def _read(self, section: Sequence[int]) -> bytes:
        offset, length = section
        data = self._source.read_at(length, offset)
        self.bytes_read += length
        return bytes(data)

    def _bitmap(self, section: Sequence[int] | None) -> BitMap:
        if section is None:
            return BitMap()
        return BitMap.deserialize(self._read(section))

    def _directory(self, column: str) -> _Directory:
        with self._lock:
            found = self._directories.get(column)
            if found is None:
                table = _read_ipc(self._read(self.footer["columns"][column]["directory"]))
                found = _Directory(
                    table.schema.field("first").type,
                    table.column("first").to_pylist(),
                    table.column("last").to_pylist(),
                    table.column("rows").to_pylist(),
                    table.column("offset").to_pylist(),
                    table.column("length").to_pylist(),
                )
                self._directories[column] = found
            return found

    def all_rows(self) -> BitMap:
        return BitMap(range(self.num_rows))

    def _block_rows(self, column: str, block: int, mask_fn: Any) -> BitMap:
        d = self._directory(column)
        table = _read_ipc(self._read([d.offset[block], d.length[block]]))
        mask = mask_fn(table.column("value"))
        chosen = np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))
        out = BitMap()
        if not len(chosen):
            return out
        rows = table.column("rows").combine_chunks()
        blobs = table.column("bitmap").combine_chunks()
        small = pc.list_flatten(rows.take(pa.array(chosen))).to_numpy(zero_copy_only=False)
        if len(small):
            out.update(small.astype(np.uint32))
        for i in chosen:
            blob = blobs[int(i)]
            if blob.is_valid:
                out |= BitMap.deserialize(blob.as_py())
        return out

    def _blocks_between(self, column: str, low: Any, high: Any) -> list[int]:
        """Blocks whose values may lie in [low, high] (None: unbounded)."""
        d = self._directory(column)
        n = len(d.first)
        lo = 0 if low is None else max(0, bisect.bisect_left(d.last, low))
        hi = n if high is None else bisect.bisect_right(d.first, high)
        return list(range(lo, min(hi, n)))

    def estimate(self, p: ColumnPredicate) -> int | None:
        """An upper bound on the rows `p` selects, from the directory only (None: not answerable)."""
        if p.column not in self.footer["columns"]:
            return None
        bounds = self._bounds(p)
        if bounds is None:
            return None if p.op not in ("=", "in", "is null") else 0
        d = self._directory(p.column)
        return sum(d.rows[b] for b in self._blocks_between(p.column, *bounds))

    def _bounds(self, p: ColumnPredicate) -> tuple[Any, Any] | None:
        d = self._directory(p.column)
        if p.op == "like":
            prefix = like_prefix(str(p.value))
            if prefix is None or not (pa.types.is_string(d.data_type) or pa.types.is_large_string(d.data_type)):
                return None
            return prefix, _after_prefix(prefix)
        if p.op not in RANGE_OPS:
            return None
        scalar = literal(p.value, d.data_type)
        if scalar is None:
            return None
        value = scalar.as_py()
        return (value, None) if p.op in (">", ">=") else (None, value)

    def lookup(self, p: ColumnPredicate, max_rows: int | None = None) -> BitMap | None:
        """Row ids of the rows that may satisfy `p` (a superset of the exact answer; exact for
        the supported operators); None when this index cannot answer `p`, or (ranges) when
        the blocks it would read hold more than `max_rows` rows.
        """
        section = self.footer["columns"].get(p.column)
        if section is None:
            return None
        op = p.op
        if op == "is null":
            return self._bitmap(section["nulls"])
        if op == "is not null":
            return self.all_rows() - self._bitmap(section["nulls"])
        d = self._directory(p.column)
        if op in ("=", "!=", "in", "not in"):
            values = [p.value] if op in ("=", "!=") else list(p.value)
            scalars = [literal(v, d.data_type) for v in values]
            if any(s is None for s, v in zip(scalars, values, strict=True) if v is not None):
                return None  # not exactly a value of the column (another type, NaN): the scan decides
            present = [s for s in scalars if s is not None and not _is_nan(s)]
            found = BitMap()
            if op == "in" and any(v is None for v in values):
                found |= self._bitmap(section["nulls"])  # an in-list with None accepts nulls (pyarrow's is_in)
            for block, group in _group_by_block(d, [s.as_py() for s in present]).items():
                wanted = pa.array(group, d.data_type)
                found |= self._block_rows(p.column, block, lambda v, w=wanted: pc.is_in(v, value_set=w))
            if op in ("=", "in"):
                return found
            return self.all_rows() - found  # keeps nulls and NaN: a superset, the exact filter decides
        bounds = self._bounds(p)
        if bounds is None:
            return None
        blocks = self._blocks_between(p.column, *bounds)
        if max_rows is not None and len(blocks) > 2 and sum(d.rows[b] for b in blocks) > max_rows:
            return None  # many blocks, mostly selected: a scan is cheaper than reading them
        if op == "like":
            prefix = like_prefix(str(p.value))
            assert prefix is not None
            fn = lambda v: pc.starts_with(v, prefix)  # noqa: E731
        else:
            scalar = literal(p.value, d.data_type)
            compare = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}[op]
            fn = lambda v: compare(v, scalar)  # noqa: E731
        found = BitMap()
        for block in blocks:
            found |= self._block_rows(p.column, block, fn)
        return found


def _after_prefix(prefix: str) -> str | None:
    """The least string after every string that starts with `prefix` (code point order, which is
    UTF-8 byte order); None when there is none (the prefix is all U+10FFFF). A block whose first
    value is at most this may hold such strings (`prefix + U+10FFFF` missed those going on past it)."""
    stem = prefix.rstrip("\U0010ffff")
    if not stem:
        return None
    return stem[:-1] + chr(ord(stem[-1]) + 1)


def _is_nan(scalar: pa.Scalar) -> bool:
    value = scalar.as_py()
    return isinstance(value, float) and value != value


def _group_by_block(d: _Directory, values: list[Any]) -> dict[int, list[Any]]:
    """Values grouped by the block that may hold them (values outside every block are dropped)."""
    out: dict[int, list[Any]] = {}
    for v in values:
        if isinstance(v, float) and v == 0.0:
            v = 0.0
        i = bisect.bisect_right(d.first, v) - 1
        if i >= 0 and v <= d.last[i]:
            out.setdefault(i, []).append(v)
    return out
