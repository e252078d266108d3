"""Keep the metadata table's `files` partition in step with every data-table commit, as Hudi 1.x does.

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

A crash between the metadata commit and the data commit leaves a metadata delta commit whose
data instant never completed; the data table's rollback of `T` then rolls back `T` on the
metadata table too (`table_services.rollback`), as Hudi does. A metadata delta commit `T` that
exists already when `T` is written again (a re-run table service) is rolled back first (Hudi's
"re-attempted commit" rule).

Only `files` is maintained: other metadata partitions are refused or dropped before anything
is written (`metadata_table.gate`). The metadata table's own compaction and clean are not run
yet; its `files` partition grows by one log file per data instant until a Hudi writer (or a
later lakeward) compacts it.
"""

from __future__ import annotations

import posixpath
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakeward.core.file_group.hfile_writer import write_log_block_hfile
from lakeward.core.file_group.log_file.log_block import BlockType, HeaderKey, OpaqueBlock
from lakeward.core.file_group.log_file.log_format import encode_block
from lakeward.core.file_group.metadata_listing import (
    ALL_PARTITIONS_KEY,
    FILES_PARTITION,
    keeps_metadata_table,
    metadata_partitions,
    metadata_storage,
    read_table_properties,
)
from lakeward.core.file_group.naming import log_file_name, write_token
from lakeward.core.metadata_table.files_partition import FILES_FILE_GROUP_ID, encode_record, partition_key
from lakeward.core.metadata_table.record_index import RECORD_INDEX_PARTITION, record_index_change
from lakeward.core.metadata_table.record_index_writer import keeps_record_index, write_change
from lakeward.core.metadata_table.schema import COMMIT_SCHEMA_JSON, HFILE_SCHEMA_JSON, MetadataRecordType
from lakeward.core.storage import Storage
from lakeward.core.table_services.rollback import rollback_metadata_table
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import Action, CommitMetadata, Instant, WriteStat
from lakeward.core.timeline.transitions import complete, create_requested, transition_to_inflight
from lakeward.core.write.markers import create_marker, delete_markers

#: The operation Hudi records on metadata-table delta commits.
METADATA_OPERATION = "UPSERT_PREPPED"
#: Write token of the metadata log files lakeward writes (one task, one attempt).
LOG_WRITE_TOKEN = write_token(0, 0, 0)
_DELETE_PARTITION = "DELETE_PARTITION"


@dataclass
class FilesChange:
    """What one data-table instant changes in the `files` partition."""

    #: Data partition path ("" for the table's root) -> file name -> size, written by the instant.
    added: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Data partition path -> file names the instant removed.
    deleted: dict[str, list[str]] = field(default_factory=dict)
    #: Partitions the `__all_partitions__` record names as live (every partition the instant touched).
    partitions: list[str] = field(default_factory=list)
    #: Partitions the `__all_partitions__` record names as deleted.
    partitions_deleted: list[str] = field(default_factory=list)
    #: Whether the change has an `__all_partitions__` record (every commit has one, even empty;
    #: a clean only when it deleted partitions).
    lists_partitions: bool = True
    #: The commit the change comes from (writes, compaction, clustering): what the `record_index`
    #: partition, when the table keeps one, derives its change from (`metadata_table.record_index`).
    commit: CommitMetadata | None = None


def _file_name(path: str) -> str:
    return posixpath.basename(path)


def commit_change(storage: Storage, metadata: CommitMetadata) -> FilesChange:
    """The `files` change of a commit, delta commit or replace commit (writes, compaction, clustering).

    As `convertMetadataToFilesPartitionRecords(HoodieCommitMetadata)`: every partition with write
    stats is named in `__all_partitions__`, its files (each stat's `path`, and the other log files
    a rolled-over append wrote, sized from storage) are added; a `DELETE_PARTITION` replace commit
    names its partitions deleted. Replaced files are not removed here (the clean removes them).
    """
    change = FilesChange(commit=metadata)
    for partition, stats in metadata.partitionToWriteStats.items():
        files = change.added.setdefault(partition, {})
        change.partitions.append(partition)
        for stat in stats:
            for path in stat.files():
                size = stat.fileSizeInBytes if path == stat.path else _size_or_zero(storage, path)
                name = _file_name(path)
                files[name] = max(files.get(name, 0), size)
    if metadata.operationType == _DELETE_PARTITION:
        change.partitions_deleted = sorted(metadata.partitionToReplaceFileIds or {})
    return change


def _size_or_zero(storage: Storage, path: str) -> int:
    try:
        return storage.size(path)
    except (OSError, FileNotFoundError):
        return 0


def removal_change(deleted: Mapping[str, Iterable[str]], partitions_deleted: Sequence[str] = ()) -> FilesChange:
    """A change that removes files (a clean, a restore): partition -> deleted file names or paths."""
    change = FilesChange(partitions_deleted=list(partitions_deleted), lists_partitions=bool(partitions_deleted))
    for partition, paths in deleted.items():
        names = sorted({_file_name(p) for p in paths})
        if names:
            change.deleted[partition] = names
    return change


def _files_record(record_type: MetadataRecordType, entries: Mapping[str, tuple[int, bool]]) -> dict[str, Any]:
    return {
        "key": "",
        "type": int(record_type),
        "filesystemMetadata": {name: {"size": size, "isDeleted": gone} for name, (size, gone) in entries.items()},
    }


def files_records(change: FilesChange) -> list[tuple[str, dict[str, Any]]]:
    """(key, record) of the `files` partition records of `change`, one per key."""
    records: list[tuple[str, dict[str, Any]]] = []
    listed = {partition_key(p): (0, False) for p in change.partitions}
    listed |= {partition_key(p): (0, True) for p in change.partitions_deleted}
    if change.lists_partitions:
        records.append((ALL_PARTITIONS_KEY, _files_record(MetadataRecordType.ALL_PARTITIONS, listed)))
    by_partition: dict[str, dict[str, tuple[int, bool]]] = defaultdict(dict)
    for partition, files in change.added.items():
        by_partition[partition].update({name: (size, False) for name, size in files.items()})
    for partition, names in change.deleted.items():
        by_partition[partition].update({name: (0, True) for name in names})
    for partition in sorted(set(change.added) | set(change.deleted)):
        records.append((partition_key(partition), _files_record(MetadataRecordType.FILE_LIST, by_partition[partition])))
    return records


def commit_files_change(storage: Storage, timezone: str, instant_time: str, change: FilesChange) -> Instant:
    """Write and complete the metadata table's delta commit `instant_time` applying `change` to `files`.

    Call under the data table's lock, right before the data instant `instant_time` completes;
    `timezone`: the table's timeline time zone. Returns the completed metadata instant.
    """
    started = time.monotonic()
    mdt = metadata_storage(storage)
    rollback_metadata_table(storage, instant_time, None, timezone)  # an earlier attempt of `instant_time`
    requested = create_requested(mdt, instant_time, Action.DELTA_COMMIT, b"", TimelineLayout.V2)
    workload = CommitMetadata(operationType=METADATA_OPERATION)
    inflight = transition_to_inflight(mdt, requested, workload.to_avro())

    records = files_records(change)
    cells = [(key, encode_record(record)) for key, record in records]
    block = OpaqueBlock(
        kind=BlockType.HFILE_DATA,
        header={HeaderKey.SCHEMA: HFILE_SCHEMA_JSON, HeaderKey.INSTANT_TIME: instant_time},
        raw_content=write_log_block_hfile(cells, HFILE_SCHEMA_JSON),
    )
    name = log_file_name(FILES_FILE_GROUP_ID, instant_time, 1, LOG_WRITE_TOKEN)
    create_marker(mdt, instant_time, FILES_PARTITION, name, "APPEND")
    data = encode_block(block)
    path = posixpath.join(FILES_PARTITION, name)
    mdt.create_if_absent(path, data)
    stat = WriteStat(
        fileId=FILES_FILE_GROUP_ID,
        path=path,
        prevCommit=instant_time,
        numWrites=len(cells),
        numUpdateWrites=len(cells),
        totalWriteBytes=len(data),
        partitionPath=FILES_PARTITION,
        fileSizeInBytes=len(data),
        runtimeStats={"totalScanTime": 0, "totalCreateTime": 0, "totalUpsertTime": _ms_since(started)},
        logVersion=1,
        logOffset=0,
        baseFile="",
        logFiles=[name],
    )
    partition_stats = {FILES_PARTITION: [stat]}
    if change.commit is not None and keeps_record_index(storage):
        index_change = record_index_change(storage, instant_time, change.commit)
        partition_stats[RECORD_INDEX_PARTITION] = write_change(mdt, instant_time, index_change)
    metadata = CommitMetadata(
        partitionToWriteStats={p: stats for p, stats in partition_stats.items() if stats},
        extraMetadata={"schema": COMMIT_SCHEMA_JSON},
        operationType=METADATA_OPERATION,
    )
    completed = complete(mdt, inflight, metadata.to_avro(), timezone)
    delete_markers(mdt, instant_time)
    return completed


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def maintains_files_partition(storage: Storage) -> bool:
    """Whether a commit on this table must keep its metadata table: a v8/v9 table whose
    `hoodie.properties` (read now, not as opened) lists the `files` partition."""
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


def apply_commit(storage: Storage, timezone: str, instant_time: str, metadata: CommitMetadata) -> Instant | None:
    """`apply_change` for a commit, delta commit or replace commit (`commit_change`)."""
    return apply_change(storage, timezone, instant_time, lambda: commit_change(storage, metadata))


def clean_change(clean_metadata: Mapping[str, Any]) -> FilesChange:
    """The `files` change of a clean (`HoodieCleanMetadata`), as `convertMetadataToFilesPartitionRecords(
    HoodieCleanMetadata)`: each partition's `deletePathPatterns` deleted, partitions the clean
    emptied (`isPartitionDeleted`) deleted from `__all_partitions__`."""
    partitions = clean_metadata.get("partitionMetadata") or {}
    return removal_change(
        {p: m.get("deletePathPatterns") or [] for p, m in partitions.items()},
        sorted(p for p, m in partitions.items() if m.get("isPartitionDeleted")),
    )
