"""Merge one `record_index` file slice into the cells of its compacted base HFile.

The metadata table's compaction (`metadata_table.compaction`) folds every partition's latest
slices, as Hudi's does; for a record-index file group the merge is Hudi's
(`HoodieMetadataPayload` of type 5 with `HoodieMetadataLogRecordReader`): start from the base
HFile's cells, then apply each committed log block oldest to newest — an `HFILE_DATA` block's
cell replaces the key's value, a DELETE block's key removes it. The values are kept byte for
byte (the location and the instant that put the key there), so the compacted base answers every
lookup exactly as the slice it replaces did.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from lakeward.core.file_group import log_file
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.metadata_listing import MetadataTableUnavailable
from lakeward.core.storage import Storage


def _apply_hfile(merged: dict[bytes, bytes], data: bytes, name: str) -> None:
    merged.update(HFileReader(data, name).items())


def merge_record_index_slice(
    mdt: Storage, base_path: str | None, log_paths: Sequence[str], completed: Collection[str]
) -> list[tuple[str, bytes]]:
    """The live cells (key, value) of one record-index slice, sorted by key bytes: the base HFile
    (if any), then the blocks of `log_paths` (in the order given: completion time, version, write
    token) whose instant is in `completed`; later values replace, deleted keys are dropped.
    Raises MetadataTableUnavailable on a damaged log block (nothing is written from a partial merge)."""
    merged: dict[bytes, bytes] = {}
    if base_path is not None:
        _apply_hfile(merged, mdt.read_bytes(base_path), base_path)
    for path in log_paths:
        for block in log_file.scan_blocks(mdt.read_bytes(path)):
            if isinstance(block, log_file.CorruptBlock):
                raise MetadataTableUnavailable(f"{path}: damaged log block ({block.reason})")
            if block.instant_time not in completed:
                continue
            if block.block_type is log_file.BlockType.HFILE_DATA:
                _apply_hfile(merged, block.content, path)
            elif block.block_type is log_file.BlockType.DELETE:
                deleted = log_file.decode_block(block).records.column(0).to_pylist()  # type: ignore[attr-defined]
                for key in deleted:
                    if key is not None:
                        merged.pop(key.encode(), None)
    return [(key.decode(), merged[key]) for key in sorted(merged)]


__all__ = ["merge_record_index_slice"]
