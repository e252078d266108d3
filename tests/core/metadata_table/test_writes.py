"""Writes keep the metadata table's `files` partition (v8/v9), as Hudi 1.x writers do.

After every write: hudi-rs (which lists files through the metadata table on v8/v9) and lakeward
read the expected rows, the `files` partition matches a storage listing
(`compare_files_partition`), and the metadata table has a delta commit with the data instant's
time that completed before it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.engine.spark import SparkEngine
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group.metadata_listing import load_metadata_timeline, metadata_storage
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.timeline import Action
from tests.interop.compare import all_mismatches, both_readers, comparable_rows, fail_on, hudi_snapshot, hudi_table
from tests.support.fixture_tables import META_FIXTURES
from tests.support.metadata_tables import table_with_metadata

PARTS = ["p1", "p2", "p3"]
SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])
#: Every index partition lakeward cannot keep yet, disabled: the writer drops them (as Hudi would).
DROP_INDEXES = {
    "hoodie.metadata.index.column.stats.enable": "false",
    "hoodie.metadata.index.partition.stats.enable": "false",
    "hoodie.metadata.record.index.enable": "false",
    "hoodie.metadata.index.bloom.filter.enable": "false",
    "hoodie.metadata.index.secondary.enable": "false",
}


def _batch(rows: dict[str, tuple[str, int, int]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": k, "part": p, "ts": ts, "val": v} for k, (p, ts, v) in sorted(rows.items())], schema=SCHEMA
    )


def _data_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({k: v for k, v in r.items() if not k.startswith("_hoodie")} for r in rows), key=repr)


def check_metadata_table(path: str, instant_time: str, expected: list[dict[str, Any]]) -> None:
    """Both readers give `expected`, `files` matches storage, and the metadata table has `instant_time`
    as a delta commit that completed before the data instant (by completion time where the
    timeline records it: v8/v9)."""
    mine, theirs = both_readers(path)
    assert _data_rows(mine) == _data_rows(theirs) == sorted(expected, key=repr)
    table = Table.open(path)
    diff = compare_files_partition(table.storage)
    assert diff.ok, str(diff)
    mdt = load_metadata_timeline(metadata_storage(table.storage))
    [done] = [i for i in mdt.completed(Action.DELTA_COMMIT) if i.time == instant_time]
    [data] = [i for i in table.timeline().completed() if i.time == instant_time]
    if table.version.timeline_layout.completion_time_in_name:
        assert done.completion_time is not None and data.completion_time is not None
        assert done.completion_time < data.completion_time
    assert not mdt.pending()


def _model_rows(model: dict[str, tuple[str, int, int]]) -> list[dict[str, Any]]:
    return [{"id": k, "part": p, "ts": ts, "val": v} for k, (p, ts, v) in model.items()]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [6, 8, 9])
def test_every_write_operation_keeps_the_files_partition(tmp_path: Path, version: int, table_type: str):
    path = str(tmp_path / "t")
    model = {f"k{i:02d}": (PARTS[i % 3], 1, i) for i in range(9)}
    table_with_metadata(path, version, table_type, _batch(model))
    table = Table.open(path)

    def step(result: Any) -> None:
        check_metadata_table(path, result.instant_time, _model_rows(model))

    updates = {"k00": ("p1", 2, 100), "k04": ("p2", 2, 104), "k20": ("p4", 2, 20)}
    model |= updates
    step(table.upsert(_batch(updates)))
    model |= {"k30": ("p1", 3, 30)}
    step(table.insert(_batch({"k30": ("p1", 3, 30)})))
    model |= {"k31": ("p5", 3, 31)}
    step(table.bulk_insert(_batch({"k31": ("p5", 3, 31)})))
    deleted = {k: model.pop(k) for k in ("k01", "k05")}
    step(table.delete(_batch(deleted)))
    overwrite = {"k40": ("p3", 4, 40)}
    model = {k: r for k, r in model.items() if r[0] != "p3"} | overwrite
    step(table.insert_overwrite(_batch(overwrite)))
    model = {k: r for k, r in model.items() if r[0] != "p5"}
    step(table.delete_partition(["p5"]))
    fail_on(all_mismatches(path))


def fixture_rows(path: str) -> tuple[pa.Table, list[dict[str, Any]]]:
    """A fixture table's data columns as hudi-rs reads them, and its rows as `_data_rows` compares them."""
    start = pa.Table.from_batches(hudi_snapshot(hudi_table(path)))
    return start.drop_columns([c for c in start.column_names if c.startswith("_hoodie")]), _data_rows(
        comparable_rows(start)
    )


def _unique_rows(rows: list[dict[str, Any]], key_fields: list[str]) -> list[dict[str, Any]]:
    """Rows whose record key appears once (the fixtures hold duplicates made by plain INSERTs)."""
    keys = [tuple(r[f] for f in key_fields) for r in rows]
    return [r for r, k in zip(rows, keys, strict=True) if keys.count(k) == 1]


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_upsert_then_delete_on_a_hudi_meta_fixture(
    fixture_table: Callable[[str, str], str], caplog: pytest.LogCaptureFixture, kind: str, name: str
):
    path = fixture_table(kind, name)
    start = pa.Table.from_batches(hudi_snapshot(hudi_table(path)))
    data = start.drop_columns([c for c in start.column_names if c.startswith("_hoodie")])
    expected = _data_rows(comparable_rows(start))
    table = Table.open(path, options=DROP_INDEXES)
    key_fields = list(table.config.record_key_fields)
    unique = _unique_rows(data.to_pylist(), key_fields)

    # upsert: two existing rows change (later ordering value), one new row
    changed = [dict(r, amount=r["amount"] + 1, txn_ts=r["txn_ts"] + 1000) for r in unique[:2]]
    new = dict(unique[2], txn_id="TXN-900", txn_ts=unique[2]["txn_ts"] + 1000)
    batch = pa.Table.from_pylist([*changed, new], schema=data.schema)
    with caplog.at_level(logging.WARNING, logger="lakeward.core.metadata_table.gate"):
        result = table.upsert(batch)
    assert "dropped metadata-table partition column_stats" in caplog.text
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "files"
    assert sorted(p.name for p in (Path(path) / ".hoodie" / "metadata").iterdir() if not p.name.startswith(".")) == [
        "files"
    ]
    old = {tuple(r[f] for f in key_fields) for r in unique[:2]}
    expected = [r for r in expected if tuple(r[f] for f in key_fields) not in old]
    expected = _data_rows([*expected, *comparable_rows(batch)])
    check_metadata_table(path, result.instant_time, expected)

    # delete one row that was not touched
    gone = unique[3]
    result = table.delete(pa.Table.from_pylist([gone], schema=data.schema))
    expected = [r for r in expected if tuple(r[f] for f in key_fields) != tuple(gone[f] for f in key_fields)]
    check_metadata_table(path, result.instant_time, expected)


def test_index_partitions_not_disabled_refuse_and_change_nothing(fixture_table: Callable[[str, str], str]):
    path = fixture_table("cow", "v9_txns_nonpart_meta")
    before = sorted((p, p.stat().st_size) for p in Path(path).rglob("*") if p.is_file())
    # secondary indexes are dropped unless the writer asks to keep them (test_secondary_index_drop.py)
    table = Table.open(
        path,
        options={
            "hoodie.metadata.index.column.stats.enable": "false",
            "hoodie.metadata.index.secondary.enable": "true",
        },
    )
    rows = table.read().slice(0, 1)
    data = rows.drop_columns([c for c in rows.column_names if c.startswith("_hoodie")])
    with pytest.raises(
        MetadataTableError,
        match=r"partition\(s\) secondary_index_merchant_idx,secondary_index_txn_date_idx that.*Nothing was written",
    ):
        table.upsert(data)
    assert sorted((p, p.stat().st_size) for p in Path(path).rglob("*") if p.is_file()) == before


def test_the_comparison_reports_a_commit_missing_from_the_files_partition(tmp_path: Path):
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    table.insert(_batch({"k1": ("p1", 1, 1)}))
    table.initialize_metadata_table()
    result = Table.open(path).upsert(_batch({"k2": ("p2", 1, 2)}))
    assert compare_files_partition(table.storage).ok
    mdt = tmp_path / "t" / ".hoodie" / "metadata"
    for log_file in (mdt / "files").glob(f".files-0000-0_{result.instant_time}.log.*"):
        log_file.unlink()
    diff = compare_files_partition(table.storage)
    assert not diff.ok
    assert [p.split("/")[0] for p in diff.missing] == ["p2"] and diff.partitions_missing == ("p2",)


@pytest.mark.spark
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_spark_engine_writes_keep_the_files_partition(spark: Any, tmp_path: Path, table_type: str):
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=9
    )
    model = {f"k{i:02d}": (PARTS[i % 3], 1, i) for i in range(6)}
    table.insert(_batch(model))
    table.initialize_metadata_table()
    table = Table.open(path, engine=SparkEngine(spark))
    updates = {"k00": ("p1", 2, 100), "k10": ("p4", 2, 10)}
    model |= updates
    result = table.upsert(spark.createDataFrame(_batch(updates).to_pandas()))
    check_metadata_table(path, result.instant_time, _model_rows(model))
    deleted = {"k02": model.pop("k02")}
    result = table.delete(spark.createDataFrame(_batch(deleted).to_pandas()))
    check_metadata_table(path, result.instant_time, _model_rows(model))
