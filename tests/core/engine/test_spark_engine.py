"""The Spark engine (`lakeward.core.engine.spark`): same tables as the local engine, records never on the driver.

Writes: every operation through `Table.<op>(spark_df)` is compared, step by step, with the
same operation on a twin table written by the local engine, and both with the rows the input
batches imply (`ExpectedTable`) and with what hudi-rs reads. Reads: `Table.read(engine="spark")`
returns a Spark DataFrame with the same rows as the Arrow read; a copy-on-write snapshot is
Spark's own Parquet scan over exactly the latest base files, with filters pushed down.
Failures: a bad batch fails like on the local engine and leaves the table untouched; a task
that fails after writing its file is retried and leaves neither duplicates nor orphan files.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.engine.spark import SparkEngine
from lakeward.core.exceptions import ConfigError, LakewardError
from lakeward.core.table import Table
from lakeward.core.write.client import WriteResult
from tests.interop.compare import (
    all_mismatches,
    comparable_rows,
    hudi_snapshot,
    hudi_table,
    incremental_ranges,
    same_rows,
    write_instants,
)
from tests.support.spark import spark_jobs
from tests.support.write_model import ExpectedTable, Row, arrow_rows, as_steps, data_files, disk_state

pytestmark = pytest.mark.spark

DATA = pa.schema(
    [
        ("id", pa.int64()),
        ("part", pa.string()),
        ("ts", pa.int64()),
        ("v", pa.string()),
        ("_hoodie_is_deleted", pa.bool_()),
    ]
)
COLUMNS = DATA.names
#: Small files: ~30 records per base file, so partitions hold several file groups.
SMALL_FILES = {
    "hoodie.parquet.max.file.size": "3000",
    "hoodie.parquet.small.file.limit": "0",
    "hoodie.copyonwrite.record.size.estimate": "100",
}


IS_DEL = "_hoodie_is_deleted"


def abc(i: int) -> str:
    return "abc"[i % 3]


def rows(
    ids: Sequence[int] | range, part: str | Callable[[int], str], ts: int, deleted: Sequence[int] = ()
) -> list[Row]:
    return [
        {"id": i, "part": part if isinstance(part, str) else part(i), "ts": ts, "v": f"{i}@{ts}", IS_DEL: i in deleted}
        for i in ids
    ]


def arrow(batch: Sequence[Row]) -> pa.Table:
    return pa.Table.from_pylist(list(batch), schema=DATA)


def sorted_rows(data: Any) -> list[Row]:
    """Every column of every row (meta columns included), in a canonical order."""
    return sorted(arrow_rows(data), key=repr)


def lakeward_steps(path: str, instants: Sequence[str], as_of: str | None = None) -> list[Row]:
    return as_steps(arrow_rows(Table.open(path).read(as_of=as_of)), instants, COLUMNS)


def hudi_steps(path: str, instants: Sequence[str]) -> list[Row]:
    return as_steps(arrow_rows(hudi_snapshot(hudi_table(path))), instants, COLUMNS)


class Twins:
    """The same writes on a table written by the local engine and one written by the Spark engine."""

    def __init__(self, spark: Any, base: Path, model: ExpectedTable, **create: Any):
        self.spark = spark
        self.model = model
        self.local_path, self.spark_path = str(base / "local"), str(base / "spark")
        self.local = Table.create(self.local_path, **create)
        self.on_spark = Table.create(self.spark_path, **create)  # no engine: Spark DataFrames choose Spark
        self.local_instants: list[str] = []
        self.spark_instants: list[str] = []

    def apply(self, planes: list[str], op: str, batch: Sequence[Row] = (), partitions: Sequence[str] = ()) -> None:
        planes.clear()
        if op == "delete_partition":
            local = self.local.delete_partition(list(partitions))
            spark = Table.open(self.spark_path, engine=SparkEngine(self.spark)).delete_partition(list(partitions))
        else:
            local = getattr(self.local, op)(arrow(batch))
            spark = getattr(self.on_spark, op)(self.spark.createDataFrame(arrow(batch)))
        assert planes == ["LocalDataPlane", "SparkDataPlane"], f"{op}: planes used {planes}"
        self.model.apply(op, batch, partitions)
        self.local_instants.append(local.instant_time)
        self.spark_instants.append(spark.instant_time)
        self.check(op, local, spark)

    def check(self, op: str, local: WriteResult, spark: WriteResult) -> None:
        step = f"step {len(self.spark_instants) - 1} ({op})"
        counts = (spark.num_inserts, spark.num_updates, spark.num_deletes)
        assert counts == (local.num_inserts, local.num_updates, local.num_deletes), f"{step}: counts"
        assert write_instants(Table.open(self.spark_path)) == self.spark_instants, f"{step}: one instant per write"
        want = self.model.expected(COLUMNS)
        assert lakeward_steps(self.spark_path, self.spark_instants) == want, f"{step}: lakeward reads the Spark table"
        assert hudi_steps(self.spark_path, self.spark_instants) == want, f"{step}: hudi-rs reads the Spark table"
        assert lakeward_steps(self.local_path, self.local_instants) == want, f"{step}: the local twin"
        assert Table.open(self.spark_path).schema() == Table.open(self.local_path).schema(), f"{step}: schemas"

    def check_history(self) -> None:
        """Every earlier instant reads the same on both tables; lakeward and hudi-rs agree everywhere."""
        for i, (local, spark) in enumerate(zip(self.local_instants, self.spark_instants)):
            ours = lakeward_steps(self.spark_path, self.spark_instants, as_of=spark)
            assert ours == lakeward_steps(self.local_path, self.local_instants, as_of=local), f"as of step {i}"
        problems = all_mismatches(self.spark_path)
        assert not problems, "\n".join(problems)


# -- every operation, Spark vs local ----------------------------------------------------------
def test_every_operation_matches_the_local_engine(spark, tmp_path: Path, planes: list[str]) -> None:
    twins = Twins(
        spark,
        tmp_path,
        ExpectedTable("id", "part", "ts"),
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        options=SMALL_FILES,
    )
    twins.apply(planes, "bulk_insert", rows(range(0, 120), abc, 1))
    groups = [s.partition_path for s in twins.on_spark.file_slices()]
    assert all(groups.count(p) > 1 for p in "abc"), f"one file group per partition only: {groups}"
    twins.apply(planes, "insert", rows(range(120, 150), abc, 2))
    upsert = (
        rows(range(0, 150, 7), abc, 3)  # updates
        + rows(range(150, 170), abc, 3)  # inserts
        + rows([1, 2, 500], abc, 3, deleted=[1, 2, 500])  # delete markers (500 does not exist)
        + rows([14], abc, 2)  # an older duplicate of 14: loses to ts 3
        + rows([21], abc, 4)  # a newer duplicate of 21: wins over ts 3
    )
    twins.apply(planes, "upsert", upsert)
    twins.apply(planes, "delete", rows([4, 5, 6, 6, 999], abc, 5))  # 6 twice; 999 does not exist
    twins.apply(planes, "insert_overwrite", rows(range(200, 210), "b", 6))
    twins.apply(planes, "delete_partition", partitions=["c"])
    twins.apply(planes, "upsert", rows(range(0, 30), abc, 7))  # updates in a; inserts in b (overwritten), c (dropped)
    twins.apply(planes, "insert_overwrite_table", rows(range(300, 320), abc, 8))
    twins.apply(planes, "upsert", rows(range(315, 330), abc, 9, deleted=[316]) + rows([310], abc, 9, deleted=[310]))
    twins.check_history()


@pytest.mark.parametrize("index", ["SIMPLE", "BUCKET"])
def test_index_types_match_the_local_engine(spark, tmp_path: Path, planes: list[str], index: str) -> None:
    options = {"hoodie.index.type": index, "hoodie.bucket.index.num.buckets": "3"}
    twins = Twins(
        spark,
        tmp_path,
        ExpectedTable("id", "part", "ts", hive=True),
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        hive_style_partitioning=True,
        options=options,
    )
    twins.apply(planes, "upsert", rows(range(0, 90), abc, 1))
    twins.apply(planes, "upsert", rows(range(0, 120, 4), abc, 2) + rows([3, 9, 700], abc, 2, deleted=[3, 9, 700]))
    twins.apply(planes, "delete", rows([12, 13, 14, 800], abc, 3))
    twins.apply(planes, "insert", rows(range(120, 130), abc, 4))
    if index == "BUCKET":
        for table in (twins.on_spark, twins.local):
            ids = {s.file_id[:8] for s in table.file_slices()}
            assert ids <= {f"{b:08d}" for b in range(3)}, f"{table.path}: file groups outside the 3 buckets: {ids}"
    twins.check_history()


def test_merge_on_read_matches_the_local_engine(spark, tmp_path: Path, planes: list[str]) -> None:
    """On a merge-on-read table the Spark engine appends updates and deletes to logs as the local engine does."""
    twins = Twins(
        spark,
        tmp_path,
        ExpectedTable("id", "part", "ts"),
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )

    def layout(table: Table) -> list[tuple[str, int]]:
        """(partition, number of log files) of every file slice."""
        return sorted((s.partition_path, len(s.log_files)) for s in table.file_slices())

    steps = [
        ("upsert", rows(range(0, 60), abc, 1)),
        ("upsert", rows(range(0, 60, 4), abc, 2) + rows([5, 61], abc, 2, deleted=[5, 61])),  # updates: log blocks
        ("delete", rows([6, 7], abc, 3)),  # delete blocks
        ("insert", rows(range(60, 70), abc, 4)),  # slices with logs take no inserts: new file groups
    ]
    for op, batch in steps:
        twins.apply(planes, op, batch)
        assert layout(twins.on_spark) == layout(twins.local), f"after {op}: file slices differ"
        assert all(i.action == "deltacommit" for i in Table.open(twins.spark_path).completed_instants())
    assert layout(twins.on_spark) == [("a", 0), ("a", 2), ("b", 0), ("b", 2), ("c", 0), ("c", 1)]
    twins.check_history()
    # Under a pending compaction, appends go to the slice based on the compaction instant (as on the
    # local engine). hudi-rs 0.5.0 does not read such logs yet: lakeward reads only, from here on.
    pending = {t.path: t.schedule_compaction(force=True) for t in (twins.on_spark, twins.local)}
    assert all(pending.values())
    batch = rows(range(0, 60, 5), abc, 5)
    twins.local_instants.append(twins.local.upsert(arrow(batch)).instant_time)
    twins.spark_instants.append(twins.on_spark.upsert(twins.spark.createDataFrame(arrow(batch))).instant_time)
    twins.model.apply("upsert", batch)
    want = twins.model.expected(COLUMNS)
    assert lakeward_steps(twins.spark_path, twins.spark_instants) == want
    assert lakeward_steps(twins.local_path, twins.local_instants) == want
    compaction = pending[twins.spark_path]
    appended = [f for s in twins.on_spark.file_slices() for f in s.log_files if f.base_instant_time == compaction]
    assert len(appended) == 3, f"appends under the pending compaction {compaction}: {appended}"


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_bucket_index_insert_overwrite(spark, tmp_path: Path, engine: str) -> None:
    """insert_overwrite on a BUCKET table writes new file groups of the buckets; later upserts find them."""
    table = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        options={"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "2"},
    )
    model = ExpectedTable("id", "part", "ts")
    instants = []
    for op, batch in [
        ("upsert", rows([1, 2, 3, 4], "a", 1)),
        ("insert_overwrite", rows([1, 2], "a", 2)),
        ("upsert", rows([1, 5], "a", 3)),
    ]:
        data = spark.createDataFrame(arrow(batch)) if engine == "spark" else arrow(batch)
        instants.append(getattr(table, op)(data, engine=engine).instant_time)
        model.apply(op, batch)
        want = model.expected(COLUMNS)
        assert lakeward_steps(table.path, instants) == want, f"after {op}"
        assert hudi_steps(table.path, instants) == want, f"hudi-rs after {op}"
    assert {s.file_id[:8] for s in table.file_slices()} <= {"00000000", "00000001"}


def test_precombine_within_a_batch(spark, tmp_path: Path) -> None:
    """Duplicate keys spread over Spark partitions: the largest ordering value wins, as on the local engine."""
    twins_model = ExpectedTable("id", "part", "ts")
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts")
    local = Table.create(str(tmp_path / "local"), record_key="id", partition_by="part", ordering_field="ts")
    first = (
        rows([1], "a", 5)
        + rows([1], "a", 9)
        + rows([1], "a", 7)  # 9 wins
        + rows([2], "b", 3)
        + rows([2], "b", 1)  # 3 wins
        + rows([3], "a", 2)
        + rows([3], "a", 4, deleted=[3])  # the delete marker is newer: 3 is not written
        + rows(range(10, 40), abc, 1)
    )
    second = rows([1], "a", 1) + rows([2], "b", 11) + rows([2], "b", 10) + rows([3], "a", 1)  # 1: older than stored
    instants, local_instants = [], []
    for batch in (first, second):
        # round-robin repartitioning puts the copies of a key into different input partitions
        df = spark.createDataFrame(arrow(batch)).repartition(4)
        assert df.rdd.getNumPartitions() == 4
        instants.append(table.upsert(df).instant_time)
        local_instants.append(local.upsert(arrow(batch)).instant_time)
        twins_model.apply("upsert", batch)
        want = twins_model.expected(COLUMNS)
        assert lakeward_steps(path, instants) == want
        assert hudi_steps(path, instants) == want
        assert lakeward_steps(local.path, local_instants) == want
    by_id = {r["id"]: r for r in arrow_rows(table.read())}
    assert (by_id[1]["v"], by_id[2]["v"], 3 in by_id) == ("1@1", "2@11", True)


TIMESTAMPS = pa.schema([("k", pa.timestamp("us", tz="UTC")), ("part", pa.string()), ("v", pa.string())])
NEW_YEAR = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("writer", "index"),
    [
        ("spark-session-time-zone", "BLOOM"),
        ("spark-session-time-zone", "BUCKET"),
        ("local-input-time-zone", "BLOOM"),
    ],
)
def test_timestamp_record_keys_do_not_depend_on_time_zones(spark, tmp_path: Path, writer: str, index: str) -> None:
    """The same instant is the same record key, whatever the Spark session's (or the input's) time zone."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="k", partition_by="part", options={"hoodie.index.type": index})
    first = table.upsert(pa.Table.from_pylist([{"k": NEW_YEAR, "part": "a", "v": "first"}], schema=TIMESTAMPS))
    if writer == "spark-session-time-zone":
        again = pa.Table.from_pylist([{"k": NEW_YEAR, "part": "a", "v": "second"}], schema=TIMESTAMPS)
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        try:
            second = table.upsert(spark.createDataFrame(again))
        finally:
            spark.conf.set("spark.sql.session.timeZone", "UTC")
    else:
        zoned = pa.schema([("k", pa.timestamp("us", tz="America/New_York")), ("part", pa.string()), ("v", pa.string())])
        second = table.upsert(pa.Table.from_pylist([{"k": NEW_YEAR, "part": "a", "v": "second"}], schema=zoned))
    assert (second.num_updates, second.num_inserts) == (1, 0)
    got = [(r["_hoodie_commit_time"], r["v"]) for r in arrow_rows(hudi_snapshot(hudi_table(path)))]
    assert got == [(second.instant_time, "second")]
    assert first.instant_time != second.instant_time


@pytest.mark.parametrize(
    "engine",
    [
        "local",
        "spark",
    ],
)
def test_upsert_of_a_key_stored_several_times_counts(spark, tmp_path: Path, engine: str) -> None:
    """A key stored three times (inserts allow duplicates), then upserted: no insert is counted, none negative."""
    table = Table.create(str(tmp_path / "t"), record_key="id", partition_by="part", ordering_field="ts")
    table.insert(arrow(rows([1, 2], "a", 1)))
    table.insert(arrow(rows([1, 1], "a", 2)))
    batch = arrow(rows([1], "a", 5))
    result = table.upsert(spark.createDataFrame(batch) if engine == "spark" else batch, engine=engine)
    assert result.num_inserts == 0 and result.num_updates >= 1, result
    values = {r["v"] for r in arrow_rows(table.read()) if r["id"] == 1}
    assert values == {"1@5"}, "a stored copy of the key kept an old value"


# -- engine choice ------------------------------------------------------------------------------
def _spark_jobs(spark: Any, group: str, fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run fn; return its result and how many Spark jobs it started."""
    result, jobs = spark_jobs(spark, group, fn)
    return result, len(jobs)


def test_engine_choice_per_call_and_per_table(spark, tmp_path: Path, planes: list[str]) -> None:
    from pyspark.sql import DataFrame

    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts")
    model = ExpectedTable("id", "part", "ts")
    instants: list[str] = []

    def write(label: str, fn: Callable[[], WriteResult], plane: str, batch: Sequence[Row], op: str = "upsert") -> int:
        planes.clear()
        result, jobs = _spark_jobs(spark, f"probe-{label}", fn)
        assert planes == [plane], f"{label}: {planes}"
        instants.append(result.instant_time)
        model.apply(op, batch)
        return jobs

    b = [rows(range(i * 10, i * 10 + 15), abc, i + 1) for i in range(7)]
    # default: a pyarrow Table is written by the local engine, without any Spark job
    assert write("arrow", lambda: table.upsert(arrow(b[0])), "LocalDataPlane", b[0]) == 0
    # a Spark DataFrame picks the Spark engine by itself
    assert write("df", lambda: table.upsert(spark.createDataFrame(arrow(b[1]))), "SparkDataPlane", b[1]) > 0
    # engine="spark" turns a pyarrow Table into a DataFrame
    assert write("arrow-spark", lambda: table.upsert(arrow(b[2]), engine="spark"), "SparkDataPlane", b[2]) > 0
    # engine="local" with a DataFrame: the local engine (the DataFrame is collected)
    write("df-local", lambda: table.upsert(spark.createDataFrame(arrow(b[3])), engine="local"), "LocalDataPlane", b[3])

    # per table: Table.open(engine="spark") writes and reads on Spark unless a call says otherwise
    on_spark = Table.open(path, engine="spark")
    write("table-spark", lambda: on_spark.upsert(arrow(b[4])), "SparkDataPlane", b[4])
    new = b[5][-5:]  # keys the table does not hold yet
    write("table-spark-local", lambda: on_spark.insert(arrow(new), engine="local"), "LocalDataPlane", new, "insert")
    gone = b[0][:3]
    write("delete-keys", lambda: on_spark.delete(keys=[r["id"] for r in gone]), "SparkDataPlane", gone, "delete")
    given = Table.open(path, engine=SparkEngine(spark))
    write("engine-object", lambda: given.upsert(arrow(b[6])), "SparkDataPlane", b[6])

    assert isinstance(on_spark.read(), DataFrame)
    assert isinstance(given.read(), DataFrame)
    assert isinstance(on_spark.read(engine="local"), pa.Table)
    assert isinstance(Table.open(path).read(), pa.Table)
    assert isinstance(Table.open(path).read(engine="spark"), DataFrame)
    want = model.expected(COLUMNS)
    assert lakeward_steps(path, instants) == want
    assert hudi_steps(path, instants) == want
    assert as_steps(arrow_rows(on_spark.read()), instants, COLUMNS) == want

    with pytest.raises(ConfigError, match="flink"):
        table.upsert(arrow(b[0]), engine="flink")
    assert write_instants(Table.open(path)) == instants


def test_spark_write_never_collects_the_records(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only counts and write statuses reach the driver: no DataFrame action returns the input rows."""
    from pyspark import RDD
    from pyspark.sql.classic.dataframe import DataFrame

    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=SMALL_FILES)
    table.bulk_insert(arrow(rows(range(300), abc, 1)))
    batch = rows(range(150, 450), abc, 2)  # 150 updates, 150 inserts
    df = spark.createDataFrame(arrow(batch))

    calls: list[tuple[str, int]] = []

    def spy(cls: type, name: str) -> None:
        original = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            size = (
                result.num_rows if isinstance(result, pa.Table) else len(result) if hasattr(result, "__len__") else -1
            )
            calls.append((f"{cls.__name__}.{name}", size))
            return result

        monkeypatch.setattr(cls, name, wrapper)

    for name in ("collect", "toArrow", "toPandas", "toLocalIterator", "take", "head", "tail", "_collect_as_arrow"):
        spy(DataFrame, name)
    spy(RDD, "collect")
    result = table.upsert(df)
    monkeypatch.undo()

    assert (result.num_updates, result.num_inserts) == (150, 150)
    file_groups = len(table.file_slices())
    assert calls, "the Spark write ran no action at all?"
    assert not [c for c in calls if not c[0].endswith(".collect")], f"records pulled to the driver: {calls}"
    assert max(n for _, n in calls) <= 2 * file_groups + 3, f"an action returned too many rows: {calls}"
    assert sum(n for _, n in calls) < len(batch) // 2, f"the driver received {calls}"


# -- reads ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def read_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """A table with old and new file versions, replaced and dropped partitions (written locally: reads are tested)."""
    path = str(tmp_path_factory.mktemp("reads") / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=SMALL_FILES)
    instants = [
        table.bulk_insert(arrow(rows(range(0, 180), abc, 1))).instant_time,
        table.upsert(arrow(rows(range(0, 60, 3), "a", 2) + rows(range(180, 190), abc, 2))).instant_time,
        table.delete(arrow(rows([1, 4, 7], "b", 3))).instant_time,
        table.insert_overwrite(arrow(rows(range(400, 420), "c", 4))).instant_time,
        table.upsert(arrow(rows([0, 10, 400], abc, 5))).instant_time,
    ]
    return path, instants


def test_spark_read_returns_a_dataframe_with_the_same_rows(spark, read_table: tuple[str, list[str]]) -> None:
    from pyspark.sql import DataFrame

    path, _ = read_table
    df = Table.open(path).read(engine="spark")
    assert isinstance(df, DataFrame)
    local = Table.open(path).read()
    assert df.columns == local.column_names
    assert sorted_rows(df) == sorted_rows(local)  # every column, file names and sequence numbers included
    assert same_rows(comparable_rows(df.toArrow()), comparable_rows(hudi_snapshot(hudi_table(path))))


def test_spark_time_travel_and_incremental(spark, read_table: tuple[str, list[str]]) -> None:
    path, instants = read_table
    table = Table.open(path, engine="spark")
    local = Table.open(path)
    for instant in instants:
        assert sorted_rows(table.read(as_of=instant)) == sorted_rows(local.read(as_of=instant)), f"as of {instant}"
    for begin, end in incremental_ranges(instants):
        got = sorted_rows(table.read_incremental(begin, end))
        assert got == sorted_rows(local.read_incremental(begin, end)), f"incremental ({begin}, {end}]"
    spark_inc = table.read_incremental(instants[0], instants[2], columns=["id", "v"], filters=[("part", "=", "a")])
    local_inc = local.read_incremental(instants[0], instants[2], columns=["id", "v"], filters=[("part", "=", "a")])
    assert spark_inc.columns == ["id", "v"]
    assert sorted_rows(spark_inc) == sorted_rows(local_inc) != []


READ_CASES = [
    (None, [("part", "=", "a")]),
    (["id", "v"], None),
    (["_hoodie_record_key", "id", "ts"], [("ts", ">=", 2)]),
    (None, [[("part", "=", "a"), ("id", "<", 20)], [("id", "in", [400, 401, 999])]]),
    (["id"], [("part", "!=", "b"), ("v", "not in", ["0@5"])]),
]


@pytest.mark.parametrize(("columns", "filters"), READ_CASES)
def test_spark_columns_and_filters(spark, read_table: tuple[str, list[str]], columns: Any, filters: Any) -> None:
    path, instants = read_table
    table = Table.open(path)
    df = table.read(columns=columns, filters=filters, engine="spark")
    local = table.read(columns=columns, filters=filters)
    assert df.columns == local.column_names
    assert sorted_rows(df) == sorted_rows(local) != []
    old = table.read(as_of=instants[1], columns=columns, filters=filters, engine="spark")
    assert sorted_rows(old) == sorted_rows(table.read(as_of=instants[1], columns=columns, filters=filters))


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _latest_files(path: str, partition: str | None = None) -> set[str]:
    """The latest base files, as hudi-rs lists them (file:// URIs, as Spark reports its input files)."""
    slices = hudi_table(path).get_file_slices()
    return {
        "file://" + os.path.join(path, s.base_file_relative_path())
        for s in slices
        if partition is None or s.partition_path == partition
    }


def test_snapshot_is_a_native_parquet_scan_of_the_latest_files(spark, read_table: tuple[str, list[str]]) -> None:
    path, _ = read_table
    df = Table.open(path).read(engine="spark")
    plan = _plan(df)
    assert "FileScan parquet" in plan, plan
    assert "Python" not in plan and "ArrowEval" not in plan and "MapInArrow" not in plan, plan
    latest = _latest_files(path)
    on_disk = {"file://" + os.path.join(path, f) for f in data_files(path)}
    assert len(on_disk) > len(latest), "the table must hold older file versions for this test to mean anything"
    assert set(df.inputFiles()) == latest
    # partition pruning and projection
    pruned = Table.open(path).read(columns=["id", "v"], filters=[("part", "=", "a")], engine="spark")
    assert set(pruned.inputFiles()) == _latest_files(path, "a")
    # only the projected columns (and the filtered one) are read: no meta columns, no `ts`
    assert "ReadSchema: struct<id:bigint,part:string,v:string>" in _plan(pruned), _plan(pruned)


def test_filters_are_pushed_down(spark, read_table: tuple[str, list[str]]) -> None:
    from pyspark.sql import functions as F

    path, _ = read_table
    table = Table.open(path)
    df = table.read(filters=[("v", "=", "10@5")], engine="spark")
    plan = _plan(df)
    pushed = plan[plan.index("PushedFilters: [") :].split("]", 1)[0]
    assert "EqualTo(v,10@5)" in pushed, plan
    assert [r["id"] for r in df.collect()] == [10]
    after = table.read(engine="spark").where(F.col("ts") > 4)
    pushed = _plan(after)[_plan(after).index("PushedFilters: [") :].split("]", 1)[0]
    assert "GreaterThan(ts,4)" in pushed
    assert sorted(r["id"] for r in after.collect()) == [0, 10, 400]


def test_merged_slices_are_read_by_python_tasks(spark, tmp_path: Path) -> None:
    """Slices with log files are merged by Arrow tasks; slices without them stay a native Parquet scan."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ")
    instants = [
        table.upsert(arrow(rows(range(0, 40), abc, 1))).instant_time,
        table.upsert(arrow(rows(range(0, 40, 3), "a", 2))).instant_time,  # logs in partition a only
        table.delete(arrow(rows([1], "b", 3))).instant_time,  # and a delete block in b
    ]
    merged = {s.partition_path for s in table.file_slices() if s.log_files}
    assert merged == {"a", "b"} and any(not s.log_files for s in table.file_slices()) is (len(merged) < 3)
    df = table.read(engine="spark")
    plan = _plan(df)
    assert "MapInArrow" in plan and "FileScan parquet" in plan, plan
    assert sorted_rows(df) == sorted_rows(table.read())
    assert same_rows(comparable_rows(df.toArrow()), comparable_rows(hudi_snapshot(hudi_table(path))))
    for instant in instants:
        got = sorted_rows(table.read(as_of=instant, engine="spark"))
        assert got == sorted_rows(table.read(as_of=instant)), f"as of {instant}"
    optimized = table.read(read_optimized=True, engine="spark")
    assert "MapInArrow" not in _plan(optimized)
    assert sorted_rows(optimized) == sorted_rows(table.read(read_optimized=True))
    for begin, end in incremental_ranges(instants):
        got = sorted_rows(table.read_incremental(begin, end, engine="spark"))
        assert got == sorted_rows(table.read_incremental(begin, end)), f"incremental ({begin}, {end}]"


def test_engine_map_runs_one_task_per_item(spark) -> None:
    engine = SparkEngine(spark)
    assert engine.map(lambda x: x * 2, [1, 2, 3], "double") == [2, 4, 6]
    assert engine.map(lambda x: x, [], "nothing") == []
    assert engine.default_parallelism == spark.sparkContext.defaultParallelism


# -- bad batches --------------------------------------------------------------------------------
def _null_key() -> pa.Table:
    batch = rows([1, 2], "a", 9)
    batch[1]["id"] = None
    return arrow(batch)


def _with_duplicate_column(table: pa.Table, name: str) -> pa.Table:
    return pa.Table.from_arrays([*table.columns, table.column(name)], names=[*table.column_names, name])


BAD_BATCHES: dict[str, Callable[[], pa.Table]] = {
    "missing record key column": lambda: arrow(rows([1, 2], "a", 9)).drop_columns(["id"]),
    # on a table without data the schema check cannot catch it: the key generator does, in a Spark task
    "missing record key column, empty table": lambda: arrow(rows([1, 2], "a", 9)).drop_columns(["id"]),
    "null record key": _null_key,
    "missing partition column": lambda: arrow(rows([1, 2], "a", 9)).drop_columns(["part"]),
    "incompatible type": lambda: arrow(rows([1, 2], "a", 9)).set_column(3, "v", pa.array([1.5, 2.5])),
    # issue 18: the same validation (core/write/validation.py, keygen) on both engines, before any instant
    "null ordering value": lambda: arrow(rows([1, 2], "a", 9)).set_column(2, "ts", pa.array([9, None], pa.int64())),
    "is-deleted flag as strings": lambda: arrow(rows([1, 2], "a", 9)).set_column(4, IS_DEL, pa.array(["no", "yes"])),
    "partition value with a slash": lambda: arrow(rows([1, 2], "a/b", 9)),
    "duplicate column": lambda: _with_duplicate_column(arrow(rows([1, 2], "a", 9)), "v"),
}
#: What the error of each new case must name, on both engines.
BAD_BATCH_NEEDLES: dict[str, tuple[str, ...]] = {
    "null ordering value": ("'ts'", "null"),
    "is-deleted flag as strings": ("'_hoodie_is_deleted'", "bool"),
    "partition value with a slash": ("'a/b'", "'part'", "hoodie.datasource.write.partitionpath.urlencode"),
    "duplicate column": ("'v'", "more than once"),
}


@pytest.mark.parametrize("case", list(BAD_BATCHES))
def test_bad_batch_fails_like_the_local_engine(spark, tmp_path: Path, case: str) -> None:
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts")
    if "empty table" not in case:
        table.upsert(arrow(rows(range(10), abc, 1)))
    before = disk_state(path)
    bad = BAD_BATCHES[case]()
    with pytest.raises(LakewardError) as local_error:
        table.upsert(bad)
    assert disk_state(path) == before
    with pytest.raises(LakewardError) as spark_error:
        table.upsert(spark.createDataFrame(bad))
    assert type(spark_error.value) is type(local_error.value), f"{spark_error.value!r} vs {local_error.value!r}"
    assert disk_state(path) == before, "the failed Spark write changed the table"
    for needle in BAD_BATCH_NEEDLES.get(case, ()):
        assert needle in str(local_error.value) and needle in str(spark_error.value), needle
    if case == "null record key":  # (each failing Spark job retries its task: keep the slow cases few)
        with pytest.raises(type(local_error.value)):
            Table.open(path, engine="spark").upsert(bad)  # pyarrow input on the Spark engine
        assert disk_state(path) == before


def test_arrow_input_on_the_spark_engine_is_cast_to_the_table_types_as_on_the_local_engine(
    spark, tmp_path: Path
) -> None:
    """Arrow input on the Spark engine: a nanosecond that a microsecond column cannot hold is refused before
    any instant (Spark's createDataFrame truncated it silently), a sub-millisecond value into a millisecond
    column too (it was refused only by the file tasks, after the instant began), and a delete's float key
    finds the int64 key it equals (the Spark plane rendered it "1.0" and deleted nothing)."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", ordering_field="ts")
    millis = pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 1000)], pa.timestamp("ms", "UTC"))
    table.upsert(
        pa.table(
            {"id": pa.array([1], pa.int64()), "ts": [1], "at": millis, "when": millis.cast(pa.timestamp("us", "UTC"))}
        )
    )
    before = disk_state(path)
    nanos = pa.array([1704067200000000123], pa.timestamp("ns", "UTC"))
    micros = pa.array([1704067200000001], pa.timestamp("us", "UTC"))
    for bad in (
        pa.table({"id": pa.array([2], pa.int64()), "ts": [2], "at": millis, "when": nanos}),
        pa.table({"id": pa.array([2], pa.int64()), "ts": [2], "at": micros, "when": micros}),
    ):
        for engine in ("local", "spark"):
            with pytest.raises(LakewardError, match="lose data|would change"):
                table.upsert(bad, engine=engine)
            assert disk_state(path) == before, f"the refused {engine} write changed the table"
    result = table.delete(pa.table({"id": [1.0]}), engine="spark")
    assert result.num_deletes == 1
    assert Table.open(path).read().num_rows == 0


# -- task retries ----------------------------------------------------------------------------------
def _commit(path: str, instant: str) -> dict[str, Any]:
    return json.loads(Path(path, ".hoodie", f"{instant}.commit").read_text())


def _committed_files(path: str) -> set[str]:
    """Data files named by any completed commit of the table."""
    out = set()
    for instant in write_instants(Table.open(path)):
        for stats in _commit(path, instant)["partitionToWriteStats"].values():
            out |= {s["path"] for s in stats}
    return out


def _fail_first_attempt_once(flag: str, merges_only: bool) -> Callable[[Any], None]:
    """A hook that makes the first attempt of ONE file group fail after its file was written.

    The flag file is created with O_CREAT | O_EXCL, so exactly one call, in any worker process,
    ever raises; it records the path of the file that attempt wrote.
    """

    def hook(stat: Any) -> None:
        import os

        if merges_only and stat.prevCommit == "null":
            return
        try:
            fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, stat.path.encode())
        os.close(fd)
        raise RuntimeError(f"injected failure after writing {stat.path}")

    return hook


def _check_retried_commit(path: str, result: WriteResult, flag: Path) -> None:
    assert flag.exists(), "no task failed: the hook never ran"
    failed_path = flag.read_text()
    assert not Path(path, failed_path).exists(), f"the failed attempt's file {failed_path} is still on disk"
    stats = [s for ss in _commit(path, result.instant_time)["partitionToWriteStats"].values() for s in ss]
    file_ids = [s["fileId"] for s in stats]
    assert len(file_ids) == len(set(file_ids)), f"a file group appears twice in the commit: {file_ids}"
    assert failed_path not in {s["path"] for s in stats}
    failed_id = Path(failed_path).name.split("_")[0]
    assert failed_id in file_ids, "the retried attempt's file is missing from the commit"
    assert sorted(s["path"] for s in stats) == sorted(result.files_written)
    assert data_files(path) == _committed_files(path), "a data file on disk belongs to no commit (orphan)"
    assert not Path(path, ".hoodie", ".temp", result.instant_time).exists(), "markers left behind"


def test_failed_task_attempt_is_retried_without_duplicates_or_orphans(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=SMALL_FILES)
    model = ExpectedTable("id", "part", "ts")
    instants = []

    # 1. new file groups: the first file group to be written fails once, after writing its base file
    flag = tmp_path / "create-failed"
    engine = SparkEngine(spark, after_file_group=_fail_first_attempt_once(str(flag), merges_only=False))
    batch = rows(range(200), abc, 1)
    result = table.upsert(spark.createDataFrame(arrow(batch)), engine=engine)
    instants.append(result.instant_time)
    model.apply("upsert", batch)
    assert (result.num_inserts, result.num_updates) == (200, 0)
    _check_retried_commit(path, result, flag)
    assert lakeward_steps(path, instants) == hudi_steps(path, instants) == model.expected(COLUMNS)

    # 2. merges into existing file groups: one merge fails once
    flag = tmp_path / "merge-failed"
    engine = SparkEngine(spark, after_file_group=_fail_first_attempt_once(str(flag), merges_only=True))
    batch = rows(range(0, 200, 2), abc, 2) + rows(range(200, 230), abc, 2)
    result = table.upsert(spark.createDataFrame(arrow(batch)), engine=engine)
    instants.append(result.instant_time)
    model.apply("upsert", batch)
    assert (result.num_inserts, result.num_updates) == (30, 100)
    _check_retried_commit(path, result, flag)
    want = model.expected(COLUMNS)
    assert lakeward_steps(path, instants) == want
    assert hudi_steps(path, instants) == want
    assert len({(r["_hoodie_partition_path"], r["_hoodie_record_key"]) for r in want}) == len(want) == 230


def _log_files(path: str) -> set[str]:
    """Relative paths of every log file under the table, outside `.hoodie/`."""
    root = Path(path)
    return {str(p.relative_to(root)) for p in root.rglob(".*.log.*") if ".hoodie" not in p.relative_to(root).parts}


def _committed_logs(path: str) -> set[str]:
    out = set()
    for instant in write_instants(Table.open(path)):
        meta = json.loads(Path(path, ".hoodie", f"{instant}.deltacommit").read_text())
        for partition, stats in meta["partitionToWriteStats"].items():
            for stat in stats:
                out |= {os.path.join(partition, name) for name in stat.get("logFiles") or []}
    return out


def test_failed_log_append_attempt_is_retried_without_orphan_logs(spark, tmp_path: Path) -> None:
    """Merge-on-read: an append task that fails after writing its log file is retried; the attempt's log is deleted."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ")
    model = ExpectedTable("id", "part", "ts")
    first = rows(range(90), abc, 1)
    instants = [table.upsert(arrow(first)).instant_time]
    model.apply("upsert", first)

    flag = tmp_path / "append-failed"
    engine = SparkEngine(spark, after_file_group=_fail_first_attempt_once(str(flag), merges_only=True))
    batch = rows(range(0, 90, 3), abc, 2) + rows([1, 2], abc, 2, deleted=[1, 2])
    result = table.upsert(spark.createDataFrame(arrow(batch)), engine=engine)
    instants.append(result.instant_time)
    model.apply("upsert", batch)

    assert flag.exists(), "no task failed: the hook never ran"
    failed_log = flag.read_text()
    assert ".log." in failed_log, f"the failed attempt was no log append: {failed_log}"
    assert not Path(path, failed_log).exists(), f"the failed attempt's log file {failed_log} is still on disk"
    meta = json.loads(Path(path, ".hoodie", f"{result.instant_time}.deltacommit").read_text())
    file_ids = [s["fileId"] for ss in meta["partitionToWriteStats"].values() for s in ss]
    assert len(file_ids) == len(set(file_ids)) == 3, f"one stat per file group: {file_ids}"
    assert _log_files(path) == _committed_logs(path), "a log file on disk belongs to no commit (orphan)"
    assert not Path(path, ".hoodie", ".temp", result.instant_time).exists(), "markers left behind"
    want = model.expected(COLUMNS)
    assert lakeward_steps(path, instants) == want
    assert hudi_steps(path, instants) == want


def test_hook_failing_every_attempt_fails_the_write_and_rolls_back(spark, tmp_path: Path) -> None:
    """When every attempt fails, the write fails and the table stays as it was (files of the attempts removed)."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts")
    table.upsert(arrow(rows(range(20), abc, 1)))
    rows_before = sorted_rows(table.read())
    files_before = data_files(path)
    instants_before = write_instants(table)

    def always(stat: Any) -> None:
        raise RuntimeError("injected: every attempt fails")

    with pytest.raises(Exception, match="injected"):
        table.upsert(spark.createDataFrame(arrow(rows(range(10, 30), abc, 2))), engine=SparkEngine(spark, always))
    assert data_files(path) == files_before
    assert [i for i in write_instants(Table.open(path)) if not _is_rollback(path, i)] == instants_before
    assert sorted_rows(Table.open(path).read()) == rows_before


def _is_rollback(path: str, instant: str) -> bool:
    return Path(path, ".hoodie", f"{instant}.rollback").exists()
