"""Interop: lakeward upserts into, deletes from and COMPACTS copies of the MOR fixture tables written by
Apache Hudi; hudi-rs (PyPI `hudi` 0.5.0) reads them to the same rows before and after the compaction.

For every fixture in ../shared/fixtures/hudi-tables/mor/ (Avro and Parquet log blocks, deletes,
a rolled-back write): lakeward updates two stored records, inserts one, deletes a third, plans
a compaction of every slice with log files (`force=True`) and runs it, then writes once more on
top of the compacted slices. At each stage:

- lakeward == hudi-rs for snapshot and read-optimized reads (`hoodie.read.use.read_optimized.mode`),
  latest and as of every completed instant (`reader_mismatches`);
- the rows == the fixture's rows (as hudi-rs read them before lakeward wrote) changed as the
  batches say, latest and as of each of lakeward's writes;
- after the compaction, read-optimized reads hold every change (all logs were folded in).

No write happens between the plan and its execution, so hudi-rs (which hides log files based on a
still-pending compaction) is compared at every stage.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.schema import META_COLUMNS
from lakeward.core.table import Table
from tests.interop.compare import comparable_rows, incremental_mismatches, incremental_ranges, same_rows
from tests.interop.test_hudi_rs_mor_writes import MOR_FIXTURES, hudi_read, reader_mismatches

Row = dict[str, Any]


def test_mor_fixtures_are_present() -> None:
    assert {"v6_trips_8i1u", "v6_trips_8i3d", "v6_nonpartitioned_rollback"} <= {n for _, n in MOR_FIXTURES}


def _by_key(rows: list[Row]) -> dict[str, Row]:
    out = {str(r["_hoodie_record_key"]): r for r in rows}
    assert len(out) == len(rows), "duplicate record keys"
    return out


def _changed(data: pa.Table, rows: slice, column: str, values: list[str]) -> pa.Table:
    part = data.slice(rows.start, rows.stop - rows.start)
    return part.set_column(part.schema.get_field_index(column), column, pa.array(values))


def _assert_rows(path: str, expected: dict[str, Row], as_of: str | None = None, label: str = "") -> None:
    """Both readers' rows, by record key, == expected (values and Python types)."""
    ours = comparable_rows(Table.open(path).read(as_of=as_of))
    theirs = comparable_rows(hudi_read(path, as_of))
    assert same_rows(ours, theirs), f"{label}: lakeward and hudi-rs disagree as of {as_of}"
    assert _by_key(theirs) == expected, f"{label}: rows as of {as_of}"


@pytest.mark.parametrize(("kind", "name"), MOR_FIXTURES)
def test_compaction_of_a_fixture_copy(fixture_table, kind: str, name: str) -> None:
    path = fixture_table(kind, name)
    block_format = "parquet" if kind == "mor/parquet" else "avro"
    table = Table.open(
        path, options={"hoodie.parquet.small.file.limit": 0, "hoodie.logfile.data.block.format": block_format}
    )
    fixture_instants = [i.time for i in table.timeline().completed_writes()]
    key_field = table.config.record_key_fields[0]
    column = "rider" if "rider" in (table.schema() or pa.schema([])).names else "name"
    before = _by_key(comparable_rows(hudi_read(path)))
    assert len(before) >= 3

    # Two updates, one new record (a copy of a stored one under a new key), then a delete.
    data = table.read().drop_columns(list(META_COLUMNS)).sort_by(key_field)
    keys = [str(k) for k in data.column(key_field).to_pylist()]
    new_key = 1000 if pa.types.is_integer(data.schema.field(key_field).type) else "lw-new-key"
    source = 3 if data.num_rows > 3 else 0
    new_row = data.slice(source, 1)
    new_row = new_row.set_column(
        new_row.schema.get_field_index(key_field), key_field, pa.array([new_key], data.schema.field(key_field).type)
    )
    first = table.upsert(pa.concat_tables([_changed(data, slice(0, 2), column, ["lw-1", "lw-2"]), new_row]))
    after_first = {k: dict(r) for k, r in before.items()}
    for key, value in zip(keys[:2], ["lw-1", "lw-2"], strict=True):
        after_first[key] |= {column: value, "_hoodie_commit_time": first.instant_time}
    after_first[str(new_key)] = before[keys[source]] | {
        key_field: new_key,
        "_hoodie_record_key": str(new_key),
        "_hoodie_commit_time": first.instant_time,
    }
    second = table.delete(data.slice(2, 1))
    after_second = {k: r for k, r in after_first.items() if k != keys[2]}
    states = {fixture_instants[-1]: before, first.instant_time: after_first, second.instant_time: after_second}

    # Planned, not run: nothing changes for either reader.
    instant = table.schedule_compaction(force=True)
    assert instant is not None and table.pending_compactions() == [instant]
    for as_of, rows in [(None, after_second), *states.items()]:
        _assert_rows(path, rows, as_of, "with the plan pending")
    assert reader_mismatches(path, [*fixture_instants, first.instant_time, second.instant_time]) == []
    read_optimized_before = comparable_rows(hudi_read(path, read_optimized=True))
    assert _by_key(read_optimized_before) != after_second, "logged changes are not in base files yet"

    result = table.run_compaction(instant)
    assert result.file_slices >= 1
    assert all(parse_base_file_name(p.split("/")[-1]).instant_time == instant for p in result.files_written)
    for as_of, rows in [(None, after_second), *states.items(), (instant, after_second)]:
        _assert_rows(path, rows, as_of, "after the compaction")
    # Every slice with logs was compacted: read-optimized reads now hold every change.
    assert _by_key(comparable_rows(hudi_read(path, read_optimized=True))) == after_second
    assert same_rows(
        comparable_rows(table.read(read_optimized=True)), comparable_rows(hudi_read(path, read_optimized=True))
    )
    instants = [i.time for i in table.timeline().completed_writes()]
    assert instants[-3:] == [first.instant_time, second.instant_time, instant]
    assert reader_mismatches(path, instants) == []
    # Incremental reads skip the compaction's carried-over records (their commit times are kept).
    assert incremental_mismatches(path, incremental_ranges(instants[-4:])) == []

    # A write on top of the compacted slices (logs based on the compaction instant).
    third = table.upsert(_changed(data, slice(0, 1), column, ["lw-3"]))
    after_third = {k: dict(r) for k, r in after_second.items()}
    after_third[keys[0]] |= {column: "lw-3", "_hoodie_commit_time": third.instant_time}
    _assert_rows(path, after_third, None, "after a write on the compacted slices")
    _assert_rows(path, after_second, instant, "as of the compaction")
    assert reader_mismatches(path, [*instants, third.instant_time]) == []
