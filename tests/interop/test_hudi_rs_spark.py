"""Interop through the `lakeward` Spark data source: hudi-rs reads what the Spark engine writes.

The foundation's interop scenarios (tests/interop/scenarios.py) run again with EVERY write
going through `df.write.format("lakeward")` with Apache Hudi's option names (so on the Spark
engine): deletes by key are rows read back with `spark.read.format("lakeward")`, partition
drops use `hoodie.datasource.write.partitions.to.delete`. Then:

1. hudi-rs and lakeward read the same rows (snapshot, time travel to every instant, every
   incremental range), the final keys are the hand-worked ones, and every row's data is the
   input row of the step that committed it;
2. the table reads the same as the scenario's twin written by the local engine;
3. Spark reads (`Table.read(engine="spark")`, `spark.read.format("lakeward")`) give the same rows;
4. upserts and deletes through the data source into Apache Hudi's fixture tables find Hudi's
   records (keys joined with Hudi's files) and leave the values the SQL plus our writes imply.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.config.table import KeyGeneratorType
from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.table import Table
from tests.interop.compare import (
    all_mismatches,
    assert_values,
    both_readers,
    comparable_rows,
    fail_on,
    hudi_table,
    project,
    same_rows,
    write_instants,
)
from tests.interop.scenarios import (
    BOB_UPDATE,
    COMPARED,
    EVE,
    FIXTURE_LAYOUTS,
    RICH_META,
    SCENARIOS,
    Scenario,
    Step,
    by_sort,
    expected_fixture_row,
    rich_expected,
    run_step,
    scenario_ids,
    sql_row,
)

pytestmark = pytest.mark.spark

FORMAT = "lakeward"
OPERATION = "hoodie.datasource.write.operation"
PARTITIONS_TO_DELETE = "hoodie.datasource.write.partitions.to.delete"
#: Table API keyword (Table.create) -> Apache Hudi data source option.
CREATE_OPTIONS = {
    "record_key": "hoodie.datasource.write.recordkey.field",
    "partition_by": "hoodie.datasource.write.partitionpath.field",
    "ordering_field": "hoodie.datasource.write.precombine.field",
    "hive_style_partitioning": "hoodie.datasource.write.hive_style_partitioning",
    "url_encode_partitions": "hoodie.datasource.write.partitionpath.urlencode",
    "key_generator": "hoodie.datasource.write.keygenerator.class",
}


def hudi_options(scenario: Scenario) -> dict[str, str]:
    """The scenario's table settings as the options a Hudi user passes to format("hudi")."""
    options = {"hoodie.table.name": scenario.name.replace("-", "_")}
    for key, value in scenario.create.items():
        if key == "options":
            options |= value
        elif key == "key_generator":
            options[CREATE_OPTIONS[key]] = KeyGeneratorType.parse(value).value  # the Hudi class name
        elif isinstance(value, bool):
            options[CREATE_OPTIONS[key]] = str(value).lower()
        elif isinstance(value, list | tuple):
            options[CREATE_OPTIONS[key]] = ",".join(value)
        else:
            options[CREATE_OPTIONS[key]] = str(value)  # a KeyError here: a new Table.create keyword to map
    return options


def _key_condition(scenario: Scenario, keys: list[Any]) -> Any:
    """A Spark condition selecting the rows of the given key values (or dicts of field values)."""
    from pyspark.sql import functions as F

    if not isinstance(keys[0], dict):
        field = scenario.create["record_key"]
        return F.col(field).isin(keys)
    condition = None
    for key in keys:
        term = None
        for name, value in key.items():
            piece = F.col(name) == F.lit(value)
            term = piece if term is None else term & piece
        condition = term if condition is None else condition | term
    return condition


def save_step(spark: Any, path: str, scenario: Scenario, step: Step, first: bool) -> str:
    """One scenario step through the data source; returns the instant it completed."""
    op, payload = step
    options = hudi_options(scenario)
    if op == "delete_keys":
        # as a Hudi user deletes by key: read the rows back, write them with operation=delete
        df = spark.read.format(FORMAT).load(path).where(_key_condition(scenario, payload))
        options[OPERATION] = "delete"
    elif op == "delete_partition":
        df = spark.createDataFrame(scenario.schema.empty_table())
        options |= {OPERATION: "delete_partition", PARTITIONS_TO_DELETE: ",".join(payload)}
    else:
        df = spark.createDataFrame(pa.Table.from_pylist(payload, schema=scenario.schema))
        options[OPERATION] = op
    before = write_instants(Table.open(path)) if Path(path, ".hoodie").exists() else []
    df.write.format(FORMAT).options(**options).mode("overwrite" if first else "append").save(path)
    after = write_instants(Table.open(path))
    assert after[:-1] == before and len(after) == len(before) + 1, f"{scenario.name} {op}: not exactly one instant"
    return after[-1]


class Built:
    """A scenario's table written through the data source, and its twin written by the local engine."""

    def __init__(self, path: str, instants: list[str], local_path: str, local_instants: list[str]):
        self.path, self.instants = path, instants
        self.local_path, self.local_instants = local_path, local_instants


@pytest.fixture(scope="module")
def registered(spark: Any) -> Any:
    """The Spark session, with format lakeward registered."""
    import lakeward.spark

    lakeward.spark.register(spark)
    return spark


@pytest.fixture(scope="module")
def built(registered: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built | BaseException]:
    """Every scenario's tables, written once per module (two scenarios at a time: Spark jobs overlap)."""
    spark = registered
    root = tmp_path_factory.mktemp("interop-spark")
    lock = threading.Lock()
    out: dict[str, Built | BaseException] = {}

    def build(scenario: Scenario) -> None:
        path = str(root / scenario.name.replace("-", "_"))
        local_path = str(root / ("local_" + scenario.name.replace("-", "_")))
        try:
            instants = [save_step(spark, path, scenario, step, i == 0) for i, step in enumerate(scenario.steps)]
            local = Table.create(local_path, schema=scenario.schema, **scenario.create)
            local_instants = [run_step(local, scenario.schema, step) for step in scenario.steps]
            result: Built | BaseException = Built(path, instants, local_path, local_instants)
        except BaseException as exc:  # reported by the scenario's own tests
            result = exc
        with lock:
            out[scenario.name] = result

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(build, SCENARIOS))
    return out


def _get(built: dict[str, Built | BaseException], scenario: Scenario) -> Built:
    result = built[scenario.name]
    if isinstance(result, BaseException):
        raise result
    return result


def _by_step(rows: list[dict[str, Any]], instants: list[str]) -> list[dict[str, Any]]:
    """Rows with the commit time replaced by the index of the step that wrote it (then canonical order)."""
    out = [r | {"_hoodie_commit_time": instants.index(r["_hoodie_commit_time"])} for r in rows]
    return sorted(out, key=repr)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_ids(SCENARIOS))
def test_datasource_scenario_snapshot(built, scenario: Scenario) -> None:
    table = _get(built, scenario)
    fail_on(all_mismatches(table.path))  # snapshot, every instant, every incremental range
    ours, theirs = both_readers(table.path)
    expected = sorted(scenario.expected)
    assert sorted((r["_hoodie_partition_path"], r["_hoodie_record_key"]) for r in ours) == expected
    assert sorted((r["_hoodie_partition_path"], r["_hoodie_record_key"]) for r in theirs) == expected
    # every row holds the data of the input row of the step that committed it
    columns = scenario.schema.names
    for row in theirs:
        step = table.instants.index(row["_hoodie_commit_time"])
        _, payload = scenario.steps[step]
        inputs = comparable_rows(pa.Table.from_pylist(payload, schema=scenario.schema))
        assert project([row], columns)[0] in project(inputs, columns), f"{row} is no input row of step {step}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_ids(SCENARIOS))
def test_datasource_scenario_matches_the_local_engine(built, scenario: Scenario) -> None:
    table = _get(built, scenario)
    for step, (mine, local) in enumerate(zip(table.instants, table.local_instants)):
        ours = comparable_rows(Table.open(table.path).read(as_of=mine))
        twin = comparable_rows(Table.open(table.local_path).read(as_of=local))
        assert _by_step(ours, table.instants) == _by_step(twin, table.local_instants), f"as of step {step}"
    # the files of every step were written by Spark tasks (their write token carries the Spark stage)
    for instant in table.instants:
        for stat in _write_stats(table.path, instant):
            name = parse_base_file_name(Path(stat).name)
            assert name is not None and int(name.write_token.split("-")[1]) > 0, f"{stat}: not a Spark task's file"


def _write_stats(path: str, instant: str) -> list[str]:
    from lakeward.core.timeline.transitions import read_commit_metadata

    table = Table.open(path)
    done = next(i for i in table.completed_instants() if i.time == instant)
    return [s.path for s in read_commit_metadata(table.storage, done).write_stats()]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_ids(SCENARIOS))
def test_datasource_scenario_spark_reads(spark, built, scenario: Scenario) -> None:
    table = _get(built, scenario)
    arrow = Table.open(table.path).read()
    want = comparable_rows(arrow)
    assert same_rows(comparable_rows(Table.open(table.path).read(engine="spark").toArrow()), want)
    assert same_rows(comparable_rows(spark.read.format(FORMAT).load(table.path).toArrow()), want)
    first = table.instants[0]
    as_of = spark.read.format(FORMAT).option("as.of.instant", first).load(table.path)
    assert same_rows(comparable_rows(as_of.toArrow()), comparable_rows(Table.open(table.path).read(as_of=first)))


def test_datasource_rich_types_values(built) -> None:
    """Every Arrow type of the rich scenario survives the trip through Spark: both readers see the input values."""
    scenario = SCENARIOS[0]
    table = _get(built, scenario)
    want = rich_expected(table.instants)
    for reader, rows in zip(("lakeward", "hudi-rs"), both_readers(table.path)):
        assert_values(project(rows, [f.name for f in RICH_META] + scenario.schema.names), want, reader)
    assert Table.open(table.path).schema() == Table.open(table.local_path).schema()


# -- Apache Hudi's fixture tables, written through the data source --------------------------------------
def _table_options(path: str) -> dict[str, str]:
    """The options a Hudi user writes this table with, from its hoodie.properties (as hudi-rs reads them)."""
    props = hudi_table(path).hudi_options()
    mapping = {
        "hoodie.table.name": "hoodie.table.name",
        "hoodie.table.recordkey.fields": "hoodie.datasource.write.recordkey.field",
        "hoodie.table.partition.fields": "hoodie.datasource.write.partitionpath.field",
        "hoodie.table.precombine.field": "hoodie.datasource.write.precombine.field",
        "hoodie.table.keygenerator.class": "hoodie.datasource.write.keygenerator.class",
        "hoodie.datasource.write.hive_style_partitioning": "hoodie.datasource.write.hive_style_partitioning",
    }
    return {option: props[prop] for prop, option in mapping.items() if props.get(prop)}


def _save(df: Any, path: str, operation: str) -> str:
    before = write_instants(Table.open(path))
    df.write.format(FORMAT).options(**_table_options(path)).option(OPERATION, operation).mode("append").save(path)
    after = write_instants(Table.open(path))
    assert after[:-1] == before and len(after) == len(before) + 1
    return after[-1]


@pytest.mark.parametrize("name", sorted(FIXTURE_LAYOUTS))
def test_datasource_upsert_and_delete_into_fixture(registered, fixture_table: Callable[..., str], name: str) -> None:
    from pyspark.sql import functions as F

    spark = registered
    layout = FIXTURE_LAYOUTS[name]
    path = fixture_table("cow", name)
    table = Table.open(path)
    first, second = write_instants(table)
    current = table.read()
    data = current.drop_columns([c for c in current.column_names if c.startswith("_hoodie_")])
    by_id = {r["id"]: r for r in data.to_pylist()}
    # Bob modified; Eve new (in a new partition), with Alice's values for the columns EVE leaves out
    batch = pa.Table.from_pylist([by_id[2] | BOB_UPDATE, by_id[1] | EVE], schema=data.schema)
    upsert = _save(spark.createDataFrame(batch), path, "upsert")
    carol = spark.read.format(FORMAT).load(path).where(F.col("id") == 3)
    deleted = _save(carol, path, "delete")

    expected = by_sort(
        [
            expected_fixture_row(layout, sql_row(1), second),
            expected_fixture_row(layout, sql_row(2) | BOB_UPDATE, upsert),
            expected_fixture_row(layout, sql_row(4), second),
            expected_fixture_row(layout, EVE, upsert),
        ]
    )
    for reader, rows in zip(("lakeward", "hudi-rs"), both_readers(path)):
        assert_values(by_sort(project(rows, COMPARED)), expected, f"{reader}, after our writes")
    assert write_instants(Table.open(path)) == [first, second, upsert, deleted]
    # Bob was found in Hudi's own file: his file group got a new version, no duplicate
    assert sum(1 for r in Table.open(path).read().to_pylist() if r["id"] == 2) == 1
    fail_on(all_mismatches(path))


def test_datasource_writes_into_empty_fixture(registered, fixture_table: Callable[..., str]) -> None:
    spark = registered
    path = fixture_table("cow", "v6_empty")
    schema = Table.open(path).schema()
    assert schema is not None and schema.names == ["id", "name", "isActive"]
    rows = [{"id": 1, "name": "a", "isActive": True}, {"id": 2, "name": "b", "isActive": False}]
    _save(spark.createDataFrame(pa.Table.from_pylist(rows, schema=schema)), path, "upsert")
    update = [{"id": 2, "name": "b2", "isActive": True}]
    second = _save(spark.createDataFrame(pa.Table.from_pylist(update, schema=schema)), path, "upsert")
    _save(spark.read.format(FORMAT).load(path).where("id = 1"), path, "delete")
    want = [
        {
            "_hoodie_commit_time": second,
            "_hoodie_record_key": "2",
            "_hoodie_partition_path": "",
            "id": 2,
            "name": "b2",
            "isActive": True,
        }
    ]
    for reader, got in zip(("lakeward", "hudi-rs"), both_readers(path)):
        assert_values(project(got, list(want[0])), want, reader)
    fail_on(all_mismatches(path))
