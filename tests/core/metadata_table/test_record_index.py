"""The metadata table's `record_index` partition and `hoodie.index.type=RECORD_INDEX` (issue 17).

Randomised against a model: every upsert's tagging (updates vs inserts) is the model's, the record
index places every live key in its partition and no deleted key, hudi-rs (which lists through the
metadata table and ignores `record_index`) and lakeward read the model's rows, and `files` matches a
storage listing — on copy-on-write and merge-on-read, with keys that live only in log files
(BUCKET-index inserts into existing buckets, before the index is built), deletes, re-inserts,
compaction and clustering.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.engine.spark import SparkEngine
from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.file_group.reader import MergeSettings
from lakeward.core.metadata_table import writer
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.metadata_table.compaction import mdt_timeline, pending_metadata_compactions
from lakeward.core.metadata_table.files_partition import encode_record
from lakeward.core.metadata_table.record_index import (
    RecordIndex,
    RecordIndexChange,
    decode_location,
    encode_location,
    file_group_indexes,
    record_index_change,
)
from lakeward.core.timeline import Action, CommitMetadata
from lakeward.core.timeline.transitions import read_instant
from tests.interop.compare import both_readers
from tests.support import crash
from tests.support.keyed_rows import (
    Model,
    bucket_table_with_log_keys,
    check_rows,
    part_of,
    random_upsert,
    upsert_txns_update_and_insert,
)
from tests.support.keyed_rows import batch as _batch


def _check(path: str, model: Model, gone: set[str]) -> None:
    check_rows(path, model)
    table = Table.open(path)
    assert compare_files_partition(table.storage).ok
    keys = sorted(model) + sorted(gone)
    partitions, file_ids = RecordIndex(table.storage).locate(pa.array(keys, pa.string()))
    assert partitions.to_pylist() == [model[k][0] for k in sorted(model)] + [None] * len(gone)
    live = {(s.partition_path, s.file_id) for s in table.file_slices()}
    assert all((p, f) in live for p, f in zip(partitions.to_pylist()[: len(model)], file_ids.to_pylist(), strict=False))


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_record_index_tagging_matches_the_model(tmp_path: Path, table_type: str, version: int):
    rng = random.Random(17 if table_type == "COPY_ON_WRITE" else 18)
    path = str(tmp_path / "t")
    model = bucket_table_with_log_keys(path, table_type, version, inserted=40, appended=20)
    table = Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"})
    table.initialize_metadata_table()  # with the record index, built from the latest slices
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "files,record_index"
    gone: set[str] = set()
    _check(path, model, gone)
    next_key = 60
    for step in range(8):
        fresh = [f"k{next_key + i}" for i in range(4)]
        next_key += 4
        batch, updates, reinserts = random_upsert(rng, model, gone, fresh, updates=6, ts=step + 2)
        result = table.upsert(_batch(batch))
        assert (result.num_updates, result.num_inserts) == (len(updates), len(reinserts) + len(fresh)), step
        model |= batch
        gone -= set(reinserts)
        deleted = {k: model.pop(k) for k in rng.sample(sorted(model), 3)}
        assert table.delete(_batch(deleted)).num_deletes == 3
        gone |= set(deleted)
        if step == 3 and table_type == "MERGE_ON_READ":
            instant = table.schedule_compaction(force=True)
            assert instant is not None
            table.run_compaction(instant)
        if step == 5:
            instant = table.schedule_clustering()
            if instant is not None:
                table.run_clustering(instant)
        _check(path, model, gone)


def _timeline_files(path: str) -> list[str]:
    """The instant files of the table's and its metadata table's timelines."""
    return sorted(
        str(p.relative_to(path))
        for p in Path(path).rglob("*")
        if p.is_file() and p.parent.name == "timeline" and "history" not in p.parts
    )


def test_record_index_refuses_a_key_moving_partition(tmp_path: Path):
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    table.insert(_batch({"k1": ("p1", 1, 1)}))
    table.initialize_metadata_table()
    table = Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"})
    table.upsert(_batch({"k2": ("p2", 1, 2)}))
    with pytest.raises(ConfigError, match="global index"):
        table.upsert(_batch({"k1": ("p2", 2, 1)}))
    before = sorted(p for p in Path(path).rglob("*") if ".hoodie" not in p.parts)
    timeline_before = _timeline_files(path)
    # A partition without file groups yet: the key was written a second time there (no lookup ran)
    with pytest.raises(ConfigError, match="global index"):
        table.upsert(_batch({"k1": ("p9", 2, 1)}))
    # a delete naming a partition the key is not in: said so, not as a write moving the key
    with pytest.raises(ConfigError, match="delete of record key 'k1' names partition 'p9'.*delete\\(keys="):
        table.delete(_batch({"k1": ("p9", 2, 1)}))
    assert sorted(p for p in Path(path).rglob("*") if ".hoodie" not in p.parts) == before, "data files changed"
    # refused before any file was written: the timelines are as they were (no rollback instants)
    assert _timeline_files(path) == timeline_before
    assert sorted(Table.open(path).read(columns=["id", "part"]).to_pylist(), key=str) == [
        {"id": "k1", "part": "p1"},
        {"id": "k2", "part": "p2"},
    ]


def test_disabling_the_record_index_drops_it(tmp_path: Path):
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    table.insert(_batch({"k1": ("p1", 1, 1)}))
    Table.open(path, options={"hoodie.metadata.record.index.enable": "true"}).initialize_metadata_table()
    assert (Path(path) / ".hoodie" / "metadata" / "record_index").is_dir()
    Table.open(path, options={"hoodie.metadata.record.index.enable": "false"}).upsert(_batch({"k2": ("p1", 1, 2)}))
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "files"
    assert not (Path(path) / ".hoodie" / "metadata" / "record_index").exists()


def test_record_values_and_hashing_are_hudis():
    """Format doc 7.7: the fixture's file id halves, and `TXN-008` -> group 1, `TXN-001` -> 8 of 10."""
    file_id = "c3b646cc-8602-47c5-b010-3fe002241298-0"
    value = encode_location("p1", file_id, 1772922357587)
    info = {
        "partitionName": "p1",
        "fileIdHighBits": -4344206946316695611,
        "fileIdLowBits": -5760033692065721704,
        "fileIndex": 0,
        "fileId": "",
        "instantTime": 1772922357587,
        "fileIdEncoding": 0,
    }
    assert value == encode_record({"key": "", "type": 5, "recordIndexMetadata": info})
    assert decode_location(value) == ("p1", file_id)
    raw = encode_record({"key": "x", "type": 5, "recordIndexMetadata": {"fileId": "f_1", "fileIdEncoding": 1}})
    assert decode_location(raw) == ("", "f_1")
    assert file_group_indexes(pa.array(["TXN-008", "TXN-001", "é"]), 10).tolist() == [1, 8, 233 % 10]


def _check_locations(path: str) -> None:
    rows = _fixture_keys(path)
    keys = sorted({r["_hoodie_record_key"] for r in rows})
    partitions, file_ids = RecordIndex(Table.open(path).storage).locate(pa.array(keys, pa.string()))
    where = {r["_hoodie_record_key"]: (r["_hoodie_partition_path"], r["_hoodie_file_name"].split("_")[0]) for r in rows}
    assert list(zip(partitions.to_pylist(), file_ids.to_pylist(), strict=True)) == [where[k] for k in keys]


def _fixture_keys(path: str) -> list[dict[str, Any]]:
    return (
        Table.open(path)
        .read()
        .select(["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"])
        .to_pylist()
    )


@pytest.mark.parametrize(
    ("kind", "name"), [("cow", "v9_txns_nonpart_meta"), ("mor/avro", "v9_nonpartitioned_rollback")]
)
def test_record_index_of_a_hudi_fixture_matches_its_data(fixture_table: Any, kind: str, name: str):
    _check_locations(fixture_table(kind, name))


def test_lakeward_keeps_a_hudi_fixtures_record_index(fixture_table: Any):
    """Upserts (RECORD_INDEX tagging) and a delete on Hudi's table keep its record_index (other
    index partitions dropped), and the index still matches the data; hudi-rs agrees."""
    path = fixture_table("cow", "v9_txns_nonpart_meta")
    options = {
        "hoodie.metadata.index.column.stats.enable": "false",
        "hoodie.metadata.index.secondary.enable": "false",
        "hoodie.index.type": "RECORD_INDEX",
    }
    table = Table.open(path, options=options)
    data, new = upsert_txns_update_and_insert(table)
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "files,record_index"
    _check_locations(path)
    table.delete(pa.Table.from_pylist([new], schema=data.schema))
    _check_locations(path)
    mine, theirs = both_readers(path)
    assert mine == theirs
    assert compare_files_partition(table.storage).ok


def _indexed_table(path: str, rows: int) -> tuple[Table, Model]:
    """A v9 copy-on-write table of `rows` keys with its metadata table and record index, opened
    with RECORD_INDEX tagging, and its model."""
    # the first data is written before the metadata table exists: both partitions are bootstrapped from it
    off = {"hoodie.metadata.enable": "false"}
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9, options=off)
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(rows)}
    table.insert(_batch(model))
    table = Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"})
    table.initialize_metadata_table()
    return table, model


@pytest.mark.parametrize("handle", ["new", "same"])
def test_restore_drops_the_record_index_and_the_next_writer_rebuilds_it(tmp_path: Path, handle: str):
    """The next writer rebuilds the index, also the handle that restored (it kept the properties it read
    before the restore, which still listed the index: it never rebuilt it)."""
    path = str(tmp_path / "t")
    table, model = _indexed_table(path, 6)
    saved = table.upsert(_batch({"k1": ("p1", 2, 10)})).instant_time
    model["k1"] = ("p1", 2, 10)
    table.savepoint(saved)
    table.upsert(_batch({"k7": (part_of("k7"), 3, 7)}))  # a key the restore takes away
    table.restore(saved)
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "files"
    if handle == "new":
        table = Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"})
    result = table.upsert(_batch({"k7": (part_of("k7"), 4, 7), "k2": (part_of("k2"), 4, 2)}))
    assert (result.num_updates, result.num_inserts) == (1, 1)
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert "record_index" in props["hoodie.table.metadata.partitions"]
    model |= {"k7": (part_of("k7"), 4, 7), "k2": (part_of("k2"), 4, 2)}
    _check(path, model, set())


def test_insert_overwrite_and_delete_partition_remove_their_keys(tmp_path: Path):
    path = str(tmp_path / "t")
    table, model = _indexed_table(path, 9)
    overwrite = {"k30": ("p0", 2, 30)}  # p0 held k0, k3, k6
    table.insert_overwrite(_batch(overwrite))
    gone = {k for k, r in model.items() if r[0] == "p0"}
    model = {k: r for k, r in model.items() if r[0] != "p0"} | overwrite
    _check(path, model, gone)
    table.delete_partition(["p1"])
    gone |= {k for k, r in model.items() if r[0] == "p1"}
    model = {k: r for k, r in model.items() if r[0] != "p1"}
    _check(path, model, gone)
    result = table.upsert(_batch({"k1": ("p1", 3, 1), "k2": ("p2", 3, 2)}))  # k1 was in the dropped partition
    assert (result.num_updates, result.num_inserts) == (1, 1)


@pytest.mark.spark
def test_spark_engine_writes_keep_the_record_index(spark: Any, tmp_path: Path):
    """Spark-engine writes keep the record index (tagging through it: tests/core/spark/test_spark_record_index.py)."""
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ", table_version=9
    )
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(6)}
    table.insert(_batch(model))
    Table.open(path, options={"hoodie.metadata.record.index.enable": "true"}).initialize_metadata_table()
    table = Table.open(path, engine=SparkEngine(spark), options={"hoodie.index.type": "RECORD_INDEX"})
    updates = {"k0": ("p0", 2, 100), "k10": (part_of("k10"), 2, 10)}
    table.upsert(spark.createDataFrame(_batch(updates).to_pandas()))
    model |= updates
    deleted = {"k2": model.pop("k2")}
    table.delete(spark.createDataFrame(_batch(deleted).to_pandas()))
    _check(path, model, {"k2"})


def _record_index_bases(path: str) -> dict[str, list[str]]:
    """Base HFile names per record-index file group, oldest (instant time) first."""
    names = sorted(
        (p.name for p in (Path(path) / ".hoodie" / "metadata" / "record_index").glob("*.hfile")),
        key=lambda name: name.rsplit("_", 1)[1],
    )
    out: dict[str, list[str]] = {}
    for name in names:
        out.setdefault(name.split("_")[0], []).append(name)
    return out


def test_the_record_index_stays_exact_through_metadata_table_compactions(tmp_path: Path):
    """The metadata table compacts `files` and `record_index` in one instant: each record-index file
    group gets a base HFile named with the compaction's instant time, holding the live keys (deletes
    applied), tagging stays exact, and the metadata clean later removes the old record-index slices."""
    path = str(tmp_path / "t")
    table, model = _indexed_table(path, 12)
    options = {
        "hoodie.index.type": "RECORD_INDEX",
        "hoodie.metadata.compact.max.delta.commits": 3,
        "hoodie.metadata.cleaner.commits.retained": 2,
    }
    table = Table.open(path, options=options)
    initial = {f: sorted(n) for f, n in _record_index_bases(path).items()}
    gone: set[str] = set()
    for step in range(10):
        batch = {f"k{i}": (part_of(f"k{i}"), step + 2, step) for i in range(step, 16 + step, 3)}
        result = table.upsert(_batch(batch))
        updates = sum(k in model for k in batch)
        assert (result.num_updates, result.num_inserts) == (updates, len(batch) - updates), step
        model |= batch
        gone -= set(batch)
        deleted = {k: model.pop(k) for k in sorted(model)[step % 3 :: 7][:2]}
        assert table.delete(_batch(deleted)).num_deletes == len(deleted)
        gone |= set(deleted)
        _check(path, model, gone)
    mdt = mdt_timeline(table.storage)
    compactions = mdt.completed(Action.COMMIT)
    assert compactions, "the metadata table was compacted"
    # every record-index file group with changes since its base got a base of the latest compaction
    bases = _record_index_bases(path)
    compacted = {f for f, names in bases.items() if names[-1].endswith(f"_{compactions[-1].time}.hfile")}
    assert compacted, bases
    stats = CommitMetadata.from_bytes(read_instant(metadata_storage(table.storage), compactions[-1]))
    assert set(stats.partitionToWriteStats) == {"files", "record_index"}
    assert {s.fileId for s in stats.partitionToWriteStats["record_index"]} == compacted
    # the metadata clean removed the old record-index slices: the initial base files are gone
    assert mdt.completed(Action.CLEAN)
    remaining = {n for names in bases.values() for n in names}
    assert not remaining & {n for names in initial.values() for n in names}, remaining
    assert all(len(names) <= 2 for names in bases.values()), bases


@pytest.mark.slow
def test_killed_after_the_record_index_base_is_written_is_repaired_by_the_next_writer(tmp_path: Path):
    """SIGKILL once the metadata compaction wrote its base files (`record_index` ones included), before
    its commit: readers ignore them, and the next writer finishes the compaction from its plan."""
    path = str(tmp_path / "t")
    table, model = _indexed_table(path, 12)
    # the crash writer runs with the default threshold (10): the 10th metadata delta commit is its write's
    table = Table.open(
        path, options={"hoodie.index.type": "RECORD_INDEX", "hoodie.metadata.compact.max.delta.commits": 1000}
    )
    for step in range(6):
        batch = {f"k{i}": (part_of(f"k{i}"), step + 2, step) for i in range(step, 14 + step, 4)}
        table.upsert(_batch(batch))
        model |= batch
    gone = {"k1"}
    table.delete(_batch({"k1": model.pop("k1")}))
    assert len(mdt_timeline(table.storage).completed(Action.DELTA_COMMIT)) == 9
    crash_rows = {f"k{i}": (part_of(f"k{i}"), 20, i) for i in range(0, 24, 2)}
    batch_file = tmp_path / "crash.parquet"
    pq.write_table(_batch(crash_rows), batch_file)
    crash.run_and_kill("crash_writer.py", path, "mdt_compaction_base_written", str(batch_file))
    model |= crash_rows  # the write itself completed before its metadata services
    storage = Table.open(path).storage
    [pending] = pending_metadata_compactions(storage)
    written = _record_index_bases(path)
    assert any(names[-1].endswith(f"_{pending}.hfile") for names in written.values()), written
    _check(path, model, gone)  # readers ignore the unfinished compaction's base files

    table = Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"})
    repair = {"k1": (part_of("k1"), 30, 1), "k99": (part_of("k99"), 30, 99), "k3": (part_of("k3"), 30, 3)}
    result = table.upsert(_batch(repair))
    assert (result.num_updates, result.num_inserts) == (1, 2)
    model |= repair
    _check(path, model, set())
    mdt = mdt_timeline(storage)
    assert not pending_metadata_compactions(storage) and [i.time for i in mdt.completed(Action.COMMIT)] == [pending]


def test_lakeward_compacts_a_hudi_fixtures_record_index(fixture_table: Any):
    """On Hudi's table (whose record index Hudi compacted), lakeward's metadata compaction folds the
    record-index slices Hudi and lakeward wrote; lookups and tagging stay exact after it."""
    path = fixture_table("cow", "v9_txns_nonpart_meta")
    options = {
        "hoodie.metadata.index.column.stats.enable": "false",
        "hoodie.metadata.index.secondary.enable": "false",
        "hoodie.index.type": "RECORD_INDEX",
        "hoodie.metadata.compact.max.delta.commits": 3,
    }
    table = Table.open(path, options=options)
    hudi_compactions = mdt_timeline(table.storage).completed(Action.COMMIT)
    data = table.read()
    data = data.drop_columns([c for c in data.column_names if c.startswith("_hoodie")])
    rows = data.to_pylist()
    for n in range(3):
        changed = dict(rows[n], amount=rows[n]["amount"] + 1, txn_ts=rows[n]["txn_ts"] + 1000)
        new = dict(rows[n], txn_id=f"TXN-9{n:02d}", txn_ts=rows[n]["txn_ts"] + 1000)
        result = table.upsert(pa.Table.from_pylist([changed, new], schema=data.schema))
        assert (result.num_updates, result.num_inserts) == (1, 1), n
    table.delete(pa.Table.from_pylist([dict(rows[0], txn_id="TXN-900")], schema=data.schema))
    compactions = mdt_timeline(table.storage).completed(Action.COMMIT)
    assert len(compactions) > len(hudi_compactions)
    bases = _record_index_bases(path)
    assert any(names[-1].endswith(f"_{compactions[-1].time}.hfile") for names in bases.values()), bases
    _check_locations(path)
    partitions, _ = RecordIndex(table.storage).locate(pa.array(["TXN-900", "TXN-901"], pa.string()))
    assert partitions.to_pylist()[0] is None and partitions.to_pylist()[1] is not None
    again = [
        dict(rows[0], txn_id="TXN-900", txn_ts=rows[0]["txn_ts"] + 2000),
        dict(rows[1], txn_ts=rows[1]["txn_ts"] + 2000),
    ]
    result = table.upsert(pa.Table.from_pylist(again, schema=data.schema))
    assert (result.num_updates, result.num_inserts) == (1, 1)
    _check_locations(path)
    mine, theirs = both_readers(path)
    assert mine == theirs
    assert compare_files_partition(table.storage).ok


@pytest.mark.parametrize(
    ("table_type", "index"),
    [("COPY_ON_WRITE", "RECORD_INDEX"), ("MERGE_ON_READ", "RECORD_INDEX"), ("MERGE_ON_READ", "BLOOM")],
)
def test_an_exactly_tagged_write_derives_the_rewrite_derived_change(
    tmp_path: Path, table_type: str, index: str, monkeypatch: pytest.MonkeyPatch
):
    """An upsert (updates, inserts into small files and new partitions) and a delete tagged exactly
    (the record index; BLOOM on merge-on-read, its candidates confirmed) give the record index the
    change the write knows from its tagging, equal to the change derived by re-reading the file
    groups it rewrote."""
    seen: list[tuple[RecordIndexChange | None, RecordIndexChange]] = []
    real = writer.write_files_delta_commit

    def spy(storage: Any, timezone: str, instant_time: str, change: Any) -> Any:
        if change.commit is not None:
            tagged = change.record_index() if change.record_index is not None else None
            seen.append((tagged, record_index_change(storage, instant_time, change.commit)))
        return real(storage, timezone, instant_time, change)

    monkeypatch.setattr(writer, "write_files_delta_commit", spy)
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=9
    )
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(30)}
    table.insert(_batch(model))
    Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"}).initialize_metadata_table()
    table = Table.open(path, options={"hoodie.index.type": index})
    seen.clear()
    for step in range(3):
        batch = {k: (model[k][0], step + 2, step) for k in sorted(model)[step : step + 8]}  # updates
        batch |= {f"k{100 + 10 * step + i}": (part_of(f"k{100 + 10 * step + i}"), step + 2, i) for i in range(5)}
        batch[f"n{step}"] = ("p9", step + 2, 0)  # a new partition
        table.upsert(_batch(batch))
        model |= batch
        deleted = {k: model.pop(k) for k in sorted(model)[-3:]}
        table.delete(_batch(deleted))
    assert len(seen) == 6
    for tagged, derived in seen:
        assert tagged is not None  # the write's own change, not a re-read
        assert tagged.upserts == derived.upserts and tagged.deletes == derived.deletes
    assert sum(len(t.upserts) for t, _ in seen) == 18 and sum(len(t.deletes) for t, _ in seen) == 9


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_record_index_type_without_its_partition_tags_by_the_stored_keys(tmp_path: Path, table_type: str):
    """`hoodie.index.type=RECORD_INDEX` on a table whose metadata table keeps no `record_index` (here:
    disabled) must not take every key for new: updates stay updates (no duplicate rows)."""
    path = str(tmp_path / "t")
    options = {
        "hoodie.index.type": "RECORD_INDEX",
        "hoodie.metadata.enable": "false",
        "hoodie.parquet.small.file.limit": "0",  # inserts go to new file groups: duplicates would show
    }
    Table.create(path, record_key="id", ordering_field="ts", table_type=table_type, options=options)
    first = pa.table({"id": ["a", "b", "c"], "ts": [1, 1, 1], "v": [1, 2, 3]})
    Table.open(path, options=options).upsert(first)
    result = Table.open(path, options=options).upsert(
        pa.table({"id": ["a", "b", "d"], "ts": [2, 2, 2], "v": [4, 5, 6]})
    )
    rows = Table.open(path).read().sort_by("id")
    assert rows.column("id").to_pylist() == ["a", "b", "c", "d"]
    assert rows.column("v").to_pylist() == [4, 5, 3, 6]
    assert (result.num_updates, result.num_inserts) == (2, 1)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_record_index_batch_with_one_new_key_in_two_partitions_keeps_one(tmp_path: Path, table_type: str):
    """The record index is global: a batch naming a new key in two partitions is de-duplicated by
    key alone (Hudi's rule for global indexes), the latest ordering value winning; it wrote both."""
    from tests.support.keyed_rows import SCHEMA

    path = str(tmp_path / "t")
    options = {"hoodie.index.type": "RECORD_INDEX"}
    Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=9
    )
    table = Table.open(path, options=options)
    table.upsert(_batch({"k1": ("p1", 1, 1)}))
    rows = [
        {"id": "k2", "part": "p1", "ts": 5, "val": 1},
        {"id": "k2", "part": "p2", "ts": 7, "val": 2},
        {"id": "k3", "part": "p2", "ts": 9, "val": 3},
        {"id": "k3", "part": "p1", "ts": 8, "val": 4},
    ]
    result = table.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
    assert (result.num_inserts, result.num_updates) == (2, 0)
    model = {"k1": ("p1", 1, 1), "k2": ("p2", 7, 2), "k3": ("p2", 9, 3)}
    _check(path, model, set())


def test_a_bloom_upsert_re_adds_a_key_the_record_index_dropped(tmp_path: Path):
    """A table keeping `record_index`, written by writers of both index types (merge-on-read): a key
    deleted under RECORD_INDEX and upserted again under BLOOM goes to the group whose log deleted it,
    and must be in the record index again, or the next RECORD_INDEX delete finds nothing to delete."""
    path = str(tmp_path / "t")
    Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ", table_version=9
    )
    by_index = {"hoodie.index.type": "RECORD_INDEX", "hoodie.metadata.record.index.enable": "true"}
    bloom = {"hoodie.index.type": "BLOOM", "hoodie.metadata.record.index.enable": "true"}
    Table.open(path, options=by_index).upsert(_batch({"k1": ("p1", 1, 1), "k2": ("p1", 1, 2)}))
    assert Table.open(path, options=by_index).delete(_batch({"k1": ("p1", 2, 0)})).num_deletes == 1
    result = Table.open(path, options=bloom).upsert(_batch({"k1": ("p1", 3, 3)}))
    assert (result.num_inserts, result.num_updates) == (0, 1)  # into the group that holds it deleted
    _check(path, {"k1": ("p1", 3, 3), "k2": ("p1", 1, 2)}, set())
    assert Table.open(path, options=by_index).delete(_batch({"k1": ("p1", 4, 0)})).num_deletes == 1
    _check(path, {"k2": ("p1", 1, 2)}, {"k1"})


def test_building_the_record_index_over_a_key_in_two_partitions_is_refused(tmp_path: Path):
    """A table written under a per-partition index can hold a key in two partitions: the global record
    index has one location per key, so its build is refused naming the key (it kept one silently, and
    RECORD_INDEX writes then missed the other row), and the table is left as it was."""
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    Table.open(path).upsert(_batch({"k1": ("p1", 1, 1), "k2": ("p1", 1, 2)}))
    Table.open(path).upsert(_batch({"k1": ("p2", 2, 3)}))  # BLOOM looks within p2 only: a second k1
    before = sorted(str(p) for p in Path(path).rglob("*"))
    with pytest.raises(ConfigError, match=r"cannot build the record index.*'k1' in file group .* of partition 'p1'"):
        Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"}).upsert(_batch({"k3": ("p1", 3, 4)}))
    assert sorted(str(p) for p in Path(path).rglob("*")) == before
    assert sorted(r["id"] for r in Table.open(path).read(columns=["id"]).to_pylist()) == ["k1", "k1", "k2"]


@pytest.mark.parametrize(("table_type", "version"), [("MERGE_ON_READ", 6), ("MERGE_ON_READ", 8), ("COPY_ON_WRITE", 8)])
def test_a_record_index_writer_after_a_restore_with_a_plan_pending_tags_as_bloom_until_it_can_build(
    tmp_path: Path, table_type: str, version: int
):
    """A restore drops `record_index`; a compaction or clustering plan older than the savepoint stays
    pending, and the partition cannot be built while it is. Writes and services of a RECORD_INDEX writer
    go on meanwhile, tagged as BLOOM tags them (as on a table without the partition); the first write
    with nothing pending builds it again."""
    path = str(tmp_path / "t")
    options = {"hoodie.index.type": "RECORD_INDEX"}

    def rows(val: int, ids: tuple[str, ...]) -> pa.Table:
        n = len(ids)
        return pa.table({"id": list(ids), "part": ["p0"] * n, "val": [val] * n, "ts": [val] * n})

    table = Table.create(
        path,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        table_version=version,
        options=options,
    )
    table.upsert(rows(1, ("a", "b")))
    table.bulk_insert(rows(1, ("c", "d")))
    table.upsert(rows(2, ("a", "b")))
    plan = table.schedule_compaction(force=True) if table_type == "MERGE_ON_READ" else table.schedule_clustering()
    assert plan is not None
    saved = table.insert(rows(3, ("e",))).instant_time
    table.savepoint(saved)
    table.insert(rows(4, ("f",)))
    Table.open(path).restore(saved)
    table = Table.open(path, options=options)
    if table_type == "MERGE_ON_READ":
        table.upsert(rows(5, ("a", "e")))  # updates of stored keys while the plan is pending: BLOOM finds them
        table.run_compaction(plan)
    else:  # updates of file groups under a pending clustering are refused: the service runs first
        table.run_clustering(plan)
        table.upsert(rows(5, ("a", "e")))
    expected = {"a": 5, "b": 2, "c": 1, "d": 1, "e": 5}
    data = Table.open(path).read(columns=["id", "val"])
    assert dict(zip(data.column("id").to_pylist(), data.column("val").to_pylist(), strict=True)) == expected
    Table.open(path, options=options).upsert(rows(6, ("b",)))  # nothing pending: builds the record index
    props = parse_properties((tmp_path / "t" / ".hoodie" / "hoodie.properties").read_text())
    assert "record_index" in props["hoodie.table.metadata.partitions"]
    data = Table.open(path).read(columns=["id", "val"])
    assert dict(zip(data.column("id").to_pylist(), data.column("val").to_pylist(), strict=True)) == expected | {"b": 6}
    assert compare_files_partition(Table.open(path).storage).ok


@pytest.mark.parametrize(
    ("version", "table_type", "meta_fields"),
    [
        (6, "MERGE_ON_READ", "true"),
        (9, "MERGE_ON_READ", "true"),
        (9, "COPY_ON_WRITE", "true"),
        (9, "MERGE_ON_READ", "false"),
    ],
)
def test_a_late_flagged_delete_that_loses_on_ordering_keeps_its_key_in_the_record_index(
    tmp_path: Path, version: int, table_type: str, meta_fields: str
):
    """A `_hoodie_is_deleted` row whose ordering value is below the stored one's: under event-time
    ordering (versions 8+) it deletes nothing, but on merge-on-read the record index dropped the key,
    so a later delete() found nothing and a later upsert inserted the key a second time. Also in a
    table without meta fields (virtual keys)."""
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        record_key="id",
        ordering_field="ts",
        table_type=table_type,
        table_version=version,
        options={
            "hoodie.index.type": "RECORD_INDEX",
            "hoodie.metadata.record.index.enable": "true",
            "hoodie.populate.meta.fields": meta_fields,
        },
    )

    def rows(ids: list[str], vals: list[int], ts: list[int], deleted: list[bool]) -> pa.Table:
        return pa.table({"id": ids, "v": vals, "ts": ts, "_hoodie_is_deleted": deleted})

    def read() -> list[tuple[str, int]]:
        mine, theirs = both_readers(path)
        assert [(r["id"], r["v"]) for r in mine] == [(r["id"], r["v"]) for r in theirs]
        return sorted((r["id"], r["v"]) for r in mine)

    table.upsert(rows(["k1", "k2"], [1, 1], [5, 5], [False, False]))
    table.upsert(rows(["k1"], [2], [2], [True]))  # a late delete event
    event_time = MergeSettings.from_config(table.config).event_time_ordering
    assert event_time == (version >= 8)
    assert read() == ([("k1", 1), ("k2", 1)] if event_time else [("k2", 1)])
    located = RecordIndex(table.storage).locate(pa.array(["k1"], pa.string()))[1].to_pylist()
    assert (located != [None]) == event_time

    result = table.upsert(rows(["k1"], [3], [9], [False]))
    assert (result.num_updates, result.num_inserts) == ((1, 0) if event_time else (0, 1))
    assert read() == [("k1", 3), ("k2", 1)]
    assert table.delete(keys=["k1"]).num_deletes == 1
    assert read() == [("k2", 1)]
    assert compare_files_partition(table.storage).ok


def test_a_record_index_built_over_a_late_flagged_delete_holds_its_key(tmp_path: Path):
    """The index build took a key whose last log event is a delete for deleted, ordering values aside:
    a late `_hoodie_is_deleted` row that lost left the key out of the index built afterwards."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", table_version=9)
    table.upsert(pa.table({"id": ["k1", "k2"], "v": [1, 1], "ts": [5, 5], "_hoodie_is_deleted": [False, False]}))
    table.upsert(pa.table({"id": ["k1"], "v": [2], "ts": [2], "_hoodie_is_deleted": [True]}))  # loses
    indexed = Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"})
    indexed.initialize_metadata_table()
    assert RecordIndex(indexed.storage).locate(pa.array(["k1", "k2"], pa.string()))[1].null_count == 0
    result = indexed.upsert(pa.table({"id": ["k1"], "v": [3], "ts": [9], "_hoodie_is_deleted": [False]}))
    assert (result.num_updates, result.num_inserts) == (1, 0)
    mine, theirs = both_readers(path)
    expected = [("k1", 3), ("k2", 1)]
    assert sorted((r["id"], r["v"]) for r in mine) == sorted((r["id"], r["v"]) for r in theirs) == expected


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_keys_of_replaced_file_groups_leave_the_record_index(tmp_path: Path, table_type: str):
    """delete_partition and insert_overwrite replace whole file groups: their keys leave the index. On
    merge-on-read under event-time ordering (versions 8+) the check for deletes that lost on ordering
    value looked them up in the replaced slices, found them there, and kept them: the next upsert of such
    a key was refused ('not a live file group') until the index was rebuilt."""
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        table_version=9,
        options={"hoodie.index.type": "RECORD_INDEX", "hoodie.metadata.record.index.enable": "true"},
    )

    def rows(ids: list[str], parts: list[str], ts: int) -> pa.Table:
        return pa.table({"id": ids, "part": parts, "ts": [ts] * len(ids)})

    table.upsert(rows(["a", "b", "c"], ["x", "y", "x"], 1))
    table.delete_partition(["x"])  # a, c gone
    table.insert_overwrite(rows(["f"], ["y"], 2))  # b gone
    located = RecordIndex(table.storage).locate(pa.array(["a", "b", "c", "f"], pa.string()))[1].to_pylist()
    assert [f is not None for f in located] == [False, False, False, True]
    result = table.upsert(rows(["a", "b", "c"], ["x", "y", "z"], 3))
    assert (result.num_updates, result.num_inserts) == (0, 3)
    mine, theirs = both_readers(path)
    expected = [("a", 3), ("b", 3), ("c", 3), ("f", 2)]
    assert sorted((r["id"], r["ts"]) for r in mine) == sorted((r["id"], r["ts"]) for r in theirs) == expected
    assert compare_files_partition(table.storage).ok


def test_a_winning_flagged_delete_applied_by_a_base_rewrite_leaves_the_record_index(tmp_path: Path):
    """On merge-on-read, an upsert that also inserts into a log-free (small) file group rewrites its base
    file, applying a `_hoodie_is_deleted` row there. The check for deletes that lost on ordering value
    weighed the delete against the group's old slice, found the key live, and kept it in the index."""
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        table_version=9,
        options={"hoodie.index.type": "RECORD_INDEX", "hoodie.metadata.record.index.enable": "true"},
    )

    def rows(ids: list[str], ts: int, deleted: list[bool] | None = None) -> pa.Table:
        return pa.table({"id": ids, "ts": [ts] * len(ids), "_hoodie_is_deleted": deleted or [False] * len(ids)})

    table.upsert(rows(["a", "b", "c"], 10))
    table.upsert(rows(["b", "n"], 30, [True, False]))  # b's delete wins; n lands in the same small group
    assert RecordIndex(table.storage).locate(pa.array(["b"], pa.string()))[1].to_pylist() == [None]
    assert table.upsert(rows(["b"], 40)).num_inserts == 1
    mine, theirs = both_readers(path)
    expected = [("a", 10), ("b", 40), ("c", 10), ("n", 30)]
    assert sorted((r["id"], r["ts"]) for r in mine) == sorted((r["id"], r["ts"]) for r in theirs) == expected


@pytest.mark.parametrize(("version", "table_type"), [(6, "COPY_ON_WRITE"), (9, "COPY_ON_WRITE"), (9, "MERGE_ON_READ")])
def test_the_record_index_of_a_table_without_meta_fields_holds_its_live_keys(
    tmp_path: Path, version: int, table_type: str
):
    """Without meta fields (`hoodie.populate.meta.fields=false`) the stored `_hoodie_record_key` is null:
    the record index took its keys from it, so keys written by insert, bulk_insert or a writer of another
    index type were missing (a Hudi writer tagging by the index would insert them a second time), a key
    deleted by a copy-on-write rewrite stayed, and an index built over the table was empty."""
    path = str(tmp_path / "t")
    options = {"hoodie.populate.meta.fields": "false", "hoodie.metadata.record.index.enable": "true"}
    options |= {"hoodie.parquet.small.file.limit": "0", "hoodie.clustering.plan.strategy.sort.columns": "ts"}
    table = Table.create(
        path, record_key="id", ordering_field="ts", table_type=table_type, table_version=version, options=options
    )

    def indexed(keys: list[str]) -> list[str]:
        located = RecordIndex(table.storage).locate(pa.array(keys, pa.string()))[1].to_pylist()
        return [k for k, f in zip(keys, located, strict=True) if f is not None]

    table.upsert(_flagged(["a", "b"], 1))
    table.insert(_flagged(["c"], 1))
    table.bulk_insert(_flagged(["d"], 1))
    table.upsert(_flagged(["e"], 1))
    table.upsert(_flagged(["a"], 2, deleted=True))
    everything = ["a", "b", "c", "d", "e"]
    assert sorted(table.read(columns=["id"]).column("id").to_pylist()) == ["b", "c", "d", "e"]
    assert indexed(everything) == ["b", "c", "d", "e"]
    clustering = table.schedule_clustering()
    assert clustering is not None
    table.run_clustering(clustering)
    assert indexed(everything) == ["b", "c", "d", "e"]
    if table_type == "COPY_ON_WRITE":  # every key where its row is
        want = {}
        for file_slice in table.file_slices():
            assert file_slice.base_file is not None
            stored = pq.read_table(Path(path) / file_slice.base_file.path, columns=["id"]).column("id")
            want |= dict.fromkeys(stored.to_pylist(), file_slice.file_id)
        got = RecordIndex(table.storage).locate(pa.array(sorted(want), pa.string()))[1].to_pylist()
        assert dict(zip(sorted(want), got, strict=True)) == want


def test_a_record_index_built_over_a_table_without_meta_fields_holds_its_keys(tmp_path: Path):
    """The build read each slice's keys from the null `_hoodie_record_key` column: an empty index."""
    path = str(tmp_path / "t")
    virtual = {"hoodie.populate.meta.fields": "false"}
    table = Table.create(path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", options=virtual)
    table.upsert(pa.table({"id": ["a", "b"], "ts": [1, 1]}))
    table.upsert(pa.table({"id": ["c"], "ts": [1]}))
    indexed = Table.open(path, options={**virtual, "hoodie.metadata.record.index.enable": "true"})
    indexed.initialize_metadata_table()
    located = RecordIndex(indexed.storage).locate(pa.array(["a", "b", "c"], pa.string()))[1]
    assert located.null_count == 0


@pytest.mark.parametrize("how", ["flagged", "delete"])
def test_a_key_deleted_and_written_again_in_a_table_without_meta_fields_is_indexed_again(tmp_path: Path, how: str):
    """Merge-on-read without meta fields tags by the stored key fields (SIMPLE), even with RECORD_INDEX:
    a key held only deleted in a group's logs was taken for an update there, so writing it again left it
    out of the record index (a later writer tagging through the index would insert it a second time)."""
    path = str(tmp_path / "t")
    options = {"hoodie.populate.meta.fields": "false", "hoodie.index.type": "RECORD_INDEX"}
    table = Table.create(
        path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", table_version=9, options=options
    )

    table.upsert(_flagged(["a", "b"], 1))
    if how == "flagged":
        table.upsert(_flagged(["a"], 2, deleted=True))
    else:
        table.delete(keys=["a"])
    assert RecordIndex(table.storage).locate(pa.array(["a"], pa.string()))[1].to_pylist() == [None]
    result = table.upsert(_flagged(["a"], 3))  # into the group holding it deleted (SIMPLE tags it there)
    assert result.num_updates + result.num_inserts == 1
    assert RecordIndex(table.storage).locate(pa.array(["a", "b"], pa.string()))[1].null_count == 0
    mine, theirs = both_readers(path)
    assert (
        sorted((r["id"], r["ts"]) for r in mine) == sorted((r["id"], r["ts"]) for r in theirs) == [("a", 3), ("b", 1)]
    )


def _flagged(ids: list[str], ts: int, deleted: bool = False) -> pa.Table:
    """Rows of `ids` at ordering value `ts`, flagged `_hoodie_is_deleted` = `deleted`."""
    return pa.table({"id": ids, "ts": [ts] * len(ids), "_hoodie_is_deleted": [deleted] * len(ids)})


@pytest.mark.parametrize("version", [6, 9])
def test_change_tracking_leaves_the_record_index_as_it_was(tmp_path: Path, version: int):
    """Change tracking writes `.cdc` files only: its commit moves no key. Its write stats name no
    data file; the record index read one anyway (the table's folder) and every run failed, left
    its plan inflight for good and held archival back."""
    options = {"hoodie.table.cdc.enabled": "true", "hoodie.index.type": "RECORD_INDEX"}
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ",
        table_version=version, options=options,
    )  # fmt: skip
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(40)}
    table.upsert(_batch(model))
    model |= {f"k{i}": (part_of(f"k{i}"), 2, 100 + i) for i in range(0, 40, 3)}
    table.upsert(_batch({k: model[k] for k in list(model)[::3]}))
    begin = table.timeline().completed_writes()[0].ordering_time
    inferred = table.read_changes(begin, images="struct")
    plan = table.schedule_change_tracking()
    assert plan is not None
    result = table.run_change_tracking(plan)
    assert result.files_written
    assert not Table.open(path).timeline().pending()
    assert Table.open(path).read_changes(begin, images="struct").equals(inferred)
    _check(path, model, {"absent"})
