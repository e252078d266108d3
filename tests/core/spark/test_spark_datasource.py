"""The `lakeward` Spark data source: Apache Hudi's option names, save modes and query types.

Writes go through `df.write.format("lakeward")...save(path)` (the Spark engine); expected
rows come from the input batches (`ExpectedTable`) and hudi-rs must read the same. Reads
through `spark.read.format("lakeward")` (the driver hook and the registered Python data
source) must give exactly the rows of `Table.read` / `Table.read_incremental`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.config.table import KeyGeneratorType
from lakeward.core.exceptions import ConfigError, LakewardError
from lakeward.core.table import Table
from tests.interop.compare import hudi_snapshot, hudi_table, write_instants
from tests.support.write_model import ExpectedTable, Row, arrow_rows, as_steps, disk_state

pytestmark = pytest.mark.spark

FORMAT = "lakeward"
OPERATION = "hoodie.datasource.write.operation"
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


def abc(i: int) -> str:
    return "abc"[i % 3]


def rows(
    ids: Sequence[int] | range, part: str | Callable[[int], str], ts: int, deleted: Sequence[int] = ()
) -> list[Row]:
    return [
        {
            "id": i,
            "part": part if isinstance(part, str) else part(i),
            "ts": ts,
            "v": f"{i}@{ts}",
            COLUMNS[4]: i in deleted,
        }
        for i in ids
    ]


def hudi_options(name: str, **extra: str) -> dict[str, str]:
    """What a Hudi user passes to format("hudi")."""
    return {
        "hoodie.table.name": name,
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "part",
        "hoodie.datasource.write.precombine.field": "ts",
        **extra,
    }


def sorted_rows(data: Any) -> list[Row]:
    return sorted(arrow_rows(data), key=repr)


def properties(path: str) -> dict[str, str]:
    """hoodie.properties, as hudi-rs reads it."""
    return dict(hudi_table(path).hudi_options())


def commit_of(path: str, instant: str) -> tuple[str, dict[str, Any]]:
    """(action, commit metadata JSON) of a completed write instant."""
    for action in ("commit", "replacecommit"):
        file = Path(path, ".hoodie", f"{instant}.{action}")
        if file.exists():
            return action, json.loads(file.read_text())
    raise AssertionError(f"no completed write instant {instant}")


@pytest.fixture(scope="module")
def lakeward_spark(spark: Any) -> Any:
    import lakeward.spark

    lakeward.spark.register(spark)
    lakeward.spark.register(spark)  # registering twice is harmless
    return spark


def _df(spark: Any, batch: Sequence[Row], schema: pa.Schema = DATA) -> Any:
    return spark.createDataFrame(pa.Table.from_pylist(list(batch), schema=schema))


# -- writes -------------------------------------------------------------------------------------
def test_overwrite_creates_then_append_runs_every_operation(lakeward_spark, tmp_path: Path, planes: list[str]) -> None:
    spark = lakeward_spark
    path = str(tmp_path / "trips")
    options = hudi_options("trips")
    model = ExpectedTable("id", "part", "ts")
    instants: list[str] = []

    def save(mode: str, op: str, batch: Sequence[Row], partitions: Sequence[str] = (), **extra: str) -> None:
        planes.clear()
        before = write_instants(Table.open(path)) if Path(path).exists() else []
        df = _df(spark, batch)
        df.write.format(FORMAT).options(**options).option(OPERATION, op).options(**extra).mode(mode).save(path)
        after = write_instants(Table.open(path))
        assert after[: len(before)] == before and len(after) == len(before) + 1, f"{op}: one new instant"
        assert planes == ["SparkDataPlane"], f"{op}: {planes}"
        instants.append(after[-1])
        model.apply(op, batch, partitions)
        action, meta = commit_of(path, after[-1])
        assert meta["operationType"] == op.upper()
        assert action == (
            "replacecommit" if op in ("insert_overwrite", "insert_overwrite_table", "delete_partition") else "commit"
        )
        want = model.expected(COLUMNS)
        assert as_steps(arrow_rows(Table.open(path).read()), instants, COLUMNS) == want, f"lakeward after {op}"
        assert as_steps(arrow_rows(hudi_snapshot(hudi_table(path))), instants, COLUMNS) == want, f"hudi-rs after {op}"

    save("overwrite", "upsert", rows(range(0, 60), abc, 1))
    props = properties(path)
    assert (props["hoodie.table.name"], props["hoodie.table.recordkey.fields"]) == ("trips", "id")
    assert (props["hoodie.table.partition.fields"], props["hoodie.table.precombine.field"]) == ("part", "ts")
    save("append", "insert", rows(range(60, 80), abc, 2))
    save("append", "upsert", rows(range(0, 80, 5), abc, 3) + rows([1, 2, 999], abc, 3, deleted=[1, 2, 999]))
    save("append", "bulk_insert", rows(range(100, 120), abc, 4))
    save("append", "delete", rows([3, 4, 100], abc, 5))
    save("append", "insert_overwrite", rows(range(200, 205), "b", 6))
    save("append", "delete_partition", [], ["c"], **{"hoodie.datasource.write.partitions.to.delete": "c"})
    # without the option, the partitions are those of the DataFrame's rows
    save("append", "delete_partition", rows([7], "a", 7), ["a"])
    save("append", "insert_overwrite_table", rows(range(300, 310), abc, 8))
    assert sorted(p.name for p in Path(path).iterdir() if not p.name.startswith(".")) == ["a", "b", "c"]


def test_append_creates_a_missing_table(lakeward_spark, tmp_path: Path) -> None:
    path = str(tmp_path / "new")
    batch = rows(range(10), abc, 1)
    options = hudi_options("new", **{OPERATION: "insert"})
    # the path may also be given as an option, as with any Spark source
    _df(lakeward_spark, batch).write.format(FORMAT).options(**options).option("path", path).mode("append").save()
    table = Table.open(path)
    model = ExpectedTable("id", "part", "ts")
    model.apply("insert", batch)
    assert as_steps(arrow_rows(hudi_snapshot(hudi_table(path))), write_instants(table), COLUMNS) == model.expected(
        COLUMNS
    )
    assert properties(path)["hoodie.table.name"] == "new"
    read_back = lakeward_spark.read.format(FORMAT).option("path", path).load()
    assert sorted_rows(read_back) == sorted_rows(table.read())


def test_inline_compaction_runs_after_data_source_writes(lakeward_spark, tmp_path: Path) -> None:
    """`hoodie.compact.inline=true` compacts after a Spark write as after `Table.upsert`."""
    path = str(tmp_path / "mor")
    options = hudi_options(
        "mor",
        **{
            "hoodie.datasource.write.table.type": "MERGE_ON_READ",
            "hoodie.compact.inline": "true",
            "hoodie.compact.inline.max.delta.commits": "2",
        },
    )
    model = ExpectedTable("id", "part", "ts")
    for mode, op, batch in [
        ("overwrite", "insert", rows(range(30), abc, 1)),
        ("append", "upsert", rows(range(0, 30, 2), abc, 2, deleted=[4])),
    ]:
        _df(lakeward_spark, batch).write.format(FORMAT).options(**options).option(OPERATION, op).mode(mode).save(path)
        model.apply(op, batch)
    table = Table.open(path)
    hoodie = Path(path) / ".hoodie"
    [compaction] = sorted(p.name.split(".")[0] for p in hoodie.glob("*.compaction.requested"))
    assert (hoodie / f"{compaction}.commit").exists(), "the inline compaction completed"
    assert commit_of(path, compaction)[1]["operationType"] == "COMPACT"
    assert table.pending_compactions() == []
    instants = [i for i in write_instants(table) if i != compaction]
    want = model.expected(COLUMNS)
    assert as_steps(arrow_rows(table.read(read_optimized=True)), instants, COLUMNS) == want, "compacted base files"
    assert as_steps(arrow_rows(hudi_snapshot(hudi_table(path))), instants, COLUMNS) == want, "hudi-rs"


@pytest.fixture
def existing(tmp_path: Path) -> tuple[str, str, list[Row]]:
    """A table written by the local engine: (path, its instant, its rows)."""
    path = str(tmp_path / "t")
    batch = rows(range(20), abc, 1)
    table = Table.create(path, options=hudi_options("t"))
    instant = table.upsert(pa.Table.from_pylist(batch, schema=DATA)).instant_time
    return path, instant, batch


def test_save_modes_on_an_existing_table(lakeward_spark, existing: tuple[str, str, list[Row]]) -> None:
    spark = lakeward_spark
    path, first, _ = existing
    before = disk_state(path)
    old_rows = sorted_rows(Table.open(path).read())
    df = _df(spark, rows(range(100, 105), "z", 2))
    with pytest.raises(ConfigError, match="already exists"):
        df.write.format(FORMAT).options(**hudi_options("t")).mode("error").save(path)
    with pytest.raises(ConfigError, match="already exists"):
        df.write.format(FORMAT).options(**hudi_options("t")).save(path)  # Spark's default: errorifexists
    df.write.format(FORMAT).options(**hudi_options("t")).mode("ignore").save(path)
    assert disk_state(path) == before
    # deletes take append only, as in Hudi: overwrite made the rows meant to be deleted the table's only rows
    for operation in ("delete", "delete_partition"):
        deleting = {**hudi_options("t"), "hoodie.datasource.write.operation": operation}
        with pytest.raises(ConfigError, match="append"):
            df.write.format(FORMAT).options(**deleting).mode("overwrite").save(path)
    assert disk_state(path) == before

    # overwrite: the table keeps its history, and its data is the DataFrame's
    df.write.format(FORMAT).options(**hudi_options("t")).mode("overwrite").save(path)
    instants = write_instants(Table.open(path))
    assert len(instants) == 2 and instants[0] == first
    action, meta = commit_of(path, instants[1])
    assert (action, meta["operationType"]) == ("replacecommit", "INSERT_OVERWRITE_TABLE")
    want = sorted((r["id"], r["v"]) for r in rows(range(100, 105), "z", 2))
    assert sorted((r["id"], r["v"]) for r in arrow_rows(hudi_snapshot(hudi_table(path)))) == want
    as_of = spark.read.format(FORMAT).option("as.of.instant", first).load(path)
    assert sorted_rows(as_of) == old_rows


KEYGEN_CASES: dict[str, dict[str, Any]] = {
    "simple-hive": {
        "options": {
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
            "hoodie.datasource.write.hive_style_partitioning": "true",
        },
        "key": lambda r: str(r["id"]),
        "partition": lambda r: f"part={r['part']}",
        "keygen": KeyGeneratorType.SIMPLE,
    },
    "complex-nonhive": {
        "options": {
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.ComplexKeyGenerator",
            "hoodie.datasource.write.recordkey.field": "id,v",
            "hoodie.datasource.write.partitionpath.field": "part,ts",
        },
        "key": lambda r: f"id:{r['id']},v:{r['v']}",
        "partition": lambda r: f"{r['part']}/{r['ts']}",
        "keygen": KeyGeneratorType.COMPLEX,
    },
    "nonpartitioned": {
        "options": {
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
            "hoodie.datasource.write.partitionpath.field": "",
        },
        "key": lambda r: str(r["id"]),
        "partition": lambda r: "",
        "keygen": KeyGeneratorType.NON_PARTITION,
    },
    "timestamp-based": {
        "options": {
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
            "hoodie.datasource.write.partitionpath.field": "ts",
            "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
            "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
            "hoodie.keygen.timebased.timezone": "UTC",
        },
        "key": lambda r: str(r["id"]),
        "partition": lambda r: dt.datetime.fromtimestamp(r["ts"] / 1000, dt.UTC).strftime("%Y/%m/%d"),
        "keygen": KeyGeneratorType.TIMESTAMP,
    },
}


@pytest.mark.parametrize("case", list(KEYGEN_CASES))
def test_table_options_are_honoured(lakeward_spark, tmp_path: Path, case: str) -> None:
    spec = KEYGEN_CASES[case]
    path = str(tmp_path / "t")
    # ts: epoch milliseconds on three different UTC days
    days = [1_700_000_000_000, 1_700_100_000_000, 1_704_067_200_000]
    batch = [{"id": i, "part": abc(i), "ts": days[i % 3] + i, "v": f"v{i}", COLUMNS[4]: False} for i in range(12)]
    options = hudi_options("t", **{"hoodie.datasource.write.table.type": "COPY_ON_WRITE"}) | spec["options"]
    options = {k: v for k, v in options.items() if v != ""}
    _df(lakeward_spark, batch).write.format(FORMAT).options(**options).mode("overwrite").save(path)

    props = properties(path)
    assert props["hoodie.table.type"] == "COPY_ON_WRITE"
    assert props["hoodie.table.keygenerator.class"] == spec["keygen"].value
    assert props["hoodie.datasource.write.hive_style_partitioning"] == ("true" if case == "simple-hive" else "false")
    assert props["hoodie.table.recordkey.fields"] == options["hoodie.datasource.write.recordkey.field"]
    assert props.get("hoodie.table.partition.fields", "") == options.get(
        "hoodie.datasource.write.partitionpath.field", ""
    )
    if case == "timestamp-based":
        assert props["hoodie.keygen.timebased.timestamp.type"] == "EPOCHMILLISECONDS"
        assert props["hoodie.keygen.timebased.output.dateformat"] == "yyyy/MM/dd"

    want = sorted((spec["partition"](r), spec["key"](r), r["v"]) for r in batch)
    for reader, got in (("lakeward", Table.open(path).read()), ("hudi-rs", hudi_snapshot(hudi_table(path)))):
        triples = sorted((r["_hoodie_partition_path"], r["_hoodie_record_key"], r["v"]) for r in arrow_rows(got))
        assert triples == want, reader
    folders = {str(p.parent.relative_to(path)) for p in Path(path).rglob("*.parquet")}
    assert folders == {spec["partition"](r) or "." for r in batch}


def test_partition_by_is_the_partition_path_field(lakeward_spark, tmp_path: Path) -> None:
    """`.partitionBy(...)` (or `save(partitionBy=...)`) names the partition fields, as with Hudi."""
    options = {k: v for k, v in hudi_options("t").items() if k != "hoodie.datasource.write.partitionpath.field"}
    batch = rows(range(6), abc, 1)
    first, second = str(tmp_path / "method"), str(tmp_path / "keyword")
    _df(lakeward_spark, batch).write.format(FORMAT).options(**options).partitionBy("part").mode("overwrite").save(first)
    _df(lakeward_spark, batch).write.format(FORMAT).options(**options).mode("overwrite").save(
        second, partitionBy="part"
    )
    for path in (first, second):
        assert properties(path).get("hoodie.table.partition.fields") == "part", path
        assert sorted({r["_hoodie_partition_path"] for r in arrow_rows(hudi_snapshot(hudi_table(path)))}) == [
            "a",
            "b",
            "c",
        ]


BAD_OPTIONS = [
    (OPERATION, "upsertt"),
    ("hoodie.no.such.option", "1"),
    ("no.such.option", "1"),
    ("hoodie.index.type", "FOO"),
    ("hoodie.parquet.max.file.size", "-1"),
    ("hoodie.datasource.write.keygenerator.class", "org.apache.hudi.keygen.CustomKeyGenerator"),
    ("hoodie.datasource.write.hive_style_partitioning", "yes"),
    ("hoodie.datasource.write.partitionpath.urlencode", "maybe"),
    ("hoodie.datasource.write.table.type", "FOO"),
    ("hoodie.datasource.write.payload.class", "com.example.Payload"),
    ("hoodie.write.lock.provider", "com.example.NoSuchLock"),
    ("as.of.instant", "20240101000000000"),
    ("lakeward.metadata.compact.deflate.levl", "1"),
]


@pytest.mark.parametrize(("key", "value"), BAD_OPTIONS, ids=[k for k, _ in BAD_OPTIONS])
def test_bad_option_fails_before_any_file_is_written(lakeward_spark, tmp_path: Path, key: str, value: str) -> None:
    path = tmp_path / "t"
    df = _df(lakeward_spark, rows(range(5), abc, 1))
    with pytest.raises(LakewardError) as error:
        df.write.format(FORMAT).options(**hudi_options("t")).option(key, value).mode("overwrite").save(str(path))
    assert key in str(error.value), f"the message does not name {key}: {error.value}"
    assert not path.exists(), f"files were written: {sorted(disk_state(path))}"


@pytest.mark.parametrize(("key", "value"), BAD_OPTIONS, ids=[k for k, _ in BAD_OPTIONS])
def test_bad_option_leaves_an_existing_table_unchanged(
    lakeward_spark, existing: tuple[str, str, list[Row]], key: str, value: str
) -> None:
    path = existing[0]
    before = disk_state(path)
    df = _df(lakeward_spark, rows(range(5), abc, 2))
    with pytest.raises(LakewardError) as error:
        df.write.format(FORMAT).options(**hudi_options("t")).option(key, value).mode("append").save(path)
    assert key in str(error.value), f"the message does not name {key}: {error.value}"
    assert disk_state(path) == before


def test_lakeward_write_options_are_accepted(lakeward_spark, tmp_path: Path) -> None:
    """lakeward's own write options (docs/configuration.md) pass through the data source as the
    library takes them; the misspelt one is refused above."""
    path = str(tmp_path / "t")
    df = _df(lakeward_spark, rows(range(5), abc, 1))
    df.write.format(FORMAT).options(**hudi_options("t")).option("lakeward.metadata.compact.deflate.level", "6").mode(
        "overwrite"
    ).save(path)
    assert len(arrow_rows(Table.open(path).read())) == 5


CONFLICTS = [
    ("hoodie.datasource.write.recordkey.field", "v"),
    ("hoodie.datasource.write.partitionpath.field", "v"),
    ("hoodie.datasource.write.precombine.field", "id"),
    ("hoodie.datasource.write.keygenerator.class", "org.apache.hudi.keygen.ComplexKeyGenerator"),
    ("hoodie.datasource.write.hive_style_partitioning", "true"),
]


@pytest.mark.parametrize(("key", "value"), CONFLICTS, ids=[k for k, _ in CONFLICTS])
def test_option_conflicting_with_the_table_fails(
    lakeward_spark, existing: tuple[str, str, list[Row]], key: str, value: str
) -> None:
    """As Hudi: a table property given with another value than the table's is an error, not ignored."""
    path = existing[0]
    before = disk_state(path)
    df = _df(lakeward_spark, rows(range(5), abc, 2))
    with pytest.raises(ConfigError) as error:
        df.write.format(FORMAT).options(**(hudi_options("t") | {key: value})).mode("append").save(path)
    assert key in str(error.value)
    assert disk_state(path) == before


def test_missing_record_key_fails_before_any_file(lakeward_spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    df = _df(lakeward_spark, rows(range(5), abc, 1))
    with pytest.raises(LakewardError, match="'id'"):  # the column is missing from the DataFrame
        df.drop("id").write.format(FORMAT).options(**hudi_options("t")).mode("overwrite").save(str(path))
    assert not path.exists()
    options = {k: v for k, v in hudi_options("t").items() if k != "hoodie.datasource.write.recordkey.field"}
    with pytest.raises(ConfigError, match="recordkey"):  # no record key option at all
        df.write.format(FORMAT).options(**options).mode("overwrite").save(str(path))
    assert not path.exists()


# -- reads ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["COPY_ON_WRITE", "MERGE_ON_READ"])
def read_table(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """Five instants, written by the local engine (reads are what is tested here); MOR: with log files."""
    path = str(tmp_path_factory.mktemp("ds-reads") / "t")
    table = Table.create(path, options=hudi_options("t", **{"hoodie.datasource.write.table.type": request.param}))

    def arrow(batch: list[Row]) -> pa.Table:
        return pa.Table.from_pylist(batch, schema=DATA)

    instants = [
        table.bulk_insert(arrow(rows(range(0, 60), abc, 1))).instant_time,
        table.upsert(arrow(rows(range(0, 60, 4), abc, 2) + rows(range(60, 70), abc, 2))).instant_time,
        table.delete(arrow(rows([1, 2, 3], abc, 3))).instant_time,
        table.insert_overwrite(arrow(rows(range(100, 110), "c", 4))).instant_time,
        table.upsert(arrow(rows([0, 5, 100], abc, 5))).instant_time,
    ]
    if request.param == "MERGE_ON_READ":
        assert any(s.log_files for s in table.file_slices()), "the MOR table must have log files"
    return path, instants


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _timestamp(instant: str) -> str:
    """An instant time written as Hudi also accepts it: `yyyy-MM-dd HH:mm:ss.SSS`."""
    i = instant
    return f"{i[:4]}-{i[4:6]}-{i[6:8]} {i[8:10]}:{i[10:12]}:{i[12:14]}.{i[14:]}"


def _read_cases(instants: list[str]) -> list[tuple[str, dict[str, str], Callable[[Table], Any]]]:
    begin = "hoodie.datasource.read.begin.instanttime"
    end = "hoodie.datasource.read.end.instanttime"
    query = "hoodie.datasource.query.type"
    return [
        ("snapshot (default)", {}, lambda t: t.read()),
        ("snapshot", {query: "snapshot"}, lambda t: t.read()),
        ("read_optimized", {query: "read_optimized"}, lambda t: t.read(read_optimized=True)),
        *[
            (f"as of {i}", {"as.of.instant": instants[i]}, lambda t, i=i: t.read(as_of=instants[i]))
            for i in range(len(instants))
        ],
        (
            "incremental (0, 2]",
            {query: "incremental", begin: instants[0], end: instants[2]},
            lambda t: t.read_incremental(instants[0], instants[2]),
        ),
        (
            "incremental (1, 4]",
            {query: "incremental", begin: instants[1], end: instants[4]},
            lambda t: t.read_incremental(instants[1], instants[4]),
        ),
        (
            "incremental (2, open)",
            {query: "incremental", begin: instants[2]},
            lambda t: t.read_incremental(instants[2]),
        ),
        (
            "incremental from earliest",
            {query: "incremental", begin: "earliest"},
            lambda t: t.read_incremental("0"),
        ),
        (
            "incremental (1, 3] given as timestamps",
            {query: "incremental", begin: _timestamp(instants[1]), end: _timestamp(instants[3])},
            lambda t: t.read_incremental(instants[1], instants[3]),
        ),
        (
            "as of 2 given as a timestamp",
            {"as.of.instant": _timestamp(instants[2])},
            lambda t: t.read(as_of=instants[2]),
        ),
        (
            "incremental (epoch, 0]",
            {query: "incremental", begin: "19700101000000000", end: instants[0]},
            lambda t: t.read_incremental("19700101000000000", instants[0]),
        ),
    ]


def test_reads_give_the_rows_of_table_read(lakeward_spark, read_table: tuple[str, list[str]]) -> None:
    from pyspark.sql.readwriter import DataFrameReader

    spark = lakeward_spark
    path, instants = read_table
    table = Table.open(path)
    python_source_load = DataFrameReader.load.__wrapped__  # type: ignore[attr-defined]
    for label, options, expected in _read_cases(instants):
        want = sorted_rows(expected(table))
        assert want, f"{label}: the case reads nothing"
        hooked = spark.read.format(FORMAT).options(**options).load(path)
        assert hooked.columns == list(expected(table).column_names), label
        assert sorted_rows(hooked) == want, f"{label}: format lakeward (driver hook)"
        registered = python_source_load(spark.read.format(FORMAT).options(**options), path)
        assert "BatchScan lakeward" in _plan(registered), f"{label}: not the registered Python data source"
        assert sorted_rows(registered) == want, f"{label}: the registered Python data source"


BAD_READS = [
    ({"hoodie.datasource.query.type": "streaming"}, "hoodie.datasource.query.type"),
    ({"hoodie.datasource.query.type": "incremental"}, "hoodie.datasource.read.begin.instanttime"),
    ({"hoodie.datasource.read.begin.instanttime": "20240101000000000"}, "hoodie.datasource.read.begin.instanttime"),
    ({"hoodie.no.such.read.option": "x"}, "hoodie.no.such.read.option"),
    ({"no.such.option": "x"}, "no.such.option"),
]


@pytest.mark.parametrize(("options", "needle"), BAD_READS, ids=[n for _, n in BAD_READS])
def test_bad_read_options_fail_naming_the_option(
    lakeward_spark, read_table: tuple[str, list[str]], options: dict[str, str], needle: str
) -> None:
    with pytest.raises(ConfigError) as error:
        lakeward_spark.read.format(FORMAT).options(**options).load(read_table[0])
    assert needle in str(error.value)


def test_hoodie_write_table_version_creates_a_hudi_1x_table_and_must_match_an_existing_one(
    lakeward_spark, tmp_path: Path
) -> None:
    """Hudi 1.x users create version 8/9 tables with `hoodie.write.table.version`; the data source
    refused the key as unknown. On an existing table a different version is a conflict."""
    path = str(tmp_path / "v9")
    batch = rows(range(5), abc, 1)
    options = hudi_options("v9", **{OPERATION: "upsert", "hoodie.write.table.version": "9"})
    _df(lakeward_spark, batch).write.format(FORMAT).options(**options).mode("append").save(path)
    assert properties(path)["hoodie.table.version"] == "9"
    assert sorted(r["id"] for r in arrow_rows(hudi_snapshot(hudi_table(path)))) == list(range(5))
    with pytest.raises(ConfigError, match=r"hoodie\.write\.table\.version.*upgrade"):
        again = hudi_options("v9", **{OPERATION: "upsert", "hoodie.write.table.version": "8"})
        _df(lakeward_spark, batch).write.format(FORMAT).options(**again).mode("append").save(path)
