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

import time
from collections import defaultdict

import numpy as np
import pyarrow as pa

from lakeward.core.config.table import TableConfig
from lakeward.core.exceptions import ConfigError, MetadataTableError
from lakeward.core.file_group.log_file.log_block import DeleteBlock
from lakeward.core.file_group.log_file.log_format import encode_block
from lakeward.core.file_group.metadata_listing import (
    metadata_partitions,
    read_table_properties,
)
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.gate import drop_partitions
from lakeward.core.metadata_table.index_partition import (
    append_log_file,
    hfile_data_block,
    prepare_build,
    write_partition,
)
from lakeward.core.metadata_table.record_index import (
    RECORD_INDEX_PARTITION,
    RecordIndexChange,
    encode_location,
    file_group_count,
    file_group_id,
    file_group_indexes,
    instant_epoch_ms,
    live_slice_keys,
    table_config_of,
)
from lakeward.core.metadata_table.schema import HFILE_SCHEMA_JSON
from lakeward.core.storage import Storage
from lakeward.core.table_version import TableVersion
from lakeward.core.timeline import Timeline, WriteStat

_DELETE_PARTITION_PATH = "record_index"


def keeps_record_index(storage: Storage) -> bool:
    """Whether the table's `hoodie.properties` (read now) lists the `record_index` partition."""
    return RECORD_INDEX_PARTITION in metadata_partitions(read_table_properties(storage))


def drop_record_index(storage: Storage, reason: str) -> bool:
    """Drop the `record_index` partition (the table stops listing it, then its folder goes:
    `gate.drop_partitions`), logging `reason`; False when the table has none. Call under the table
    lock (a restore does). A writer that enables the record index builds it again."""
    if RECORD_INDEX_PARTITION not in metadata_partitions(read_table_properties(storage)):
        return False
    drop_partitions(storage, {RECORD_INDEX_PARTITION: reason})
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


def write_change(mdt: Storage, instant_time: str, change: RecordIndexChange, version: TableVersion) -> list[WriteStat]:
    """Write `change` as log files of the metadata delta commit `instant_time` (inflight); their stats.
    `version`: the metadata table's (how its log files are named, `next_log_file`)."""
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
            data += hfile_data_block(instant_time, _cells({k: change.upserts[k] for k in upserts[index]}))
        if deletes.get(index):
            gone = deletes[index]
            block = DeleteBlock.create(
                instant_time, HFILE_SCHEMA_JSON, gone, _DELETE_PARTITION_PATH, pa.array([0] * len(gone), pa.int64())
            )
            data += encode_block(block)
        updated, deleted = len(upserts.get(index, ())), len(deletes.get(index, ()))
        stats.append(
            append_log_file(
                mdt,
                version,
                instant_time,
                RECORD_INDEX_PARTITION,
                file_id,
                data,
                started,
                updates=updated,
                deletes=deleted,
            )
        )
    return stats


def table_locations(storage: Storage, timeline: Timeline) -> dict[str, tuple[str, str, str]]:
    """Every live key of the table's latest file slices -> (partition, file id, slice base instant)."""
    committed = CommittedInstants.of(timeline)
    config = table_config_of(storage)
    locations: dict[str, tuple[str, str, str]] = {}
    twice: dict[str, set[str]] = {}
    for file_slice in FileSystemView.load(storage, timeline).latest_file_slices():
        location = (file_slice.partition_path, file_slice.file_id, file_slice.base_instant_time)
        for key in live_slice_keys(storage, file_slice, committed, config).to_pylist():
            other = locations.setdefault(key, location)
            if other != location:
                twice.setdefault(key, {_where(other)}).add(_where(location))
    if twice:
        shown = "; ".join(f"{k!r} in {', '.join(sorted(w))}" for k, w in sorted(twice.items())[:5])
        more = f" (and {len(twice) - 5} more)" if len(twice) > 5 else ""
        raise ConfigError(
            f"cannot build the record index of {storage.uri}: {len(twice)} record key(s) live in more than one "
            f"file group, {shown}{more}. The record index is global (one location per key): remove the "
            "duplicates first, or keep hoodie.index.type=BLOOM and hoodie.metadata.record.index.enable=false"
        )
    return locations


def _where(location: tuple[str, str, str]) -> str:
    partition, file_id, _ = location
    return f"file group {file_id} of partition {partition!r}" if partition else f"file group {file_id}"


def initialize_record_index(
    storage: Storage, config: TableConfig, timeline: Timeline, *, min_file_groups: int | None = None
) -> str:
    """Build the `record_index` partition of a table whose metadata table has `files` (module
    docstring); call under the table lock with nothing pending. Returns the metadata instant."""
    locations = table_locations(storage, timeline)  # refuses a table holding a key twice, before any change
    prepare_build(storage, timeline, RECORD_INDEX_PARTITION)
    num_groups = file_group_count(len(locations), *(() if min_file_groups is None else (min_file_groups,)))
    keys = list(locations)
    groups = file_group_indexes(pa.array(keys, pa.string()), num_groups) if keys else np.zeros(0, dtype=np.int64)
    members: dict[int, list[str]] = defaultdict(list)
    for key, index in zip(keys, groups.tolist(), strict=True):
        members[index].append(key)
    return write_partition(
        storage,
        config,
        timeline,
        RECORD_INDEX_PARTITION,
        [file_group_id(i) for i in range(num_groups)],
        lambda index: _cells({k: locations[k] for k in members.get(index, ())}),
    )
