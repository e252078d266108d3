"""Read a table with lakeward and with hudi-rs (PyPI `hudi`) and compare the rows.

The oracle is hudi-rs: `HudiTableBuilder.from_base_uri(path).build().read(options)`.
Rows of both readers go through ONE normalising helper, `comparable_rows`, which only
removes representational differences between the readers (see its docstring); values
are never rounded, cast or dropped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

import hudi
import pyarrow as pa
import pytest

from lakeward.core.table import Table

#: Meta columns compared besides the data columns. `_hoodie_commit_seqno` and
#: `_hoodie_file_name` are left out: they identify physical write positions, not rows.
COMPARED_META = ("_hoodie_commit_time", "_hoodie_record_key", "_hoodie_partition_path")
SKIPPED_META = ("_hoodie_commit_seqno", "_hoodie_file_name")

#: An incremental begin before every instant ("(epoch, t]"); lakeward does not accept "0".
EPOCH_INSTANT = "19700101000000000"

Row = dict[str, Any]


def _plain(value: Any) -> Any:
    """Recursively replace tz-aware datetimes by the naive UTC datetime of the same instant."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, dict):  # keys sorted so that repr() is canonical (see `same_rows`)
        return {k: _plain(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):  # map entries come out of to_pylist() as (key, value) tuples
        return tuple(_plain(v) for v in value)
    return value


def comparable_rows(data: pa.Table | Sequence[pa.RecordBatch]) -> list[Row]:
    """The rows of one reader's result as sorted plain Python dicts, ready for `==`.

    Representational differences between lakeward and hudi-rs, and ONLY those, vanish here:

    * Arrow container details: list item field names (`element` / `array` / `item`),
      map entry names, dictionary encoding, string vs large_string, nullability flags and
      integer widths (hudi-rs widens Avro-int-backed byte/short columns to int32) all
      disappear in `to_pylist()`, which yields the values only.
    * Timestamp time-zone annotation: hudi-rs reads Avro `timestamp-micros` as
      `timestamp[us, tz=UTC]` while lakeward may return the same instant as naive
      `timestamp[us]`; aware values become naive UTC (the instant is unchanged).
    * Row order: rows are sorted by partition path, record key, commit time, then the
      full row text.
    * `_hoodie_commit_seqno` and `_hoodie_file_name` are dropped (see `COMPARED_META`).

    A reader that returns no batches at all (hudi-rs on an empty result) gives [].
    """
    if isinstance(data, pa.Table):
        table = data
    else:
        batches = list(data)
        if not batches:
            return []
        table = pa.Table.from_batches(batches)
    keep = [c for c in table.column_names if c not in SKIPPED_META]
    rows = [_plain(r) for r in table.select(keep).to_pylist()]
    return sorted(
        rows,
        key=lambda r: (
            str(r.get("_hoodie_partition_path")),
            str(r.get("_hoodie_record_key")),
            str(r.get("_hoodie_commit_time")),
            repr(r),
        ),
    )


def same_rows(mine: list[Row], other: list[Row]) -> bool:
    """Equal values AND equal Python types: `==` alone would let 1 == 1.0 == True pass."""
    return mine == other and [repr(r) for r in mine] == [repr(r) for r in other]


def column_names(data: pa.Table | Sequence[pa.RecordBatch]) -> set[str] | None:
    """Column names of a result; None when hudi-rs returned no batch (no schema to compare)."""
    if isinstance(data, pa.Table):
        return set(data.column_names)
    batches = list(data)
    return set(batches[0].schema.names) if batches else None


# -- hudi-rs -------------------------------------------------------------------------------
def hudi_table(path: str) -> hudi.HudiTable:
    """A freshly built hudi-rs table (it loads the timeline when built)."""
    return hudi.HudiTableBuilder.from_base_uri(path).build()


def hudi_snapshot(table: hudi.HudiTable, as_of: str | None = None) -> list[pa.RecordBatch]:
    options = hudi.HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    return table.read(options)


def hudi_incremental(table: hudi.HudiTable, begin: str, end: str | None) -> list[pa.RecordBatch]:
    options = hudi.HudiReadOptions().with_query_type(hudi.HudiQueryType.Incremental).with_start_timestamp(begin)
    if end is not None:
        options = options.with_end_timestamp(end)
    return table.read(options)


# -- both readers --------------------------------------------------------------------------
def write_instants(table: Table) -> list[str]:
    """Times of the table's completed instants, oldest first."""
    return [i.time for i in table.completed_instants()]


def incremental_ranges(instants: Sequence[str]) -> list[tuple[str, str | None]]:
    """(begin, end] ranges to check: (epoch, first], each consecutive pair, (first, last] and (first, open)."""
    if not instants:
        return []
    ranges: list[tuple[str, str | None]] = [(EPOCH_INSTANT, instants[0])]
    ranges += list(zip(instants, instants[1:]))
    if len(instants) > 2:
        ranges.append((instants[0], instants[-1]))
    if len(instants) > 1:
        ranges.append((instants[0], None))
    return ranges


def _diff(label: str, ours: pa.Table, theirs: Sequence[pa.RecordBatch]) -> str | None:
    """None when both results hold the same rows (and, if hudi-rs gave a schema, columns)."""
    problems = []
    their_columns = column_names(theirs)
    if their_columns is not None and their_columns != set(ours.column_names):
        problems.append(
            f"columns differ: only lakeward {sorted(set(ours.column_names) - their_columns)}, "
            f"only hudi-rs {sorted(their_columns - set(ours.column_names))}"
        )
    mine, other = comparable_rows(ours), comparable_rows(theirs)
    if not same_rows(mine, other):
        mine_text, other_text = [repr(r) for r in mine], [repr(r) for r in other]
        only_mine = [t for t in mine_text if t not in other_text]
        only_other = [t for t in other_text if t not in mine_text]
        problems.append(
            f"rows differ ({len(mine)} lakeward vs {len(other)} hudi-rs)\n"
            f"    only in lakeward: {only_mine}\n    only in hudi-rs:  {only_other}"
        )
    return f"{label}: " + "; ".join(problems) if problems else None


def snapshot_mismatches(path: str, as_of: Iterable[str | None] = (None,)) -> list[str]:
    """Snapshot (None) and time-travel reads where lakeward and hudi-rs disagree."""
    ours_table, theirs_table = Table.open(path), hudi_table(path)
    out = []
    for instant in as_of:
        label = "snapshot" if instant is None else f"as of {instant}"
        problem = _diff(label, ours_table.read(as_of=instant), hudi_snapshot(theirs_table, instant))
        if problem:
            out.append(problem)
    return out


def incremental_mismatches(path: str, ranges: Iterable[tuple[str, str | None]]) -> list[str]:
    """Incremental reads over (begin, end] where lakeward and hudi-rs disagree."""
    ours_table, theirs_table = Table.open(path), hudi_table(path)
    out = []
    for begin, end in ranges:
        problem = _diff(
            f"incremental ({begin}, {end}]",
            ours_table.read_incremental(begin, end),
            hudi_incremental(theirs_table, begin, end),
        )
        if problem:
            out.append(problem)
    return out


def all_mismatches(path: str) -> list[str]:
    """Snapshot, time travel to each completed instant and every incremental range."""
    instants = write_instants(Table.open(path))
    return snapshot_mismatches(path, [None, *instants]) + incremental_mismatches(path, incremental_ranges(instants))


def project(rows: list[Row], columns: Sequence[str]) -> list[Row]:
    return [{c: r[c] for c in columns} for r in rows]


def assert_values(got: list[Row], want: list[Row], label: str) -> None:
    """`got == want` (pytest shows the diff), and the same Python types (1 vs True vs 1.0)."""
    assert got == want, label

    def canonical(rows: list[Row]) -> list[str]:
        return [repr({k: r[k] for k in sorted(r)}) for r in rows]

    assert canonical(got) == canonical(want), f"{label}: equal values of different types"


def both_readers(path: str) -> tuple[list[Row], list[Row]]:
    """Latest snapshot rows from lakeward and from hudi-rs, normalised."""
    return comparable_rows(Table.open(path).read()), comparable_rows(hudi_snapshot(hudi_table(path)))


def fail_on(problems: list[str]) -> None:
    """Fail the test with every disagreement between lakeward and hudi-rs listed."""
    if problems:
        pytest.fail("lakeward and hudi-rs disagree:\n" + "\n".join(problems), pytrace=False)
