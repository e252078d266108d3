"""Cleaning: each policy over many tiny commits leaves exactly the file slices it must, protects what
savepoints, pending compactions, pending clustering and the retention window need, and a clean killed
mid-run (SIGKILL) is finished by running it again. Both readers (lakeward, hudi-rs) must read the
rows expected from the input batches after every clean."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.exceptions import ConfigError, InstantNotFoundError
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.table import Table
from lakeward.core.table_services.clean import schedule_clean
from lakeward.core.timeline import Action, State, avro_plans, new_instant_time
from lakeward.core.timeline.transitions import create_requested
from tests.core.table_services.clean_helpers import (
    as_tuples,
    base_instants,
    data_files,
    new_scenario,
    run_and_kill,
    timeline_files,
)


def test_keep_latest_commits_keeps_what_the_last_n_commits_need(tmp_path: Path) -> None:
    s = new_scenario(tmp_path / "t", **{"hoodie.cleaner.commits.retained": 4})
    for r in range(15):
        s.upsert(r)
    w = s.writes
    result = s.table.clean()
    assert result is not None
    assert result.policy == "KEEP_LATEST_COMMITS"
    assert result.earliest_commit_to_retain == w[-4]
    assert result.files_deleted == 2 * 10
    # every slice based at or after E = w[-4], plus the newest before it (a read as of E needs it)
    assert base_instants(s.path) == {"a": w[-5:], "b": w[-5:]}
    assert timeline_files(s.path)[-3:] == [f"{result.instant_time}.clean{x}" for x in ("", ".inflight", ".requested")]
    s.assert_both_readers()
    for instant in w[-4:]:
        s.assert_both_readers(as_of=instant)
    with pytest.raises(InstantNotFoundError, match=rf"no longer retained.*oldest readable instant is {w[-4]}"):
        s.table.read(as_of=w[-5])
    with pytest.raises(InstantNotFoundError, match=rf"{w[1]}.*no longer retained.*oldest readable instant is {w[-4]}"):
        s.table.read_incremental(w[0])
    assert as_tuples(s.table.read_incremental(w[-5])) == s.expected()  # every write after w[-5] is retained
    assert s.table.clean() is None  # nothing more to clean
    s.upsert(15)
    s.upsert(16)
    again = s.table.clean()
    assert again is not None and again.files_deleted == 2 * 2
    assert base_instants(s.path) == {"a": s.writes[-5:], "b": s.writes[-5:]}
    s.assert_both_readers()


def test_keep_latest_file_versions(tmp_path: Path) -> None:
    s = new_scenario(
        tmp_path / "t",
        **{"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": 2},
    )
    for r in range(12):
        s.upsert(r)
    result = s.table.clean()
    assert result is not None and result.files_deleted == 2 * 10
    assert base_instants(s.path) == {"a": s.writes[-2:], "b": s.writes[-2:]}
    assert result.earliest_commit_to_retain == s.writes[-2]
    s.assert_both_readers()
    s.assert_both_readers(as_of=s.writes[-2])
    with pytest.raises(InstantNotFoundError, match=f"oldest readable instant is {s.writes[-2]}"):
        s.table.read(as_of=s.writes[-3])


def _as_datetime(instant: str) -> dt.datetime:
    return dt.datetime.strptime(instant[:14], "%Y%m%d%H%M%S").replace(microsecond=int(instant[14:]) * 1000)


def test_keep_latest_by_hours(tmp_path: Path) -> None:
    s = new_scenario(
        tmp_path / "t", **{"hoodie.cleaner.policy": "keep_latest_by_hours", "hoodie.cleaner.hours.retained": 1}
    )
    for r in range(10):
        s.upsert(r)
    # An hour after w[-3]: the commits of the last hour are w[-3:].
    now = _as_datetime(s.writes[-3]) + dt.timedelta(hours=1)
    instant = schedule_clean(s.table._writer(), now=now)
    assert instant is not None
    result = s.table.run_clean(instant)
    assert result.earliest_commit_to_retain == s.writes[-3]
    assert base_instants(s.path) == {"a": s.writes[-4:], "b": s.writes[-4:]}
    s.assert_both_readers()
    s.assert_both_readers(as_of=s.writes[-3])
    # Now: every commit is within the last hour, nothing to clean.
    assert s.table.schedule_clean() is None


def test_savepoint_files_are_never_cleaned(tmp_path: Path) -> None:
    s = new_scenario(tmp_path / "t", **{"hoodie.cleaner.commits.retained": 2})
    for r in range(8):
        s.upsert(r)
    saved = s.writes[1]
    s.table.savepoint(saved)
    assert s.table.clean() is not None
    assert base_instants(s.path) == {"a": [saved, *s.writes[-3:]], "b": [saved, *s.writes[-3:]]}
    s.assert_both_readers(as_of=saved)  # a savepointed instant stays readable
    with pytest.raises(InstantNotFoundError, match=f"savepointed instants, readable too: {saved}"):
        s.table.read(as_of=s.writes[2])
    s.table.delete_savepoint(saved)
    assert s.table.savepoints() == []
    assert s.table.clean() is not None
    assert base_instants(s.path) == {"a": s.writes[-3:], "b": s.writes[-3:]}
    s.assert_both_readers()


def test_mor_pending_compaction_protects_its_slice_then_whole_slices_go(tmp_path: Path) -> None:
    s = new_scenario(tmp_path / "t", "MERGE_ON_READ", **{"hoodie.cleaner.commits.retained": 1})
    for r in range(4):
        s.upsert(r)
    first_files = data_files(s.path)
    assert any(".log." in f for f in first_files)
    compaction = s.table.schedule_compaction(force=True)
    assert compaction is not None
    s.upsert(4)
    s.upsert(5)  # log files based on the pending compaction's instant
    # Without the protection the slice the compaction reads (older than the newest slice) would go.
    assert s.table.schedule_clean() is None
    assert first_files <= data_files(s.path)
    # hudi-rs 0.5 does not merge logs written on top of a pending compaction: lakeward only here.
    assert as_tuples(s.table.read()) == s.expected()
    s.table.run_compaction(compaction)
    result = s.table.clean()
    assert result is not None
    # The whole first slice of each file group (base file and its log files) is gone.
    assert set(result.deleted_files) == first_files
    assert not first_files & data_files(s.path)
    s.assert_both_readers()
    s.assert_both_readers(as_of=s.writes[-1])


def test_pending_clustering_file_groups_are_not_cleaned(tmp_path: Path) -> None:
    s = new_scenario(tmp_path / "t", **{"hoodie.cleaner.commits.retained": 2})
    for r in range(6):
        s.upsert(r)
    file_id_a = next(f for f in data_files(s.path) if f.startswith("a/")).split("/")[1].rsplit("_", 2)[0]
    plan = {
        "operationType": "cluster",
        "clusteringPlan": {
            "inputGroups": [
                {
                    "slices": [
                        {
                            "dataFilePath": None,
                            "deltaFilePaths": None,
                            "fileId": file_id_a,
                            "partitionPath": "a",
                            "bootstrapFilePath": None,
                            "version": 1,
                        }
                    ],
                    "metrics": None,
                    "numOutputFileGroups": 1,
                    "extraMetadata": None,
                    "version": 1,
                }
            ],
            "strategy": None,
            "extraMetadata": None,
            "version": 1,
            "preserveHoodieMetadata": True,
        },
        "extraMetadata": None,
        "version": 1,
    }
    pending = create_requested(
        s.table.storage,
        new_instant_time(s.writes[-1]),
        Action.REPLACE_COMMIT,
        avro_plans.serialize(avro_plans.REQUESTED_REPLACE_METADATA, plan),
    )
    instant = s.table.schedule_clean()
    assert instant is not None
    s.table.run_clean(instant)
    assert base_instants(s.path) == {"a": s.writes, "b": s.writes[-3:]}
    os.remove(os.path.join(s.path, ".hoodie", pending.file_name))
    s.assert_both_readers()


def test_replaced_file_groups_are_cleaned_once_outside_the_window(tmp_path: Path) -> None:
    s = new_scenario(tmp_path / "t", **{"hoodie.cleaner.commits.retained": 3})
    for r in range(3):
        s.upsert(r)
    old_a = {f for f in data_files(s.path) if f.startswith("a/")}
    s.overwrite_partition(3, "a", [1, 2])
    s.upsert(4)
    # The replacecommit is inside the window (E = w[-3] is before it): the replaced group keeps the
    # slice a read as of E needs (only its oldest slice goes).
    s.table.clean()
    left_of_a = old_a & data_files(s.path)
    assert len(left_of_a) == 2
    for r in range(5, 9):
        s.upsert(r)
    result = s.table.clean()
    assert result is not None
    assert not old_a & data_files(s.path), "the replaced file group is gone"
    assert left_of_a <= set(result.deleted_files)
    s.assert_both_readers()
    s.assert_both_readers(as_of=s.writes[-3])


def test_bad_cleaner_options_fail_fast(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="hoodie.cleaner.policy"):
        new_scenario(tmp_path / "t", **{"hoodie.cleaner.policy": "KEEP_EVERYTHING"})
    with pytest.raises(ConfigError, match="hoodie.cleaner.commits.retained"):
        new_scenario(tmp_path / "u", **{"hoodie.cleaner.commits.retained": 0})


@pytest.fixture(scope="module")
def crash_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    path = tmp_path_factory.mktemp("clean-crash") / "t"
    s = new_scenario(path, **{"hoodie.cleaner.commits.retained": 2})
    for r in range(8):
        s.upsert(r)
    instant = s.table.schedule_clean()
    assert instant is not None
    return path, instant, s.writes


@pytest.mark.parametrize("point", ["clean_after_inflight", "clean_after_some_deletes", "clean_before_complete"])
def test_clean_killed_then_rerun(crash_template: tuple[Path, str, list[str]], tmp_path: Path, point: str) -> None:
    source, instant, writes = crash_template
    path = str(tmp_path / "t")
    shutil.copytree(source, path)
    table = Table.open(path)
    expected = as_tuples(table.read())
    run_and_kill(path, point, instant)
    table = Table.open(path)
    assert table.timeline().state_of(instant, Action.CLEAN) is State.INFLIGHT
    assert table.pending_cleans() == [instant]
    assert table.schedule_clean() is None  # one clean at a time
    assert as_tuples(table.read()) == expected
    # the files a clean killed midway deleted are no damage: the next clean finishes it
    report = table.check()
    assert report.ok, report
    assert (tmp_path / "t" / ".hoodie" / "metadata").exists()
    diff = compare_files_partition(table.storage)
    assert diff.ok, diff
    result = table.run_clean(instant)
    assert result.files_deleted == 2 * 5
    assert table.timeline().state_of(instant, Action.CLEAN) is State.COMPLETED
    assert base_instants(path) == {"a": writes[-3:], "b": writes[-3:]}
    assert as_tuples(table.read()) == expected
    from tests.core.table_services.clean_helpers import hudi_read

    assert as_tuples(hudi_read(path)) == expected
    assert table.run_clean(instant).files_deleted == 2 * 5  # a completed clean reports what it did


def test_a_merge_on_read_clean_killed_midway_is_no_damage_to_the_checks(tmp_path: Path) -> None:
    """Version 8 merge-on-read lists its files from the metadata table, which still names the
    files a clean killed midway deleted: `check()` reported them missing and the files partition
    differed from storage until the next clean (found by an exploration)."""
    s = new_scenario(tmp_path / "t", "MERGE_ON_READ", 8, **{"hoodie.cleaner.commits.retained": 1})
    for r in range(4):
        s.upsert(r)
    assert s.table.schedule_compaction(force=True) is not None
    s.table.run_compaction(s.table.pending_compactions()[0])
    for r in range(4, 6):
        s.upsert(r)
    instant = s.table.schedule_clean()
    assert instant is not None
    expected = as_tuples(s.table.read())
    run_and_kill(s.path, "clean_after_some_deletes", instant)
    table = Table.open(s.path)
    assert table.pending_cleans() == [instant]
    assert as_tuples(table.read()) == expected
    report = table.check()
    assert report.ok, report
    diff = compare_files_partition(table.storage)
    assert diff.ok, diff
    table.run_clean(instant)
    assert table.check().ok and compare_files_partition(table.storage).ok


@pytest.mark.parametrize("metadata", ["true", "false"])
@pytest.mark.parametrize("version", [8, 9])
def test_an_incremental_range_over_a_cleaned_write_by_its_completion_time_is_refused(
    tmp_path: Path, version: int, metadata: str
) -> None:
    """On versions 8+ a range is of completion times: (t, c] with t a write's instant time and c its
    completion time holds exactly that write. Once a clean deleted its file slices the read must say
    so, not return no rows (the retention check compared instant times with the range)."""
    options = {"hoodie.cleaner.commits.retained": "1", "hoodie.metadata.enable": metadata}
    table = Table.create(
        str(tmp_path / "t"), record_key="id", ordering_field="ts", table_version=version, options=options
    )
    times = [table.upsert(pa.table({"id": ["k1", f"n{i}"], "ts": [i, i], "v": [i, i]})).instant_time for i in range(4)]
    assert table.clean() is not None
    first = times[0]
    completed = table.timeline().completion_times()[first]
    with pytest.raises(InstantNotFoundError, match=f"covers instant {first}, which is no longer retained"):
        table.read_incremental(first, completed)
    # what the clean kept is still readable
    last = times[-1]
    rows = table.read_incremental(last, table.timeline().completion_times()[last])
    assert sorted(rows.column("id").to_pylist()) == ["k1", "n3"]


def _clustered_table(tmp_path: Path, version: int) -> Table:
    """A table keeping 2 commits, clustered by `v`, with one upsert of keys a1, a2."""
    options = {"hoodie.cleaner.commits.retained": "2", "hoodie.clustering.plan.strategy.sort.columns": "v"}
    table = Table.create(
        str(tmp_path / "t"), record_key="id", ordering_field="ts", table_version=version, options=options
    )
    table.upsert(_versioned(["a1", "a2"], 1))
    return table


def _versioned(ids: list[str], v: int) -> pa.Table:
    return pa.table({"id": ids, "v": [v] * len(ids), "ts": [1] * len(ids)})


@pytest.mark.parametrize("version", [6, 9])
def test_an_incremental_range_over_a_clustering_that_completed_after_the_clean_bound_is_read(
    tmp_path: Path, version: int
) -> None:
    """A clustering planned before the clean's bound completes later, inside every range that begins
    before its completion; it changes no record (rows keep their commit times), as a compaction, and its
    files are the live ones. On versions 8+ it was counted as a write the clean had lost, refusing every
    such range, even one beginning after the oldest readable instant the error named."""
    table = _clustered_table(tmp_path, version)
    table.bulk_insert(_versioned(["b1", "b2"], 2))
    clustering = table.schedule_clustering()
    assert clustering is not None
    writes = [table.bulk_insert(_versioned([f"n{i}"], 10 + i)).instant_time for i in range(4)]  # new keys: allowed
    table.run_clustering(clustering)
    assert table.clean() is not None
    by_time = {i.time: i for i in table.timeline().completed()}
    oldest_readable = None
    for n in range(1, 4):  # (write n-1, now]: writes n.. and the clustering (on 8+, by completion time)
        begin = by_time[writes[n - 1]].completion_time or writes[n - 1]
        try:
            got = sorted(table.read_incremental(begin).column("id").to_pylist())
        except InstantNotFoundError as exc:  # the writes before the clean's bound are gone: said so
            oldest_readable = re.search(r"oldest readable instant is (\d+)", str(exc)).group(1)  # type: ignore[union-attr]
            assert begin < oldest_readable, f"refused a range beginning after the oldest readable instant: {exc}"
            continue
        assert got == [f"n{i}" for i in range(n, 4)], (begin, got)
    assert oldest_readable is None or oldest_readable <= writes[3]


@pytest.mark.parametrize("version", [6, 9])
def test_an_incremental_range_whose_only_cleaned_instant_is_a_clustering_is_read(tmp_path: Path, version: int) -> None:
    """A range that begins just before a clustering the clean's bound left behind covers no write the
    clean lost: the clustering changes no record. On version 6 (timeline layout 1, where a clustering is
    a replacecommit whose plan says so) the range was refused."""
    table = _clustered_table(tmp_path, version)
    before = table.bulk_insert(_versioned(["b1", "b2"], 2)).instant_time
    clustering = table.schedule_clustering()
    assert clustering is not None
    table.run_clustering(clustering)
    for i in range(2):
        table.bulk_insert(_versioned([f"n{i}"], 10 + i))
    assert table.clean() is not None
    begin = table.timeline().completion_times().get(before) or before
    assert sorted(table.read_incremental(begin).column("id").to_pylist()) == ["n0", "n1"]
