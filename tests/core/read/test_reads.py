"""Reads: projection, filters with partition pruning, time travel and incremental queries."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.table import Table


def batch(*rows: tuple) -> pa.Table:
    """Rows of (id, city, year, v)."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "city": pa.array([r[1] for r in rows], pa.string()),
            "year": pa.array([r[2] for r in rows], pa.int32()),
            "v": pa.array([r[3] for r in rows], pa.string()),
        }
    )


ROWS = [
    (1, "sf", 2023, "a"),
    (2, "sf", 2024, "b"),
    (3, "ny", 2023, "c"),
    (4, "ny", 2024, "d"),
    (5, "la", 2024, "e"),
]


@pytest.fixture
def table(tmp_path) -> Table:
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    t.upsert(batch(*ROWS))
    return t


@pytest.fixture
def opened_files(monkeypatch):
    """Paths of the base files every snapshot read hands to the Parquet scanner."""
    opened: list[str] = []
    original = ds.dataset

    def spy(source, *args, **kwargs):
        paths = [source] if isinstance(source, str) else list(source)
        opened.extend(paths)
        return original(source, *args, **kwargs)

    monkeypatch.setattr(ds, "dataset", spy)  # the scan imports pyarrow.dataset when it runs
    return opened


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def partitions_of(paths: list[str], root: str) -> set[str]:
    return {str(Path(p).parent.relative_to(root)) for p in paths}


# -- projection and filters ---------------------------------------------------------------------
def test_projection_returns_only_the_requested_columns_in_order(table):
    out = table.read(columns=["v", "id"])
    assert out.column_names == ["v", "id"]
    assert sorted(zip(out.column("id").to_pylist(), out.column("v").to_pylist())) == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
        (4, "d"),
        (5, "e"),
    ]
    meta = table.read(columns=["_hoodie_record_key"])
    assert sorted(meta.column(0).to_pylist()) == ["1", "2", "3", "4", "5"]


def test_full_read_has_meta_columns_first(table):
    names = table.read().column_names
    assert names[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    assert names[5:] == ["id", "city", "year", "v"]


def test_dnf_filters(table):
    assert ids(table.read(filters=[("city", "=", "sf")])) == [1, 2]
    assert ids(table.read(filters=[("city", "in", ["sf", "la"]), ("year", "=", 2024)])) == [2, 5]
    # OR of ANDs
    assert ids(table.read(filters=[[("city", "=", "ny"), ("year", "=", 2023)], [("v", "=", "e")]])) == [3, 5]
    assert ids(table.read(filters=[("id", ">", 3)])) == [4, 5]
    assert ids(table.read(filters=[("city", "=", "nowhere")])) == []


def test_pyarrow_expression_filters(table):
    assert ids(table.read(filters=pc.field("year") == 2023)) == [1, 3]
    expr = (pc.field("city") == "ny") | (pc.field("v").isin(["a", "e"]))
    assert ids(table.read(filters=expr)) == [1, 3, 4, 5]
    out = table.read(columns=["v"], filters=pc.field("id") >= 4)
    assert out.column_names == ["v"]
    assert sorted(out.column("v").to_pylist()) == ["d", "e"]


def test_partition_filters_skip_other_partitions_files(table, opened_files):
    out = table.read(filters=[("city", "=", "ny")])
    assert ids(out) == [3, 4]
    assert partitions_of(opened_files, table.path) == {"ny"}

    opened_files.clear()
    out = table.read(filters=[("city", "in", ["sf", "la"]), ("year", "=", 2024)])
    assert ids(out) == [2, 5]
    assert partitions_of(opened_files, table.path) == {"sf", "la"}

    opened_files.clear()
    out = table.read(filters=[[("city", "=", "la")], [("city", "!=", "sf"), ("id", "<", 4)]])
    assert ids(out) == [3, 5]
    assert partitions_of(opened_files, table.path) == {"la", "ny"}


def test_no_pruning_when_a_disjunct_does_not_constrain_partitions(table, opened_files):
    out = table.read(filters=[[("city", "=", "la")], [("year", "=", 2023)]])
    assert ids(out) == [1, 3, 5]
    assert partitions_of(opened_files, table.path) == {"sf", "ny", "la"}


def test_pruning_on_hive_style_and_integer_partitions(tmp_path, opened_files):
    t = Table.create(str(tmp_path / "h"), record_key="id", partition_by="year", hive_style_partitioning=True)
    t.upsert(batch(*ROWS))
    opened_files.clear()
    out = t.read(filters=[("year", ">=", 2024)])
    assert ids(out) == [2, 4, 5]
    assert partitions_of(opened_files, t.path) == {"year=2024"}
    opened_files.clear()
    assert ids(t.read(filters=[("year", "=", 2023)])) == [1, 3]
    assert partitions_of(opened_files, t.path) == {"year=2023"}


def test_pruning_a_filter_that_matches_no_partition_opens_no_file(table, opened_files):
    out = table.read(columns=["id", "v"], filters=[("city", "=", "tokyo")])
    assert out.num_rows == 0
    assert out.column_names == ["id", "v"]
    assert opened_files == []


# -- time travel ------------------------------------------------------------------------------------
@pytest.fixture
def history(tmp_path):
    """Three commits a few milliseconds apart: returns the table and the three instant times."""
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    r1 = t.upsert(batch((1, "sf", 2024, "v1"), (2, "ny", 2024, "v1")))
    time.sleep(0.02)
    r2 = t.upsert(batch((1, "sf", 2024, "v2"), (3, "sf", 2024, "v2")))
    time.sleep(0.02)
    r3 = t.delete(keys=[2])
    return t, r1.instant_time, r2.instant_time, r3.instant_time


def state(table: pa.Table) -> list[tuple]:
    return sorted((r["id"], r["v"]) for r in table.to_pylist())


def as_datetime(instant_time: str) -> dt.datetime:
    return dt.datetime.strptime(instant_time, "%Y%m%d%H%M%S%f")


STATE_1 = [(1, "v1"), (2, "v1")]
STATE_2 = [(1, "v2"), (2, "v1"), (3, "v2")]
STATE_3 = [(1, "v2"), (3, "v2")]


def test_time_travel_by_instant_time(history):
    t, i1, i2, i3 = history
    assert state(t.read(as_of=i1)) == STATE_1
    assert state(t.read(as_of=i2)) == STATE_2
    assert state(t.read(as_of=i3)) == STATE_3
    assert state(t.read()) == STATE_3


def test_time_travel_between_instants_resolves_to_the_latest_completed_not_after(history):
    t, i1, i2, i3 = history
    just_before_i2 = as_datetime(i2) - dt.timedelta(milliseconds=1)
    assert just_before_i2 >= as_datetime(i1)
    assert state(t.read(as_of=just_before_i2)) == STATE_1
    assert state(t.read(as_of=as_datetime(i2))) == STATE_2
    # An aware datetime is converted to the timeline's (local) zone first.
    aware = as_datetime(i2).astimezone(dt.UTC)
    assert state(t.read(as_of=aware)) == STATE_2
    # ISO strings, with "T" or a space, with milliseconds.
    iso = as_datetime(i2).isoformat(timespec="milliseconds")
    assert state(t.read(as_of=iso)) == STATE_2
    assert state(t.read(as_of=iso.replace("T", " "))) == STATE_2
    before_i3 = (as_datetime(i3) - dt.timedelta(milliseconds=1)).isoformat(sep=" ", timespec="milliseconds")
    assert state(t.read(as_of=before_i3)) == STATE_2
    # file_slices() agrees with read().
    assert {s.base_instant_time for s in t.file_slices(as_of=i1)} == {i1}


def test_time_travel_before_the_first_instant_names_the_earliest(history):
    t, i1, _, _ = history
    before = as_datetime(i1) - dt.timedelta(seconds=1)
    with pytest.raises(InstantNotFoundError, match=i1):
        t.read(as_of=before)
    with pytest.raises(InstantNotFoundError, match=i1):
        t.read(as_of="20000101000000000")


def test_time_travel_across_an_insert_overwrite(history):
    t, _, _, i3 = history
    r4 = t.insert_overwrite(batch((9, "sf", 2024, "v4")))
    assert state(t.read()) == [(9, "v4")]
    assert state(t.read(as_of=i3)) == STATE_3
    assert state(t.read(as_of=r4.instant_time)) == [(9, "v4")]


# -- incremental --------------------------------------------------------------------------------------
def test_incremental_reads_are_half_open(history):
    t, i1, i2, i3 = history
    # (i1, i2]: only what i2 wrote, in its latest state as of i2.
    assert state(t.read_incremental(i1, i2)) == [(1, "v2"), (3, "v2")]
    # (before everything, i1]: the first commit.
    assert state(t.read_incremental("20000101000000000", i1)) == [(1, "v1"), (2, "v1")]
    # (i2, i3]: a delete only, nothing to return.
    assert state(t.read_incremental(i2, i3)) == []
    # (i1, now]
    assert state(t.read_incremental(i1)) == [(1, "v2"), (3, "v2")]
    # (i2, i2] is empty; (i3, ...] is empty.
    assert t.read_incremental(i2, i2).num_rows == 0
    assert t.read_incremental(i3).num_rows == 0


def test_incremental_returns_the_latest_state_within_the_range(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    i1 = t.upsert(batch((1, "sf", 2024, "a1"), (2, "sf", 2024, "b1"))).instant_time
    i2 = t.upsert(batch((1, "sf", 2024, "a2"))).instant_time
    i3 = t.upsert(batch((1, "sf", 2024, "a3"), (4, "ny", 2024, "d3"))).instant_time
    assert state(t.read_incremental(i1, i3)) == [(1, "a3"), (4, "d3")]
    assert state(t.read_incremental(i1, i2)) == [(1, "a2")]
    rows = t.read_incremental(i1, i2).to_pylist()
    assert {r["_hoodie_commit_time"] for r in rows} == {i2}
    # Datetimes and ISO strings work as range bounds too.
    start = dt.datetime.strptime(i1, "%Y%m%d%H%M%S%f")
    assert state(t.read_incremental(start, i2)) == [(1, "a2")]


def test_incremental_projection_and_filters(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    i1 = t.upsert(batch((1, "sf", 2024, "a"))).instant_time
    t.upsert(batch((2, "sf", 2024, "b"), (3, "ny", 2023, "c"), (4, "ny", 2024, "d")))
    out = t.read_incremental(i1, columns=["id", "v"], filters=[("year", "=", 2024)])
    assert out.column_names == ["id", "v"]
    assert sorted(out.column("id").to_pylist()) == [2, 4]


def test_incremental_skips_file_groups_replaced_within_the_range(tmp_path):
    """As Hudi's incremental relation: records of file groups replaced in the range are gone."""
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    i1 = t.upsert(batch((1, "sf", 2024, "a"), (2, "ny", 2024, "b"))).instant_time
    i2 = t.insert_overwrite(batch((9, "sf", 2024, "z"))).instant_time
    assert state(t.read()) == [(2, "b"), (9, "z")]
    assert state(t.read_incremental("20000101000000000", i1)) == [(1, "a"), (2, "b")]
    assert state(t.read_incremental(i1, i2)) == [(9, "z")]
    assert state(t.read_incremental("20000101000000000", i2)) == [(2, "b"), (9, "z")]


# -- completed instants ----------------------------------------------------------------------------
def test_completed_instants_lists_every_completed_write_oldest_first(history):
    t, i1, i2, i3 = history
    r4 = t.insert_overwrite(batch((9, "sf", 2024, "x")))
    instants = t.completed_instants()
    assert [i.time for i in instants] == [i1, i2, i3, r4.instant_time]
    assert [i.action.value for i in instants] == ["commit", "commit", "commit", "replacecommit"]
    assert all(i.is_completed for i in instants)


def test_empty_table_reads(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    assert t.read().num_rows == 0
    assert t.completed_instants() == []
    assert t.schema() is None


@pytest.mark.parametrize("version", [6, 8])
def test_an_explicit_end_before_a_write_in_flight_can_complete_is_stable(tmp_path, monkeypatch, version):
    """A streaming consumer reads up to the last completion it saw while an ingestion write runs.

    On table versions 8+ the range is in completion time, and a write still in flight completes
    after every completion on the timeline now, whatever its instant time: a range ending at or
    before the latest completion can no longer change, and is read. On version 6 (commit time) a
    write in flight inside the range is still an error: its rows would land in the range later.
    """
    import lakeward.core.write.client as client_mod
    from tests.core.table_services.compaction_helpers import Background, Gate

    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city", table_version=version)
    first = t.upsert(batch((1, "sf", 2024, "a1"), (2, "sf", 2024, "b1"))).instant_time
    gate = Gate(monkeypatch, client_mod, "reconcile_markers")
    job = Background(lambda: Table.open(t.path).upsert(batch((3, "ny", 2024, "slow"))).instant_time)
    gate.wait()
    [pending] = Table.open(t.path).timeline().pending_writes()
    done = Table.open(t.path).upsert(batch((1, "sf", 2024, "a2"))).instant_time
    timeline = Table.open(t.path).timeline()
    assert pending.time < done
    begin = timeline.completion_times().get(first, first)
    end = timeline.completion_times().get(done, done)
    try:
        if version == 6:
            with pytest.raises(InstantNotFoundError, match="still in flight"):
                Table.open(t.path).read_incremental(begin, end)
        else:
            assert state(Table.open(t.path).read_incremental(begin, end)) == [(1, "a2")]
            # an end past every completion could still take the write in flight: refused
            with pytest.raises(InstantNotFoundError, match="still in flight"):
                Table.open(t.path).read_incremental(begin, "29991231235959999")
    finally:
        gate.release()
    slow = job.result()
    timeline = Table.open(t.path).timeline()
    # the write that was in flight is read by the next range, never lost between the two
    after = Table.open(t.path).read_incremental(end)
    assert state(after) == ([(3, "slow")] if version != 6 else [])
    assert {r["_hoodie_commit_time"] for r in after.to_pylist()} <= {slow}


def test_a_pending_clustering_holds_back_no_incremental_or_change_read_on_version_6(tmp_path):
    """A clustering changes no record and keeps commit times: as in Hudi (whose hollow-commit check skips
    clustering plans), a write completed after a pending plan is read at once. Before the fix version 6
    ranges stopped before the plan (nothing new for as long as it stayed pending), and an explicit
    end past it was refused."""
    table = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="p",
        ordering_field="ts",
        options={"hoodie.table.cdc.enabled": "true"},
    )

    def row(key: str, ts: int) -> pa.Table:
        return pa.table({"id": [key], "p": ["a"], "v": [ts], "ts": [ts]})

    table.bulk_insert(row("k1", 1))
    second = table.bulk_insert(row("k2", 2)).instant_time
    assert table.schedule_clustering() is not None
    third = table.upsert(row("k3", 3)).instant_time  # a new key: written while the plan is pending
    assert table.read_incremental(second).column("id").to_pylist() == ["k3"]
    assert table.read_incremental(second, third).column("id").to_pylist() == ["k3"]
    assert [(c["op"], c["ts_ms"]) for c in table.read_changes(second).to_pylist()] == [("i", third)]


@pytest.mark.parametrize(("version", "table_type"), [(6, "COPY_ON_WRITE"), (8, "COPY_ON_WRITE"), (9, "MERGE_ON_READ")])
def test_an_incremental_range_keeps_a_group_a_clustering_replaced_only_after_it(
    tmp_path: Path, version: int, table_type: str
) -> None:
    """A clustering planned before the range's last write and completed after the range's end: the
    rows the range wrote into the file groups it replaces are read from those groups. On 8+ a group
    counted as replaced from the clustering's instant time, so the range returned none of them (a
    stream moved on past them). Found reviewing the change to slices by completion time."""
    schema = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64())])

    def rows(*items: tuple[str, str, int]) -> pa.Table:
        return pa.Table.from_pylist([{"id": i, "part": p, "ts": ts} for i, p, ts in items], schema=schema)

    t = Table.create(
        str(tmp_path / "t"), record_key="id", partition_by="part", ordering_field="ts", table_version=version,
        table_type=table_type,
    )  # fmt: skip
    t.bulk_insert(rows(("x", "p1", 0)))
    t.bulk_insert(rows(("y", "p1", 0)))  # two small file groups in p1: a clustering takes them
    before = t.upsert(rows(("z", "p2", 0))).instant_time
    t.upsert(rows(("x", "p1", 1)))
    clustering = t.schedule_clustering()
    assert clustering is not None
    last = t.upsert(rows(("z", "p2", 1))).instant_time  # requested after the plan, completed before it ran
    completion = t.timeline().completion_times()
    begin, end = completion.get(before, before), completion.get(last, last)
    t.run_clustering(clustering)
    got = sorted((r["id"], r["ts"]) for r in Table.open(t.path).read_incremental(begin, end).to_pylist())
    assert got == [("x", 1), ("z", 1)]
