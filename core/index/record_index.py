"""RECORD_INDEX: locate keys through the metadata table's `record_index` partition.

One lookup per key in the record index (`metadata_table.record_index.RecordIndex`) instead of
reading bloom filters and base-file keys. The index is global, as Hudi's: a key lives in one
partition; a record whose key the index places in another partition is refused rather than
written twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.metadata_table.record_index import RecordIndex


def located_by_record_index(index: RecordIndex, slices: Sequence[FileSlice], keys: pa.Array) -> pa.Array:
    """File id holding each key (null: a new key) among `slices`, the latest slices of one partition."""
    partitions, file_ids = index.locate(keys)
    if not len(keys):
        return file_ids
    partition = slices[0].partition_path if slices else ""
    elsewhere = pc.and_(pc.is_valid(partitions), pc.not_equal(partitions, pa.scalar(partition)))
    if pc.any(elsewhere).as_py():
        row = pc.index(elsewhere, True).as_py()
        raise ConfigError(
            f"record key {keys[row].as_py()!r} is in partition {partitions[row].as_py()!r} according to the record "
            f"index, and the write puts it in {partition!r}: hoodie.index.type=RECORD_INDEX is a global index (a key "
            "lives in one partition) and moving keys between partitions is not supported. Nothing was written"
        )
    known = {s.file_id for s in slices}
    stale = pc.and_(
        pc.is_valid(file_ids), pc.invert(pc.is_in(file_ids, value_set=pa.array(sorted(known), pa.string())))
    )
    if pc.any(stale).as_py():
        row = pc.index(stale, True).as_py()
        raise ConfigError(
            f"the record index places key {keys[row].as_py()!r} in file group {file_ids[row].as_py()} of partition "
            f"{partition!r}, which is not a live file group: the record_index partition is out of date. Rebuild it "
            "(drop it with hoodie.metadata.record.index.enable=false, then enable it again). Nothing was written"
        )
    return file_ids
