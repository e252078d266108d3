"""Interop: lakeward and the real hudi-rs reader (PyPI `hudi`) see the same copy-on-write rows.

1. Tables written by lakeward (every key generator / partitioning style lakeward writes,
   after every write operation) read the same with both readers: snapshot, time travel to
   each completed instant, and incremental ranges.
2. COW fixture tables written by Apache Hudi (Spark) read the same with both readers.
3. lakeward upserts and deletes into copies of those fixtures (finding keys with the bloom
   filters Hudi wrote); both readers then show the values the SQL + our writes imply.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakeward.core.table import Table
from tests.interop.compare import (
    all_mismatches,
    assert_values,
    both_readers,
    comparable_rows,
    fail_on,
    incremental_mismatches,
    incremental_ranges,
    project,
    same_rows,
    snapshot_mismatches,
    write_instants,
)
from tests.interop.scenarios import (
    BOB_UPDATE,
    COMPARED,
    EVE,
    FIXTURE_LAYOUTS,
    RICH_META,
    SCENARIOS,
    SQL_ROWS,
    Scenario,
    by_sort,
    expected_fixture_row,
    rich_expected,
    run_step,
    scenario_ids,
    sql_row,
)
from tests.support.fixture_tables import COW_FIXTURES

# ----------------------------------------------------------------------------------------
# Scenarios (tests/interop/scenarios.py): tables written by lakeward
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scenario_tables(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Scenario], tuple[str, list[str]]]:
    """Build each scenario's table once per module: name -> (base path, instants of the steps)."""
    built: dict[str, tuple[str, list[str]]] = {}

    def build(scenario: Scenario) -> tuple[str, list[str]]:
        if scenario.name not in built:
            path = str(tmp_path_factory.mktemp("interop") / scenario.name.replace("-", "_"))
            table = Table.create(path, schema=scenario.schema, **scenario.create)
            instants = [run_step(table, scenario.schema, step) for step in scenario.steps]
            built[scenario.name] = (path, instants)
        return built[scenario.name]

    return build


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_ids(SCENARIOS))
def test_written_table_snapshot(scenario_tables, scenario: Scenario) -> None:
    path, instants = scenario_tables(scenario)
    assert write_instants(Table.open(path)) == instants, "every step must complete exactly one instant"
    fail_on(snapshot_mismatches(path))
    ours, theirs = both_readers(path)
    expected = sorted(scenario.expected)
    assert sorted((r["_hoodie_partition_path"], r["_hoodie_record_key"]) for r in ours) == expected
    assert sorted((r["_hoodie_partition_path"], r["_hoodie_record_key"]) for r in theirs) == expected


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_ids(SCENARIOS))
def test_written_table_time_travel(scenario_tables, scenario: Scenario) -> None:
    path, instants = scenario_tables(scenario)
    fail_on(snapshot_mismatches(path, as_of=instants))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_ids(SCENARIOS))
def test_written_table_incremental(scenario_tables, scenario: Scenario) -> None:
    path, instants = scenario_tables(scenario)
    fail_on(incremental_mismatches(path, incremental_ranges(instants)))


def test_rich_types_values(scenario_tables) -> None:
    """The rich-types table's values themselves (not only agreement): both readers, final state."""
    scenario = SCENARIOS[0]
    path, instants = scenario_tables(scenario)
    want = rich_expected(instants)
    for reader, rows in zip(("lakeward", "hudi-rs"), both_readers(path)):
        assert_values(project(rows, [f.name for f in RICH_META] + scenario.schema.names), want, reader)


# ----------------------------------------------------------------------------------------
# Fixture tables written by Apache Hudi
# ----------------------------------------------------------------------------------------


def test_cow_fixtures_present() -> None:
    wanted = {"v6_empty", "v6_nonpartitioned", "v6_simplekeygen_nonhivestyle", "v6_complexkeygen_hivestyle"}
    assert wanted <= set(COW_FIXTURES)


@pytest.mark.parametrize("name", COW_FIXTURES)
def test_fixture_reads_like_hudi_rs(fixture_table, name: str) -> None:
    path = fixture_table("cow", name)
    instants = write_instants(Table.open(path))
    assert len(instants) == (0 if name == "v6_empty" else 2)
    fail_on(snapshot_mismatches(path, as_of=[None, *instants]))


@pytest.mark.parametrize("name", COW_FIXTURES)
def test_fixture_incremental_like_hudi_rs(fixture_table, name: str) -> None:
    path = fixture_table("cow", name)
    fail_on(incremental_mismatches(path, incremental_ranges(write_instants(Table.open(path)))))


@pytest.mark.parametrize("name", sorted(FIXTURE_LAYOUTS))
def test_upsert_and_delete_into_fixture(fixture_table, name: str) -> None:
    layout = FIXTURE_LAYOUTS[name]
    path = fixture_table("cow", name)
    table = Table.open(path)
    first, second = write_instants(table)

    # Before: both readers show what the SQL wrote (Alice and Diana by the 2nd INSERT).
    sql_commit = {1: second, 2: first, 3: first, 4: second}
    before = by_sort([expected_fixture_row(layout, sql_row(i), sql_commit[i]) for i in SQL_ROWS])
    for reader, rows in zip(("lakeward", "hudi-rs"), both_readers(path)):
        assert_values(by_sort(project(rows, COMPARED)), before, f"{reader}, before our writes")

    # Upsert: the table's own rows (exact column types), Bob modified, Eve new (new partition).
    current = table.read()
    data = current.drop_columns([c for c in current.column_names if c.startswith("_hoodie_")])
    data_schema = data.schema
    alice, bob = (data.filter(pc.equal(data["id"], i)).to_pylist()[0] for i in (1, 2))
    eve = alice | EVE
    upsert = table.upsert(pa.Table.from_pylist([bob | BOB_UPDATE, eve], schema=data_schema))
    # Bob was found in Hudi's file (through the bloom filter Hudi wrote): an update, not an insert.
    assert (upsert.num_updates, upsert.num_inserts) == (1, 1)

    # Delete Carol, by key values / key dicts or by her row.
    if layout.delete == "rows":
        deleted = table.delete(data.filter(pc.equal(data["id"], 3)))
    elif name == "v6_complexkeygen_hivestyle":
        deleted = table.delete(keys=[{"id": 3, "name": "Carol", "byteField": 10, "shortField": 300}])
    else:
        deleted = table.delete(keys=[3])
    assert deleted.num_deletes == 1

    expected = by_sort(
        [
            expected_fixture_row(layout, sql_row(1), second),
            expected_fixture_row(layout, sql_row(2) | BOB_UPDATE, upsert.instant_time),
            expected_fixture_row(layout, sql_row(4), second),
            expected_fixture_row(layout, EVE, upsert.instant_time),
        ]
    )
    for reader, rows in zip(("lakeward", "hudi-rs"), both_readers(path)):
        assert_values(by_sort(project(rows, COMPARED)), expected, f"{reader}, after our writes")

    # ...and the readers agree everywhere: snapshot, each instant (Hudi's and ours), increments.
    assert write_instants(Table.open(path)) == [first, second, upsert.instant_time, deleted.instant_time]
    fail_on(all_mismatches(path))


def test_writes_into_empty_fixture(fixture_table) -> None:
    """v6_empty has a create schema only (NonpartitionedKeyGenerator, no ordering field)."""
    path = fixture_table("cow", "v6_empty")
    table = Table.open(path)
    schema = table.schema()
    assert schema is not None and schema.names == ["id", "name", "isActive"]
    rows = [{"id": 1, "name": "a", "isActive": True}, {"id": 2, "name": "b", "isActive": False}]
    table.upsert(pa.Table.from_pylist(rows, schema=schema))
    second = table.upsert(pa.Table.from_pylist([{"id": 2, "name": "b2", "isActive": True}], schema=schema))
    table.delete(keys=[1])
    want = [
        {
            "_hoodie_commit_time": second.instant_time,
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


# ----------------------------------------------------------------------------------------
# The comparison itself: only representational differences are normalised
# ----------------------------------------------------------------------------------------


def test_comparison_normalises_representation_only() -> None:
    ts = dt.datetime(2024, 1, 2, 3, 4, 5, 6)
    meta = {"_hoodie_commit_time": "1", "_hoodie_record_key": "k", "_hoodie_partition_path": "p"}

    def rows(**columns: pa.Array) -> list[dict[str, Any]]:
        arrays = {k: pa.array([v]) for k, v in meta.items()} | columns
        return comparable_rows(pa.table(arrays))

    item = pa.list_(pa.field("item", pa.int32()))
    element = pa.list_(pa.field("element", pa.int64(), nullable=False))
    # representational: list item names and widths, dictionary encoding, tz annotation, column order
    assert same_rows(rows(x=pa.array([[1, 2]], item)), rows(x=pa.array([[1, 2]], element)))
    assert same_rows(rows(s=pa.array(["a"]).dictionary_encode()), rows(s=pa.array(["a"], pa.large_string())))
    aware = pa.array([ts.replace(tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC"))
    assert same_rows(rows(t=pa.array([ts], pa.timestamp("us"))), rows(t=aware))
    assert same_rows(rows(a=pa.array([1]), b=pa.array(["x"])), rows(b=pa.array(["x"]), a=pa.array([1])))
    # values: never normalised away
    assert not same_rows(rows(t=pa.array([ts], pa.timestamp("us"))), rows(t=pa.array([ts], pa.timestamp("ms"))))
    assert not same_rows(rows(f=pa.array([1.1], pa.float64())), rows(f=pa.array([1.1], pa.float32())))
    assert not same_rows(rows(v=pa.array([1], pa.int32())), rows(v=pa.array([True])))
    assert not same_rows(rows(v=pa.array([1], pa.int32())), rows(v=pa.array([1.0])))
    assert not same_rows(rows(v=pa.array([Decimal("1.10")])), rows(v=pa.array([1.1])))
    assert not same_rows(rows(v=pa.array([None], pa.string())), rows(v=pa.array([""])))
    assert not same_rows(rows(v=pa.array([[{"a": 1}]])), rows(v=pa.array([[{"a": 2}]])))
    other_tz = pa.array([ts.replace(tzinfo=dt.timezone(dt.timedelta(hours=1)))], pa.timestamp("us", tz="+01:00"))
    assert not same_rows(rows(t=pa.array([ts], pa.timestamp("us"))), rows(t=other_tz))


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_millisecond_timestamps_are_stored_in_the_unit_the_schema_names(tmp_path: Any, table_type: str) -> None:
    """A `timestamp[ms]` column is `timestamp-millis` in the table schema: base files stored it as
    TIMESTAMP_MICROS, so hudi-rs (taking the schema's unit) read values 1000x too large."""
    import glob

    import hudi
    import pyarrow.parquet as pq

    path = str(tmp_path / "t")
    moments = [dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC), dt.datetime(2024, 6, 1, 0, 0, 1, 5000, tzinfo=dt.UTC)]
    table = Table.create(path, record_key="id", ordering_field="o", table_type=table_type, table_version=8)
    table.upsert(pa.table({"id": ["a", "b"], "o": [1, 1], "t": pa.array(moments, pa.timestamp("ms", "UTC"))}))
    table.upsert(pa.table({"id": ["b"], "o": [2], "t": pa.array(moments[:1], pa.timestamp("ms", "UTC"))}))
    for f in glob.glob(f"{path}/*.parquet"):
        unit = pq.read_schema(f).field("t").type.unit
        assert unit == "ms", f"{f} stores {unit}"
    expected = {"a": 1704110400000, "b": 1704110400000}
    theirs = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(path).build().read(hudi.HudiReadOptions()))
    assert dict(zip(theirs.column("id").to_pylist(), theirs.column("t").cast(pa.int64()).to_pylist())) == expected
    mine = Table.open(path).read()
    assert mine.schema.field("t").type == pa.timestamp("ms", "UTC")
    assert dict(zip(mine.column("id").to_pylist(), mine.column("t").cast(pa.int64()).to_pylist())) == expected
