"""Incremental `latest_state` reads: records written by completed commits in (begin, end].

As Hudi's incremental relation for copy-on-write: for each file group touched in the
range, read the version written by the last commit in the range and keep the rows whose
`_hoodie_commit_time` lies in the range. This module holds the pieces (the slices of a
range, its stable end, the range as a row filter); `Scan` plans and runs the query.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow.compute as pc

from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.integrity import verify_listing
from lakeward.core.file_group.reader import VisibleInstants
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline
from lakeward.core.timeline.clustering_plan import pending_clustering_plans
from lakeward.core.timeline.transitions import read_commit_metadata

COMMIT_TIME = "_hoodie_commit_time"


def incremental_slices(
    storage: Storage, timeline: Timeline, begin: str, end: str | None, *, into_archive: bool = False
) -> list[FileSlice]:
    """The file groups written in (begin, end], each as its latest slice as of `end`.

    Covers base files and log files (merge-on-read): the slice as of `end` holds every
    version written in the range, and a group replaced inside the range is left out.

    `into_archive`: the range begins before the active timeline of a table whose archive keeps no
    write stats (version 6): which groups the archived commits wrote is unknown, so every group's
    slice as of `end` is read (Hudi's full-table-scan fallback; the commit-time row filter keeps
    the records of the range).
    """
    if end is not None and end < begin:
        raise InstantNotFoundError(f"incremental range is empty: end {end} is before begin {begin}")
    touched: set[tuple[str, str]] = set()
    partitions: set[str] = set()
    last = None
    for instant in timeline.completed_writes_between(begin, end):
        # the latest position in the range: on layout 2 a completion time, as the file slicing is (a
        # delta commit that completed after a compaction was planned has its logs in the compaction's
        # slice, which a slice as of its instant time leaves out)
        last = max(last or "", instant.ordering_time)
        metadata = read_commit_metadata(storage, instant)
        partitions |= metadata.touched_partitions()
        for stat in metadata.write_stats():
            if stat.fileId:
                touched.add((stat.partitionPath, stat.fileId))
    if into_archive:
        last = end or last or (timeline.completed_writes()[-1].time if timeline.completed_writes() else None)
    if last is None:
        return []
    view = FileSystemView.load(storage, timeline, partitions=None if into_archive else partitions)
    # with completion times (layout 2) `end` is a completion time: slices as of the last write's
    completion = timeline.completion_times()
    as_of = last if completion else (end or last)
    verify_listing(storage, timeline, view, as_of)
    slices = _latest_by_completion(view, completion, last) if completion else view.latest_file_slices(as_of=as_of)
    return list(slices) if into_archive else [s for s in slices if (s.partition_path, s.file_id) in touched]


def _latest_by_completion(view: FileSystemView, completion: Mapping[str, str], last: str) -> list[FileSlice]:
    """The latest slice as of `last` (a completion time) of every file group that no replacecommit
    completed by then replaced: a clustering planned before `last` may complete after it, and the
    rows the range wrote into the groups it replaces are read from those groups."""
    slices = []
    for group in view.file_groups():
        replaced = view.replaced_by(group.partition_path, group.file_id)
        if replaced is not None and completion.get(replaced, replaced) <= last:
            continue
        latest = group.latest_slice(last)
        if latest is not None:
            slices.append(latest)
    return slices


def stable_end(timeline: Timeline, begin: str, end: str | None, storage: Storage | None = None) -> str | None:
    """The end of a range (begin, end] that no in-flight write can still change.

    With an explicit `end`, a write in flight that could still land inside the range is an
    error; without one, the range stops before the first in-flight write (its later commits
    would be read before it completes, and missed by the next read). On layout 2 (completion
    time) only an end past every time on the timeline can still take a write in flight.
    With `storage`, a pending clustering plan (a replacecommit on layout 1) is no such write: it
    changes no record and keeps commit times (Hudi's hollow-commit check skips it too).
    """
    if timeline.completion_times():
        # Completion-time ranges (layout 2): a write still in flight completes after every time on
        # the timeline now, whatever its instant time. A range ending by then cannot change; one
        # ending later could still take any write in flight, even one requested before `begin`.
        latest = timeline.latest_time()
        if end is None or (latest is not None and end <= latest):
            return end
        pending = [i.time for i in timeline.pending_writes()]
    else:
        pending = [i.time for i in timeline.pending_writes() if i.time > begin and (end is None or i.time <= end)]
        if pending and storage is not None:
            clusterings = pending_clustering_plans(storage, timeline)
            pending = [t for t in pending if t not in clusterings]
    if not pending:
        return end
    if end is not None:
        raise InstantNotFoundError(
            f"instant {pending[0]} is still in flight and could land inside ({begin}, {end}]; the range "
            "is not stable yet: end the range before it or retry when it completes"
        )
    before = [i.time for i in timeline.completed_writes() if i.time < pending[0]]
    return before[-1] if before and before[-1] > begin else begin


def latest_stable_instant(timeline: Timeline, begin: str, storage: Storage | None = None) -> str:
    """The latest completed write after which no write before it is still in flight (at least `begin`).

    On versions 8+ ranges are in completion time, so offsets are too: the latest completion
    time of a completed write (a write in flight completes after it). The instant time of the
    latest write would leave that write out of the range (it completed after its instant time).
    """
    end = stable_end(timeline, begin, None, storage)
    if end is None:
        end = max((w.ordering_time for w in timeline.completed_writes()), default=begin)
    return max(end, begin)


def commit_time_range(begin: str, end: str | None) -> pc.Expression:
    """Rows whose `_hoodie_commit_time` lies in (begin, end]."""
    time_filter = pc.field("_hoodie_commit_time") > begin
    if end is not None:
        time_filter = time_filter & (pc.field("_hoodie_commit_time") <= end)
    return time_filter


@dataclass(frozen=True)
class IncrementalRange:
    """An incremental range (begin, end] resolved against a timeline: which rows it returns and
    which instants a merge may see. The one definition every engine uses (local and Spark).

    On timeline layout 1 (table version 6) the range is in commit time: rows whose
    `_hoodie_commit_time` lies in (begin, end]. On layout 2 (versions 8+) it is in completion
    time, as Hudi 1.x incremental queries are: rows of the writes that *completed* in the
    range (`write_times`), merged with only the writes completed by `end`.
    """

    begin: str
    end: str | None
    #: Layout 2: instant times of the writes that completed in the range; None on layout 1.
    write_times: tuple[str, ...] | None
    visible: VisibleInstants

    @classmethod
    def resolve(cls, timeline: Timeline, begin: str, end: str | None) -> IncrementalRange:
        """The range (begin, end] on `timeline` (already normalised and stable, see `stable_end`)."""
        visible = VisibleInstants.from_timeline(timeline, end)
        if not timeline.completion_times():
            return cls(begin, end, None, visible)
        in_range = tuple(i.time for i in timeline.completed_writes_between(begin, end))
        done = frozenset(i.time for i in timeline.completed_writes() if end is None or i.ordering_time <= end)
        return cls(begin, end, in_range, replace(visible, completed=done, as_of=None))

    def commit_time_conjunction(self) -> list[tuple[str, str, Any]]:
        """The row condition on `_hoodie_commit_time` as one DNF conjunction (for any engine)."""
        if self.write_times is not None:
            return [(COMMIT_TIME, "in", list(self.write_times))]
        conjunction: list[tuple[str, str, Any]] = [(COMMIT_TIME, ">", self.begin)]
        if self.end is not None:
            conjunction.append((COMMIT_TIME, "<=", self.end))
        return conjunction

    def row_filter(self) -> pc.Expression:
        """The row condition as a pyarrow expression."""
        if self.write_times is not None:
            return pc.field(COMMIT_TIME).isin(list(self.write_times))
        return commit_time_range(self.begin, self.end)
