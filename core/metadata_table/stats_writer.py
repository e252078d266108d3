"""Keep the `column_stats` and `partition_stats` partitions: per commit, at initialisation, in compaction.

Per data instant `T` (Hudi's `HoodieTableMetadataUtil.convertMetadataToColumnStatsRecords` and
`…PartitionStatsRecords`), in the metadata delta commit `T` that carries the `files` change:

- `column_stats`: for every data file the instant wrote (base files: from the Parquet footer;
  log files: from their data blocks' records), one record per indexed column; for every file it
  removed (a clean, a rollback of a compacted instant), one tombstone per column (`isDeleted`, no
  bounds, counts -1, as Hudi's stub). One log file `.col-stats-NNNN-0_T.log.1_0-0-0` per touched
  file group (`abs(javaStringHash(key)) % groups`), one `HFILE_DATA` block.
- `partition_stats`: for every partition the instant touched, one record per column: the range over
  the partition's live `column_stats` entries after the change (a superset of its latest file
  slices, so a safe bound for pruning).

Indexed columns: the `column_stats` definition of `.hoodie/.index_defs/index.json` (v9), else
`hoodie.metadata.index.column.stats.column.list`, else (Hudi 1.x's default) the three indexed meta
fields and the first data columns of a supported (primitive) type, at most 32 in all.

The metadata compaction folds both partitions' slices: newest record per key, tombstones dropped
(`merge_stats_slice`).
"""

from __future__ import annotations

import io
import posixpath
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.config.table import TableConfig, update_table_properties
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group import log_file
from lakeward.core.file_group.log_file.log_block import DataBlock
from lakeward.core.file_group.metadata_listing import (
    metadata_partitions,
    metadata_storage,
    metadata_table_version,
    read_table_properties,
)
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.column_stats import (
    COLUMN_STATS_PARTITION,
    DEFAULT_FILE_GROUPS,
    FILE_GROUP_PREFIX,
    INDEXED_META_FIELDS,
    ColumnRange,
    column_stats_key,
    encode_range,
    file_group_index,
    hash_id,
    index_version,
    indexable,
    parquet_ranges,
    partitions_filter,
    read_ranges,
    table_ranges,
)
from lakeward.core.metadata_table.index_definitions import (
    INDEX_DEFINITIONS_PATH,
    load_index_definitions,
    write_index_definitions,
)
from lakeward.core.metadata_table.index_partition import (
    Cells,
    append_log_file,
    hfile_data_block,
    prepare_build,
    write_partition,
)
from lakeward.core.metadata_table.partition_stats import (
    DEFAULT_FILE_GROUPS as PARTITION_STATS_FILE_GROUPS,
)
from lakeward.core.metadata_table.partition_stats import (
    FILE_GROUP_PREFIX as PARTITION_STATS_PREFIX,
)
from lakeward.core.metadata_table.partition_stats import (
    PARTITION_STATS_PARTITION,
    partition_range,
    partition_stats_key,
)
from lakeward.core.metadata_table.record_index_compaction import FileNameStamp, merge_slice_cells
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA
from lakeward.core.metadata_table.schema import MetadataRecordType as RecordType
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline, WriteStat

#: Hudi's cap on the columns indexed by default (`hoodie.metadata.index.column.stats.max.columns.to.index`).
MAX_COLUMNS = 32
#: The table property naming the index definitions file (v9).
INDEX_DEFS_KEY = "hoodie.table.index.defs.path"
_PARSED_SCHEMA = fastavro.parse_schema(METADATA_RECORD_SCHEMA)
#: The partitions this module keeps.
STATS_PARTITIONS = (COLUMN_STATS_PARTITION, PARTITION_STATS_PARTITION)
_PREFIXES = {COLUMN_STATS_PARTITION: FILE_GROUP_PREFIX, PARTITION_STATS_PARTITION: PARTITION_STATS_PREFIX}


@dataclass(frozen=True)
class StatsChange:
    """What a data instant changes in the stats partitions: data partition -> file name -> size
    (files written), and data partition -> file names removed."""

    added: Mapping[str, Mapping[str, int]]
    deleted: Mapping[str, Sequence[str]]


def kept_stats_partitions(storage: Storage) -> list[str]:
    """The stats partitions the table's `hoodie.properties` (read now) lists."""
    listed = metadata_partitions(read_table_properties(storage))
    return [p for p in (COLUMN_STATS_PARTITION, PARTITION_STATS_PARTITION) if p in listed]


# -- which columns, of which types ------------------------------------------------------------
def default_columns(schema: pa.Schema, populate_meta_fields: bool = True, column_list: str | None = None) -> list[str]:
    """The columns a new `column_stats` index covers (module docstring)."""
    if column_list:
        return [c.strip() for c in column_list.split(",") if c.strip()]
    meta = [c for c in INDEXED_META_FIELDS if populate_meta_fields and c in schema.names]
    data = [f.name for f in schema if not f.name.startswith("_hoodie_") and indexable(f.type)]
    return (meta + data)[:MAX_COLUMNS]


def indexed_columns(storage: Storage, schema: pa.Schema) -> list[str]:
    """The columns the table's column_stats covers: its `index.json` definition, else the default."""
    fields = load_index_definitions(storage).get(COLUMN_STATS_PARTITION, {}).get("sourceFields")
    if fields:
        return list(fields)
    return default_columns(schema, "_hoodie_record_key" in schema.names)


def _is_log(name: str) -> bool:
    return name.startswith(".") and ".log." in name


def file_ranges(
    storage: Storage, partition: str, name: str, columns: Iterable[str], records: pa.Table | None = None
) -> tuple[dict[str, ColumnRange], pa.Schema]:
    """The ranges of one data file (base: Parquet footer; log: its data blocks' records, read unless
    given), and its schema."""
    path = posixpath.join(partition, name) if partition else name
    if _is_log(name):
        records = _log_records(storage, path) if records is None else records
        return table_ranges(records, name, columns), records.schema
    with storage.open_input_file(path) as source:  # the footer only, not the whole file
        ranges = parquet_ranges(source, name, columns)
        return ranges, pq.ParquetFile(source).schema_arrow


def _log_records(storage: Storage, path: str) -> pa.Table:
    tables = [b.records for b in log_file.read_log_file(storage, path) if isinstance(b, DataBlock)]
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


def _probe_schema(
    storage: Storage, files: Sequence[tuple[str, str]], records: dict[tuple[str, str], pa.Table]
) -> pa.Schema:
    """The schema the indexed columns are chosen from: the first of `files` that has columns (a
    log file of deletes only has none). Log files read on the way are kept in `records`."""
    for partition, name in files:
        if not _is_log(name):
            return file_ranges(storage, partition, name, [])[1]
        records[partition, name] = table = _log_records(storage, posixpath.join(partition, name) if partition else name)
        if table.num_columns:
            return table.schema
    return pa.schema([])


def _tombstone(name: str, column: str) -> ColumnRange:
    return ColumnRange(name, column, None, None, -1, -1, -1, -1, deleted=True)


def column_stats_cells(
    storage: Storage, change: StatsChange, version: int, schema_hint: pa.Schema | None = None
) -> tuple[dict[str, bytes], dict[str, tuple[str, ColumnRange, pa.DataType]]]:
    """The `column_stats` cells of `change` (key -> value), and what they say (key -> (data partition,
    range, type)) for the partition stats."""
    cells: dict[str, bytes] = {}
    said: dict[str, tuple[str, ColumnRange, pa.DataType]] = {}
    columns: list[str] | None = None
    data_files = [
        (partition, name)
        for partition, files in sorted(change.added.items())
        for name in sorted(files)
        if not (name.endswith(".cdc") or ".cdc." in name)
    ]
    records: dict[tuple[str, str], pa.Table] = {}
    if data_files:
        columns = indexed_columns(storage, schema_hint or _probe_schema(storage, data_files, records))
    for partition, name in data_files:
        assert columns is not None
        ranges, schema = file_ranges(storage, partition, name, columns, records.pop((partition, name), None))
        for column, stats in ranges.items():
            key = column_stats_key(column, partition, name)
            arrow_type = schema.field(column).type if column in schema.names else pa.null()
            cells[key] = encode_range(stats, arrow_type, version, RecordType.COLUMN_STATS)
            said[key] = (partition, stats, arrow_type)
    for partition, names in sorted(change.deleted.items()):
        if columns is None:
            columns = indexed_columns(storage, schema_hint or pa.schema([]))
        for name in names:
            for column in columns:
                key = column_stats_key(column, partition, name)
                cells[key] = encode_range(_tombstone(name, column), pa.string(), version, RecordType.COLUMN_STATS)
                said[key] = (partition, _tombstone(name, column), pa.null())
    return cells, said


def partition_stats_cells(
    storage: Storage,
    touched: Collection[str],
    said: Mapping[str, tuple[str, ColumnRange, pa.DataType]],
    version: int,
) -> dict[str, bytes]:
    """The `partition_stats` cells of the partitions `touched`: per column, the range over the live
    `column_stats` entries of the partition once `said` (this instant's records) applies."""
    live = read_ranges(storage, COLUMN_STATS_PARTITION, partitions_filter(touched))
    types: dict[str, pa.DataType] = {}
    for key, (_, stats, arrow_type) in said.items():
        if stats.deleted:
            live.pop(key, None)
        else:
            live[key] = stats
            if not pa.types.is_null(arrow_type):
                types[stats.column] = arrow_type
    cells: dict[str, bytes] = {}
    for partition in sorted(touched):
        segment = hash_id(partition or ".")
        by_column: dict[str, list[ColumnRange]] = defaultdict(list)
        for key, stats in live.items():
            if key[12:24] == segment:
                by_column[stats.column].append(stats)
        schema = None
        if any(c not in types for c in by_column):
            schema = _schema_of(storage, partition, [r for rs in by_column.values() for r in rs])
        for column, ranges in sorted(by_column.items()):
            arrow_type = types.get(column)
            if arrow_type is None and schema is not None and column in schema.names:
                arrow_type = schema.field(column).type
            if arrow_type is None:
                continue
            merged = partition_range(partition, column, ranges, arrow_type)
            cells[partition_stats_key(column, partition)] = encode_range(
                merged, arrow_type, version, RecordType.PARTITION_STATS
            )
    return cells


def _schema_of(storage: Storage, partition: str, ranges: Iterable[ColumnRange]) -> pa.Schema | None:
    """The schema of one live base file of `partition` (the column types of a partition whose
    files this instant did not write: a clean)."""
    for r in ranges:
        if not _is_log(r.file_name):
            path = posixpath.join(partition, r.file_name) if partition else r.file_name
            try:
                with storage.open_input_file(path) as source:
                    return pq.ParquetFile(source).schema_arrow
            except (OSError, pa.ArrowInvalid):
                continue
    return None


# -- writing ----------------------------------------------------------------------------------
def _file_group_ids(mdt: Storage, partition: str) -> list[str]:
    prefix = _PREFIXES[partition]
    names = [e.name.lstrip(".") for e in mdt.list_dir(partition) if not e.is_dir]
    ids = sorted({n.split("_")[0] for n in names if n.startswith(prefix + "-")})
    if not ids:
        raise MetadataTableError(f"{mdt.uri}: the {partition} partition has no file group")
    return ids


def write_cells(mdt: Storage, partition: str, instant_time: str, cells: Mapping[str, bytes]) -> list[WriteStat]:
    """Write `cells` into the partition's file groups as log files of the delta commit `instant_time`,
    as every index partition's are (`index_partition.append_log_file`)."""
    if not cells:
        return []
    ids = _file_group_ids(mdt, partition)
    version = metadata_table_version(mdt)
    groups: dict[int, Cells] = defaultdict(list)
    for key, value in cells.items():
        groups[file_group_index(key, len(ids))].append((key, value))
    stats = []
    for index, members in sorted(groups.items()):
        started = time.monotonic()
        members.sort(key=lambda kv: kv[0].encode())
        data = hfile_data_block(instant_time, members)
        stats.append(
            append_log_file(mdt, version, instant_time, partition, ids[index], data, started, updates=len(members))
        )
    return stats


def write_stats_change(storage: Storage, instant_time: str, change: StatsChange) -> dict[str, list[WriteStat]]:
    """Write what `change` does to the stats partitions the table keeps, as log files of the metadata
    delta commit `instant_time` (inflight); their write stats by metadata partition."""
    kept = kept_stats_partitions(storage)
    if not kept or not (change.added or change.deleted):
        return {}
    mdt = metadata_storage(storage)
    version = index_version(storage, _table_version(storage))
    cells, said = column_stats_cells(storage, change, version)
    out: dict[str, list[WriteStat]] = {}
    if COLUMN_STATS_PARTITION in kept:
        out[COLUMN_STATS_PARTITION] = write_cells(mdt, COLUMN_STATS_PARTITION, instant_time, cells)
    if PARTITION_STATS_PARTITION in kept and COLUMN_STATS_PARTITION in kept:
        touched = set(change.added) | set(change.deleted)
        partition_cells = partition_stats_cells(storage, touched, said, version)
        out[PARTITION_STATS_PARTITION] = write_cells(mdt, PARTITION_STATS_PARTITION, instant_time, partition_cells)
    return {p: s for p, s in out.items() if s}


def _table_version(storage: Storage) -> int:
    return int(read_table_properties(storage).get("hoodie.table.version", "9"))


# -- compaction -------------------------------------------------------------------------------
def _is_tombstone(value: bytes) -> bool:
    record = fastavro.schemaless_reader(io.BytesIO(value), _PARSED_SCHEMA, None)
    return bool((record.get("ColumnStatsMetadata") or {}).get("isDeleted"))  # type: ignore[union-attr]


def merge_stats_slice(
    mdt: Storage, base_path: str | None, log_paths: Sequence[str], completed: Collection[str], file_name: str
) -> list[tuple[str, bytes]]:
    """The cells of the compacted base HFile `file_name` of one stats file slice: the base HFile, then
    the committed log blocks in the order given, the newest value per key; tombstones dropped (nothing
    older is left below a base file); `_hoodie_file_name` stamped, key order."""
    merged = merge_slice_cells(mdt, base_path, log_paths, completed)
    stamp = FileNameStamp(file_name)
    return [(key.decode(), stamp(merged[key])) for key in sorted(merged) if not _is_tombstone(merged[key])]


def _any_schema(storage: Storage, files: Mapping[str, Mapping[str, int]]) -> pa.Schema | None:
    for partition, names in files.items():
        for name in names:
            if not _is_log(name):
                return file_ranges(storage, partition, name, [])[1]
    return None


# -- initialisation ---------------------------------------------------------------------------
def _write_partition(
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    partition: str,
    num_groups: int,
    cells: Mapping[str, bytes],
) -> str:
    """The initialisation delta commit of a stats partition of `num_groups` file groups holding
    `cells`, written as every index partition's is (`index_partition.write_partition`)."""
    members: dict[int, Cells] = defaultdict(list)
    for key, value in cells.items():
        members[file_group_index(key, num_groups)].append((key, value))
    file_ids = [f"{_PREFIXES[partition]}-{index:04d}-0" for index in range(num_groups)]
    return write_partition(
        storage,
        config,
        timeline,
        partition,
        file_ids,
        lambda index: sorted(members.get(index, []), key=lambda kv: kv[0].encode()),
    )


def latest_files(storage: Storage, timeline: Timeline) -> dict[str, dict[str, int]]:
    """Data partition -> file name -> size of every file of the table's latest file slices."""
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for file_slice in FileSystemView.load(storage, timeline).latest_file_slices():
        files = out[file_slice.partition_path]
        if file_slice.base_file is not None:
            files[file_slice.base_file.name] = file_slice.base_file.size
        files.update({f.name: f.size for f in file_slice.log_files})
    return dict(out)


def _define_index(storage: Storage, columns: Sequence[str]) -> None:
    """Record the `column_stats` definition in `.hoodie/.index_defs/index.json` (table version 9), as
    Hudi 1.1 does when it builds the index: the columns it covers, index version 2."""
    definitions = load_index_definitions(storage)
    definitions[COLUMN_STATS_PARTITION] = {
        "indexName": COLUMN_STATS_PARTITION,
        "indexType": COLUMN_STATS_PARTITION,
        "indexFunction": COLUMN_STATS_PARTITION,
        "sourceFields": list(columns),
        "indexOptions": {},
        "version": "V2",
    }
    write_index_definitions(storage, definitions)
    if INDEX_DEFS_KEY not in read_table_properties(storage):
        update_table_properties(storage, {INDEX_DEFS_KEY: INDEX_DEFINITIONS_PATH})


def initialize_column_stats(
    storage: Storage, config: TableConfig, timeline: Timeline, *, column_list: str | None = None
) -> str:
    """Build the `column_stats` partition of a table whose metadata table (v8/v9) has `files`, from
    its latest file slices; call under the table lock with nothing pending (`prepare_build`).
    `column_list`: the columns to index (Hudi's `hoodie.metadata.index.column.stats.column.list`;
    default: module docstring), recorded in `index.json` on v9. Returns the metadata instant."""
    prepare_build(storage, timeline, COLUMN_STATS_PARTITION)
    files = latest_files(storage, timeline)
    if config.version.number >= 9:
        schema = _any_schema(storage, files)
        if schema is not None:
            _define_index(storage, default_columns(schema, config.populate_meta_fields, column_list))
    cells, _ = column_stats_cells(storage, StatsChange(files, {}), index_version(storage, config.version.number))
    return _write_partition(storage, config, timeline, COLUMN_STATS_PARTITION, DEFAULT_FILE_GROUPS, cells)


def initialize_partition_stats(storage: Storage, config: TableConfig, timeline: Timeline) -> str:
    """Build the `partition_stats` partition of a partitioned table whose metadata table (v8/v9) has
    `files` and `column_stats` (a partition's range is taken over its column stats), from its latest
    file slices; call under the table lock with nothing pending. Returns the metadata instant."""
    prepare_build(storage, timeline, PARTITION_STATS_PARTITION)
    if COLUMN_STATS_PARTITION not in metadata_partitions(read_table_properties(storage)):
        raise MetadataTableError(
            f"cannot build the {PARTITION_STATS_PARTITION} partition of {storage.uri} without "
            f"{COLUMN_STATS_PARTITION}; nothing was written"
        )
    files = latest_files(storage, timeline)
    version = index_version(storage, config.version.number)
    _, said = column_stats_cells(storage, StatsChange(files, {}), version)
    cells = partition_stats_cells(storage, set(files), said, version)
    return _write_partition(storage, config, timeline, PARTITION_STATS_PARTITION, PARTITION_STATS_FILE_GROUPS, cells)
