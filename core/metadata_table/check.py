"""Compare the metadata table's `files` partition with a listing of storage: what Hudi's
`HoodieMetadataTableValidator` checks for file listings, as one report.

Storage side: the data files of every partition whose instant (as in their names) completed on
the data table (files of pending instants are not committed yet, and a crashed writer's files
are rolled back by the next writer). Metadata side: the merged `files` partition as readers see
it (completed metadata instants only; files of pending data-table instants left out). Any file
on one side and not the other, a size that differs, or a partition listed on one side only is a
difference.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from dataclasses import dataclass

from lakeward.core.file_group.metadata_listing import MetadataFileListing, read_table_properties
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.files_partition import list_partition_files, placing_instant
from lakeward.core.metadata_table.writer import FilesChange
from lakeward.core.storage import Storage
from lakeward.core.table_services.clean.plan import files_pending_cleans_delete
from lakeward.core.table_version import TimelineLayout, table_version
from lakeward.core.timeline import Timeline
from lakeward.core.timeline.compaction_plan import pending_compaction_instants


@dataclass(frozen=True)
class FilesPartitionDiff:
    """Differences between the `files` partition and storage (paths relative to the base path)."""

    #: Committed data files on storage the `files` partition does not list.
    missing: tuple[str, ...] = ()
    #: Files the `files` partition lists that are not on storage (or not committed there).
    extra: tuple[str, ...] = ()
    #: (path, size in the `files` partition, size on storage).
    size_mismatches: tuple[tuple[str, int, int], ...] = ()
    #: Partitions with visible file slices (storage listing) that `__all_partitions__` does not list.
    partitions_missing: tuple[str, ...] = ()
    #: Partitions `__all_partitions__` lists that storage does not have.
    partitions_extra: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (
            self.missing or self.extra or self.size_mismatches or self.partitions_missing or self.partitions_extra
        )

    def __str__(self) -> str:
        if self.ok:
            return "files partition matches storage"
        parts = [
            f"{label}: {list(values)}"
            for label, values in (
                ("on storage, not in files", self.missing),
                ("in files, not on storage", self.extra),
                ("sizes differ (path, files, storage)", self.size_mismatches),
                ("partitions not listed", self.partitions_missing),
                ("partitions listed but absent", self.partitions_extra),
            )
            if values
        ]
        return "; ".join(parts)


def compare_files_partition(storage: Storage, layout: TimelineLayout | None = None) -> FilesPartitionDiff:
    """The differences between the `files` partition of the table at `storage` and a storage listing.

    `layout`: the data table's timeline layout (None: from its `hoodie.properties`; every table
    version, v6 included). Raises MetadataTableUnavailable when the metadata table cannot be read at all.
    """
    layout = layout or table_version(read_table_properties(storage).get("hoodie.table.version", "6")).timeline_layout
    listing = MetadataFileListing(storage, layout)
    timeline = Timeline.load(storage, layout)
    completed = timeline.completed()
    as_of = completed[-1].time if completed else "0"
    pending = {i.time for i in timeline.pending()}
    # Version 6 names a log written over a pending compaction after the compaction's instant: the log's
    # own delta commit decides (a completed one is in `files`), not the compaction plan.
    compactions = {i.time for i in pending_compaction_instants(timeline)}
    pending_logs = pending - compactions if layout is TimelineLayout.V1 else pending
    on_storage = list_partition_files(storage.list_dir("", recursive=True), as_of, pending, pending_logs)

    # a write killed after its metadata delta commit completed and before its own commit: readers
    # leave its files out (Hudi's metadata reader takes only completed data instants' entries)
    def of_pending_instant(name: str) -> bool:
        placed = placing_instant(name, pending, pending_logs)
        return placed is not None and placed[1]

    listed = {
        partition: {n: size for n, size in files.items() if not of_pending_instant(n)}
        for partition, files in listing.partition_files().items()
    }

    def path(partition: str, name: str) -> str:
        return posixpath.join(partition, name) if partition else name

    cleaning = files_pending_cleans_delete(storage, timeline)  # `files` learns of a clean as it completes
    missing, extra, sizes = [], [], []
    for partition in sorted(set(on_storage) | set(listed)):
        ours, theirs = on_storage.get(partition, {}), listed.get(partition, {})
        missing += [path(partition, n) for n in sorted(set(ours) - set(theirs))]
        extra += [path(partition, n) for n in sorted(set(theirs) - set(ours)) if path(partition, n) not in cleaning]
        common = sorted(set(ours) & set(theirs))
        sizes += [(path(partition, n), theirs[n], ours[n]) for n in common if ours[n] != theirs[n]]
    live = set(listing.partitions())
    # a partition dropped from `__all_partitions__` (delete_partition) keeps its replaced files until cleaned
    visible = {s.partition_path for s in FileSystemView.from_storage_listing(storage, timeline).latest_file_slices()}
    return FilesPartitionDiff(
        missing=tuple(missing),
        extra=tuple(extra),
        size_mismatches=tuple(sizes),
        partitions_missing=tuple(sorted(visible - live)),
        partitions_extra=tuple(sorted(live - set(on_storage))),
    )


def restore_change(storage: Storage, layout: TimelineLayout | None = None) -> FilesChange:
    """What brings the `files` partition back in line with storage after a restore deleted files.

    As Hudi's metadata writer on a restore: the data files are listed and the difference becomes
    one delta commit (files storage has and `files` lacks are added, files it lists that are gone
    are deleted, partitions gone from storage are deleted from `__all_partitions__`).
    """
    diff = compare_files_partition(storage, layout)
    added: dict[str, dict[str, int]] = defaultdict(dict)
    for path in (*diff.missing, *(p for p, _, _ in diff.size_mismatches)):
        added[posixpath.dirname(path)][posixpath.basename(path)] = storage.size(path)
    deleted: dict[str, list[str]] = defaultdict(list)
    for path in diff.extra:
        deleted[posixpath.dirname(path)].append(posixpath.basename(path))
    partitions = sorted(set(added) | set(diff.partitions_missing))
    return FilesChange(
        added=dict(added),
        deleted=dict(deleted),
        partitions=partitions,
        partitions_deleted=list(diff.partitions_extra),
        lists_partitions=bool(partitions or diff.partitions_extra),
    )
