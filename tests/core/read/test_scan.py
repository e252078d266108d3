"""`Scan`: the one read planner. Its plan lists exactly what a query reads; running it gives
what the `Table` read methods give; `explain()` names what the pruners ruled out."""

from __future__ import annotations

import operator

import pyarrow as pa
import pytest

from lakeward.core.exceptions import ConfigError
from lakeward.core.read.pruning import PartitionPruner
from lakeward.core.read.scan import QueryType, Scan, ScanExplain
from lakeward.core.table import Table


def batch(*rows: tuple[int, str, str]) -> pa.Table:
    """Rows of (id, city, v)."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "city": pa.array([r[1] for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.string()),
        }
    )


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


@pytest.fixture
def mor(tmp_path) -> Table:
    """A merge-on-read table whose slices have a base file and a log file (an update)."""
    table = Table.create(
        str(tmp_path / "mor"),
        record_key="id",
        partition_by="city",
        table_type="MERGE_ON_READ",
        options={"hoodie.table.cdc.enabled": "true"},
    )
    table.upsert(batch((1, "sf", "a"), (2, "ny", "b"), (3, "la", "c")))
    table.upsert(batch((1, "sf", "a2"), (2, "ny", "b2")))
    return table


def test_scan_plan_snapshot_on_mor_lists_log_files(mor):
    plan = mor.scan().plan()
    assert plan.query_type is QueryType.SNAPSHOT
    assert any(s.merges for s in plan.splits)
    logs = [p for p in plan.files if ".log." in p]
    assert logs and all(p.startswith(("sf/", "ny/")) for p in logs)
    assert {s.file_slice.partition_path for s in plan.splits} == {"sf", "ny", "la"}


def test_scan_plan_read_optimized_on_mor_lists_no_log_files(mor):
    plan = mor.scan(query_type="read_optimized").plan()
    assert plan.query_type is QueryType.READ_OPTIMIZED
    assert plan.files and all(p.endswith(".parquet") for p in plan.files)
    assert all(s.base_only and not s.merges for s in plan.splits)
    # the same slices as the snapshot, only without their logs
    assert plan.slices == mor.scan().plan().slices


def test_scan_to_arrow_equals_table_read(mor):
    filters = [("v", "!=", "c")]
    scan = mor.scan(columns=["id", "v"], filters=filters)
    assert sorted_rows(scan.to_arrow()) == sorted_rows(mor.read(columns=["id", "v"], filters=filters))
    assert sorted_rows(scan.to_arrow()) == [{"id": 1, "v": "a2"}, {"id": 2, "v": "b2"}]
    read_optimized = mor.scan(query_type="read_optimized", columns=["id", "v"]).to_arrow()
    assert sorted_rows(read_optimized) == sorted_rows(mor.read(columns=["id", "v"], read_optimized=True))


def test_scan_time_travel_plans_as_of_the_instant_and_reads_its_state(mor):
    first = mor.completed_instants()[0].time
    scan = mor.scan(as_of=first, columns=["id", "v"])
    plan = scan.plan()
    assert (plan.query_type, plan.as_of) == (QueryType.TIME_TRAVEL, first)
    assert sorted_rows(scan.to_arrow()) == sorted_rows(mor.read(as_of=first, columns=["id", "v"]))
    assert sorted(scan.to_arrow().column("v").to_pylist()) == ["a", "b", "c"]


def test_scan_incremental_and_cdc_equal_the_table_reads(mor):
    first = mor.completed_instants()[0].time
    incremental = mor.scan(query_type="incremental", begin=first, columns=["id", "v"])
    plan = incremental.plan()
    assert (plan.begin, plan.end) == (first, None)
    assert {s.file_slice.partition_path for s in plan.splits} == {"sf", "ny"}  # la was not written after
    assert sorted_rows(incremental.to_arrow()) == sorted_rows(mor.read_incremental(first, columns=["id", "v"]))
    changes = mor.scan(query_type="cdc", begin="earliest")
    assert changes.plan().change_splits
    assert changes.to_arrow().equals(mor.read_changes("earliest"))


def test_scan_explain_names_the_slices_partition_pruning_dropped(mor):
    explained = mor.scan(filters=[("city", "=", "sf")]).explain()
    assert isinstance(explained, ScanExplain)
    assert [s.partition_path for s in explained.slices] == ["sf"]
    assert sorted(p.partition_path for p in explained.pruned) == ["la", "ny"]
    assert {p.pruner for p in explained.pruned} == {"partition"}
    text = str(explained)
    assert "pruned file slices: 2" in text and "pruned by partition" in text
    # Table.explain is the scan's explain
    assert str(mor.explain([("city", "=", "sf")])) == text
    assert mor.scan(filters=[("city", "=", "sf")]).plan().pruned == tuple(explained.pruned)


def test_partition_pruner_keeps_every_slice_without_partition_filters(mor):
    slices = mor.file_slices()
    pruner = PartitionPruner(mor.config, mor.schema())
    assert pruner.prune(slices, [("v", "=", "a")]).kept == tuple(slices)
    pruning = pruner.prune(slices, [("city", "in", ["sf", "ny"])])
    assert [s.partition_path for s in pruning.kept] == sorted(["ny", "sf"])
    assert [(p.partition_path, p.pruner) for p in pruning.pruned] == [("la", "partition")]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"query_type": "time_travel"}, "needs as_of"),
        ({"query_type": "incremental"}, "needs begin"),
        ({"query_type": "incremental", "begin": "0", "as_of": "1"}, "as_of applies to"),
        ({"query_type": "snapshot", "begin": "0"}, "begin and end apply to"),
        ({"query_type": "cdc", "begin": "earliest", "columns": ["id"]}, "no columns or filters"),
        ({"query_type": "latest"}, "is not one of snapshot, read_optimized"),
    ],
)
def test_scan_arguments_that_do_not_fit_the_query_type_raise_config_error(mor, arguments, message):
    with pytest.raises(ConfigError, match=message):
        mor.scan(**arguments)


def test_scan_explain_of_cdc_scan_raises_config_error(mor):
    with pytest.raises(ConfigError, match="change splits"):
        mor.scan(query_type="cdc", begin="earliest").explain()


def test_scan_is_a_plain_value_over_storage_config_and_timeline(mor):
    scan = Scan(mor.storage, mor.config, mor.timeline(), QueryType.SNAPSHOT, columns=["id"])
    assert sorted(scan.to_arrow().column("id").to_pylist()) == [1, 2, 3]


@pytest.mark.spark
def test_scan_to_spark_has_the_rows_of_to_arrow(spark, mor):
    snapshot = mor.scan(columns=["id", "v"], filters=[("v", "!=", "c")])
    rows = [r.asDict() for r in snapshot.to_spark(spark).collect()]
    assert sorted_rows(pa.Table.from_pylist(rows)) == sorted_rows(snapshot.to_arrow())
    first = mor.completed_instants()[0].time
    incremental = mor.scan(query_type="incremental", begin=first, columns=["id", "v"])
    rows = [r.asDict() for r in incremental.to_spark(spark).collect()]
    assert sorted_rows(pa.Table.from_pylist(rows)) == sorted_rows(incremental.to_arrow())
    changes = mor.scan(query_type="cdc", begin="earliest")
    rows = [r.asDict() for r in changes.to_spark(spark).collect()]
    assert sorted_rows(pa.Table.from_pylist(rows)) == sorted_rows(changes.to_arrow())


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_naive_datetime_filters_compare_as_written(tmp_path, table_type):
    """A batch of naive timestamps is stored as UTC instants and read back with tz=UTC: a filter with
    the same naive datetimes selects the rows written with them (it raised ArrowInvalid), in every
    filter shape, and an aware literal keeps working."""
    import datetime as dt

    times = [dt.datetime(2024, 1, 1, h) for h in range(4)]
    table = Table.create(str(tmp_path / "t"), record_key="id", table_type=table_type)
    table.upsert(pa.table({"id": [0, 1, 2, 3], "ts": pa.array(times, pa.timestamp("us"))}))
    table.upsert(pa.table({"id": [3], "ts": pa.array([times[3]], pa.timestamp("us"))}))  # a log on MOR
    assert table.read().schema.field("ts").type == pa.timestamp("us", "UTC")
    cases = [
        ([("ts", ">=", times[2])], [2, 3]),
        ([("ts", "=", times[1])], [1]),
        ([("ts", "in", [times[0], times[3]])], [0, 3]),
        ([("ts", "not in", (times[0],))], [1, 2, 3]),
        ([[("ts", "<", times[1])], [("id", "=", 2)]], [0, 2]),
        ([("ts", ">", times[2].replace(tzinfo=dt.UTC))], [3]),
    ]
    for filters, expected in cases:
        assert sorted(table.read(filters=filters).column("id").to_pylist()) == expected, filters


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_partition_pruning_keeps_the_default_partition_of_nulls_and_empty_strings(tmp_path, table_type):
    """Nulls, empty strings and the literal default name all go to `__HIVE_DEFAULT_PARTITION__` (as in
    Hudi): pruning took that folder for nulls only and dropped the rows of "" (and of the literal)."""
    table = Table.create(str(tmp_path / "t"), record_key="id", partition_by="part", table_type=table_type)
    parts = ["a", "", None, "__HIVE_DEFAULT_PARTITION__", "c"]
    table.upsert(pa.table({"id": ["k1", "k2", "k3", "k4", "k5"], "part": parts}))
    rows = table.read(columns=["id", "part"]).to_pylist()
    for filters in (
        [("part", "=", "")],
        [("part", "!=", "a")],
        [("part", "<", "b")],
        [("part", "in", ["", "c"])],
        [("part", "=", "__HIVE_DEFAULT_PARTITION__")],
        [("part", "is null", None)],
        [("part", "=", "c")],
    ):
        _, op, value = filters[0]

        def keep(v: str | None, op: str = op, value: object = value) -> bool:
            if op == "is null":
                return v is None
            if op == "in":
                return v in value  # type: ignore[operator]
            if v is None:
                return False
            return {"=": v == value, "!=": v != value, "<": v < value}[op]  # type: ignore[operator]

        expected = sorted(r["id"] for r in rows if keep(r["part"]))
        assert sorted(table.read(columns=["id"], filters=filters).column("id").to_pylist()) == expected, filters


def test_filters_that_do_not_fit_the_columns_fail_before_reading_naming_the_filter(tmp_path):
    """pyarrow's own errors (ArrowNotImplementedError, ArrowInvalid listing every field) named neither
    the filter nor the table: a ConfigError now does, before any file is read."""
    table = Table.create(str(tmp_path / "t"), record_key="id")
    table.upsert(pa.table({"id": [1, 2], "s": ["a", "b"]}))
    for filters, reason in (
        ([("id", "=", "1")], "no kernel matching input types"),
        ([("nope", "=", 1)], "No match for FieldRef"),
        ([("s", ">", 3)], "no kernel matching input types"),
    ):
        with pytest.raises(ConfigError, match=rf"filters=.* do not fit the table's columns \['id', 's'\]: .*{reason}"):
            table.read(filters=filters)
    assert table.read(filters=[("s", "=", "b")]).column("id").to_pylist() == [2]


@pytest.mark.parametrize("version", [6, 9])
def test_partition_pruning_keeps_a_partition_whose_value_holds_a_slash(tmp_path, version):
    """Hudi's SimpleKeyGenerator writes a value holding '/' as nested folders when values are not URL-encoded
    (its quickstart's `americas/united_states/san_francisco`): pruning split the path into one segment per
    field and dropped the partition (no rows, silently). Such a table is made here with a timestamp key
    generator whose output is its input, then recorded as a SimpleKeyGenerator table, as Hudi records it."""
    path = tmp_path / "t"
    options = {
        "hoodie.keygen.timebased.timestamp.type": "DATE_STRING",
        "hoodie.keygen.timebased.input.dateformat": "yyyy/MM/dd",
        "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
        "hoodie.keygen.timebased.timezone": "UTC",
    }
    table = Table.create(
        str(path),
        record_key="id",
        partition_by="dt",
        ordering_field="o",
        key_generator="TIMESTAMP",
        table_version=version,
        options=options,
    )
    table.upsert(pa.table({"id": ["a", "b"], "dt": ["2024/01/01", "2024/01/02"], "o": [1, 1]}))
    props = path / ".hoodie" / "hoodie.properties"
    lines = [line for line in props.read_text().splitlines() if "timebased" not in line and "keygenerator" not in line]
    lines.append("hoodie.table.keygenerator.class=org.apache.hudi.keygen.SimpleKeyGenerator")
    if version >= 8:
        lines.append("hoodie.table.keygenerator.type=SIMPLE")
    props.write_text("\n".join(lines) + "\n")
    table = Table.open(str(path))
    assert table.config.key_generator.name == "SIMPLE"
    for filters, want in (
        ([("dt", "=", "2024/01/01")], ["a"]),
        ([("dt", ">", "2024/01/01")], ["b"]),
        ([("dt", "in", ["2024/01/02"])], ["b"]),
    ):
        assert sorted(table.read(filters=filters).column("id").to_pylist()) == want, filters


def test_a_single_predicate_not_in_a_list_is_refused_with_the_fix(mor):
    """`filters=("v", "=", 1)` raised TypeError: 'int' object is not iterable."""
    with pytest.raises(ConfigError, match=r"pass a list of them"):
        mor.read(filters=("id", "=", 1))


def test_a_value_given_to_is_null_is_refused_not_ignored(mor):
    """`("v", "is null", 5)` read as `v is null`, silently dropping the 5 the caller meant something by."""
    with pytest.raises(ConfigError, match=r"'is null' takes no value"):
        mor.read(filters=[("v", "is null", 5)])
    with pytest.raises(ConfigError, match=r"'is not null' takes no value"):
        mor.read(filters=[("v", "is not null", "x")])
    assert mor.read(filters=[("v", "is null", None)]).num_rows == 0


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_float_literals_on_an_integer_column_select_what_the_comparison_means(tmp_path, table_type):
    """Pyarrow compares an int64 column with a float through a cast that refuses values past 2^24
    (raw ArrowInvalid mid-scan); the literal is made an integer of the same meaning instead."""
    values = [2**40, 5, -3, 0, None, 2**53 + 2]
    table = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts", table_type=table_type)
    table.upsert(pa.table({"id": list(range(6)), "ts": [0] * 6, "v": pa.array(values, pa.int64())}))
    if table_type == "MERGE_ON_READ":
        table.upsert(pa.table({"id": [1], "ts": [1], "v": pa.array([6], pa.int64())}))  # a log file too
        values[1] = 6
    compare = {
        "=": operator.eq,
        "!=": operator.ne,
        "<": operator.lt,
        "<=": operator.le,
        ">": operator.gt,
        ">=": operator.ge,
    }
    for literal in (1.5, -2.5, 5.0, 6.0, 2.0**40, 2.0**40 + 0.5, -0.5):
        for op, holds in compare.items():
            want = sorted(i for i, v in enumerate(values) if v is not None and holds(v, literal))
            got = sorted(table.read(filters=[("v", op, literal)]).column("id").to_pylist())
            assert got == want, (op, literal)
    got = sorted(table.read(filters=[("v", "in", [6.0, 1.5, 2.0**40])]).column("id").to_pylist())
    assert got == sorted(i for i, v in enumerate(values) if v in (6, 2**40))
    got = sorted(table.read(filters=[("v", "not in", [1.5, 0.0])]).column("id").to_pylist())
    assert got == sorted(i for i, v in enumerate(values) if v != 0)  # a null is `not in` any list of values
    with pytest.raises(ConfigError, match="no NaN or infinity"):
        table.read(filters=[("v", "<", float("inf"))])


def test_one_column_named_alone_is_that_column(mor):
    """`columns="city"` reads the column city (it was taken as the columns c, i, t, y)."""
    first = mor.timeline().completed_writes()[0].time
    assert mor.read(columns="city").column_names == ["city"]
    assert sorted(mor.scan(columns="city").to_arrow().column("city").to_pylist()) == ["la", "ny", "sf"]
    assert sorted(mor.read_incremental(first, columns="city").column("city").to_pylist()) == ["ny", "sf"]
