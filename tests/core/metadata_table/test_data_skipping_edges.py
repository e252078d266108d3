"""Data skipping never loses a row: on every edge a filtered read returns the rows of the full read
filtered by the same predicate (`read()` then pyarrow), on tables with `column_stats` and
`partition_stats` (versions 8 and 9). Each case was a silent loss of rows, or a failed write,
found by exploratory testing: nulls in an `in` list, float32 columns, decimals beyond 28 digits
or Hudi's version-1 scale, a column added later filtered with `is null`, a log file holding only
NaN, date and timestamp columns written twice."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.index.secondary.predicates import filters_to_expression
from lakeward.core.metadata_table.column_stats import ColumnRange, parquet_ranges
from lakeward.core.metadata_table.partition_stats import partition_range

STATS = {
    "hoodie.metadata.index.column.stats.enable": "true",
    "hoodie.metadata.index.partition.stats.enable": "true",
}


def _table(path: Path, version: int, table_type: str = "COPY_ON_WRITE") -> Table:
    return Table.create(
        str(path),
        record_key="id",
        partition_by="part",
        ordering_field="o",
        table_type=table_type,
        table_version=version,
        options=STATS,
    )


def _rows(data: pa.Table) -> list[dict[str, Any]]:
    def plain(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and math.isnan(v) else v

    data = data.select([c for c in data.column_names if not c.startswith("_hoodie")])
    return sorted(({k: plain(v) for k, v in r.items()} for r in data.to_pylist()), key=lambda r: r["id"])


def assert_filtered_reads_lose_nothing(table: Table, filters: list[Any]) -> list[dict[str, Any]]:
    full = Table.open(table.path).read()
    expected = _rows(full.filter(filters_to_expression(filters)))
    got = Table.open(table.path).read(filters=filters)
    assert _rows(got) == expected, filters
    assert got.schema == full.schema, "a pruned read returns other column types than a full read"
    return expected


@pytest.mark.parametrize("version", [8, 9])
def test_in_with_null_keeps_the_null_rows(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version)
    table.upsert(pa.table({"id": [1, 2, 3], "part": ["a", "a", "b"], "o": [1] * 3, "x": pa.array([None, None, 5])}))
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("x", "in", [None, 100])])] == [1, 2]
    assert_filtered_reads_lose_nothing(table, [("x", "in", [None])])


@pytest.mark.parametrize("version", [8, 9])
def test_float32_bounds_compare_as_the_exact_filter_does(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version, "MERGE_ON_READ")
    table.upsert(pa.table({"id": [1], "part": ["a"], "o": [1], "f": pa.array([0.1], pa.float32())}))
    for op in (">", ">=", "=", "<", "<="):
        assert_filtered_reads_lose_nothing(table, [("f", op, 0.1)])
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("f", ">", 0.1)])] == [1]


@pytest.mark.parametrize(
    ("version", "precision", "scale", "value"),
    [
        (9, 38, 0, "10000000000000000000000000000000000001"),  # beyond the default 28 digits
        (9, 38, 10, "1234567890123456789012345.0000000001"),
        (8, 38, 20, "0.12345678901234567890"),  # version 1 keeps 15 decimal places
        (8, 38, 0, "12345678901234567890123456789012345678"),  # beyond version 1's decimal(30, 15)
    ],
)
def test_decimal_bounds_keep_every_digit_they_need(
    tmp_path: Path, version: int, precision: int, scale: int, value: str
) -> None:
    table = _table(tmp_path / "t", version)
    number = decimal.Decimal(value)
    column = pa.array([number], pa.decimal128(precision, scale))
    table.upsert(pa.table({"id": [1], "part": ["a"], "o": [1], "d": column}))
    table.upsert(pa.table({"id": [2], "part": ["a"], "o": [1], "d": column}))  # partition_stats merged
    for op in ("=", "<=", ">="):
        assert len(assert_filtered_reads_lose_nothing(table, [("d", op, number)])) == 2


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_is_null_on_a_column_added_later_keeps_the_old_rows(tmp_path: Path, version: int, table_type: str) -> None:
    table = _table(tmp_path / "t", version, table_type)
    table.bulk_insert(pa.table({"id": [1, 2], "part": ["a", "a"], "o": [1, 1]}))  # a file without `c` stays live
    table.bulk_insert(pa.table({"id": [3, 4], "part": ["a", "a"], "o": [1, 1], "c": pa.array([10, 20])}))
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("c", "is null", None)])] == [1, 2]
    table.upsert(pa.table({"id": [1], "part": ["a"], "o": [2], "c": pa.array([30])}))
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("c", "is null", None)])] == [2]
    assert_filtered_reads_lose_nothing(table, [[("c", "is null", None)], [("id", "=", 4)]])
    # every predicate a null satisfies: the partition's range knows nothing of the older file's nulls
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("c", "in", [None])])] == [2]
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("c", "in", [None, 20])])] == [2, 4]
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("c", "not in", [10, 20, 30])])] == [2]


@pytest.mark.parametrize("version", [8, 9])
def test_a_log_file_of_nan_only_does_not_rule_its_partition_out(tmp_path: Path, version: int) -> None:
    """The partition's range merges its files in storage order, which follows the random file ids:
    a few tables make the NaN-only log file come first in some (it then ruled the partition out)."""
    for run in range(6):
        table = _table(tmp_path / f"t{run}", version, "MERGE_ON_READ")
        table.bulk_insert(pa.table({"id": [1], "part": ["a"], "o": [1], "f": [5.0]}))
        table.upsert(pa.table({"id": [1], "part": ["a"], "o": [2], "f": [float("nan")]}))  # a log file of NaN
        table.bulk_insert(pa.table({"id": [2], "part": ["a"], "o": [1], "f": [3.0]}))
        assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("f", "=", 3.0)])] == [2]


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_negations_and_nan_tests_keep_the_nan_rows_of_a_file_whose_other_values_are_one(
    tmp_path: Path, version: int, table_type: str
) -> None:
    """Parquet's min/max leave NaN out: a file holding 1.0 and NaN looks like it holds only 1.0, and
    pyarrow's scan folded `f != 1.0`, `not in [1.0]` and `in [nan]` to false there (no row, silently)."""
    table = _table(tmp_path / "t", version, table_type)
    table.upsert(pa.table({"id": [1, 2], "part": ["a", "a"], "o": [1, 1], "f": [1.0, float("nan")]}))
    for filters in ([("f", "!=", 1.0)], [("f", "not in", [1.0])], [("f", "in", [float("nan")])]):
        assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, filters)] == [2], filters


def test_nan_never_bounds_a_partition_range() -> None:
    files = [
        ColumnRange("log", "f", float("nan"), float("nan"), 1, 0),
        ColumnRange("base", "f", 3.0, 5.0, 2, 0),
    ]
    for ordered in (files, files[::-1]):
        merged = partition_range("a", "f", ordered, pa.float64())
        assert (merged.min_value, merged.max_value, merged.value_count) == (3.0, 5.0, 3)


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.date32(),
        pa.timestamp("us"),
        pa.timestamp("ms"),
        pa.timestamp("us", "UTC"),
        pa.timestamp("us", "America/New_York"),
    ],
    ids=str,
)
def test_date_and_timestamp_columns_are_written_twice_and_skipped_on(
    tmp_path: Path, version: int, arrow_type: pa.DataType
) -> None:
    table = _table(tmp_path / "t", version)
    values = [dt.date(2020, 1, 1), dt.date(2021, 6, 1)] if pa.types.is_date(arrow_type) else None
    if values is None:
        zone = dt.UTC if arrow_type.tz else None
        values = [dt.datetime(2020, 1, 1, tzinfo=zone), dt.datetime(2021, 6, 1, tzinfo=zone)]
    for i, value in enumerate(values):
        table.upsert(pa.table({"id": [i], "part": ["a"], "o": [1], "c": pa.array([value], arrow_type)}))
    probe = Table.open(table.path).read().column("c")[0]  # a literal of the type reads compare with
    for op in ("=", ">", "<="):
        assert_filtered_reads_lose_nothing(table, [("c", op, probe)])


@pytest.mark.parametrize("version", [8, 9])
def test_a_pruned_read_has_the_column_types_of_a_full_read(tmp_path: Path, version: int) -> None:
    """The first write's files kept the batch's own types (int8, a time zone-less timestamp) while
    every later file took the committed schema's (int32, UTC): a read that skipped the later files
    returned other column types than a full read."""
    table = _table(tmp_path / "t", version)
    schema = pa.schema(
        [("id", pa.int64()), ("part", pa.string()), ("o", pa.int64()), ("i8", pa.int8()), ("ts", pa.timestamp("us"))]
    )
    for i, part in ((1, "a"), (2, "a"), (3, "b")):
        row = {"id": i, "part": part, "o": 1, "i8": i, "ts": dt.datetime(2024, 1, i)}
        table.bulk_insert(pa.Table.from_pylist([row], schema=schema))
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("i8", "=", 1)])] == [1]
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("i8", "=", 3)])] == [3]


@pytest.mark.parametrize("version", [8, 9])
def test_a_datetime_literal_on_a_date_column_prunes_no_file_holding_matches(tmp_path: Path, version: int) -> None:
    """The literal was cast to the column's type: datetime(2024, 1, 5, 12) became 2024-01-05, so
    `d < noon of the 5th` pruned the file whose minimum is the 5th."""
    table = _table(tmp_path / "t", version)
    for day in (1, 5, 9):
        first = dt.date(2024, 1, day)
        rows = {"id": [day, day + 1], "part": ["a", "a"], "o": [1, 1], "d": [first, first + dt.timedelta(days=1)]}
        table.bulk_insert(pa.table(rows))
    noon = dt.datetime(2024, 1, 5, 12)
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("d", "<", noon)])] == [1, 2, 5]


@pytest.mark.parametrize("version", [8, 9])
def test_a_value_without_statistics_leaves_its_partition_unbounded(tmp_path: Path, version: int) -> None:
    """Parquet writers keep no min/max for a value over 4 KiB: that file's range has no bounds, and
    the partition's range was taken over the other files alone, which ruled the partition out."""
    table = _table(tmp_path / "t", version)
    long_text = "z" * 5000
    table.bulk_insert(pa.table({"id": [1], "part": ["a"], "o": [1], "s": ["b"]}))
    table.bulk_insert(pa.table({"id": [2], "part": ["a"], "o": [1], "s": [long_text]}))
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("s", "=", long_text)])] == [2]


def test_a_row_group_without_statistics_leaves_its_file_unbounded(tmp_path: Path) -> None:
    """A file's range was taken over the row groups that have min/max, leaving out the values of
    one that has none."""
    path = tmp_path / "two-groups.parquet"
    pq.write_table(pa.table({"s": ["b", "c", "z" * 5000, None]}), path, row_group_size=2)
    assert not pq.ParquetFile(path).metadata.row_group(1).column(0).statistics.has_min_max
    stats = parquet_ranges(path.read_bytes(), "f", ["s"])["s"]
    assert (stats.min_value, stats.max_value) == (None, None)
    assert stats.value_count > stats.null_count > 0  # neither `is null` nor `is not null` rules it out


@pytest.mark.parametrize("version", [8, 9])
def test_a_delete_only_log_file_written_first_keeps_the_commits_column_stats(tmp_path: Path, version: int) -> None:
    """The indexed columns were taken from the first file the commit wrote: a log file of deletes
    only has no columns, so no file of the commit got column stats, and the partition stats left
    out the new values."""
    table = _table(tmp_path / "t", version, "MERGE_ON_READ")
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("part", pa.string()),
            ("o", pa.int64()),
            ("v", pa.int64()),
            ("_hoodie_is_deleted", pa.bool_()),
        ]
    )
    rows = [{"id": 1, "part": "a", "o": 1, "v": 1, "_hoodie_is_deleted": False}]
    table.upsert(
        pa.Table.from_pylist(
            [*rows, {"id": 2, "part": "b", "o": 1, "v": 2, "_hoodie_is_deleted": False}], schema=schema
        )
    )
    # partition "a" gets a log file of deletes only; it sorts before partition "b"'s log file
    change = [{"id": 1, "part": "a", "o": 2, "v": 1, "_hoodie_is_deleted": True}]
    table.upsert(
        pa.Table.from_pylist(
            [*change, {"id": 2, "part": "b", "o": 2, "v": 1000, "_hoodie_is_deleted": False}], schema=schema
        )
    )
    assert [r["id"] for r in assert_filtered_reads_lose_nothing(table, [("v", "=", 1000)])] == [2]
