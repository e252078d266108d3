"""Merge one `record_index` file slice into the cells of its compacted base HFile.

The metadata table's compaction (`metadata_table.compaction`) folds every partition's latest
slices, as Hudi's does; for a record-index file group the merge is Hudi's
(`HoodieMetadataPayload` of type 5 with `HoodieMetadataLogRecordReader`): start from the base
HFile's cells, then apply each committed log block oldest to newest — an `HFILE_DATA` block's
cell replaces the key's value, a DELETE block's key removes it. The values keep the location and
the instant that put the key there, so the compacted base answers every lookup exactly as the
slice it replaces did; as in the base files Hudi's compaction writes (its create handle stamps
the file name even on the metadata table, which has no other meta fields), `_hoodie_file_name`
is the new base file's name and `key` is "" (`HoodieAvroHFileWriter` blanks it, the HFile key
holds it). `bloom_filters` file groups merge the same way (Hudi's type-4 payload: the newer
record replaces the older; its log blocks have no deletes).

The merge is columnar (a record-index file group holds millions of keys, and the record-by-record
merge cost about 3 us a key): every cell of the base and of the log blocks is located once in
one buffer (`hfile_cells.cell_columns`), the newest entry per key is found by Arrow hash lookups
over the log entries, the base entries they replace are dropped by a set lookup, one sort orders
the survivors, and the compacted cells are assembled by one Arrow `take` of pieces of the source
cells (`_stamped_cells`) and written as encoded cells (`HFileWriter.extend_encoded`). The output
is byte for byte the record-by-record merge's (a randomised test holds it to that). Only the
record index and bloom filters read the base's bloom filter and the keys new to the group
(`merge_record_index_slice`); the stats partitions' merge (`merge_slice_cells`) does not.
"""

from __future__ import annotations

import io
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.file_group import log_file
from lakeward.core.file_group.hfile import KEY_SUFFIX, HFileReader
from lakeward.core.file_group.hfile_cells import CellColumns, EncodedCells, binary_array, cell_columns, encoded, pieces
from lakeward.core.file_group.hfile_writer import (
    BLOOM_FILTER_META_BLOCK,
    KEY_TAIL,
    MEMSTORE_ZERO,
    extended_metadata_bloom_filter,
)
from lakeward.core.file_group.log_file.avro_vector import read_long
from lakeward.core.file_group.metadata_listing import committed_blocks
from lakeward.core.index.bloom_filter import BloomFilter
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA
from lakeward.core.storage import Storage

_PARSED_SCHEMA = fastavro.parse_schema(METADATA_RECORD_SCHEMA)
#: The first four meta fields (`_hoodie_commit_time` … `_hoodie_partition_path`), null.
_NULL_META = b"\x00" * 4


def _avro_string(text: str) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, "string", text)
    return out.getvalue()


class FileNameStamp:
    """Rewrites record values with `_hoodie_file_name` set to one file's name and `key` "".

    Values as lakeward and Hudi write them (four null meta fields, a null or set file name, key "")
    are spliced; any other layout goes through the Avro codec.
    """

    def __init__(self, file_name: str):
        self.file_name = file_name
        self.head = _NULL_META + b"\x02" + _avro_string(file_name)
        self._stamped: dict[bytes, bytes] = {}  # keys at one location share their value

    def __call__(self, value: bytes) -> bytes:
        stamped = self._stamped.get(value)
        if stamped is None:
            stamped = self._stamped[value] = self._stamp(value)
        return stamped

    def _stamp(self, value: bytes) -> bytes:
        if value.startswith(_NULL_META) and len(value) > 5:
            pos = 5
            if value[4] == 2:  # a file name: skip it
                length, pos = read_long(value, 5)
                pos += length
            elif value[4] != 0:
                pos = -1
            if pos > 0 and value[pos : pos + 1] == b"\x00":  # key ""
                return self.head + value[pos:]
        record = fastavro.schemaless_reader(io.BytesIO(value), _PARSED_SCHEMA, None)
        record |= {"_hoodie_file_name": self.file_name, "key": ""}  # type: ignore[operator]
        out = io.BytesIO()
        fastavro.schemaless_writer(out, _PARSED_SCHEMA, record)
        return out.getvalue()


def merge_slice_cells(
    mdt: Storage, base_path: str | None, log_paths: Sequence[str], completed: Collection[str]
) -> dict[bytes, bytes]:
    """The newest value per key of one metadata file slice whose records replace each other (record
    index, bloom filters, column and partition stats): the base HFile (if any), then the blocks of `log_paths` (in
    the order given: completion time, version, write token) whose instant is in `completed`; a
    DELETE block's keys are removed. Raises MetadataTableUnavailable on a damaged log block."""
    merge = _merge_slice(_read_slice(mdt, base_path, log_paths, completed))
    values = binary_array(merge.pool, merge.value_starts, merge.value_lengths).to_pylist()
    return dict(zip(merge.keys.to_pylist(), values))


@dataclass(frozen=True)
class _SliceCells:
    """The cells of a slice's base HFile and committed log blocks, over one buffer, oldest first."""

    pool: np.ndarray
    #: Per entry (cells, then deletes where their block came): its cell start in `pool` (-1: a deleted key).
    starts: np.ndarray
    key_lengths: np.ndarray
    value_lengths: np.ndarray
    row_lengths: np.ndarray
    keys: pa.LargeBinaryArray
    #: Entries `[0, base_count)` are the base HFile's (sorted, distinct).
    base_count: int
    #: The base HFile's bloom filter meta block (None: no base, or none in it, or not asked for).
    base_bloom: bytes | None


def _read_slice(
    mdt: Storage, base_path: str | None, log_paths: Sequence[str], completed: Collection[str], bloom: bool = False
) -> _SliceCells:
    parts: list[tuple[CellColumns | None, pa.Array]] = []
    base_bloom: bytes | None = None
    if base_path is not None:
        base = HFileReader(mdt.read_bytes(base_path), base_path)
        columns = cell_columns(base)
        parts.append((columns, columns.rows()))
        if bloom:
            base_bloom = base.meta_block(BLOOM_FILTER_META_BLOCK)
    base_count = len(parts[0][1]) if parts else 0
    for path, block in committed_blocks(mdt, log_paths, completed):
        if block.block_type is log_file.BlockType.HFILE_DATA:
            columns = cell_columns(HFileReader(block.content, path))
            parts.append((columns, columns.rows()))
        elif block.block_type is log_file.BlockType.DELETE:
            deleted = log_file.decode_block(block).records.column(0)  # type: ignore[attr-defined]
            deleted = deleted.combine_chunks() if isinstance(deleted, pa.ChunkedArray) else deleted
            parts.append((None, deleted.drop_null().cast(pa.large_binary())))
    cells = [c for c, _ in parts if c is not None]
    pool = np.concatenate([c.data for c in cells]) if cells else np.zeros(0, np.uint8)
    shifts = np.cumsum([0] + [len(c.data) for c in cells])
    starts, key_lengths, value_lengths, row_lengths = [], [], [], []
    shift = iter(shifts)
    for columns, keys in parts:
        if columns is None:
            empty = np.zeros(len(keys), np.int64)
            starts.append(empty - 1)
            key_lengths.append(empty)
            value_lengths.append(empty)
            row_lengths.append(empty)
            continue
        starts.append(columns.starts + next(shift))
        key_lengths.append(columns.key_lengths)
        value_lengths.append(columns.value_lengths)
        row_lengths.append(columns.row_lengths)

    def joined(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

    keys = pa.concat_arrays([k for _, k in parts]) if parts else pa.array([], pa.large_binary())
    return _SliceCells(
        pool,
        joined(starts),
        joined(key_lengths),
        joined(value_lengths),
        joined(row_lengths),
        keys,
        base_count,
        base_bloom,
    )


@dataclass(frozen=True)
class _Merged:
    """The live cells of a slice, in key order: indexes into its `_SliceCells` entries."""

    cells: _SliceCells
    #: The surviving entries, sorted by key (every one a cell, never a deleted key).
    live: np.ndarray
    #: Whether each surviving entry's key is new to the slice (not in its base HFile).
    new: np.ndarray

    @property
    def pool(self) -> np.ndarray:
        return self.cells.pool

    @property
    def keys(self) -> pa.LargeBinaryArray:
        return self.cells.keys.take(pa.array(self.live))

    @property
    def value_starts(self) -> np.ndarray:
        return self.cells.starts[self.live] + 8 + self.cells.key_lengths[self.live]

    @property
    def value_lengths(self) -> np.ndarray:
        return self.cells.value_lengths[self.live]


def _merge_slice(cells: _SliceCells) -> _Merged:
    """Newest entry per key wins (entries are oldest first); a key whose newest entry is a delete is
    dropped. Columnar: the log entries' newest occurrence per key by a hash lookup over them
    reversed, the base entries they replace by a set lookup, then one sort of the survivors."""
    n_base, n = cells.base_count, len(cells.keys)
    if n == n_base:
        return _Merged(cells, np.arange(n_base, dtype=np.int64), np.zeros(n_base, bool))
    base_keys = cells.keys.slice(0, n_base)
    logged = cells.keys.slice(n_base)
    m = n - n_base
    newest_first = logged.take(pa.array(np.arange(m - 1, -1, -1, dtype=np.int64)))
    distinct = pc.unique(newest_first)
    newest = n_base + (m - 1 - pc.index_in(distinct, value_set=newest_first).to_numpy(zero_copy_only=False))
    newest = newest[cells.starts[newest] >= 0]  # a deleted key is gone
    replaced = pc.is_in(base_keys, value_set=distinct).to_numpy(zero_copy_only=False)
    candidates = np.concatenate([np.flatnonzero(~replaced), newest])
    order = pc.sort_indices(cells.keys.take(pa.array(candidates))).to_numpy()
    live = candidates[order]
    # a log key is in the base exactly when it is one of the base keys the logs replace: look it up
    # among those (few, often none) instead of hashing every base key
    in_base = base_keys.filter(pa.array(replaced))
    new = np.zeros(n, bool)
    new[newest] = ~pc.is_in(cells.keys.take(pa.array(newest)), value_set=in_base).to_numpy(zero_copy_only=False)
    return _Merged(cells, live, new[live])


def _stamped_cells(merge: _Merged, file_name: str) -> EncodedCells:
    """The surviving cells encoded for the compacted base `file_name`: the key's row as it was, the
    value stamped (`FileNameStamp`: a spliced head where the layout allows, else the Avro codec
    per value). Columnar: the slice's cells are cut into pieces where they change (`pieces`, no
    copy) and the output is one Arrow `take` of, per cell, its new head, its row, the key tail and
    new value head, the rest of its value, and the memstore byte."""
    cells, live = merge.cells, merge.live
    stamp = FileNameStamp(file_name)
    pool, n = cells.pool, len(live)
    value_starts, value_lengths = merge.value_starts, merge.value_lengths
    rest = _spliced_rest(pool, value_starts, value_lengths)
    odd = np.flatnonzero(rest < 0)
    extra = [stamp(pool[s : s + k].tobytes()) for s, k in zip(value_starts[odd].tolist(), value_lengths[odd].tolist())]
    extra_lengths = np.fromiter(map(len, extra), np.int64, len(extra))
    new_lengths = len(stamp.head) + value_lengths - rest
    new_lengths[odd] = extra_lengths
    row_lengths = cells.row_lengths[live]
    # the slice's cells (in pool order), each cut in six: head, row, key tail, value head, rest, memstore
    is_cell = cells.starts >= 0
    rank = np.cumsum(is_cell) - 1
    cell_starts = cells.starts[is_cell]
    cell_values = cell_starts + 8 + cells.key_lengths[is_cell]
    cut = np.zeros(len(cell_starts), np.int64)
    cut[rank[live]] = np.maximum(rest, 0)
    bounds = np.empty(6 * len(cell_starts) + 1, np.int64)
    bounds[0:-1:6], bounds[1:-1:6] = cell_starts, cell_starts + 8
    bounds[2:-1:6] = cell_starts + 10 + cells.row_lengths[is_cell]
    bounds[3:-1:6], bounds[4:-1:6] = cell_values, cell_values + cut
    bounds[5:-1:6], bounds[-1] = cell_values + cells.value_lengths[is_cell], len(pool)
    header = np.empty((n, 2), ">i4")
    header[:, 0], header[:, 1] = row_lengths + 2 + KEY_SUFFIX, new_lengths
    extra_bounds = np.zeros(len(extra) + 1, np.int64)
    np.cumsum(extra_lengths, out=extra_bounds[1:])
    constant = KEY_TAIL + stamp.head + KEY_TAIL + MEMSTORE_ZERO
    tail_head = len(KEY_TAIL) + len(stamp.head)
    parts = [
        pieces(pool, bounds),
        pieces(header.view(np.uint8).reshape(-1), np.arange(0, 8 * n + 1, 8, dtype=np.int64)),
        pieces(np.frombuffer(b"".join(extra), np.uint8), extra_bounds),
        pieces(np.frombuffer(constant, np.uint8), np.array([0, tail_head, tail_head + len(KEY_TAIL), len(constant)])),
    ]
    at_header = len(parts[0])
    at_extra = at_header + n
    at_constant = at_extra + len(extra)
    picks = np.empty((n, 5), np.int64)
    picks[:, 0] = at_header + np.arange(n, dtype=np.int64)
    picks[:, 1] = 6 * rank[live] + 1
    picks[:, 2] = at_constant
    picks[:, 3] = 6 * rank[live] + 4
    picks[:, 4] = at_constant + 2
    picks[odd, 2] = at_constant + 1
    picks[odd, 3] = at_extra + np.arange(len(odd), dtype=np.int64)
    data, offsets = encoded(pa.concat_arrays(parts).take(pa.array(picks.reshape(-1))))
    return EncodedCells(data, offsets[0::5].copy(), offsets[0:-1:5] + 10, row_lengths, new_lengths)


def _spliced_rest(pool: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per value, where the part kept by `FileNameStamp`'s splice begins (after the four null meta
    fields and the file name, at key ""), or -1 where the value needs the Avro codec."""
    rest = np.full(len(starts), -1, np.int64)
    ok = lengths > 5
    at = np.where(ok, starts, 0)
    limit = len(pool) - 1

    def byte(offset: np.ndarray | int) -> np.ndarray:
        return pool[np.minimum(at + offset, limit)].astype(np.int64)

    ok &= (byte(0) | byte(1) | byte(2) | byte(3)) == 0
    flag, name = byte(4), byte(5)
    named = ok & (flag == 2) & (name < 128) & (name % 2 == 0)  # a one-byte zigzag length
    rest[named] = 6 + name[named] // 2
    null = ok & (flag == 0)
    rest[null] = 5
    found = rest > 0
    found &= rest < lengths
    found &= byte(np.maximum(rest, 0)) == 0  # key ""
    rest[~found] = -1
    return rest


def merge_record_index_slice(
    mdt: Storage, base_path: str | None, log_paths: Sequence[str], completed: Collection[str], file_name: str
) -> tuple[EncodedCells, BloomFilter | None]:
    """The live cells of one record-index (or bloom-filters) slice encoded for its compacted base file
    `file_name`, sorted by key bytes (`merge_slice_cells`: later values replace, deleted keys are
    dropped; module doc). Nothing is written from a partial merge. With them, the
    base HFile's bloom filter extended with the keys new to the slice (`extended_metadata_bloom_filter`;
    None: build one): hashing every key again (30 hashes a key) was half of a record-index compaction."""
    merge = _merge_slice(_read_slice(mdt, base_path, log_paths, completed, bloom=True))
    cells = _stamped_cells(merge, file_name)
    if base_path is None or not merge.cells.base_count:
        return cells, None
    new_keys = merge.keys.filter(pa.array(merge.new)).cast(pa.large_string()).to_pylist()
    return cells, extended_metadata_bloom_filter(merge.cells.base_bloom, new_keys)


__all__ = ["FileNameStamp", "merge_record_index_slice", "merge_slice_cells"]
