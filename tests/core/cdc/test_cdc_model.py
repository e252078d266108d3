"""Randomised: CDC queries return exactly the change log a plain model of the writes implies.

For copy-on-write and merge-on-read and each supplemental logging level: many commits of
random upserts, deletes, re-inserts, partition overwrites and partition deletes over a
small key space, with compactions, clusterings, change tracking and cleans interleaved;
then, for many random (begin, end] ranges, `read_changes` must equal the model's log.

On every table version lakeward writes (6, 8, 9). On 8 and 9 (Hudi 1.x) a range is in
completion time, as Hudi 1.x's incremental and CDC queries take it: the bounds asked for
are the commits' completion times, and the changes must be those of the commits that
completed in the range. After the run hudi-rs reads every state of the table (snapshot,
time travel to every instant, incremental) to lakeward's rows.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.table_services.clean import first_retained_begin
from tests.interop.compare import fail_on
from tests.support.change_model import ChangeModel, read_as_changes
from tests.support.hudi_rs_states import readable_mismatches
from tests.support.out_of_order import write_out_of_order

KEYS = [f"k{i:02d}" for i in range(14)]
PARTS = ["p0", "p1"]
SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("v", pa.int64()), ("ts", pa.int64())])


def _batch(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _run(tmp_path, table_type: str, mode: str, seed: int, version: int = 6) -> None:
    rng = random.Random(seed)
    table = Table.create(
        str(tmp_path / "t"),
        table_version=version,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        options={
            "hoodie.table.cdc.enabled": "true",
            "hoodie.table.cdc.supplemental.logging.mode": mode,
            "hoodie.cleaner.commits.retained": 6,
            "hoodie.parquet.small.file.limit": 2000 if rng.random() < 0.5 else 0,
        },
    )
    model = ChangeModel("id", "part")
    part_of = {k: PARTS[i % 2] for i, k in enumerate(KEYS)}  # a key lives in one partition
    ts = 0
    instants: list[str] = []
    services: list[str] = []
    for _ in range(16):
        ts += 1
        roll = rng.random()
        if roll < 0.55 or not model.rows:
            keys = rng.sample(KEYS, rng.randint(1, 6))
            rows = [{"id": k, "part": part_of[k], "v": rng.randint(0, 999), "ts": ts} for k in keys]
            instant = table.upsert(_batch(rows)).instant_time
            model.upsert(instant, rows)
        elif roll < 0.8:
            keys = rng.sample(KEYS, rng.randint(1, 5))  # some may not exist: no change for those
            rows = [{"id": k, "part": part_of[k], "v": 0, "ts": ts} for k in keys]
            instant = table.delete(_batch(rows)).instant_time
            model.delete(instant, keys)
        elif roll < 0.92:
            part = rng.choice(PARTS)
            keys = rng.sample([k for k in KEYS if part_of[k] == part], 3)
            rows = [{"id": k, "part": part, "v": rng.randint(0, 999), "ts": ts} for k in keys]
            instant = table.insert_overwrite(_batch(rows)).instant_time
            model.insert_overwrite(instant, rows)
        else:
            part = rng.choice(PARTS)
            instant = table.delete_partition([part]).instant_time
            model.delete_partitions(instant, [part])
        instants.append(instant)
        service = rng.random()
        if table_type == "MERGE_ON_READ" and service < 0.2:
            planned = table.schedule_compaction(force=True)
            if planned:
                table.run_compaction(planned)
                services.append("compaction")
        elif table_type == "MERGE_ON_READ" and service < 0.35:
            planned = table.schedule_change_tracking()
            if planned:
                table.run_change_tracking(planned)
                services.append("change_tracking")
        elif service < 0.45:
            planned = table.schedule_clustering()
            if planned:
                table.run_clustering(planned)
                services.append("clustering")
        elif service < 0.55 and table.clean() is not None:
            services.append("clean")

    # The time a commit's range bound is given in: its instant time (v6), its completion time (v8+).
    bound_of = {i.time: i.ordering_time for i in table.timeline().completed()}
    instant_of = {i.ordering_time: i.time for i in table.timeline().completed()}
    compared = 0
    bounds = ["earliest", *instants]
    for _ in range(25):
        i = rng.randrange(len(bounds))
        j = rng.randrange(i, len(instants) + 1)
        begin = bounds[i]
        end = instants[j - 1] if j > i and rng.random() < 0.7 else None
        try:
            got = table.read_changes(bound_of.get(begin, begin), end and bound_of[end], images="struct")
        except InstantNotFoundError as exc:
            assert "cleaned" in str(exc) or "retained" in str(exc), exc
            continue
        start = begin
        if begin == "earliest":  # every retained change: after the last write a clean removed the files of
            retained_from = first_retained_begin(table.storage, table.timeline(), "0" * 17)
            start = instant_of.get(retained_from, "")
        assert read_as_changes(table, got.to_pylist(), "id") == model.changes(start, end), (begin, end, services)
        compared += 1
    latest = table.read_changes(bound_of[instants[-4]], images="struct")
    assert read_as_changes(table, latest.to_pylist(), "id") == model.changes(instants[-4], None)
    assert compared >= 5, f"only {compared} ranges were queryable"
    if version != 6:
        assert set(bound_of) != set(bound_of.values()), "v8+ ranges are asked in completion time"
    fail_on(readable_mismatches(table.path))


@pytest.mark.slow  # ~10 s each: a randomised model run per table type and logging mode
@pytest.mark.parametrize("version", [6, 8, 9])
@pytest.mark.parametrize("mode", ["KEY_OP", "DATA_BEFORE", "DATA_BEFORE_AFTER"])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_cdc_queries_match_the_model(tmp_path, table_type, mode, version):
    for seed in range(3):
        _run(tmp_path / str(seed), table_type, mode, seed, version)


@pytest.mark.parametrize(("table_type", "mode"), [("COPY_ON_WRITE", "DATA_BEFORE_AFTER"), ("MERGE_ON_READ", "KEY_OP")])
@pytest.mark.parametrize("version", [8, 9])
def test_cdc_queries_match_the_model_on_hudi_1x_tables(tmp_path, table_type, mode, version):
    """One seed per Hudi 1.x version in the default run (the slow run takes every mode and seed)."""
    _run(tmp_path, table_type, mode, 7, version)


# -- Hudi 1.x ranges in completion time: the commits planned decide the rows, not their instant times --
def _changes(table: Table, begin: str, end: str | None = None) -> list[tuple]:
    got = table.read_changes(begin, end, images="struct").to_pylist()
    return [(r["op"], r["ts_ms"], (r["after"] or r["before"])["id"], r["after"] and r["after"]["v"]) for r in got]


def _latest_changes(changes: list[tuple]) -> list[tuple]:
    """(commit time, key, value) of each key's last change that left a row: what an incremental read gives."""
    last = {key: (ts, key, v) for op, ts, key, v in changes}
    return sorted(row for row in last.values() if row[2] is not None)


def _incremental(table: Table, begin: str, end: str | None = None) -> list[tuple]:
    got = table.read_incremental(begin, end).to_pylist()
    return sorted((r["_hoodie_commit_time"], r["id"], r["v"]) for r in got)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_write_that_completed_after_a_later_requested_one_is_in_its_completion_range(tmp_path, table_type):
    """Two writers: A requested before B, completed after it. (B.completion, A.completion] holds
    A's changes, though A's instant time (their `ts_ms`) is before the range's begin: a consumer
    that read up to B's completion and goes on from there must not lose A."""
    w = write_out_of_order(str(tmp_path / "t"), 9, table_type)
    table = Table.open(w.path)
    done = w.completion
    a_changes = [("u", w.a, "a", 20), ("i", w.a, "c", 30)]
    b_changes = [("u", w.b, "b", 200)]
    assert _changes(table, done[w.b], done[w.a]) == a_changes
    assert _changes(table, done[w.first], done[w.b]) == b_changes
    assert _changes(table, done[w.first], done[w.a]) == a_changes + b_changes  # ordered by commit time
    assert _changes(table, done[w.b]) == a_changes
    for begin, end in ((done[w.b], done[w.a]), (done[w.first], done[w.b]), (done[w.first], done[w.a])):
        assert _latest_changes(_changes(table, begin, end)) == _incremental(table, begin, end), (begin, end)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_changes_from_a_write_s_instant_time_include_that_write_on_hudi_1x(tmp_path, version, table_type):
    """On 8+ a write completes after its instant time: a range that begins at its instant time
    holds it (as `read_incremental` and hudi-rs read it); one that begins at its completion time does not."""
    table = Table.create(str(tmp_path / "t"), table_version=version, record_key="id", partition_by="part",
                         ordering_field="ts", table_type=table_type,
                         options={"hoodie.table.cdc.enabled": "true"})  # fmt: skip
    first = table.upsert(_batch([{"id": k, "part": "p0", "v": 1, "ts": 1} for k in ("a", "z")]))
    second = table.upsert(_batch([{"id": k, "part": "p0", "v": 2, "ts": 2} for k in ("a", "b")]))
    f, s = first.instant_time, second.instant_time
    done = table.timeline().completion_times()
    assert f < done[f] < s
    later = [("u", s, "a", 2), ("i", s, "b", 2)]
    assert _changes(table, f) == [("i", f, "a", 1), ("i", f, "z", 1), *later]
    assert _latest_changes(_changes(table, f)) == _incremental(table, f) == [(f, "z", 1), (s, "a", 2), (s, "b", 2)]
    assert _changes(table, f, done[s]) == _changes(table, f)
    assert _changes(table, done[f]) == later
    assert _latest_changes(_changes(table, done[f])) == _incremental(table, done[f])
