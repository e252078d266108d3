"""`spark.read.format("lakeward")` on a Hudi 1.1 table (version 9): snapshot, read-optimized,
time travel and incremental give the rows hudi-rs reads, through both the driver hook (the
Spark engine's reads) and the registered Python data source.

Incremental ranges on table versions 8+ are in completion time: `(t1, t2]` holds the writes
that *completed* in it, so with instant times as bounds a range returns the write requested
at its begin (it completed after it), not the one requested at its end. A reader filtering
by `_hoodie_commit_time` returns other rows, which these ranges catch.
"""

from __future__ import annotations

from typing import Any

import hudi
import pyarrow as pa
import pytest
from pyspark.sql.readwriter import DataFrameReader

import lakeward.spark
from lakeward import Table
from tests.interop.compare import (
    _diff,
    fail_on,
    hudi_incremental,
    hudi_snapshot,
    hudi_table,
    incremental_ranges,
    write_instants,
)

pytestmark = pytest.mark.spark

FORMAT = "lakeward"
QUERY = "hoodie.datasource.query.type"
BEGIN = "hoodie.datasource.read.begin.instanttime"
END = "hoodie.datasource.read.end.instanttime"


@pytest.fixture(scope="module")
def lakeward_spark(spark: Any) -> Any:
    lakeward.spark.register(spark)
    return spark


@pytest.fixture
def v9_mor(fixture_table) -> str:
    return fixture_table("mor/avro", "v9_txns_simple_meta")


def _both_paths(spark: Any, path: str, options: dict[str, str]) -> list[tuple[str, Any]]:
    """(label, Arrow rows) through the driver hook and through the registered Python data source."""
    hooked = spark.read.format(FORMAT).options(**options).load(path)
    python_source_load = DataFrameReader.load.__wrapped__  # type: ignore[attr-defined]
    registered = python_source_load(spark.read.format(FORMAT).options(**options), path)
    return [("driver hook", hooked.toArrow()), ("Python data source", registered.toArrow())]


def test_snapshot_read_optimized_and_time_travel(lakeward_spark, v9_mor):
    theirs = hudi_table(v9_mor)
    cases: list[tuple[str, dict[str, str], Any]] = [("snapshot", {}, hudi_snapshot(theirs))]
    read_optimized = hudi.HudiReadOptions().with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    cases.append(("read_optimized", {QUERY: "read_optimized"}, theirs.read(read_optimized)))
    for instant in write_instants(Table.open(v9_mor)):
        cases.append((f"as of {instant}", {"as.of.instant": instant}, hudi_snapshot(theirs, instant)))
    problems = []
    for label, options, want in cases:
        for how, got in _both_paths(lakeward_spark, v9_mor, options):
            problem = _diff(f"{label} ({how})", got, want)
            if problem:
                problems.append(problem)
    fail_on(problems)


def test_incremental_is_in_completion_time(lakeward_spark, v9_mor):
    theirs = hudi_table(v9_mor)
    instants = write_instants(Table.open(v9_mor))
    problems = []
    for begin, end in incremental_ranges(instants):
        options = {QUERY: "incremental", BEGIN: begin, **({END: end} if end else {})}
        want = hudi_incremental(theirs, begin, end)
        for how, got in _both_paths(lakeward_spark, v9_mor, options):
            problem = _diff(f"incremental ({begin}, {end}] ({how})", got, want)
            if problem:
                problems.append(problem)
    fail_on(problems)


def test_an_incremental_range_returns_the_write_that_completed_in_it(lakeward_spark, v9_mor):
    """(t1, t2] between two consecutive delta commits holds t1's rows (completed after t1), not t2's."""
    timeline = Table.open(v9_mor).timeline()
    writes = [i for i in timeline.completed_writes() if i.action.value == "deltacommit"]
    first, second = writes[0], writes[1]
    assert first.time < first.ordering_time <= second.time
    options = {QUERY: "incremental", BEGIN: first.time, END: second.time}
    for how, got in _both_paths(lakeward_spark, v9_mor, options):
        times = set(got.column("_hoodie_commit_time").to_pylist())
        assert times == {first.time}, how


def test_data_source_writes_to_a_version_9_table_as_table_does(lakeward_spark, tmp_path):
    """`df.write.format("lakeward")` writes through Table's write methods, so it takes a version-9 table as
    `Table.upsert` does (data writes: yes; table services: refused), and hudi-rs reads the result."""
    path = str(tmp_path / "v9")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    table.upsert(pa.table({"id": [1, 2, 3], "part": ["a", "b", "a"], "ts": [1, 1, 1], "v": ["x", "y", "z"]}))
    before = write_instants(table)
    update = pa.table({"id": [2, 4], "part": ["b", "b"], "ts": [2, 2], "v": ["y2", "w"]})
    lakeward_spark.createDataFrame(update).write.format(FORMAT).mode("append").save(path)
    after = write_instants(Table.open(path))
    assert after[:-1] == before and len(after) == len(before) + 1, "one new write instant"
    ours = Table.open(path).read()
    assert sorted(zip(ours.column("id").to_pylist(), ours.column("v").to_pylist())) == [
        (1, "x"),
        (2, "y2"),
        (3, "z"),
        (4, "w"),
    ]
    fail_on([p for p in [_diff("after a data-source upsert", ours, hudi_snapshot(hudi_table(path)))] if p])
