"""Write the `record_index` partition: its initialisation from the table's latest file slices, and
the log files of each data-table instant's change (`record_index.record_index_change`).

Initialisation (Hudi's `initializeRecordIndexPartition`): one metadata delta commit with a reserved
time (`00000000000000` + the first 3-digit counter not on the metadata timeline), file groups
`record-index-0000-0` … (`record_index.file_group_count`), each with its initialisation log file
and, when it has keys, a base HFile of its sorted cells; then `record_index` joins
`hoodie.table.metadata.partitions`, last. Keys in log files count: the latest slices are read
as a reader merges them (base keys, then each committed log block adds or deletes keys).

Per data instant `T` the change goes into the metadata delta commit `T` that also carries the
`files` change: one log file `.record-index-NNNN-0_T.log.1_0-0-0` per touched group, with an
`HFILE_DATA` block of the added or moved keys and a DELETE block of the removed ones.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections import defaultdict

import numpy as np
import pyarrow as pa

from lakeward.core.config.table import TableConfig, update_table_properties
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group.hfile_writer import write_base_hfile, write_log_block_hfile
from lakeward.core.file_group.log_file.log_block import BlockType, DeleteBlock, HeaderKey, OpaqueBlock
from lakeward.core.file_group.log_file.log_format import encode_block
from lakeward.core.file_group.metadata_listing import (
    INIT_INSTANT_PREFIX,
    METADATA_PARTITIONS_KEY,
    metadata_partitions,
    metadata_storage,
    read_table_properties,
)
from lakeward.core.file_group.naming import log_file_name
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.bootstrap import INIT_WRITE_TOKEN, start_file_group
from lakeward.core.metadata_table.record_index import (
    LOG_WRITE_TOKEN,
    RECORD_INDEX_PARTITION,
    RecordIndexChange,
    encode_location,
    file_group_count,
    file_group_id,
    file_group_indexes,
    instant_epoch_ms,
    live_slice_keys,
)
from lakeward.core.metadata_table.schema import COMMIT_SCHEMA_JSON, HFILE_SCHEMA_JSON
from lakeward.core.storage import Storage
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import Action, CommitMetadata, Timeline, WriteStat
from lakeward.core.timeline.transitions import complete, create_requested, transition_to_inflight
from lakeward.core.write.markers import create_marker

log = logging.getLogger(__name__)

_DELETE_PARTITION_PATH = "record_index"


def keeps_record_index(storage: Storage) -> bool:
    """Whether the table's `hoodie.properties` (read now) lists the `record_index` partition."""
    return RECORD_INDEX_PARTITION in metadata_partitions(read_table_properties(storage))


def drop_record_index(storage: Storage, reason: str) -> bool:
    """Drop the `record_index` partition (the table stops listing it, then its folder goes), logging
    `reason`; False when the table has none. A writer that enables the record index builds it again."""
    partitions = metadata_partitions(read_table_properties(storage))
    if RECORD_INDEX_PARTITION not in partitions:
        return False
    remaining = [p for p in partitions if p != RECORD_INDEX_PARTITION]
    update_table_properties(storage, {METADATA_PARTITIONS_KEY: ",".join(sorted(remaining))})
    metadata_storage(storage).delete_dir(RECORD_INDEX_PARTITION)
    log.warning("dropped the record_index metadata partition of %s: %s", storage.uri, reason)
    return True


def _cells(upserts: dict[str, tuple[str, str, str]]) -> list[tuple[str, bytes]]:
    """Sorted (key, value) cells; keys at one location share one encoded value."""
    values: dict[tuple[str, str, str], bytes] = {}
    cells = []
    for key, location in upserts.items():
        value = values.get(location)
        if value is None:
            value = values[location] = encode_location(location[0], location[1], instant_epoch_ms(location[2]))
        cells.append((key, value))
    cells.sort(key=lambda kv: kv[0].encode())
    return cells


def _by_group(keys: list[str], num_groups: int) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    if keys:
        for key, index in zip(keys, file_group_indexes(pa.array(keys, pa.string()), num_groups), strict=True):
            out[int(index)].append(key)
    return out


def _num_groups(mdt: Storage) -> int:
    names = {e.name for e in mdt.list_dir(RECORD_INDEX_PARTITION) if not e.is_dir}
    ids = {n.split("_")[0].lstrip(".") for n in names if n.startswith((".record-index-", "record-index-"))}
    if not ids:
        raise MetadataTableError(f"{mdt.uri}: the record_index partition has no file group")
    return len(ids)


def write_change(mdt: Storage, instant_time: str, change: RecordIndexChange) -> list[WriteStat]:
    """Write `change` as log files of the metadata delta commit `instant_time` (inflight); their stats."""
    if not change:
        return []
    started = time.monotonic()
    num_groups = _num_groups(mdt)
    upserts = _by_group(list(change.upserts), num_groups)
    deletes = _by_group(sorted(change.deletes), num_groups)
    stats = []
    for index in sorted(set(upserts) | set(deletes)):
        file_id = file_group_id(index)
        data = b""
        if upserts.get(index):
            cells = _cells({k: change.upserts[k] for k in upserts[index]})
            block = OpaqueBlock(
                kind=BlockType.HFILE_DATA,
                header={HeaderKey.SCHEMA: HFILE_SCHEMA_JSON, HeaderKey.INSTANT_TIME: instant_time},
                raw_content=write_log_block_hfile(cells, HFILE_SCHEMA_JSON),
            )
            data += encode_block(block)
        if deletes.get(index):
            gone = deletes[index]
            block = DeleteBlock.create(
                instant_time, HFILE_SCHEMA_JSON, gone, _DELETE_PARTITION_PATH, pa.array([0] * len(gone), pa.int64())
            )
            data += encode_block(block)
        name = log_file_name(file_id, instant_time, 1, LOG_WRITE_TOKEN)
        create_marker(mdt, instant_time, RECORD_INDEX_PARTITION, name, "APPEND")
        path = posixpath.join(RECORD_INDEX_PARTITION, name)
        mdt.create_if_absent(path, data)
        count = len(upserts.get(index, ())) + len(deletes.get(index, ()))
        stats.append(
            WriteStat(
                fileId=file_id,
                path=path,
                prevCommit=instant_time,
                numWrites=count,
                numUpdateWrites=len(upserts.get(index, ())),
                numDeletes=len(deletes.get(index, ())),
                totalWriteBytes=len(data),
                partitionPath=RECORD_INDEX_PARTITION,
                fileSizeInBytes=len(data),
                runtimeStats={
                    "totalScanTime": 0,
                    "totalCreateTime": 0,
                    "totalUpsertTime": int((time.monotonic() - started) * 1000),
                },
                logVersion=1,
                logOffset=0,
                baseFile="",
                logFiles=[name],
            )
        )
    return stats


def init_instant(mdt: Storage) -> str:
    """The reserved time of a metadata partition's initialisation: the first `00000000000000NNN` not on
    the metadata timeline (Hudi gives each partition's initialisation its own)."""
    taken = {i.time for i in Timeline.load(mdt, TimelineLayout.V2).instants}
    return next(t for n in range(1000) if (t := f"{INIT_INSTANT_PREFIX}{n:03d}") not in taken)


def table_locations(storage: Storage, timeline: Timeline) -> dict[str, tuple[str, str, str]]:
    """Every live key of the table's latest file slices -> (partition, file id, slice base instant)."""
    committed = CommittedInstants.of(timeline)
    locations: dict[str, tuple[str, str, str]] = {}
    for file_slice in FileSystemView.load(storage, timeline).latest_file_slices():
        location = (file_slice.partition_path, file_slice.file_id, file_slice.base_instant_time)
        locations.update(dict.fromkeys(live_slice_keys(storage, file_slice, committed).to_pylist(), location))
    return locations


def initialize_record_index(
    storage: Storage, config: TableConfig, timeline: Timeline, *, min_file_groups: int | None = None
) -> str:
    """Build the `record_index` partition of a table whose metadata table has `files` (module
    docstring); call under the table lock with nothing pending. Returns the metadata instant."""
    props = read_table_properties(storage)
    partitions = metadata_partitions(props)
    if RECORD_INDEX_PARTITION in partitions:
        raise MetadataTableError(f"{storage.uri} already has a record_index partition; nothing was written")
    if timeline.pending():
        raise MetadataTableError(
            f"cannot build the record index of {storage.uri} while instants are pending; nothing was written"
        )
    mdt = metadata_storage(storage)
    mdt.delete_dir(RECORD_INDEX_PARTITION)  # leftovers of an interrupted initialisation
    locations = table_locations(storage, timeline)
    num_groups = file_group_count(len(locations), *(() if min_file_groups is None else (min_file_groups,)))
    init = init_instant(mdt)
    requested = create_requested(mdt, init, Action.DELTA_COMMIT, b"", TimelineLayout.V2)
    inflight = transition_to_inflight(mdt, requested)
    keys = list(locations)
    groups = file_group_indexes(pa.array(keys, pa.string()), num_groups) if keys else np.zeros(0, dtype=np.int64)
    members: dict[int, list[str]] = defaultdict(list)
    for key, index in zip(keys, groups.tolist(), strict=True):
        members[index].append(key)
    stats = []
    for index in range(num_groups):
        file_id = file_group_id(index)
        start_file_group(mdt, RECORD_INDEX_PARTITION, file_id, init)
        if not members.get(index):
            continue
        started = time.monotonic()
        hfile = write_base_hfile(_cells({k: locations[k] for k in members[index]}), HFILE_SCHEMA_JSON)
        path = posixpath.join(RECORD_INDEX_PARTITION, f"{file_id}_{INIT_WRITE_TOKEN}_{init}.hfile")
        mdt.create_if_absent(path, hfile)
        stats.append(
            WriteStat(
                fileId=file_id,
                path=path,
                numWrites=len(members[index]),
                numInserts=len(members[index]),
                totalWriteBytes=len(hfile),
                fileSizeInBytes=len(hfile),
                partitionPath=RECORD_INDEX_PARTITION,
                runtimeStats={
                    "totalScanTime": 0,
                    "totalCreateTime": int((time.monotonic() - started) * 1000),
                    "totalUpsertTime": 0,
                },
            )
        )
    metadata = CommitMetadata(
        partitionToWriteStats={RECORD_INDEX_PARTITION: stats},
        extraMetadata={"schema": COMMIT_SCHEMA_JSON},
        operationType="BULK_INSERT_PREPPED",
    )
    complete(mdt, inflight, metadata.to_avro(), config.timeline_timezone)
    update_table_properties(storage, {METADATA_PARTITIONS_KEY: ",".join(sorted({*partitions, RECORD_INDEX_PARTITION}))})
    return init
