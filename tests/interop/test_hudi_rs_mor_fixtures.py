"""Interop: merge-on-read tables read the same with lakeward and with hudi-rs (PyPI `hudi`).

1. Every MOR fixture table written by Apache Hudi (Spark; Avro and Parquet log blocks,
   deletes, a rollback): snapshot (merged), read-optimized (base files only) and time
   travel to each completed instant give the same rows with both readers.
2. Log blocks written by lakeward on top of those tables (updates, inserts, deletes, in
   Avro and Parquet data blocks, plus a failed write that never completed) read the same
   with both readers, and show what the writes imply.

Rows are compared with `tests.interop.compare.comparable_rows` (the one normaliser).
lakeward is driven below the Table API (FileSystemView + read_file_slices) so that this
file depends only on the read path.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Sequence
from typing import Any

import hudi
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakeward.core.config.table import TableConfig
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.log_file import (
    DataBlockFormat,
    DeleteBlock,
    LogFileWriter,
    WrittenLogFile,
    data_block,
)
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.read.merge_on_read import MergeSettings, VisibleInstants
from lakeward.core.read.snapshot import read_file_slices
from lakeward.core.schema import avro_schema_json, with_meta
from lakeward.core.storage import Storage
from lakeward.core.table_schema import resolve_table_schema
from lakeward.core.timeline import METAFOLDER, Timeline
from tests.interop.compare import column_names, comparable_rows, same_rows
from tests.support.fixture_tables import fixture_tables_dir

MOR_KINDS = ("mor/avro", "mor/parquet")
MOR_FIXTURES = [(kind, p.stem) for kind in MOR_KINDS for p in sorted((fixture_tables_dir() / kind).glob("*.zip"))]
READ_OPTIMIZED = "hoodie.read.use.read_optimized.mode"


def test_mor_fixtures_are_present():
    names = {name for _, name in MOR_FIXTURES}
    assert {"v6_trips_8i1u", "v6_trips_8i3d", "v6_nonpartitioned_rollback"} <= names, MOR_FIXTURES


# -- the two readers -------------------------------------------------------------------------
def _properties(storage: Storage) -> TableConfig:
    return TableConfig.from_text(storage.read_bytes(posixpath.join(METAFOLDER, "hoodie.properties")).decode())


def _slices(path: str, as_of: str | None = None) -> list[FileSlice]:
    storage = Storage.for_uri(path)
    return FileSystemView.load(storage, Timeline.load(storage)).latest_file_slices(as_of=as_of)


def lakeward_read(path: str, as_of: str | None = None, read_optimized: bool = False) -> pa.Table:
    """What Table.read will do for MOR tables: the latest slices as of `as_of`, merged."""
    storage = Storage.for_uri(path)
    timeline = Timeline.load(storage)
    config = _properties(storage)
    schema = resolve_table_schema(storage, timeline, config)
    slices = FileSystemView.load(storage, timeline).latest_file_slices(as_of=as_of)
    return read_file_slices(
        storage,
        slices,
        schema,
        instants=VisibleInstants.from_timeline(timeline, as_of),
        merge=MergeSettings.from_config(config),
        read_optimized=read_optimized,
    )


def hudi_read(path: str, as_of: str | None = None, read_optimized: bool = False) -> list[pa.RecordBatch]:
    options = hudi.HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    if read_optimized:
        options = options.with_hudi_option(READ_OPTIMIZED, "true")
    return hudi.HudiTableBuilder.from_base_uri(path).build().read(options)


def _write_times(path: str) -> list[str]:
    return [i.time for i in Timeline.load(Storage.for_uri(path)).completed_writes()]


def _mismatch(label: str, ours: pa.Table, theirs: Sequence[pa.RecordBatch]) -> str | None:
    problems = []
    their_columns, our_columns = column_names(theirs), set(ours.column_names)
    if their_columns is not None and their_columns != our_columns:
        problems.append(
            f"columns: only lakeward {our_columns - their_columns}, only hudi-rs {their_columns - our_columns}"
        )
    mine, other = comparable_rows(ours), comparable_rows(theirs)
    if not same_rows(mine, other):
        only_mine = [r for r in mine if r not in other]
        only_other = [r for r in other if r not in mine]
        problems.append(f"{len(mine)} vs {len(other)} rows; only lakeward {only_mine}; only hudi-rs {only_other}")
    return f"{label}: " + "; ".join(problems) if problems else None


def mismatches(path: str) -> list[str]:
    """Snapshot and read-optimized reads, latest and as of every completed write, that disagree."""
    out = []
    for as_of in [None, *_write_times(path)]:
        for read_optimized in (False, True):
            label = f"{'read-optimized' if read_optimized else 'snapshot'} as of {as_of or 'latest'}"
            ours, theirs = lakeward_read(path, as_of, read_optimized), hudi_read(path, as_of, read_optimized)
            problem = _mismatch(label, ours, theirs)
            if problem:
                out.append(problem)
    return out


def _by_key(table: pa.Table) -> dict[str, dict[str, Any]]:
    return {r["_hoodie_record_key"]: r for r in table.to_pylist()}


# -- 1. Hudi-written fixtures ----------------------------------------------------------------
@pytest.mark.parametrize(("kind", "name"), MOR_FIXTURES)
def test_mor_fixture_reads_match_hudi_rs(fixture_table: Callable[[str, str], str], kind: str, name: str):
    path = fixture_table(kind, name)
    # The fixture really exercises the merge: it has log files, and they change the rows.
    assert any(s.log_files for s in _slices(path)), f"{name} has no file slice with log files"
    assert comparable_rows(lakeward_read(path)) != comparable_rows(lakeward_read(path, read_optimized=True))

    assert mismatches(path) == []


def test_rollback_fixture_hides_the_rolled_back_update(fixture_table: Callable[[str, str], str]):
    path = fixture_table("mor/parquet", "v6_nonpartitioned_rollback")
    rows = _by_key(lakeward_read(path))
    assert sorted(rows) == ["1", "2", "3"]
    # log.1 (instant ...826878, rolled back by the command block in log.2) set id 1 inactive.
    assert rows["1"]["isActive"] is True
    assert rows["1"]["_hoodie_commit_time"] == "20250126040823628"
    # log.3, a completed deltacommit after the rollback, updated id 2.
    assert rows["2"]["isActive"] is True
    assert rows["2"]["_hoodie_commit_time"] == "20250126060846931"
    assert _by_key(lakeward_read(path, read_optimized=True))["2"]["isActive"] is False


def test_delete_fixture_drops_the_three_deleted_riders(fixture_table: Callable[[str, str], str]):
    path = fixture_table("mor/avro", "v6_trips_8i3d")
    riders = sorted(r["rider"] for r in lakeward_read(path).to_pylist())
    assert riders == ["rider-E", "rider-F", "rider-G", "rider-I", "rider-J"]
    first = _write_times(path)[0]
    assert len(lakeward_read(path, as_of=first)) == 8


def test_update_fixture_shows_the_logged_fare(fixture_table: Callable[[str, str], str]):
    path = fixture_table("mor/avro", "v6_trips_8i1u")
    [rider_d] = [r for r in lakeward_read(path).to_pylist() if r["rider"] == "rider-D"]
    assert rider_d["fare"] == 25.0
    assert rider_d["_hoodie_commit_time"] == "20250331030645735"


# -- 2. lakeward-written log blocks on top of the fixtures -----------------------------------
def _with_meta(rows: pa.Table, instant: str, file_id: str) -> pa.Table:
    """Rows as a log block holds them: fresh commit time and seqno, file name = file id."""
    n = rows.num_rows
    rows = _set(rows, "_hoodie_commit_time", instant)
    rows = rows.set_column(1, "_hoodie_commit_seqno", pa.array([f"{instant}_0_{i}" for i in range(n)]))
    return _set(rows, "_hoodie_file_name", file_id)


def _deltacommit(
    storage: Storage, instant: str, schema_json: str, file_slice: FileSlice, written: list[WrittenLogFile]
) -> None:
    """Publish a completed deltacommit for log files written into one slice (requested, inflight, completed).

    `schema_json` is the data schema (no meta fields), as `extraMetadata.schema` holds it.
    """
    stats = [
        {
            "fileId": file_slice.file_id,
            "path": w.log_file.path,
            "prevCommit": file_slice.base_instant_time,
            "numWrites": w.num_records,
            "numDeletes": w.num_deletes,
            "numUpdateWrites": w.num_records,
            "numInserts": 0,
            "totalWriteBytes": w.log_file.size,
            "totalWriteErrors": 0,
            "partitionPath": file_slice.partition_path,
            "fileSizeInBytes": w.log_file.size,
            "logVersion": w.log_file.version,
            "logOffset": 0,
            "baseFile": file_slice.base_file.name if file_slice.base_file else "",
            "logFiles": [w.log_file.name],
        }
        for w in written
    ]
    body = {
        "partitionToWriteStats": {file_slice.partition_path: stats},
        "compacted": False,
        "extraMetadata": {"schema": schema_json},
        "operationType": "UPSERT",
    }
    storage.write_bytes(posixpath.join(METAFOLDER, f"{instant}.deltacommit.requested"), b"")
    storage.write_bytes(posixpath.join(METAFOLDER, f"{instant}.deltacommit.inflight"), b"")
    storage.create_if_absent(posixpath.join(METAFOLDER, f"{instant}.deltacommit"), json.dumps(body).encode())


LAKEWARD_WRITES = [
    # (fixture kind, fixture name, record key column, a data column to change, its new value, block format)
    ("mor/avro", "v6_trips_8i1u", "uuid", "fare", 99.5, DataBlockFormat.AVRO),
    ("mor/avro", "v6_trips_8i3d", "uuid", "driver", "driver-Z", DataBlockFormat.PARQUET),
    ("mor/parquet", "v6_nonpartitioned", "id", "name", "Zed", DataBlockFormat.PARQUET),
    ("mor/parquet", "v6_nonpartitioned_rollback", "id", "name", "Zed", DataBlockFormat.AVRO),
    ("mor/parquet", "v6_simplekeygen_nonhivestyle", "id", "doubleField", -1.25, DataBlockFormat.AVRO),
]


@pytest.mark.parametrize(("kind", "name", "key_column", "column", "value", "block_format"), LAKEWARD_WRITES)
def test_lakeward_log_blocks_on_hudi_tables_read_the_same_with_hudi_rs(
    fixture_table: Callable[[str, str], str],
    kind: str,
    name: str,
    key_column: str,
    column: str,
    value: Any,
    block_format: DataBlockFormat,
):
    path = fixture_table(kind, name)
    storage = Storage.for_uri(path)
    config = _properties(storage)
    timeline = Timeline.load(storage)
    schema = resolve_table_schema(storage, timeline, config)
    assert schema is not None
    schema_json = avro_schema_json(schema, config.name, with_meta=True)  # log block headers
    commit_schema = avro_schema_json(schema, config.name)  # commit metadata
    # The slice holding the most rows, as the readers see it now.
    current = _plain(lakeward_read(path))
    file_names = current.column("_hoodie_file_name")
    target = max(
        (s for s in _slices(path) if s.base_file is not None),
        key=lambda s: pc.sum(pc.starts_with(file_names, s.file_id)).as_py(),
    )
    rows = current.filter(pc.starts_with(file_names, target.file_id)).sort_by("_hoodie_record_key")
    assert rows.num_rows >= 2, f"{name}: the chosen slice holds {rows.num_rows} rows"
    updated_key = rows.column("_hoodie_record_key")[0].as_py()
    deleted_key = rows.column("_hoodie_record_key")[1].as_py()
    ordering = config.precombine_field
    names = with_meta(schema).names

    # t1: update one record, insert a new one (same file group), in one data block.
    t1, t2, t3 = "20251121100000000", "20251121100100000", "20251121100200000"
    update = _set(rows.slice(0, 1), column, value)
    new_key: Any = "lakeward-new" if pa.types.is_string(rows.schema.field(key_column).type) else 424242
    insert = _set(_set(rows.slice(1, 1), key_column, new_key), "_hoodie_record_key", str(new_key))
    records = _with_meta(pa.concat_tables([update, insert]).select(names), t1, target.file_id)
    writer = LogFileWriter(storage, target.partition_path, target.file_id, target.base_instant_time, "0-77-1")
    _deltacommit(
        storage, t1, commit_schema, target, writer.append([data_block(records, t1, schema_json, block_format)])
    )

    # t2: a write that fails (never completes): its block must stay invisible to both readers.
    failed_key: Any = "lakeward-failed" if isinstance(new_key, str) else 434343
    failed = _set(_set(rows.slice(0, 1), key_column, failed_key), "_hoodie_record_key", str(failed_key))
    failed = _with_meta(
        pa.concat_tables([failed, _set(rows.slice(1, 1), column, value)]).select(names), t2, target.file_id
    )
    writer.append([data_block(failed, t2, schema_json, block_format)])
    storage.write_bytes(posixpath.join(METAFOLDER, f"{t2}.deltacommit.requested"), b"")
    storage.write_bytes(posixpath.join(METAFOLDER, f"{t2}.deltacommit.inflight"), b"")

    # t3: delete one record (with its ordering value, as a lakeward delete carries it).
    ordering_values = rows.slice(1, 1).column(ordering).combine_chunks() if ordering else None
    delete = DeleteBlock.create(t3, schema_json, [deleted_key], target.partition_path, ordering_values)
    _deltacommit(storage, t3, commit_schema, target, writer.append([delete]))
    assert [f.version for f in _slice_of(path, target).log_files][-3:] == [v + len(target.log_files) for v in (1, 2, 3)]

    # Both readers agree: snapshot, read-optimized, as of every completed write ...
    assert mismatches(path) == []
    # ... and show what the writes imply.
    after = _by_key(lakeward_read(path))
    assert after[updated_key][column] == value
    assert after[updated_key]["_hoodie_commit_time"] == t1
    assert after[str(new_key)]["_hoodie_commit_time"] == t1
    assert deleted_key not in after
    assert str(failed_key) not in after
    at_t1 = _by_key(lakeward_read(path, as_of=t1))
    assert at_t1[deleted_key][column] != value  # the failed write t2 never shows
    assert str(new_key) not in _by_key(lakeward_read(path, read_optimized=True))


def _plain(table: pa.Table) -> pa.Table:
    """Dictionary columns (meta columns of reads) as plain columns."""
    return table.cast(
        pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema])
    )


def _set(rows: pa.Table, column: str, value: Any) -> pa.Table:
    """`rows` with every value of `column` replaced by `value`."""
    i = rows.schema.get_field_index(column)
    return rows.set_column(i, column, pa.array([value] * rows.num_rows, rows.schema.field(i).type))


def _slice_of(path: str, target: FileSlice) -> FileSlice:
    [found] = [s for s in _slices(path) if (s.partition_path, s.file_id) == (target.partition_path, target.file_id)]
    return found
