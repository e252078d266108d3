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
"""

from __future__ import annotations

import io
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import fastavro

from lakeward.core.file_group import log_file
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.hfile_writer import BLOOM_FILTER_META_BLOCK, extended_metadata_bloom_filter
from lakeward.core.file_group.metadata_listing import committed_blocks
from lakeward.core.file_group.slice_keys import read_zigzag_varint
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
                length, pos = read_zigzag_varint(value, 5)
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
    return _merge_slice(mdt, base_path, log_paths, completed).cells


@dataclass(frozen=True)
class _SliceMerge:
    cells: dict[bytes, bytes]
    #: The base HFile's bloom filter meta block (None: no base, or none in it).
    base_bloom: bytes | None
    base_count: int
    #: Keys the logs added that the base did not hold (some may have been deleted again).
    new_keys: list[bytes]


def _merge_slice(
    mdt: Storage, base_path: str | None, log_paths: Sequence[str], completed: Collection[str]
) -> _SliceMerge:
    merged: dict[bytes, bytes] = {}
    base_bloom: bytes | None = None
    if base_path is not None:
        base = HFileReader(mdt.read_bytes(base_path), base_path)
        merged.update(base.items())
        base_bloom = base.meta_block(BLOOM_FILTER_META_BLOCK)
    base_count = len(merged)
    new_keys: list[bytes] = []
    for path, block in committed_blocks(mdt, log_paths, completed):
        if block.block_type is log_file.BlockType.HFILE_DATA:
            block_cells = dict(HFileReader(block.content, path).items())
            new_keys += [key for key in block_cells if key not in merged]
            merged.update(block_cells)
        elif block.block_type is log_file.BlockType.DELETE:
            deleted = log_file.decode_block(block).records.column(0).to_pylist()  # type: ignore[attr-defined]
            for key in deleted:
                if key is not None:
                    merged.pop(key.encode(), None)
    return _SliceMerge(merged, base_bloom, base_count, new_keys)


def merge_record_index_slice(
    mdt: Storage, base_path: str | None, log_paths: Sequence[str], completed: Collection[str], file_name: str
) -> tuple[list[tuple[str, bytes]], BloomFilter | None]:
    """The live cells (key, value) of one record-index (or bloom-filters) slice for its compacted base
    file `file_name`,
    sorted by key bytes (`merge_slice_cells`: later values replace, deleted keys are dropped; module
    doc). Nothing is written from a partial merge. With them, the base HFile's bloom filter
    extended with the keys new to the slice (`extended_metadata_bloom_filter`; None: build one):
    hashing every key again (30 hashes a key) was half of a record-index compaction."""
    merge = _merge_slice(mdt, base_path, log_paths, completed)
    merged = merge.cells
    stamp = FileNameStamp(file_name)
    cells = [(key.decode(), stamp(merged[key])) for key in sorted(merged)]
    if base_path is None or not merge.base_count:
        return cells, None
    live_new = sorted({key.decode() for key in merge.new_keys if key in merged})
    return cells, extended_metadata_bloom_filter(merge.base_bloom, live_new)


__all__ = ["FileNameStamp", "merge_record_index_slice", "merge_slice_cells"]
