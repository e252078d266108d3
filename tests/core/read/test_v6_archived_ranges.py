"""Incremental and CDC reads of a version 6 table whose first commits were archived.

Version 6's archive keeps no way back to an archived commit's write stats. An incremental
(latest_state) read whose range begins before the active timeline returned only the records of
file groups that active commits touched: the ones last written by archived commits were silently
missing (and a range wholly in the archive was empty). It now reads the snapshot as of the range's
end and keeps the records committed in the range (Hudi's full-table-scan fallback). A CDC query
from "earliest" skipped the first active commit (it began the range there, exclusively), whose
changes are retained. Found by exploratory testing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import InstantNotFoundError

OPTIONS = {
    "hoodie.table.cdc.enabled": "true",
    "hoodie.metadata.enable": "false",
    "hoodie.cleaner.commits.retained": "3",
    "hoodie.keep.min.commits": "4",
    "hoodie.keep.max.commits": "5",
}


def _archived_table(path: Path, table_type: str) -> tuple[Table, list[str], list[dict[str, tuple[str, int]]]]:
    """8 commits, each inserting key k<n> into its own partition and updating k0; the first
    ones archived. Returns the table, the commit times and, after each commit, key -> (commit
    time, val) as written."""
    table = Table.create(
        str(path),
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        table_version=6,
        options=OPTIONS,
    )
    times: list[str] = []
    last: dict[str, tuple[str, int]] = {}
    states: list[dict[str, tuple[str, int]]] = []
    for n in range(8):
        rows = [
            {"id": f"k{n}", "part": f"p{n}", "ts": n, "val": n},
            {"id": "k0", "part": "p0", "ts": n, "val": 100 + n},
        ]
        times.append(table.upsert(pa.Table.from_pylist(rows)).instant_time)
        for r in rows:
            last[str(r["id"])] = (times[-1], int(r["val"]))
        states.append(dict(last))
    assert table.archive().archived, "nothing archived"
    return Table.open(str(path)), times, states


def _latest_state(
    times: list[str], states: list[dict[str, tuple[str, int]]], begin: str, end: str | None
) -> set[tuple[str, int]]:
    """The records as of `end` whose latest write is in (begin, end]."""
    as_of = states[times.index(end)] if end is not None else states[-1]
    return {(k, v) for k, (t, v) in as_of.items() if t > begin}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_incremental_reads_reaching_into_the_archive_return_every_record_of_the_range(
    tmp_path: Path, table_type: str
) -> None:
    table, times, states = _archived_table(tmp_path / "t", table_type)
    first_active = table.timeline().instants[0].time
    assert first_active > times[1], "the range must begin in the archive"
    for begin, end in ((times[1], None), ("0", None), (times[1], times[6])):
        rows = table.read_incremental(begin, end).to_pylist()
        assert {(r["id"], r["val"]) for r in rows} == _latest_state(times, states, begin, end), (begin, end)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_cdc_from_earliest_includes_the_first_active_commit(tmp_path: Path, table_type: str) -> None:
    table, times, _ = _archived_table(tmp_path / "t", table_type)
    first_active = table.timeline().completed_writes()[0].time
    changes = table.read_changes("earliest").to_pylist()
    assert min(r["ts_ms"] for r in changes) == first_active
    assert {r["ts_ms"] for r in changes} == {t for t in times if t >= first_active}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_incremental_reads_into_an_archive_a_clean_passed_are_refused(tmp_path: Path, table_type: str) -> None:
    """Archived, then cleaned: the slices as of an archived range's end are gone. The read returned no
    rows and no error (the retention check looked at the active timeline only); it names the clean."""
    options = {
        "hoodie.cleaner.commits.retained": "2",
        "hoodie.keep.min.commits": "3",
        "hoodie.keep.max.commits": "4",
        "hoodie.compact.inline.max.delta.commits": "3",  # merge-on-read archival keeps what compaction counts
    }
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", ordering_field="ts", table_type=table_type, table_version=6, options=options)
    rows = [[("k0", 1, 1)], [("k0", 2, 2), ("k1", 2, 2)], *([(f"x{n}", n, n)] for n in range(3, 7))]
    times = [
        Table.open(path, options=options)
        .upsert(pa.Table.from_pylist([{"id": k, "ts": t, "val": v} for k, t, v in batch]))
        .instant_time
        for batch in rows
    ]
    table = Table.open(path, options=options)
    assert table.archive().archived, "nothing archived"
    assert table.clean() is not None, "nothing cleaned"
    table = Table.open(path, options=options)
    assert table.timeline().instants[0].time > times[1], "the ranges must lie in the archive"
    for begin, end in (("0", times[0]), (times[0], times[1]), (times[0], None)):
        with pytest.raises(InstantNotFoundError, match="no longer retained"):
            table.read_incremental(begin, end)
    # "0" (Hudi's earliest) begins past every write the clean no longer retains, archived ones too
    with pytest.raises(InstantNotFoundError, match=r"begin the range at (\d+)") as refused:
        table.read_incremental(times[0])
    retained_from = re.search(r"begin the range at (\d+)", str(refused.value)).group(1)  # type: ignore[union-attr]
    assert table.read_incremental("0").equals(table.read_incremental(retained_from))
    # a range in what the clean kept still reads
    rows_read = table.read_incremental(times[-2]).to_pylist()
    assert [(r["id"], r["val"]) for r in rows_read] == [("x6", 6)]
