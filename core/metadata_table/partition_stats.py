"""The metadata table's `partition_stats` partition: per data partition and column, one range (Hudi 1.x).

Layout (format doc 7.6): one file group (`partition-stats-0000-0`); the key is
`b64(xxh64(column)) + b64(xxh64(partition))`, the value a type-6 `HoodieMetadataRecord` whose
`ColumnStatsMetadata` has the partition path as `fileName` and `isTightBound` true. Each commit
writes, for every partition it touched, the range over the partition's latest file slices; the
newest record wins. Non-partitioned tables have no `partition_stats`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pyarrow as pa

from lakeward.core.metadata_table.column_stats import ColumnRange, column_value, hash_id, partition_identifier

PARTITION_STATS_PARTITION = "partition_stats"
FILE_GROUP_PREFIX = "partition-stats"
DEFAULT_FILE_GROUPS = 1


def partition_stats_key(column: str, partition_path: str) -> str:
    """The `partition_stats` key of `column` in `partition_path`."""
    return hash_id(column) + hash_id(partition_identifier(partition_path))


def partition_range(
    partition_path: str, column: str, files: Iterable[ColumnRange], arrow_type: pa.DataType | None = None
) -> ColumnRange:
    """The range of `column` (of `arrow_type`) over the (live) files of a partition, as a tight-bound
    partition record. Bounds are compared as values of the column's type (`column_value`: files'
    ranges decoded from the metadata table and computed from new files may differ in form); NaN
    bounds nothing. A file holding values without bounds (its writer kept no statistics for them)
    leaves the partition without bounds."""
    low = high = None
    values = nulls = size = raw = 0
    unbounded = False
    for r in files:
        values += r.value_count
        nulls += r.null_count
        size += r.total_size
        raw += r.total_uncompressed_size
        file_low, file_high = column_value(r.min_value, arrow_type), column_value(r.max_value, arrow_type)
        if (file_low is None or file_high is None) and r.value_count > r.null_count and not _is_nan(r):
            unbounded = True  # values the file keeps no bound for (statistics too long to keep)
        if file_low is not None and (low is None or file_low < low):
            low = file_low
        if file_high is not None and (high is None or file_high > high):
            high = file_high
    if unbounded:
        low = high = None
    return ColumnRange(partition_path, column, low, high, values, nulls, size, raw, tight_bound=True)


def _is_nan(r: ColumnRange) -> bool:
    """Whether a file's range is NaN (a file of NaN only): NaN matches no comparison, so it bounds
    nothing and leaves the partition's range to the other files."""
    return any(isinstance(v, float) and math.isnan(v) for v in (r.min_value, r.max_value))
