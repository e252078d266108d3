"""Keep the metadata table's `files` partition in step with every data-table commit, as Hudi does.

For each data-table instant `T` that adds or removes files, Hudi's `HoodieBackedTableMetadataWriter`
writes a **delta commit `T` on the metadata table** (same requested time) and completes it
*before* the data table's instant completes:

1. `.hoodie/metadata/.hoodie/timeline/T.deltacommit.requested` (empty), `.inflight` (the Avro
   workload of an `UPSERT_PREPPED` with no stats);
2. an `APPEND` marker, then the log file `files/.files-0000-0_T.log.1_<token>` holding one
   `HFILE_DATA` block (headers `SCHEMA`, `INSTANT_TIME`) whose cells are the `files` records
   of the change (`HoodieTableMetadataUtil.convertMetadataToFilesPartitionRecords`): one
   `__all_partitions__` record naming every partition touched (deleted partitions with
   `isDeleted=true`), one record per partition listing the files written (name -> size, the
   largest size when a file is named twice) or removed (`isDeleted=true`);
3. the completed `T_<c>.deltacommit` with a `HoodieDeltaWriteStat` of that log file.

On version 6 tables the same steps follow Hudi 0.14/0.15 (`delta_commit`): timeline layout 1
(`T.deltacommit.requested`, `.inflight`, `T.deltacommit`), JSON commit metadata, and the log
file named after its slice's base instant with the next version (`.files-0000-0_<base>.log.<n>_<token>`).

A crash between the metadata commit and the data commit leaves a metadata delta commit whose
data instant never completed; the data table's rollback of `T` then rolls back `T` on the
metadata table too (`table_services.rollback`), as Hudi does. A metadata delta commit `T` that
exists already when `T` is written again (a re-run table service) is rolled back first (Hudi's
"re-attempted commit" rule).

`files` is maintained, and `record_index`, `bloom_filters`, `column_stats` and `partition_stats`
when the table keeps them (in the same delta commit, `delta_commit`); other metadata partitions
are refused or dropped before anything is written (`metadata_table.gate`). The metadata table's
own compaction, clean and archival run after
the data commit (`metadata_table.services`). How a delta commit is written is `delta_commit`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import Any

from lakeward.core.file_group.metadata_listing import (
    FILES_PARTITION,
    keeps_metadata_table,
    metadata_partitions,
    metadata_storage,
    metadata_table_version,
    read_table_properties,
)
from lakeward.core.metadata_table.compaction import execute_metadata_compaction, pending_metadata_compactions
from lakeward.core.metadata_table.delta_commit import (
    LOG_WRITE_TOKEN,
    METADATA_OPERATION,
    FilesChange,
    files_records,
    removal_change,
    write_files_delta_commit,
)
from lakeward.core.metadata_table.record_index import RecordIndexChange
from lakeward.core.storage import Storage
from lakeward.core.table_services.rollback import rollback_metadata_table
from lakeward.core.timeline import CommitMetadata, Instant

_DELETE_PARTITION = "DELETE_PARTITION"


def commit_change(
    storage: Storage, metadata: CommitMetadata, record_index: Callable[[], RecordIndexChange] | None = None
) -> FilesChange:
    """The `files` change of a commit, delta commit or replace commit (writes, compaction, clustering).

    As `convertMetadataToFilesPartitionRecords(HoodieCommitMetadata)`: every partition with write
    stats is named in `__all_partitions__`, its files (each stat's `path`, and the other log files
    a rolled-over append wrote, sized from storage) are added; a `DELETE_PARTITION` replace commit
    names its partitions deleted. Replaced files are not removed here (the clean removes them).
    `record_index`: the write's record-index change (computed when the table keeps the partition),
    when its data plane knows it exactly from its tagging.
    """
    change = FilesChange(commit=metadata, record_index=record_index)
    for partition, stats in metadata.partitionToWriteStats.items():
        files = change.added.setdefault(partition, {})
        change.partitions.append(partition)
        for stat in stats:
            for path in stat.files():
                size = stat.fileSizeInBytes if path == stat.path else _size_or_zero(storage, path)
                name = posixpath.basename(path)
                files[name] = max(files.get(name, 0), size)
    if metadata.operationType == _DELETE_PARTITION:
        change.partitions_deleted = sorted(metadata.partitionToReplaceFileIds or {})
    return change


def _size_or_zero(storage: Storage, path: str) -> int:
    try:
        return storage.size(path)
    except (OSError, FileNotFoundError):
        return 0


def commit_files_change(storage: Storage, timezone: str, instant_time: str, change: FilesChange) -> Instant:
    """Write and complete the metadata table's delta commit `instant_time` applying `change` to `files`.

    Call under the data table's lock, right before the data instant `instant_time` completes;
    `timezone`: the table's timeline time zone. An earlier attempt of `instant_time` on the
    metadata table is rolled back first (Hudi's "re-attempted commit" rule). Returns the
    completed metadata instant.

    On v6, where a log file joins the slice its name carries, a metadata compaction a run left
    pending is finished first: the log then joins the slice it creates, not the one it folds.
    """
    rollback_metadata_table(storage, instant_time, None, timezone)  # an earlier attempt of `instant_time`
    if not metadata_table_version(metadata_storage(storage)).compacts_beside_pending_writes:
        for pending in pending_metadata_compactions(storage):
            execute_metadata_compaction(storage, pending, timezone)
    return write_files_delta_commit(storage, timezone, instant_time, change)


def maintains_files_partition(storage: Storage) -> bool:
    """Whether a commit on this table must keep its metadata table: a table whose `hoodie.properties`
    (read now, not as opened) lists the `files` partition (every table version)."""
    props = read_table_properties(storage)
    return keeps_metadata_table(props) and FILES_PARTITION in metadata_partitions(props)


def apply_change(
    storage: Storage, timezone: str, instant_time: str, change_of: Callable[[], FilesChange]
) -> Instant | None:
    """Apply what a data-table instant about to complete changes (`change_of()`, called only when
    the table keeps a metadata table) as the metadata delta commit `instant_time`.

    Call under the table lock right before completing the data instant (Hudi's order). Returns
    the completed metadata delta commit (None: no metadata table to keep).
    """
    if not maintains_files_partition(storage):
        return None
    return commit_files_change(storage, timezone, instant_time, change_of())


def apply_commit(
    storage: Storage,
    timezone: str,
    instant_time: str,
    metadata: CommitMetadata,
    record_index: Callable[[], RecordIndexChange] | None = None,
) -> Instant | None:
    """`apply_change` for a commit, delta commit or replace commit (`commit_change`); `record_index`:
    the write's record-index change when known exactly (None: derived from the files written)."""
    return apply_change(storage, timezone, instant_time, lambda: commit_change(storage, metadata, record_index))


def clean_change(clean_metadata: Mapping[str, Any]) -> FilesChange:
    """The `files` change of a clean (`HoodieCleanMetadata`), as `convertMetadataToFilesPartitionRecords(
    HoodieCleanMetadata)`: each partition's `deletePathPatterns` deleted, partitions the clean
    emptied (`isPartitionDeleted`) deleted from `__all_partitions__`."""
    partitions = clean_metadata.get("partitionMetadata") or {}
    return removal_change(
        {p: m.get("deletePathPatterns") or [] for p, m in partitions.items()},
        sorted(p for p, m in partitions.items() if m.get("isPartitionDeleted")),
    )


__all__ = [
    "LOG_WRITE_TOKEN",
    "METADATA_OPERATION",
    "FilesChange",
    "apply_change",
    "apply_commit",
    "clean_change",
    "commit_change",
    "commit_files_change",
    "files_records",
    "maintains_files_partition",
    "removal_change",
]
