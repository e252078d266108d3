"""What a clean records as the earliest instant still readable (`earliestCommitToRetain`), and the
reads that check against it: the bound never promises an instant whose files the clean deleted, never
moves backwards, stops before writes still in flight (as Hudi's `CleanerUtils` caps it), and an idle
table under KEEP_LATEST_BY_HOURS keeps its history (Hudi cleans nothing when no commit is in the
window). Found by a report-only exploration against a model of Hudi's `CleanPlanner`."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pyarrow as pa
import pytest

import lakeward.core.write.client as client_mod
from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.spark.changes import CDC, LATEST_STATE, initial_instant
from lakeward.core.table import Table
from lakeward.core.table_services.clean import schedule_clean
from lakeward.core.timeline import Action
from tests.core.table_services.clean_helpers import as_tuples, base_instants, new_scenario, run_and_kill
from tests.core.table_services.compaction_helpers import Background, Gate


def test_file_versions_with_an_old_savepoint_records_the_oldest_whole_snapshot(tmp_path: Path) -> None:
    s = new_scenario(
        tmp_path / "t",
        **{"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": 2},
    )
    for r in range(6):
        s.upsert(r)
    w = s.writes
    s.table.savepoint(w[0])
    result = s.table.clean()
    assert result is not None
    assert base_instants(s.path) == {"a": [w[0], w[4], w[5]], "b": [w[0], w[4], w[5]]}
    # the savepointed slice is kept, yet snapshots between it and w4 lost their files
    assert result.earliest_commit_to_retain == w[4]
    for lost in w[1:4]:
        with pytest.raises(InstantNotFoundError, match=f"oldest readable instant is {w[4]}"):
            Table.open(s.path).read(as_of=lost)
    s.assert_both_readers(as_of=w[0])  # the savepoint stays readable
    s.assert_both_readers(as_of=w[4])


@pytest.mark.parametrize("version", [6, 8])
def test_the_retained_bound_never_moves_backwards_when_the_policy_changes(tmp_path: Path, version: int) -> None:
    s = new_scenario(
        tmp_path / "t",
        table_version=version,
        **{"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": 2},
    )
    for r in range(3):
        s.upsert(r, {"b": [4, 5]})
    for r in range(3, 10):
        s.upsert(r, {"a": [1, 2, 3]})
    w = s.writes
    first = s.table.clean()
    assert first is not None and first.earliest_commit_to_retain == w[8]
    s.reopen({"hoodie.cleaner.policy": "KEEP_LATEST_COMMITS", "hoodie.cleaner.commits.retained": 6})
    second = s.table.clean()
    assert second is not None and second.files_deleted > 0  # group b's slice of w1 goes
    assert second.earliest_commit_to_retain == w[8]
    for lost in w[4:8]:
        with pytest.raises(InstantNotFoundError, match=f"oldest readable instant is {w[8]}"):
            Table.open(s.path).read(as_of=lost)
    s.assert_both_readers(as_of=w[8])


@pytest.mark.parametrize("version", [6, 8])
def test_the_retained_bound_stops_before_a_write_in_flight(tmp_path: Path, monkeypatch, version: int) -> None:
    """A write requested before the N-th latest completed write and still running: Hudi's cleaner keeps
    the earliest commit to retain before it, so a consumer reading on from its last checkpoint gets that
    write's records once it completes, instead of an error that tells it to begin past them."""
    s = new_scenario(tmp_path / "t", table_version=version, **{"hoodie.cleaner.commits.retained": 2})
    for r in range(4):
        s.upsert(r)
    gate = Gate(monkeypatch, client_mod, "reconcile_markers")
    slow_batch = pa.table({"id": [9], "part": ["c"], "ts": [100], "val": ["slow"]})
    job = Background(lambda: Table.open(s.path).upsert(slow_batch).instant_time)
    gate.wait()
    try:
        for r in range(4, 7):
            s.upsert(r)
        checkpoint = Table.open(s.path).timeline().completed_writes()[-1]
        result = s.table.clean()
        assert result is not None
        assert result.earliest_commit_to_retain == s.writes[3]  # the last completed before the slow write
    finally:
        gate.release()
    slow = job.result()
    begin = checkpoint.completion_time or checkpoint.time if version != 6 else s.writes[3]
    rows = as_tuples(Table.open(s.path).read_incremental(begin))
    assert (9, "c", 100, "slow") in rows, rows
    assert {r["_hoodie_commit_time"] for r in Table.open(s.path).read_incremental(begin).to_pylist()} >= {slow}


def test_keep_latest_by_hours_cleans_nothing_on_a_table_idle_for_longer(tmp_path: Path) -> None:
    s = new_scenario(
        tmp_path / "t", **{"hoodie.cleaner.policy": "keep_latest_by_hours", "hoodie.cleaner.hours.retained": 1}
    )
    for r in range(5):
        s.upsert(r)
    latest = dt.datetime.strptime(s.writes[-1][:14], "%Y%m%d%H%M%S")
    assert schedule_clean(s.table._writer(), now=latest + dt.timedelta(hours=3)) is None
    for instant in s.writes:
        s.assert_both_readers(as_of=instant)


def test_an_incremental_read_over_a_compaction_before_the_retained_bound(tmp_path: Path) -> None:
    """A compaction changes no record: a range that covers one older than the bound, but only data
    writes within it, reads them."""
    s = new_scenario(
        tmp_path / "t", "MERGE_ON_READ", **{"hoodie.cleaner.commits.retained": 2, "hoodie.metadata.enable": False}
    )
    for r in range(4):
        s.upsert(r)
    compaction = s.table.schedule_compaction(force=True)
    assert compaction is not None
    s.table.run_compaction(compaction)
    d4 = s.upsert(4, {"a": [1]})
    s.upsert(5, {"a": [2]})
    result = s.table.clean()
    assert result is not None and result.earliest_commit_to_retain == d4
    rows = as_tuples(Table.open(s.path).read_incremental(s.writes[3]))
    assert rows == sorted(r for r in s.rows.values() if r[2] >= 4)
    with pytest.raises(InstantNotFoundError, match="no longer retained"):
        Table.open(s.path).read_incremental(s.writes[2])  # d3's rows are in a cleaned slice


def test_hudi_1x_clean_key_spellings_are_accepted() -> None:
    from lakeward.core.config.write import parse_write_config

    spelled = parse_write_config(
        {
            "hoodie.clean.policy": "KEEP_LATEST_FILE_VERSIONS",
            "hoodie.clean.fileversions.retained": "4",
            "hoodie.clean.commits.retained": "7",
            "hoodie.clean.hours.retained": "5",
            "hoodie.cleaner.incremental.mode": "false",
        }
    )
    assert (spelled.cleaner_policy, spelled.cleaner_file_versions_retained) == ("KEEP_LATEST_FILE_VERSIONS", 4)
    assert (spelled.cleaner_commits_retained, spelled.cleaner_hours_retained) == (7, 5)
    from lakeward.core.exceptions import ConfigError

    with pytest.raises(ConfigError, match="hoodie.clean.commits.retained.*hoodie.cleaner.commits.retained"):
        parse_write_config({"hoodie.clean.commits.retained": "7", "hoodie.cleaner.commits.retained": "3"})
    with pytest.raises(ConfigError, match="hoodie.clean.commits.retained"):
        parse_write_config({"hoodie.clean.commits.retained": "0"})


def test_automatic_clean_after_writes(tmp_path: Path) -> None:
    """`hoodie.clean.automatic=true`: a writer cleans after its write once `hoodie.clean.max.commits`
    writes completed since the last clean, as Hudi's writers do (lakeward's default leaves cleaning to
    the daemon or `Table.clean`)."""
    s = new_scenario(
        tmp_path / "t",
        **{"hoodie.clean.commits.retained": 2, "hoodie.clean.automatic": "true", "hoodie.clean.max.commits": 3},
    )
    cleans = []
    for r in range(10):
        s.upsert(r)
        cleans.append(len(s.table.timeline().completed(Action.CLEAN)))
    # every third write cleans; the first time (3 writes, 2 retained) nothing is old enough yet
    assert cleans == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert base_instants(s.path) == {"a": s.writes[-3:], "b": s.writes[-3:]}
    s.assert_both_readers()
    manual = new_scenario(tmp_path / "m", **{"hoodie.clean.commits.retained": 2})
    for r in range(5):
        manual.upsert(r)
    assert not manual.table.timeline().completed(Action.CLEAN)  # lakeward's default: no clean by writers


@pytest.mark.parametrize("version", [6, 8])
def test_reads_of_what_an_interrupted_clean_deleted_name_the_oldest_readable_instant(
    tmp_path: Path, version: int
) -> None:
    """A clean killed after deleting some of its files: reads needing them are refused as cleaned (naming
    the oldest readable instant), never reported as a corrupt table, and never served from what is left."""
    s = new_scenario(tmp_path / "t", "COPY_ON_WRITE", version, **{"hoodie.cleaner.commits.retained": "1"})
    for r in range(4):
        s.upsert(r)
    table = Table.open(s.path, options={"hoodie.cleaner.commits.retained": "1"})
    clean = table.schedule_clean()
    assert clean is not None
    run_and_kill(s.path, "clean_after_some_deletes", clean)
    table = Table.open(s.path)
    assert table.timeline().pending(Action.CLEAN), "the killed clean is pending"
    oldest = s.writes[-1]
    for instant in s.writes[:-1]:
        with pytest.raises(InstantNotFoundError, match=f"no longer retained.*oldest readable instant is {oldest}"):
            table.read(as_of=instant)
    with pytest.raises(InstantNotFoundError, match=f"oldest readable instant is {oldest}"):
        table.read_incremental(s.writes[0])
    assert as_tuples(table.read(as_of=oldest)) == s.states[oldest]


@pytest.mark.parametrize("version", [6, 8, 9])
def test_earliest_changes_begin_at_the_oldest_retained_instant(tmp_path: Path, version: int) -> None:
    """`read_changes("earliest")` is every retained change (docs/cdc.md), also after a clean removed
    older ones; a range beginning too early names the begin that works, in the range's own time
    (instant time on 6, completion time on 8+)."""
    path = str(tmp_path / "t")
    options = {"hoodie.table.cdc.enabled": "true", "hoodie.cleaner.commits.retained": "1"}
    table = Table.create(
        path, record_key="id", partition_by="p", ordering_field="ts", table_version=version, options=options
    )
    for i in range(4):
        rows = {"id": ["a", "b"], "p": ["x", "x"], "v": [str(i)] * 2, "ts": pa.array([i, i], pa.int64())}
        table.upsert(pa.table(rows))
    writes = table.timeline().completed_writes()
    assert table.clean() is not None
    table = Table.open(path)
    changes = table.read_changes("earliest", images="struct")
    retained = sorted(set(changes.column("ts_ms").to_pylist()))
    assert retained and retained[-1] == writes[-1].time
    assert len(retained) < len(writes)  # the clean removed the oldest
    with pytest.raises(InstantNotFoundError, match=r"begin the range at (\d+)") as refused:
        table.read_changes(writes[0].ordering_time)
    assert "'earliest' begins there" in str(refused.value)
    hint = re.search(r"begin the range at (\d+)", str(refused.value)).group(1)  # type: ignore[union-attr]
    assert table.read_changes(hint, images="struct").equals(changes)
    with pytest.raises(InstantNotFoundError, match="no longer retained") as incremental:
        table.read_incremental(writes[0].ordering_time)
    assert f"begin the range at {hint} or later; 'earliest' begins there" in str(incremental.value)
    latest = table.read_incremental(hint)  # read_incremental takes "earliest" (and Hudi's "000") too
    assert sorted(latest.column("v").to_pylist()) == ["3", "3"]
    for earliest in ("earliest", "000"):
        assert table.read_incremental(earliest).equals(latest)
    for cleaned in [w for w in writes if w.time < retained[0]]:  # a range of cleaned changes only
        with pytest.raises(InstantNotFoundError, match="was cleaned"):
            table.read_changes("earliest", cleaned.ordering_time)
    first = [w.time for w in writes].index(retained[0])  # upsert `first` wrote v=str(first)
    assert {r["after"]["v"] for r in changes.to_pylist() if r["ts_ms"] == retained[0]} == {str(first)}
    # a new Spark stream from the earliest offset (its default) starts there too
    assert table.read_changes(initial_instant(table, {}, CDC), images="struct").equals(changes)
    rows = table.read_incremental(initial_instant(table, {}, LATEST_STATE))
    assert sorted(rows.column("v").to_pylist()) == ["3", "3"]


@pytest.mark.parametrize("version", [6, 8, 9])
def test_a_range_over_an_archived_clustering_is_read_as_before_its_archival(tmp_path: Path, version: int) -> None:
    """A clustering changes no record, so a range over it needs none of the files a clean deleted. Once
    archived, its plan file is gone (8+) or only the archive names it (6), and the range was refused as
    covering a cleaned write. Found by a report-only exploration."""
    options = {
        "hoodie.metadata.enable": "false",
        "hoodie.cleaner.commits.retained": "1",
        "hoodie.keep.min.commits": "2",
        "hoodie.keep.max.commits": "3",
        "hoodie.clustering.plan.strategy.small.file.limit": str(600 * 1024 * 1024),
    }
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="p", ordering_field="ts", table_version=version, options=options
    )

    def rows(i: int) -> pa.Table:
        return pa.table({"id": [f"k{i}"], "p": ["a"], "ts": pa.array([i], pa.int64())})

    table.bulk_insert(rows(0))
    begin = table.bulk_insert(rows(1)).instant_time
    clustering = table.schedule_clustering()
    assert clustering is not None
    table.run_clustering(clustering)
    table.upsert(rows(2))
    assert table.clean() is not None
    for i in (3, 4, 5):
        table.upsert(rows(i))
    before = Table.open(path).timeline().completion_times().get(begin, begin)
    want = sorted(Table.open(path).read_incremental(before).column("id").to_pylist())
    assert want == ["k2", "k3", "k4", "k5"]
    assert table.archive().archived, "nothing archived"
    archived = Table.open(path)
    assert clustering not in {i.time for i in archived.timeline().active()}
    assert sorted(archived.read_incremental(before).column("id").to_pylist()) == want
    assert sorted(archived.read_incremental("earliest").column("id").to_pylist()) == want
