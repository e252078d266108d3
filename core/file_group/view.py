"""The file-system view: which file groups and slices exist, latest or as of a completed instant.

Built from one recursive listing of the table plus the timeline. A base file is visible
only when its instant is a completed write (or older than the active timeline, i.e.
archived); file groups replaced by a completed replacecommit disappear from that
instant on.

Which slice a log file joins is the table version's rule (`LogSlicing`): on version 6 the
instant in the log's name is its slice's base instant; on versions 8+ it is the delta
commit that wrote the log, and the log joins the newest slice whose base instant is at or
before that delta commit's completion time (a pending delta commit: the newest slice).
"""

from __future__ import annotations

import logging
import posixpath
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace

from lakeward.core.config.properties import parse_properties
from lakeward.core.file_group.file_group import BaseFile, FileGroup, FileSlice, LogFile
from lakeward.core.file_group.metadata_listing import (
    MetadataFileListing,
    MetadataTableUnavailable,
    uses_files_partition,
)
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.storage import FileEntry, Storage
from lakeward.core.table_version import LogSlicing, rules_for_layout
from lakeward.core.timeline import METAFOLDER, WRITE_ACTIONS, Action, CommitMetadata, Timeline
from lakeward.core.timeline.compaction_plan import pending_compaction_file_groups
from lakeward.core.timeline.lsm_history import load_archived_instants
from lakeward.core.timeline.transitions import read_commit_metadata

PartitionFilter = Callable[[str], bool]
log = logging.getLogger(__name__)
PROPERTIES_FILE = posixpath.join(METAFOLDER, "hoodie.properties")


class FileSystemView:
    """File groups of a table, resolved against its timeline."""

    def __init__(
        self,
        timeline: Timeline,
        files: Iterable[FileEntry],
        storage: Storage,
        *,
        partition_scope: Collection[str] | None = None,
        from_metadata_table: bool = False,
    ):
        self.timeline = timeline
        self._storage = storage
        #: Listed from the metadata table's `files` partition, not from storage (`load`).
        self.from_metadata_table = from_metadata_table
        #: The partitions `files` were listed for (`load`); None: all of them.
        self.partition_scope: frozenset[str] | None = None if partition_scope is None else frozenset(partition_scope)
        completed = timeline.completed_write_times()
        earliest = timeline.instants[0].time if timeline.instants else None

        def committed(instant_time: str) -> bool:
            return instant_time in completed or (earliest is not None and instant_time < earliest)

        bases: dict[tuple[str, str], dict[str, BaseFile]] = defaultdict(dict)
        logs: dict[tuple[str, str], list[LogFile]] = defaultdict(list)
        cdc: dict[tuple[str, str], list[LogFile]] = defaultdict(list)
        self._partitions: set[str] = set()
        for entry in files:
            if entry.is_dir:
                continue
            partition = posixpath.dirname(entry.path)
            base = parse_base_file_name(entry.name)
            if base is not None:
                if not committed(base.instant_time):
                    continue
                key = (partition, base.file_id)
                existing = bases[key].get(base.instant_time)
                candidate = BaseFile(entry.path, base.file_id, base.instant_time, entry.size)
                if existing is not None:
                    candidate = self._committed_copy(existing, candidate)
                bases[key][base.instant_time] = candidate
                self._partitions.add(partition)
                continue
            log = parse_log_file_name(entry.name)
            if log is not None:
                found = LogFile(
                    entry.path, log.file_id, log.base_instant_time, log.version, log.write_token, entry.size
                )
                if log.is_cdc:
                    cdc[(partition, log.file_id)].append(found)
                    continue
                logs[(partition, log.file_id)].append(found)
                self._partitions.add(partition)

        self._slicing = slicing = rules_for_layout(timeline.layout).log_slicing
        self._completion = completion = timeline.completion_times()
        #: Instants before the timeline's first one were archived, so they completed (Hudi's
        #: `containsOrBeforeTimelineStarts`); a timeline without its LSM history knows no
        #: completion time for them: it is read from the history for the logs on storage that need
        #: one (`_with_archived_completions`), else their instant time places their logs.
        starts = timeline.instants[0].time if timeline.instants else None
        if slicing is LogSlicing.COMPLETION_TIME and starts is not None:
            completion = _with_archived_completions(storage, timeline, bases, logs, starts, completion)
            self._completion = completion

        def log_order(log: LogFile) -> str:
            """When the log's content became visible: its delta commit's completion time (v8+)."""
            if slicing is LogSlicing.COMPLETION_TIME:
                return completion.get(log.base_instant_time, log.base_instant_time)
            return log.base_instant_time

        self._groups: dict[tuple[str, str], FileGroup] = {}
        #: `.cdc` files whose file slice is gone (`stray_cdc_files`).
        self._stray_cdc: list[LogFile] = []
        for key in set(bases) | set(logs):
            partition, file_id = key
            slices_by_time: dict[str, FileSlice] = {
                t: FileSlice(partition, file_id, t, b) for t, b in bases.get(key, {}).items()
            }
            by_completion = slicing is LogSlicing.COMPLETION_TIME
            for log in sorted(logs.get(key, []), key=lambda f: (log_order(f), f.version, f.write_token)):
                archived = starts is not None and log.base_instant_time < starts
                if by_completion and log.base_instant_time not in completion and not archived:
                    # pending (or unknown) delta commit: the newest slice; reads skip its blocks
                    owner = max(slices_by_time, default=None)
                else:
                    limit = log_order(log)
                    owner = max((t for t in slices_by_time if t <= limit), default=None)
                if owner is None:
                    owner = log.base_instant_time
                    slices_by_time[owner] = FileSlice(partition, file_id, owner)
                s = slices_by_time[owner]
                slices_by_time[owner] = replace(s, log_files=(*s.log_files, log))
            for log in cdc.pop(key, []):
                owner = max((t for t in slices_by_time if t <= log.base_instant_time), default=None)
                if owner is not None:
                    s = slices_by_time[owner]
                    slices_by_time[owner] = replace(s, cdc_files=(*s.cdc_files, log))
                else:
                    self._stray_cdc.append(log)
            group = FileGroup(partition, file_id, [slices_by_time[t] for t in sorted(slices_by_time)])
            if group.slices:
                self._groups[key] = group
        self._stray_cdc.extend(log for found in cdc.values() for log in found)  # groups with no other file
        self._replaced = replaced_file_groups(self._storage, self.timeline)
        self._pending_compaction = pending_compaction_file_groups(storage, timeline)
        #: File groups of pending Hudi log compactions (lakeward does not run them; Hudi's writer does).
        self._pending_log_compaction = pending_compaction_file_groups(storage, timeline, Action.LOG_COMPACTION)

    @classmethod
    def load(cls, storage: Storage, timeline: Timeline, partitions: Collection[str] | None = None) -> FileSystemView:
        """The view from the metadata table's `files` partition when the table has one
        (table versions 8+, `files` in `hoodie.table.metadata.partitions`), else from one
        recursive storage listing. A metadata table that cannot be read is logged and the
        view falls back to listing storage.

        `partitions`: the view holds only the file groups of these partition paths ("" for a
        non-partitioned table), each listed on its own: a query of a few commits (CDC, an
        incremental read) then lists what they wrote, not the whole table."""
        if rules_for_layout(timeline.layout).metadata_table_listing:
            try:
                props = parse_properties(storage.read_bytes(PROPERTIES_FILE).decode("utf-8"))
            except (FileNotFoundError, UnicodeDecodeError):
                props = {}
            if uses_files_partition(props):
                try:
                    entries = MetadataFileListing(storage, timeline.layout, partitions).file_entries()
                    return cls(timeline, entries, storage, partition_scope=partitions, from_metadata_table=True)
                except MetadataTableUnavailable as exc:
                    log.warning("listing %s from storage: %s", storage.uri, exc)
        return cls.from_storage_listing(storage, timeline, partitions)

    @classmethod
    def from_storage_listing(
        cls, storage: Storage, timeline: Timeline, partitions: Collection[str] | None = None
    ) -> FileSystemView:
        """The view from one recursive listing of the table's files (no metadata table), or
        from a listing of each of `partitions` (see `load`)."""
        if partitions is not None:
            listed = [e for p in sorted(set(partitions)) for e in storage.list_dir(p) if not e.is_dir]
            return cls(timeline, listed, storage, partition_scope=partitions)
        entries = [
            e
            for e in storage.list_dir("", recursive=True)
            if not e.path.startswith(METAFOLDER + "/") and e.path != METAFOLDER
        ]
        return cls(timeline, entries, storage)

    def _committed_copy(self, a: BaseFile, b: BaseFile) -> BaseFile:
        """Two attempts wrote the same file version: keep the one the commit lists."""
        meta = self._metadata(a.instant_time)
        listed = set(meta.file_paths()) if meta else set()
        return b if b.path in listed and a.path not in listed else a

    def _metadata(self, time: str) -> CommitMetadata | None:
        """The commit metadata of the completed write at `time`: the instant that wrote data files.

        Other actions may carry the same instant time (a savepoint always does, a clean or
        rollback may) and their metadata lists no data files."""
        for instant in self.timeline.find(time):
            if instant.is_completed and instant.action in WRITE_ACTIONS:
                return read_commit_metadata(self._storage, instant)
        return None

    # -- queries -------------------------------------------------------------------------
    def pending_compaction(self, partition: str, file_id: str) -> str | None:
        """Instant time of the pending compaction that will rewrite this file group, if any."""
        return self._pending_compaction.get((partition, file_id))

    def slice_for_append(self, file_slice: FileSlice) -> FileSlice:
        """The slice new log blocks of a file group go to.

        Under a pending compaction at `t` this is a new slice whose base instant is `t`
        (its base file does not exist until the compaction completes), holding only the
        logs already written on top of `t`. Readers meanwhile see the older slice and
        these logs as one slice, because the view attaches a log to the latest slice at
        or before its base instant.
        """
        pending = self.pending_compaction(file_slice.partition_path, file_slice.file_id)
        if pending is None or pending <= file_slice.base_instant_time:
            return file_slice
        logs = tuple(f for f in file_slice.log_files if f.base_instant_time == pending)
        return FileSlice(file_slice.partition_path, file_slice.file_id, pending, None, logs)

    def unplanned_file_slices(self, clustering: Mapping[tuple[str, str], str]) -> list[FileSlice]:
        """The latest slices a new compaction or clustering plan may take: those of file groups
        under no pending compaction or Hudi log compaction (as Hudi's planners leave them out)
        and not in `clustering` (the pending clustering plans' file groups,
        `pending_clustering_file_groups`)."""
        return [
            s
            for s in self.latest_file_slices()
            if self.pending_compaction(s.partition_path, s.file_id) is None
            and (s.partition_path, s.file_id) not in self._pending_log_compaction
            and (s.partition_path, s.file_id) not in clustering
        ]

    def partitions(self) -> list[str]:
        return sorted(self._partitions)

    def file_groups(self, partition_filter: PartitionFilter | None = None) -> list[FileGroup]:
        return [
            g for k, g in sorted(self._groups.items()) if partition_filter is None or partition_filter(g.partition_path)
        ]

    def stray_cdc_files(self) -> list[LogFile]:
        """`.cdc` files of no file slice in the view: their slice was cleaned after a late write of its
        changes (a change tracking that raced a clean), or their whole file group was. No query reads
        them; only the cleaner deletes them (and archival waits for a replaced group's last file)."""
        return list(self._stray_cdc)

    def is_replaced(self, partition: str, file_id: str, as_of: str | None = None) -> bool:
        at = self._replaced.get((partition, file_id))
        return at is not None and (as_of is None or at <= as_of)

    def replaced_by(self, partition: str, file_id: str) -> str | None:
        """The instant time of the completed replacecommit that replaced the file group (None: live)."""
        return self._replaced.get((partition, file_id))

    def snapshot_file_slices(
        self,
        as_of: str | None = None,
        partition_filter: PartitionFilter | None = None,
        *,
        query_time: str | None = None,
    ) -> list[FileSlice]:
        """The slices a snapshot or time-travel read as of `as_of` merges (None: the latest).

        `query_time`: the instant time the read asked for, when `as_of` is the completed write
        it resolved to (default `as_of`). The latest slices, except on versions 8+ in a file
        group under a compaction planned after `query_time`: Hudi 1.x's view gives the pending
        compaction its own slice, which takes the logs of delta commits completed after the
        plan's instant (`AbstractTableFileSystemView.buildFileGroups`, `HoodieFileGroup.
        getBaseInstantTime`), and a read as of an earlier instant takes the slice before it
        alone (`getLatestMergedFileSlicesBeforeOrOn` merges the two only from the plan's
        instant on). lakeward's view keeps one slice until the compaction's base file exists,
        so such a read leaves those logs out here: it reads the same before and after the
        compaction completes.
        """
        slices = self.latest_file_slices(as_of, partition_filter)
        asked = query_time or as_of
        if asked is None or self._slicing is not LogSlicing.COMPLETION_TIME:
            return slices
        return [self._before_compaction_plan(s, asked) for s in slices]

    def _before_compaction_plan(self, file_slice: FileSlice, as_of: str) -> FileSlice:
        """`file_slice` without the logs Hudi puts in a compaction planned after `as_of`."""
        planned = self.pending_compaction(file_slice.partition_path, file_slice.file_id)
        if planned is None or planned <= as_of:
            return file_slice
        # an instant with no completion time was archived (or is still in flight: read no further)
        done = self._completion
        kept = tuple(f for f in file_slice.log_files if done.get(f.base_instant_time, f.base_instant_time) < planned)
        return file_slice if len(kept) == len(file_slice.log_files) else replace(file_slice, log_files=kept)

    def latest_file_slices(
        self, as_of: str | None = None, partition_filter: PartitionFilter | None = None
    ) -> list[FileSlice]:
        """The latest slice of every live file group, as of a completed instant (or now)."""
        slices = []
        for group in self.file_groups(partition_filter):
            if self.is_replaced(group.partition_path, group.file_id, as_of):
                continue
            latest = group.latest_slice(as_of)
            if latest is not None:
                slices.append(latest)
        return slices


def _with_archived_completions(
    storage: Storage,
    timeline: Timeline,
    bases: Mapping[tuple[str, str], Mapping[str, BaseFile]],
    logs: Mapping[tuple[str, str], list[LogFile]],
    starts: str,
    completion: dict[str, str],
) -> dict[str, str]:
    """`completion` plus the completion times, read from the LSM history, of the archived delta commits
    (instant time before `starts`, the timeline's first) whose log files are listed in a file group
    with a later base file, and whose completion time `completion` lacks. A delta commit that
    completed after a compaction was planned belongs to the compaction's new slice; placed by its
    instant time it would fall into the slice before, which the next compaction leaves out and the
    cleaner deletes. Only the history files whose time range holds those instants are read, and
    none when no log's slice depends on it (a group without a later base file)."""
    unknown = sorted(
        {
            f.base_instant_time
            for key, fs in logs.items()
            for f in fs
            if f.base_instant_time < starts and any(t > f.base_instant_time for t in bases.get(key, ()))
        }
        - set(completion)
    )
    if not unknown:
        return completion
    folder = posixpath.join(timeline.layout.timeline_folder, "history")
    archived = load_archived_instants(storage, folder, unknown[0], unknown[-1])
    found = {i.time: i.completion_time for i in archived if i.completion_time is not None and i.time in unknown}
    return {**found, **completion} if found else completion


def replaced_file_groups(storage: Storage, timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, file id) -> time of the completed replacecommit (clustering, overwrite) that
    replaced the file group: the oldest one, when several name it."""
    replaced: dict[tuple[str, str], str] = {}
    for instant in timeline.completed(Action.REPLACE_COMMIT):
        meta = read_commit_metadata(storage, instant)
        for partition, file_ids in (meta.partitionToReplaceFileIds or {}).items():
            for file_id in file_ids:
                replaced.setdefault((partition, file_id), instant.time)
    return replaced
