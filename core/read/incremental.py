"""Incremental `latest_state` reads: records written by completed commits in (begin, end].

As Hudi's incremental relation for copy-on-write: for each file group touched in the
range, read the version written by the last commit in the range and keep the rows whose
`_hoodie_commit_time` lies in the range.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.file_group.file_group import BaseFile, FileSlice
from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.read.snapshot import read_file_slices
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline
from lakeward.core.timeline.transitions import read_commit_metadata


def incremental_slices(storage: Storage, timeline: Timeline, begin: str, end: str | None) -> list[FileSlice]:
    """For each file group written in (begin, end], its version written by the last commit in the range."""
    if end is not None and end < begin:
        raise InstantNotFoundError(f"incremental range is empty: end {end} is before begin {begin}")
    latest_by_group: dict[tuple[str, str], BaseFile] = {}
    replaced: set[tuple[str, str]] = set()
    for instant in timeline.completed_writes_between(begin, end):
        metadata = read_commit_metadata(storage, instant)
        for partition, file_ids in (metadata.partitionToReplaceFileIds or {}).items():
            replaced.update((partition, f) for f in file_ids)
        for stat in metadata.write_stats():
            name = stat.path.rsplit("/", 1)[-1]
            parsed = parse_base_file_name(name)
            if parsed is None:
                continue
            latest_by_group[(stat.partitionPath, stat.fileId)] = BaseFile(
                stat.path, stat.fileId, parsed.instant_time, stat.fileSizeInBytes
            )
    # A file group replaced inside the range (overwrite, delete_partition) no longer holds data.
    return [FileSlice(p, f, b.instant_time, b) for (p, f), b in latest_by_group.items() if (p, f) not in replaced]


def commit_time_range(begin: str, end: str | None) -> pc.Expression:
    """Rows whose `_hoodie_commit_time` lies in (begin, end]."""
    time_filter = pc.field("_hoodie_commit_time") > begin
    if end is not None:
        time_filter = time_filter & (pc.field("_hoodie_commit_time") <= end)
    return time_filter


def read_incremental(
    storage: Storage,
    timeline: Timeline,
    schema: pa.Schema | None,
    begin: str,
    end: str | None,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
) -> pa.Table:
    """Latest state of every record changed by a completed write in (begin, end]."""
    slices = incremental_slices(storage, timeline, begin, end)
    time_filter = commit_time_range(begin, end)
    combined = time_filter if filter is None else time_filter & filter
    return read_file_slices(storage, slices, schema, columns, combined)
