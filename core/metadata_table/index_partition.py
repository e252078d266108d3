"""The files of the metadata table's index partitions: their initialisation, and each delta commit's log files.

Initialisation: `record_index`, `bloom_filters`, `column_stats` and `partition_stats` are built
the same way (`HoodieBackedTableMetadataWriter.initializeFromFilesystem` for a partition added to a
metadata table that has `files`; `write_partition`): one metadata delta commit with a reserved
time (on v8/v9
`00000000000000` + the first 3-digit counter not on the metadata timeline, each partition its
own; on v6 after the data table's latest completed instant: `MetadataTableRules.init_instant`), on
the timeline layout of the table version, whose file groups each get their initialisation log
file and, when they have records, a base HFile of their sorted cells, each carrying the file's
name in `_hoodie_file_name` as Hudi's base HFiles do (`BULK_INSERT_PREPPED`); then the partition joins
`hoodie.table.metadata.partitions`, last. Until that last step no reader or writer uses it, so
an interrupted build is deleted and done again by the next one.

Per data-table instant `T`, an index partition's change is one log file
(`.<fileId>_T.log.1_0-0-0` on v8/v9; on v6 the next version of the group's slice) per touched
file group (`append_log_file`), in the metadata delta commit `T` that carries the `files` change;
its blocks are `HFILE_DATA` blocks of cells
(`hfile_data_block`) and, for removed keys, DELETE blocks.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Sequence

from lakeward.core.config.table import TableConfig, update_table_properties
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group.hfile_writer import write_base_hfile, write_log_block_hfile
from lakeward.core.file_group.log_file.log_block import BlockType, HeaderKey, OpaqueBlock
from lakeward.core.file_group.log_file.log_format import encode_block
from lakeward.core.file_group.metadata_listing import (
    METADATA_PARTITIONS_KEY,
    load_metadata_timeline,
    metadata_partitions,
    metadata_storage,
    metadata_table_version,
    next_log_file,
    read_table_properties,
)
from lakeward.core.metadata_table.bootstrap import INIT_WRITE_TOKEN, start_file_group
from lakeward.core.metadata_table.record_index import LOG_WRITE_TOKEN
from lakeward.core.metadata_table.record_index_compaction import FileNameStamp
from lakeward.core.metadata_table.schema import COMMIT_SCHEMA_JSON, HFILE_SCHEMA_JSON
from lakeward.core.storage import Storage
from lakeward.core.table_version import TableVersion
from lakeward.core.timeline import Action, CommitMetadata, Timeline, WriteStat
from lakeward.core.timeline.instant_time import new_instant_time
from lakeward.core.timeline.transitions import complete, create_requested, transition_to_inflight
from lakeward.core.write.markers import create_marker

#: Cells (key, Avro value) of one file group, sorted by key bytes.
Cells = list[tuple[str, bytes]]


def init_instant(mdt: Storage, version: TableVersion, timeline: Timeline, timezone: str = "LOCAL") -> str:
    """The reserved time of a metadata partition's initialisation, the first free one on the metadata
    timeline (Hudi gives each partition's initialisation its own): `00000000000000NNN` on v8/v9, the
    data table's latest completed instant + `01N` on v6 (`MetadataTableRules.init_instant`);
    `timeline` is the data table's.

    A reserved time older than the metadata timeline's first instant is never taken: the archival
    may have moved it to the history, and readers count what sorts before the first instant as
    archived, so a base file of an archived compaction would look uncommitted beside it. With none
    left, a new instant time (`timezone`: the table's timeline zone)."""
    instants = load_metadata_timeline(mdt, version.timeline_layout).instants
    taken = {i.time for i in instants}
    first = min(taken, default=None)
    completed = timeline.completed()
    latest = completed[-1].time if completed else None
    for n in range(1000):
        candidate = version.metadata_table.init_instant(latest, n)
        if candidate not in taken and (first is None or candidate > first):
            return candidate
    return new_instant_time(max(taken), timezone)


def prepare_build(storage: Storage, timeline: Timeline, partition: str) -> None:
    """Refuse (MetadataTableError, nothing written) a build of `partition` when the table has it or
    data-table instants are pending; else delete the leftovers of an interrupted build."""
    if partition in metadata_partitions(read_table_properties(storage)):
        raise MetadataTableError(f"{storage.uri} already has a {partition} partition; nothing was written")
    if timeline.pending():
        raise MetadataTableError(
            f"cannot build the {partition} partition of {storage.uri} while instants are pending; nothing was written"
        )
    metadata_storage(storage).delete_dir(partition)


def base_hfile_stat(partition: str, file_id: str, path: str, size: int, records: int, started: float) -> WriteStat:
    """The write stat of a base HFile of `records` cells written since `started` (monotonic)."""
    return WriteStat(
        fileId=file_id,
        path=path,
        numWrites=records,
        numInserts=records,
        totalWriteBytes=size,
        fileSizeInBytes=size,
        partitionPath=partition,
        runtimeStats={
            "totalScanTime": 0,
            "totalCreateTime": int((time.monotonic() - started) * 1000),
            "totalUpsertTime": 0,
        },
    )


def write_partition(
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    partition: str,
    file_ids: Sequence[str],
    cells_of: Callable[[int], Cells],
) -> str:
    """Write the initialisation delta commit of `partition` (file groups `file_ids`; `cells_of(i)`: the
    sorted cells of group i, asked for once; their `_hoodie_file_name` is set to the base HFile's
    name) and list the partition in the table's properties, last.
    Call after `prepare_build`, under the table lock; `timeline` is the data table's. Returns the
    metadata instant."""
    mdt = metadata_storage(storage)
    version = metadata_table_version(mdt)
    init = init_instant(mdt, version, timeline, config.timeline_timezone)
    requested = create_requested(mdt, init, Action.DELTA_COMMIT, b"", version.timeline_layout)
    inflight = transition_to_inflight(mdt, requested)
    stats = []
    for index, file_id in enumerate(file_ids):
        start_file_group(mdt, partition, file_id, init)
        started = time.monotonic()
        cells = cells_of(index)
        if not cells:
            continue
        name = f"{file_id}_{INIT_WRITE_TOKEN}_{init}.hfile"
        stamp = FileNameStamp(name)
        hfile = write_base_hfile([(key, stamp(value)) for key, value in cells], HFILE_SCHEMA_JSON)
        path = posixpath.join(partition, name)
        mdt.create_if_absent(path, hfile)
        stats.append(base_hfile_stat(partition, file_id, path, len(hfile), len(cells), started))
    metadata = CommitMetadata(
        partitionToWriteStats={partition: stats},
        extraMetadata={"schema": COMMIT_SCHEMA_JSON},
        operationType="BULK_INSERT_PREPPED",
    )
    complete(mdt, inflight, metadata.to_bytes(version.metadata_encoding), config.timeline_timezone)
    partitions = metadata_partitions(read_table_properties(storage))
    update_table_properties(storage, {METADATA_PARTITIONS_KEY: ",".join(sorted({*partitions, partition}))})
    return init


def hfile_data_block(instant_time: str, cells: Cells) -> bytes:
    """An encoded `HFILE_DATA` log block of `cells` (sorted) written by the metadata instant `instant_time`."""
    block = OpaqueBlock(
        kind=BlockType.HFILE_DATA,
        header={HeaderKey.SCHEMA: HFILE_SCHEMA_JSON, HeaderKey.INSTANT_TIME: instant_time},
        raw_content=write_log_block_hfile(cells, HFILE_SCHEMA_JSON),
    )
    return encode_block(block)


def append_log_file(
    mdt: Storage,
    version: TableVersion,
    instant_time: str,
    partition: str,
    file_id: str,
    data: bytes,
    started: float,
    *,
    updates: int,
    deletes: int = 0,
) -> WriteStat:
    """Write the log file of the metadata delta commit `instant_time` (inflight) into file group
    `file_id` of `partition`: its `APPEND` marker, then `data` (encoded blocks of `updates` upserted
    and `deletes` removed keys; named as the metadata table's `version` names logs, `next_log_file`).
    Returns its write stat."""
    name, log_version = next_log_file(mdt, version, partition, file_id, instant_time, LOG_WRITE_TOKEN)
    create_marker(mdt, instant_time, partition, name, "APPEND")
    path = posixpath.join(partition, name)
    mdt.create_if_absent(path, data)
    return WriteStat(
        fileId=file_id,
        path=path,
        prevCommit=instant_time,
        numWrites=updates + deletes,
        numUpdateWrites=updates,
        numDeletes=deletes,
        totalWriteBytes=len(data),
        partitionPath=partition,
        fileSizeInBytes=len(data),
        runtimeStats={
            "totalScanTime": 0,
            "totalCreateTime": 0,
            "totalUpsertTime": int((time.monotonic() - started) * 1000),
        },
        logVersion=log_version,
        logOffset=0,
        baseFile="",
        logFiles=[name],
    )


__all__ = [
    "Cells",
    "append_log_file",
    "base_hfile_stat",
    "hfile_data_block",
    "init_instant",
    "prepare_build",
    "write_partition",
]
