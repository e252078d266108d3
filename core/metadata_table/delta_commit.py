"""One metadata-table delta commit of `files` (and `record_index`, `bloom_filters`, when kept): how it is written.

Below the metadata writer (`writer`: which data-table instants change what), which imports the
rollback (`table_services.rollback`) too. See `writer` for the steps of a delta commit.
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
    metadata_storage,
    metadata_table_version,
    next_log_file,
)
from lakeward.core.file_group.naming import write_token
from lakeward.core.metadata_table.bloom_filters import BLOOM_FILTERS_PARTITION, keeps_bloom_filters, write_bloom_change
from lakeward.core.metadata_table.files_partition import FILES_FILE_GROUP_ID, encode_record, partition_key
from lakeward.core.metadata_table.record_index import (
    RECORD_INDEX_PARTITION,
    RecordIndexChange,
    record_index_change,
    table_config_of,
    without_live_deletes,
)
from lakeward.core.metadata_table.record_index_writer import keeps_record_index, write_change
from lakeward.core.metadata_table.schema import COMMIT_SCHEMA_JSON, HFILE_SCHEMA_JSON, MetadataRecordType
from lakeward.core.metadata_table.stats_writer import StatsChange, write_stats_change
from lakeward.core.storage import Storage
from lakeward.core.timeline import Action, CommitMetadata, Instant, WriteStat
from lakeward.core.timeline.transitions import complete, create_requested, transition_to_inflight
from lakeward.core.write.markers import create_marker, delete_markers_of_completed

#: The operation Hudi records on metadata-table delta commits.
METADATA_OPERATION = "UPSERT_PREPPED"
#: Write token of the metadata log files lakeward writes (one task, one attempt).
LOG_WRITE_TOKEN = write_token(0, 0, 0)


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
    #: The commit's record-index change when the write knows it exactly (its tagging was the record
    #: index's): used instead of deriving it from the files `commit` rewrote.
    record_index: Callable[[], RecordIndexChange] | None = None


def _file_name(path: str) -> str:
    return posixpath.basename(path)


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


def write_files_delta_commit(storage: Storage, timezone: str, instant_time: str, change: FilesChange) -> Instant:
    """Write and complete the metadata table's delta commit `instant_time` applying `change` to `files`.

    Call under the data table's lock, right before the data instant `instant_time` completes;
    `timezone`: the table's timeline time zone. Returns the completed metadata instant. The
    commit follows the metadata table's version (`hoodie.properties`): timeline layout, log file
    naming (`next_log_file`) and commit metadata encoding (Avro on v8+, JSON on v6).
    """
    started = time.monotonic()
    mdt = metadata_storage(storage)
    version = metadata_table_version(mdt)
    encoding = version.metadata_encoding
    requested = create_requested(mdt, instant_time, Action.DELTA_COMMIT, b"", version.timeline_layout)
    workload = CommitMetadata(operationType=METADATA_OPERATION)
    inflight = transition_to_inflight(mdt, requested, workload.to_bytes(encoding))

    records = files_records(change)
    cells = [(key, encode_record(record)) for key, record in records]
    block = OpaqueBlock(
        kind=BlockType.HFILE_DATA,
        header={HeaderKey.SCHEMA: HFILE_SCHEMA_JSON, HeaderKey.INSTANT_TIME: instant_time},
        raw_content=write_log_block_hfile(cells, HFILE_SCHEMA_JSON),
    )
    name, log_version = next_log_file(mdt, version, FILES_PARTITION, FILES_FILE_GROUP_ID, instant_time, LOG_WRITE_TOKEN)
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
        logVersion=log_version,
        logOffset=0,
        baseFile="",
        logFiles=[name],
    )
    partition_stats = {FILES_PARTITION: [stat]}
    if change.commit is not None and keeps_record_index(storage):
        config = None  # hoodie.properties, read once where both need it
        if change.record_index is not None:
            index_change = change.record_index()
        else:
            config = table_config_of(storage)
            index_change = record_index_change(storage, instant_time, change.commit, config)
        index_change = without_live_deletes(storage, instant_time, index_change, change.commit, config)
        partition_stats[RECORD_INDEX_PARTITION] = write_change(mdt, instant_time, index_change, version)
    # column_stats / partition_stats, when kept (`stats_writer`)
    partition_stats |= write_stats_change(storage, instant_time, StatsChange(change.added, change.deleted))
    if keeps_bloom_filters(storage):  # new base files' filters, removed ones' tombstones
        partition_stats[BLOOM_FILTERS_PARTITION] = write_bloom_change(
            storage, instant_time, change.added, change.deleted
        )
    metadata = CommitMetadata(
        partitionToWriteStats={p: stats for p, stats in partition_stats.items() if stats},
        extraMetadata={"schema": COMMIT_SCHEMA_JSON},
        operationType=METADATA_OPERATION,
    )
    completed = complete(mdt, inflight, metadata.to_bytes(encoding), timezone)
    delete_markers_of_completed(mdt, instant_time)
    return completed


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


__all__ = [
    "LOG_WRITE_TOKEN",
    "METADATA_OPERATION",
    "FilesChange",
    "files_records",
    "removal_change",
    "write_files_delta_commit",
]
