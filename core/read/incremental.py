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
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.read.merge_on_read import MergeSettings, VisibleInstants
from lakeward.core.read.snapshot import read_file_slices
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline
from lakeward.core.timeline.transitions import read_commit_metadata


def incremental_slices(storage: Storage, timeline: Timeline, begin: str, end: str | None) -> list[FileSlice]:
    """The file groups written in (begin, end], each as its latest slice as of `end`.

    Covers base files and log files (merge-on-read): the slice as of `end` holds every
    version written in the range, and a group replaced inside the range is left out.
    """
    if end is not None and end < begin:
        raise InstantNotFoundError(f"incremental range is empty: end {end} is before begin {begin}")
    touched: set[tuple[str, str]] = set()
    last = None
    for instant in timeline.completed_writes_between(begin, end):
        last = instant.time
        for stat in read_commit_metadata(storage, instant).write_stats():
            if stat.fileId:
                touched.add((stat.partitionPath, stat.fileId))
    if last is None:
        return []
    view = FileSystemView.load(storage, timeline)
    return [s for s in view.latest_file_slices(as_of=end or last) if (s.partition_path, s.file_id) in touched]


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
    merge: MergeSettings | None = None,
) -> pa.Table:
    """Latest state of every record changed by a completed write in (begin, end]."""
    slices = incremental_slices(storage, timeline, begin, end)
    time_filter = commit_time_range(begin, end)
    combined = time_filter if filter is None else time_filter & filter
    return read_file_slices(
        storage, slices, schema, columns, combined, instants=VisibleInstants.from_timeline(timeline, end), merge=merge
    )
