"""Merge-on-read writes through the user API: what lands on storage and what reads return.

Expected rows are worked out from the input batches (the `Model` below), never from
lakeward's own reads. The layout checks follow Hudi's delta commits (format doc 2.2, 3.2,
4.4, 4.6, 6): updates and deletes of stored records become log blocks in a NEW log file
version of the file group's latest slice, inserts become base files, every write is a
`deltacommit` (replace operations stay `replacecommit`s).
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

import lakeward.core.write.client as client_mod
import lakeward.core.write.plane.local as local_plane_mod
from lakeward.core.config.table import DEFAULT_PAYLOAD, TableConfig, TableType
from lakeward.core.exceptions import ConcurrentWriteError
from lakeward.core.file_group.log_file import (
    AvroDataBlock,
    DeleteBlock,
    LogFileWriter,
    ParquetDataBlock,
    data_block,
    read_log_file,
)
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.schema import avro_schema_json, with_meta
from lakeward.core.storage import Storage
from lakeward.core.table import Table
from lakeward.core.timeline import Action, Timeline
from lakeward.core.write.markers import create_marker, list_markers, reconcile_markers

MOR = "MERGE_ON_READ"
NO_SMALL_FILES = {"hoodie.parquet.small.file.limit": 0}


# -- helpers ------------------------------------------------------------------------------------
def make_table(tmp_path: Path, name: str = "trips", options: dict[str, Any] | None = None, **kwargs: Any) -> Table:
    kwargs.setdefault("record_key", "id")
    kwargs.setdefault("partition_by", "city")
    kwargs.setdefault("ordering_field", "ts")
    return Table.create(str(tmp_path / name), table_type=MOR, options={**NO_SMALL_FILES, **(options or {})}, **kwargs)


def batch(*rows: tuple, deleted: list[bool] | None = None) -> pa.Table:
    """Rows of (id, city, ts, v), optionally with `_hoodie_is_deleted`."""
    columns = {
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "city": pa.array([r[1] for r in rows], pa.string()),
        "ts": pa.array([r[2] for r in rows], pa.int64()),
        "v": pa.array([r[3] for r in rows], pa.string()),
    }
    if deleted is not None:
        columns["_hoodie_is_deleted"] = pa.array(deleted, pa.bool_())
    return pa.table(columns)


class Model:
    """The table implied by the input batches: (city, id) -> (id, city, ts, v)."""

    def __init__(self, event_time: bool = False):
        self.rows: dict[tuple[str, int], tuple] = {}
        self.event_time = event_time

    def upsert(self, *rows: tuple, deleted: Iterable[bool] | None = None) -> None:
        for row, gone in zip(rows, deleted or [False] * len(rows), strict=True):
            key = (row[1], row[0])
            stored = self.rows.get(key)
            if self.event_time and stored is not None and stored[2] > row[2]:
                continue  # DefaultHoodieRecordPayload: the stored record is newer
            if gone:
                self.rows.pop(key, None)
            else:
                self.rows[key] = row

    def delete(self, *keys: tuple[str, int]) -> None:
        for key in keys:
            self.rows.pop(key, None)

    def snapshot(self) -> list[tuple]:
        return sorted(self.rows.values())


def snapshot(table: Table, as_of: str | None = None, read_optimized: bool = False) -> list[tuple]:
    rows = table.read(as_of=as_of, read_optimized=read_optimized, columns=["id", "city", "ts", "v"]).to_pylist()
    return sorted((r["id"], r["city"], r["ts"], r["v"]) for r in rows)


def commit_json(table: Table, instant_time: str, action: str = "deltacommit") -> dict[str, Any]:
    return json.loads((Path(table.path) / ".hoodie" / f"{instant_time}.{action}").read_text())


def stats_of(table: Table, instant_time: str, action: str = "deltacommit") -> list[dict[str, Any]]:
    meta = commit_json(table, instant_time, action)
    return [s for stats in meta["partitionToWriteStats"].values() for s in stats]


def data_files(table: Table) -> dict[str, str]:
    """Files outside `.hoodie/`: relative path -> 'base' or 'log'."""
    out = {}
    for root, dirs, files in os.walk(table.path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), table.path)
            if parse_base_file_name(name):
                out[rel] = "base"
            elif parse_log_file_name(name):
                out[rel] = "log"
    return out


def log_files(table: Table) -> list[str]:
    return sorted(p for p, kind in data_files(table).items() if kind == "log")


def base_files(table: Table) -> list[str]:
    return sorted(p for p, kind in data_files(table).items() if kind == "base")


def blocks_of(table: Table, rel: str) -> list[Any]:
    return read_log_file(table.storage, rel)


def timeline_names(table: Table, instant_time: str) -> list[str]:
    return sorted(p.name for p in (Path(table.path) / ".hoodie").iterdir() if p.name.startswith(instant_time))


def avro_records(data: bytes) -> list[dict[str, Any]]:
    return list(fastavro.reader(io.BytesIO(data)))  # type: ignore[arg-type]


SEED = (
    (1, "sf", 1, "a"),
    (2, "sf", 1, "b"),
    (3, "sf", 1, "c"),
    (4, "ny", 1, "d"),
    (5, "ny", 1, "e"),
)


def seeded(tmp_path: Path, **kwargs: Any) -> tuple[Table, Model, str]:
    table = make_table(tmp_path, **kwargs)
    model = Model(
        event_time=(kwargs.get("options") or {}).get("hoodie.datasource.write.payload.class") == DEFAULT_PAYLOAD
    )
    first = table.upsert(batch(*SEED))
    model.upsert(*SEED)
    return table, model, first.instant_time


# -- table creation -----------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["keyword", "option", "short option"])
def test_create_merge_on_read_table_records_hudi_properties(tmp_path: Path, how: str) -> None:
    if how == "keyword":
        table = Table.create(str(tmp_path / "t"), record_key="id", table_type="MERGE_ON_READ")
    else:
        value = "MERGE_ON_READ" if how == "option" else "mor"
        table = Table.create(
            str(tmp_path / "t"), record_key="id", options={"hoodie.datasource.write.table.type": value}
        )
    text = (Path(table.path) / ".hoodie" / "hoodie.properties").read_text()
    props = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert props["hoodie.table.type"] == "MERGE_ON_READ"
    assert props["hoodie.table.version"] == "6"
    assert props["hoodie.compaction.payload.class"] == "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
    assert props["hoodie.compaction.record.merger.strategy"] == "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
    assert "hoodie.table.log.file.format" not in props  # Hudi does not record it (format doc 1.2)
    assert TableConfig.from_text(text).table_type is TableType.MERGE_ON_READ
    assert Table.open(table.path).config.table_type is TableType.MERGE_ON_READ


def test_keyword_table_type_wins_over_the_option(tmp_path: Path) -> None:
    table = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        table_type="COPY_ON_WRITE",
        options={"hoodie.datasource.write.table.type": "MERGE_ON_READ"},
    )
    assert table.config.table_type is TableType.COPY_ON_WRITE


# -- the timeline -------------------------------------------------------------------------------
def test_every_write_is_a_deltacommit_and_replaces_stay_replacecommits(tmp_path: Path) -> None:
    table, _, first = seeded(tmp_path)
    results = {
        "upsert": table.upsert(batch((1, "sf", 2, "a2"))),
        "insert": table.insert(batch((6, "la", 2, "f"))),
        "bulk_insert": table.bulk_insert(batch((7, "la", 2, "g"))),
        "delete": table.delete(keys=[2]),
    }
    for op, result in [("first upsert", None), *results.items()]:
        t = first if result is None else result.instant_time
        assert timeline_names(table, t) == [
            f"{t}.deltacommit",
            f"{t}.deltacommit.inflight",
            f"{t}.deltacommit.requested",
        ], op
        assert (Path(table.path) / ".hoodie" / f"{t}.deltacommit.requested").read_bytes() == b""
    replaces = [
        table.insert_overwrite(batch((8, "la", 3, "h"))),
        table.insert_overwrite_table(batch((9, "sf", 3, "i"), (10, "ny", 3, "j"))),
        table.delete_partition(["ny"]),
    ]
    for result in replaces:
        t = result.instant_time
        assert timeline_names(table, t) == [
            f"{t}.replacecommit",
            f"{t}.replacecommit.inflight",
            f"{t}.replacecommit.requested",
        ]
    actions = [i.action for i in Timeline.load(table.storage).completed()]
    assert actions == [Action.DELTA_COMMIT] * 5 + [Action.REPLACE_COMMIT] * 3
    assert snapshot(table) == [(9, "sf", 3, "i")]
    assert commit_json(table, replaces[1].instant_time, "replacecommit")["operationType"] == "INSERT_OVERWRITE_TABLE"


# -- routing ------------------------------------------------------------------------------------
def test_upsert_appends_updates_to_the_log_and_inserts_new_base_files(tmp_path: Path) -> None:
    table, model, first = seeded(tmp_path)
    bases_before = base_files(table)
    sf = next(s for s in table.file_slices() if s.partition_path == "sf")
    result = table.upsert(batch((1, "sf", 2, "a2"), (3, "sf", 2, "c2"), (6, "sf", 2, "f"), (7, "la", 2, "g")))
    model.upsert((1, "sf", 2, "a2"), (3, "sf", 2, "c2"), (6, "sf", 2, "f"), (7, "la", 2, "g"))
    t = result.instant_time

    assert (result.num_updates, result.num_inserts, result.num_deletes) == (2, 2, 0)
    # The stored base files are untouched; the two updates are one log file of the sf slice.
    assert set(bases_before) <= set(base_files(table))
    [log] = log_files(table)
    parsed = parse_log_file_name(Path(log).name)
    assert parsed is not None
    assert (parsed.file_id, parsed.base_instant_time, parsed.version) == (sf.file_id, first, 1)
    assert parsed.write_token.count("-") == 2
    assert Path(log).parent.name == "sf"
    # The inserts are new file groups with base files of this instant (no small files here).
    new_bases = sorted(set(base_files(table)) - set(bases_before))
    assert len(new_bases) == 2
    assert all(parse_base_file_name(Path(p).name).instant_time == t for p in new_bases)  # type: ignore[union-attr]
    assert sorted(result.files_written) == sorted([log, *new_bases])

    assert snapshot(table) == model.snapshot()
    # Read-optimized: base files only, so the stored versions of the updated records.
    assert snapshot(table, read_optimized=True) == sorted([*SEED, (6, "sf", 2, "f"), (7, "la", 2, "g")])
    assert snapshot(table, as_of=first) == sorted(SEED)


def test_log_versions_grow_one_per_write(tmp_path: Path) -> None:
    table, model, first = seeded(tmp_path)
    instants = [first]
    states = {first: model.snapshot()}
    for round_ in range(2, 7):
        rows = [(1, "sf", round_, f"a{round_}"), (2 + round_ % 2, "sf", round_, f"x{round_}")]
        instants.append(table.upsert(batch(*rows)).instant_time)
        model.upsert(*rows)
        states[instants[-1]] = model.snapshot()
    versions = sorted(parse_log_file_name(Path(p).name).version for p in log_files(table))  # type: ignore[union-attr]
    assert versions == [1, 2, 3, 4, 5]
    assert {parse_log_file_name(Path(p).name).base_instant_time for p in log_files(table)} == {first}  # type: ignore[union-attr]
    for instant, rows in states.items():
        assert snapshot(table, as_of=instant) == rows, instant
    assert snapshot(table) == model.snapshot()
    # Each log file holds the blocks of the instant that wrote it, and only those.
    for rel in log_files(table):
        parsed = parse_log_file_name(Path(rel).name)
        assert parsed is not None
        [block] = blocks_of(table, rel)
        assert block.instant_time == instants[parsed.version]


def test_log_data_block_carries_the_meta_columns_and_schema(tmp_path: Path) -> None:
    table, _, _ = seeded(tmp_path)
    sf = next(s for s in table.file_slices() if s.partition_path == "sf")
    t = table.upsert(batch((1, "sf", 2, "a2"), (2, "sf", 2, "b2"))).instant_time
    [log] = log_files(table)
    [block] = blocks_of(table, log)
    assert isinstance(block, AvroDataBlock)  # Hudi's default data block format
    assert block.instant_time == t
    schema = table.schema()
    assert schema is not None
    assert json.loads(block.schema_json) == json.loads(avro_schema_json(schema, table.name, with_meta=True))
    rows = sorted(block.records.to_pylist(), key=lambda r: r["id"])
    assert [r["_hoodie_commit_time"] for r in rows] == [t, t]
    assert all(r["_hoodie_commit_seqno"].startswith(f"{t}_") for r in rows)
    assert len({r["_hoodie_commit_seqno"] for r in rows}) == 2
    assert [r["_hoodie_record_key"] for r in rows] == ["1", "2"]
    assert [r["_hoodie_partition_path"] for r in rows] == ["sf", "sf"]
    assert [r["_hoodie_file_name"] for r in rows] == [sf.file_id, sf.file_id]  # Hudi logs: the file id
    assert [(r["id"], r["city"], r["ts"], r["v"]) for r in rows] == [(1, "sf", 2, "a2"), (2, "sf", 2, "b2")]
    assert block.records.column_names == with_meta(schema).names


def test_parquet_data_blocks(tmp_path: Path) -> None:
    table, model, _ = seeded(tmp_path, options={"hoodie.logfile.data.block.format": "parquet"})
    table.upsert(batch((2, "sf", 2, "b2"), (4, "ny", 2, "d2")))
    model.upsert((2, "sf", 2, "b2"), (4, "ny", 2, "d2"))
    logs = log_files(table)
    assert len(logs) == 2
    for rel in logs:
        [block] = blocks_of(table, rel)
        assert isinstance(block, ParquetDataBlock)
        assert block.records.num_rows == 1
    assert snapshot(table) == model.snapshot()


def test_deletes_by_keys_and_by_rows_are_delete_blocks(tmp_path: Path) -> None:
    table, model, _ = seeded(tmp_path)
    by_keys = table.delete(keys=[2])
    model.delete(("sf", 2))
    by_rows = table.delete(batch((4, "ny", 9, "ignored"), (99, "ny", 9, "not stored")))
    model.delete(("ny", 4))
    assert (by_keys.num_deletes, by_rows.num_deletes) == (1, 1)
    assert base_files(table) and len(log_files(table)) == 2
    for result, key, partition in [(by_keys, "2", "sf"), (by_rows, "4", "ny")]:
        [path] = result.files_written
        [block] = blocks_of(table, path)
        assert isinstance(block, DeleteBlock)
        assert block.instant_time == result.instant_time
        assert block.records.column("record_key").to_pylist() == [key]
        assert block.records.column("partition_path").to_pylist() == [partition]
        # The delete operation deletes whatever the stored ordering value: no ordering value.
        assert block.records.column("ordering_value").to_pylist() == [None]
        [stat] = stats_of(table, result.instant_time)
        assert (stat["numDeletes"], stat["numWrites"], stat["numUpdateWrites"]) == (1, 0, 0)
    assert snapshot(table) == model.snapshot()


@pytest.mark.parametrize("payload", ["overwrite-with-latest", "default"])
def test_is_deleted_rows_become_ordered_deletes(tmp_path: Path, payload: str) -> None:
    options = {"hoodie.datasource.write.payload.class": DEFAULT_PAYLOAD} if payload == "default" else {}
    table, model, _ = seeded(tmp_path, options=options)
    table.upsert(batch((1, "sf", 5, "a5")))
    model.upsert((1, "sf", 5, "a5"))
    rows = [(1, "sf", 3, "late delete"), (2, "sf", 3, "delete"), (3, "sf", 3, "c3")]
    result = table.upsert(batch(*rows, deleted=[True, True, False]))
    model.upsert(*rows, deleted=[True, True, False])
    [log] = [p for p in result.files_written if parse_log_file_name(Path(p).name)]
    data, deletes = blocks_of(table, log)
    assert isinstance(data, AvroDataBlock) and isinstance(deletes, DeleteBlock)
    assert data.records.column("id").to_pylist() == [3]
    assert sorted(deletes.records.column("record_key").to_pylist()) == ["1", "2"]
    # The ordering values of the flagged rows travel with the deletes.
    assert deletes.records.column("ordering_value").to_pylist() == [3, 3]
    # With event-time ordering the stored id 1 (ts 5) is newer than its delete (ts 3) and stays.
    assert snapshot(table) == model.snapshot()
    assert ((1, "sf", 5, "a5") in snapshot(table)) == (payload == "default")


def test_small_files_without_logs_take_inserts_and_slices_with_logs_never_do(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city", ordering_field="ts", table_type=MOR)
    model = Model()
    first = table.upsert(batch((1, "sf", 1, "a"), (2, "sf", 1, "b")))
    model.upsert((1, "sf", 1, "a"), (2, "sf", 1, "b"))
    [group] = {s.file_id for s in table.file_slices()}
    # An insert into the partition fills the small file: its base file is rewritten with the
    # insert and the update of the same group (Hudi's small-file handling of delta commits).
    second = table.upsert(batch((1, "sf", 2, "a2"), (3, "sf", 2, "c")))
    model.upsert((1, "sf", 2, "a2"), (3, "sf", 2, "c"))
    assert log_files(table) == []
    [s] = table.file_slices()
    assert (s.file_id, s.base_instant_time) == (group, second.instant_time)
    [stat] = stats_of(table, second.instant_time)
    assert (stat["numUpdateWrites"], stat["numInserts"], stat["prevCommit"]) == (1, 1, first.instant_time)
    assert "logFiles" not in stat
    # An update without inserts in the partition goes to the log ...
    table.upsert(batch((2, "sf", 3, "b3")))
    model.upsert((2, "sf", 3, "b3"))
    assert len(log_files(table)) == 1
    # ... and from then on the slice is not a small file: inserts start a new file group.
    fourth = table.upsert(batch((4, "sf", 4, "d")))
    model.upsert((4, "sf", 4, "d"))
    assert len({s.file_id for s in table.file_slices()}) == 2
    [new_stat] = stats_of(table, fourth.instant_time)
    assert new_stat["prevCommit"] == "null" and new_stat["fileId"] != group
    assert snapshot(table) == model.snapshot()


def test_bucket_index_appends_everything_of_an_existing_bucket(tmp_path: Path) -> None:
    options = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 2}
    table, model, first = seeded(tmp_path, options=options)
    groups = {(s.partition_path, s.file_id) for s in table.file_slices()}
    assert all(f[:8].isdigit() for _, f in groups)
    rows = [(1, "sf", 2, "a2"), (20, "sf", 2, "new in sf"), (21, "ny", 2, "new in ny"), (30, "la", 2, "new partition")]
    result = table.upsert(batch(*rows))
    model.upsert(*rows)
    written = {p: parse_log_file_name(Path(p).name) for p in result.files_written}
    # Existing buckets: logs only (the inserts too); the new partition: a base file.
    assert {Path(p).parent.name for p, log in written.items() if log is not None} <= {"sf", "ny"}
    assert [Path(p).parent.name for p, log in written.items() if log is None] == ["la"]
    assert set(base_files(table)) - {p for p, log in written.items() if log is None} == {
        p for p in base_files(table) if first in p
    }
    appended = [s for s in stats_of(table, result.instant_time) if "logFiles" in s]
    assert sum(s["numUpdateWrites"] for s in appended) == 3  # counted as Hudi counts located records
    assert snapshot(table) == model.snapshot()
    deleted = table.delete(keys=[20, 5])
    model.delete(("sf", 20), ("ny", 5))
    assert all(parse_log_file_name(Path(p).name) for p in deleted.files_written)
    assert snapshot(table) == model.snapshot()


@pytest.mark.parametrize("index", ["BLOOM", "SIMPLE"])
def test_insert_and_bulk_insert_write_base_files(tmp_path: Path, index: str) -> None:
    table, model, _ = seeded(tmp_path, options={"hoodie.index.type": index})
    table.upsert(batch((1, "sf", 2, "a2")))  # a log on the sf group
    model.upsert((1, "sf", 2, "a2"))
    logs = log_files(table)
    for op, rows in [("insert", [(6, "sf", 3, "f"), (7, "la", 3, "g")]), ("bulk_insert", [(8, "sf", 3, "h")])]:
        result = getattr(table, op)(batch(*rows))
        model.upsert(*rows)
        assert all(parse_base_file_name(Path(p).name) for p in result.files_written), op
        assert result.num_inserts == len(rows)
    assert log_files(table) == logs
    assert snapshot(table) == model.snapshot()
    # An upsert finds the inserted keys through the index, and appends their updates.
    result = table.upsert(batch((6, "sf", 4, "f4"), (8, "sf", 4, "h4")))
    model.upsert((6, "sf", 4, "f4"), (8, "sf", 4, "h4"))
    assert (result.num_updates, result.num_inserts) == (2, 0)
    assert all(parse_log_file_name(Path(p).name) for p in result.files_written)
    assert snapshot(table) == model.snapshot()


def test_replace_operations_hide_file_groups_with_logs(tmp_path: Path) -> None:
    table, model, _ = seeded(tmp_path)
    table.upsert(batch((1, "sf", 2, "a2"), (4, "ny", 2, "d2")))
    model.upsert((1, "sf", 2, "a2"), (4, "ny", 2, "d2"))
    before = snapshot(table)
    overwrite = table.insert_overwrite(batch((10, "sf", 3, "k")))
    meta = commit_json(table, overwrite.instant_time, "replacecommit")
    assert meta["operationType"] == "INSERT_OVERWRITE" and list(meta["partitionToReplaceFileIds"]) == ["sf"]
    assert snapshot(table) == sorted([(10, "sf", 3, "k")] + [r for r in before if r[1] == "ny"])
    assert snapshot(table, as_of=overwrite.instant_time) == snapshot(table)
    # The replaced groups and their logs stay on storage (for time travel) until cleaned.
    assert len(log_files(table)) == 2
    table.insert_overwrite_table(batch((11, "ny", 4, "l")))
    assert snapshot(table) == [(11, "ny", 4, "l")]
    table.upsert(batch((11, "ny", 5, "l5")))
    assert snapshot(table) == [(11, "ny", 5, "l5")]
    table.delete_partition(["ny"])
    assert snapshot(table) == []
    assert snapshot(table, as_of=overwrite.instant_time) == sorted(
        [(10, "sf", 3, "k")] + [r for r in before if r[1] == "ny"]
    )


def test_non_partitioned_table(tmp_path: Path) -> None:
    table = Table.create(
        str(tmp_path / "np"), record_key="id", ordering_field="ts", table_type=MOR, options=NO_SMALL_FILES
    )
    table.upsert(batch((1, "sf", 1, "a"), (2, "ny", 1, "b")))
    result = table.upsert(batch((2, "ny", 2, "b2"), (3, "la", 2, "c")))
    [log] = log_files(table)
    assert "/" not in log and log in result.files_written
    [stat] = [s for s in stats_of(table, result.instant_time) if "logFiles" in s]
    assert stat["partitionPath"] == "" and stat["path"] == log
    assert snapshot(table) == [(1, "sf", 1, "a"), (2, "ny", 2, "b2"), (3, "la", 2, "c")]


# -- log file rollover and write stats ---------------------------------------------------------
def test_write_stats_of_a_log_append(tmp_path: Path) -> None:
    table, _, first = seeded(tmp_path)
    sf = next(s for s in table.file_slices() if s.partition_path == "sf")
    assert sf.base_file is not None
    r1 = table.upsert(batch((1, "sf", 2, "a2"), (2, "sf", 2, "b2")))
    r2 = table.upsert(batch((3, "sf", 3, "c3"), (1, "sf", 3, "gone"), deleted=[False, True]))
    [s1] = stats_of(table, r1.instant_time)
    [s2] = stats_of(table, r2.instant_time)
    log1, log2 = (Path(s["path"]).name for s in (s1, s2))
    for stat, log, version in [(s1, log1, 1), (s2, log2, 2)]:
        size = (Path(table.path) / stat["path"]).stat().st_size
        assert stat["fileId"] == sf.file_id
        assert stat["partitionPath"] == "sf"
        assert stat["path"] == f"sf/{log}"
        assert stat["prevCommit"] == first
        assert stat["baseFile"] == sf.base_file.name
        assert (stat["logVersion"], stat["logOffset"]) == (version, 0)
        assert stat["fileSizeInBytes"] == stat["totalWriteBytes"] == size
        assert stat["recordsStats"] == {"val": None}
        assert stat["numInserts"] == 0
        assert stat["runtimeStats"]["totalCreateTime"] == 0
    assert s1["logFiles"] == [log1]
    assert s2["logFiles"] == [log2]  # only the files written now (Hudi 0.x also lists the slice's others)
    assert (s1["numWrites"], s1["numUpdateWrites"], s1["numDeletes"]) == (2, 2, 0)
    assert (s2["numWrites"], s2["numUpdateWrites"], s2["numDeletes"]) == (1, 1, 1)
    # The key order of Hudi's HoodieDeltaWriteStat: the common fields, then the delta ones.
    assert list(s2)[-5:] == ["logVersion", "logOffset", "baseFile", "logFiles", "recordsStats"]
    assert list(s2)[:3] == ["fileId", "path", "cdcStats"]
    # A new file group of a delta commit has a plain write stat.
    r3 = table.upsert(batch((9, "la", 4, "i"), deleted=[False]))
    [s3] = stats_of(table, r3.instant_time)
    assert "logFiles" not in s3 and s3["prevCommit"] == "null"
    assert commit_json(table, r1.instant_time)["operationType"] == "UPSERT"
    assert "schema" in commit_json(table, r1.instant_time)["extraMetadata"]


def test_log_file_rollover_past_max_size(tmp_path: Path) -> None:
    table, model, first = seeded(tmp_path, options={"hoodie.logfile.max.size": 1})
    rows = [(1, "sf", 2, "a2"), (2, "sf", 2, "gone")]
    result = table.upsert(batch(*rows, deleted=[False, True]))
    model.upsert(*rows, deleted=[False, True])
    # Every block passes 1 byte: the data block and the delete block are one file each.
    logs = log_files(table)
    assert len(logs) == 2
    assert sorted(result.files_written) == logs
    names = {parse_log_file_name(Path(p).name).version: p for p in logs}  # type: ignore[union-attr]
    assert isinstance(blocks_of(table, names[1])[0], AvroDataBlock)
    assert isinstance(blocks_of(table, names[2])[0], DeleteBlock)
    [stat] = stats_of(table, result.instant_time)
    assert stat["path"] == names[2] and stat["logVersion"] == 2
    assert stat["logFiles"] == [Path(names[1]).name, Path(names[2]).name]
    assert stat["totalWriteBytes"] == sum((Path(table.path) / p).stat().st_size for p in logs)
    assert (stat["numWrites"], stat["numDeletes"]) == (1, 1)
    table.upsert(batch((3, "sf", 3, "c3"), deleted=[False]))
    model.upsert((3, "sf", 3, "c3"))
    assert len(log_files(table)) == 3
    assert snapshot(table) == model.snapshot()
    assert snapshot(table, as_of=result.instant_time) != snapshot(table, as_of=first)


# -- markers, failed attempts, rollback ---------------------------------------------------------
def _log_of(storage: Storage, instant: str, partition: str, file_id: str, base: str, token: str, version: int) -> str:
    """A log file of one data block written by `instant` (as a task would), behind its APPEND marker."""
    schema = pa.schema([("id", pa.int64())])
    records = pa.table(
        {
            "_hoodie_commit_time": [instant],
            "_hoodie_commit_seqno": [f"{instant}_0_0"],
            "_hoodie_record_key": ["1"],
            "_hoodie_partition_path": [partition],
            "_hoodie_file_name": [file_id],
            "id": pa.array([1], pa.int64()),
        }
    )
    block = data_block(records, instant, avro_schema_json(schema, "t", with_meta=True))
    writer = LogFileWriter(storage, partition, file_id, base, token, latest_version=version - 1)
    [written] = writer.append([block])
    return written.log_file.path


def test_reconcile_markers_deletes_the_log_file_of_a_failed_attempt(tmp_path: Path) -> None:
    storage = Storage.for_uri(str(tmp_path / "t"))
    instant, base = "20260101000000001", "20250101000000000"
    failed = _log_of(storage, instant, "p", "fg-0", base, "3-1-0", 1)
    committed = _log_of(storage, instant, "p", "fg-0", base, "3-1-1", 2)
    for path in (failed, committed):
        create_marker(storage, instant, "p", Path(path).name, "APPEND")
    # A marker that names another instant's file (its version was taken): never deleted.
    foreign = _log_of(storage, "20251231000000000", "p", "fg-0", base, "0-0-0", 3)
    create_marker(storage, instant, "p", Path(foreign).name, "APPEND")
    # A marker whose file was never created (the task died in between): nothing to delete.
    create_marker(storage, instant, "p", ".fg-0_20250101000000000.log.9_3-1-2", "APPEND")
    assert {m.io_type for m in list_markers(storage, instant)} == {"APPEND"}

    orphans = reconcile_markers(storage, instant, [committed])
    assert orphans == [failed]
    assert not storage.exists(failed)
    assert storage.exists(committed) and storage.exists(foreign)


def test_a_failed_attempts_log_file_is_not_read_as_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task that wrote its log file and then failed, retried under a new attempt (as Spark does)."""
    table, model, _ = seeded(tmp_path)
    real = local_plane_mod.write_file_group

    def first_attempt_fails(ctx: Any, task: Any) -> Any:
        real(ctx, task)  # the log file is written ...
        return real(ctx, replace(task, attempt=task.attempt + 1))  # ... then the task is retried

    monkeypatch.setattr(local_plane_mod, "write_file_group", first_attempt_fails)
    result = table.upsert(batch((1, "sf", 2, "a2")))
    model.upsert((1, "sf", 2, "a2"))
    monkeypatch.undo()
    [log] = log_files(table)
    assert result.files_written == (log,)
    assert parse_log_file_name(Path(log).name).write_token.endswith("-1")  # type: ignore[union-attr]
    assert snapshot(table) == model.snapshot()
    assert not (Path(table.path) / ".hoodie" / ".temp" / result.instant_time).exists()


class InjectedFailure(RuntimeError):
    pass


def test_failed_deltacommit_is_rolled_back_from_its_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, model, first = seeded(tmp_path, options={"hoodie.upsert.shuffle.parallelism": 1})
    table.upsert(batch((2, "sf", 2, "b2")))
    model.upsert((2, "sf", 2, "b2"))
    before_files = set(data_files(table))
    before_rows = snapshot(table)
    real = local_plane_mod.write_file_group
    calls: list[str] = []
    lock = threading.Lock()

    def fail_second(ctx: Any, task: Any) -> Any:
        with lock:
            calls.append(ctx.instant_time)
            n = len(calls)
        if n == 3:
            raise InjectedFailure("third file group failed")
        return real(ctx, task)

    monkeypatch.setattr(local_plane_mod, "write_file_group", fail_second)
    with pytest.raises(InjectedFailure):
        table.upsert(batch((1, "sf", 3, "a3"), (4, "ny", 3, "d3"), (9, "la", 3, "new")))
    monkeypatch.undo()
    failed = calls[0]

    assert set(data_files(table)) == before_files, "the failed write left files behind"
    assert timeline_names(table, failed) == []
    assert snapshot(table) == before_rows
    [rollback] = [i for i in Timeline.load(table.storage).completed() if i.action is Action.ROLLBACK]
    hoodie = Path(table.path) / ".hoodie"
    [plan] = avro_records((hoodie / f"{rollback.time}.rollback.requested").read_bytes())
    [meta] = avro_records((hoodie / f"{rollback.time}.rollback").read_bytes())
    assert plan["instantToRollback"] == {"commitTime": failed, "action": "deltacommit"}
    assert meta["commitsRollback"] == [failed]
    assert meta["instantsRollback"] == [{"commitTime": failed, "action": "deltacommit"}]
    log_requests = [r for r in plan["RollbackRequests"] if r["fileId"]]
    assert log_requests, plan
    for request in log_requests:
        assert request["latestBaseInstant"] == first
        assert all(parse_log_file_name(Path(f).name) for f in request["filesToBeDeleted"])
        assert request["logBlocksToBeDeleted"] == {}
    deleted_logs = {f for r in log_requests for f in r["filesToBeDeleted"]}
    failed_logs = {
        f: size
        for pm in meta["partitionMetadata"].values()
        for f, size in (pm["logFilesFromFailedCommit"] or {}).items()
    }
    assert set(failed_logs) == deleted_logs
    assert all(size > 0 for size in failed_logs.values())
    success = {f for pm in meta["partitionMetadata"].values() for f in pm["successDeleteFiles"]}
    assert deleted_logs <= success and meta["totalFilesDeleted"] == len(success)

    table.upsert(batch((1, "sf", 4, "a4")))
    model.upsert((1, "sf", 4, "a4"))
    assert snapshot(table) == model.snapshot()


def test_concurrent_appends_to_one_file_group_conflict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two writers append to the same file group; the one that completes second fails, rolled back."""
    table, model, _ = seeded(tmp_path)
    other = Table.open(table.path, options=NO_SMALL_FILES)
    real = client_mod.reconcile_markers
    done: list[str] = []

    def other_writer_completes_first(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append("started")
            other.upsert(batch((2, "sf", 5, "b-other")))
        return real(*args, **kwargs)

    monkeypatch.setattr(client_mod, "reconcile_markers", other_writer_completes_first)
    with pytest.raises(ConcurrentWriteError):
        table.upsert(batch((1, "sf", 5, "a-mine")))
    monkeypatch.undo()
    model.upsert((2, "sf", 5, "b-other"))
    assert snapshot(table) == model.snapshot()
    assert len(log_files(table)) == 1  # the loser's log file was rolled back


def test_failed_deltacommit_without_markers_is_rolled_back_by_its_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Markers lost (e.g. `.temp` wiped): the rollback finds the failed log files by their blocks."""
    table, model, _ = seeded(tmp_path)
    other_instant_log = table.upsert(batch((2, "sf", 2, "b2"))).files_written[0]
    model.upsert((2, "sf", 2, "b2"))

    def die_before_completing(*args: Any, **kwargs: Any) -> Any:
        raise InjectedFailure("process died")

    monkeypatch.setattr(client_mod, "complete", die_before_completing)
    monkeypatch.setattr(client_mod.WriteClient, "_rollback_own", lambda self, instant: None)  # as if killed
    with pytest.raises(InjectedFailure):
        table.upsert(batch((1, "sf", 3, "a3"), (4, "ny", 3, "d3")))
    monkeypatch.undo()
    [failed] = Timeline.load(table.storage).pending()
    assert failed.action is Action.DELTA_COMMIT
    failed_logs = set(log_files(table)) - {other_instant_log}
    assert len(failed_logs) == 2
    for marker_file in (Path(table.path) / ".hoodie" / ".temp" / failed.time).rglob("*"):
        if marker_file.is_file():
            marker_file.unlink()

    Table.open(table.path, options=NO_SMALL_FILES).upsert(batch((5, "ny", 4, "e4")))
    model.upsert((5, "ny", 4, "e4"))
    assert set(log_files(table)) & failed_logs == set()
    assert other_instant_log in log_files(table)
    assert snapshot(table) == model.snapshot()


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", MOR])
def test_bucket_index_insert_overwrite_starts_new_bucket_file_groups(tmp_path: Path, table_type: str) -> None:
    options = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 2}
    table = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
        options=options,
    )
    table.upsert(batch((1, "sf", 1, "a"), (2, "sf", 1, "b"), (3, "sf", 1, "c"), (4, "sf", 1, "d")))
    old_groups = {s.file_id for s in table.file_slices()}
    table.insert_overwrite(batch((1, "sf", 2, "x"), (5, "sf", 2, "y"), (6, "sf", 2, "z")))
    assert snapshot(table) == [(1, "sf", 2, "x"), (5, "sf", 2, "y"), (6, "sf", 2, "z")]
    groups = {s.file_id for s in table.file_slices()}
    assert groups.isdisjoint(old_groups) and all(f[:8].isdigit() for f in groups)
    # Later writes find the overwritten keys in their (new) buckets.
    table.upsert(batch((5, "sf", 3, "y3"), (7, "sf", 3, "w")))
    assert snapshot(table) == [(1, "sf", 2, "x"), (5, "sf", 3, "y3"), (6, "sf", 2, "z"), (7, "sf", 3, "w")]
    live = [s.file_id for s in table.file_slices()]
    assert len({f[:8] for f in live}) == len(live) <= 2, "one file group per bucket"
