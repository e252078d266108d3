"""Savepoints and restore: a savepoint keeps its files through cleaning, restore rolls the table back
to exactly the savepoint's rows (lakeward and hudi-rs), later writes work, and a restore killed
mid-run (SIGKILL) is finished by running it again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.exceptions import InstantExistsError, InstantNotFoundError
from lakeward.core.table import Table
from lakeward.core.timeline import Action, State, avro_plans
from lakeward.core.timeline.instant import Instant
from lakeward.core.timeline.transitions import read_instant
from tests.core.table_services.clean_helpers import (
    as_tuples,
    base_instants,
    hudi_read,
    new_scenario,
    run_and_kill,
    timeline_files,
)


def test_savepoint_clean_restore_then_write_cow(tmp_path: Path) -> None:
    s = new_scenario(tmp_path / "t", **{"hoodie.cleaner.commits.retained": 2})
    for r in range(5):
        s.upsert(r)
    saved = s.writes[2]
    assert s.table.savepoint(saved) == saved
    assert s.table.savepoints() == [saved]
    meta = avro_plans.deserialize(
        read_instant(s.table.storage, Instant(saved, Action.SAVEPOINT, State.COMPLETED)), "savepoint"
    )
    assert sorted(meta["partitionMetadata"]) == ["a", "b"]
    assert all(saved in f for p in meta["partitionMetadata"].values() for f in p["savepointDataFile"])
    assert f"{saved}.savepoint.inflight" in timeline_files(s.path)
    for r in range(5, 10):
        s.upsert(r)
    assert s.table.clean() is not None
    assert base_instants(s.path)["a"] == [saved, *s.writes[-3:]]
    s.assert_both_readers(as_of=saved)
    # an incremental read from just before the savepoint needs the cleaned instants after it: the
    # error names the first of those, not the savepointed instant (which stays readable)
    with pytest.raises(InstantNotFoundError, match=f"covers instant {s.writes[3]}, which is no longer retained"):
        s.table.read_incremental(s.writes[1])

    result = s.table.restore(saved)
    assert list(result.rolled_back) == list(reversed(s.writes[3:]))
    s.rows = {r[0]: r for r in s.states[saved]}
    s.assert_both_readers()
    assert base_instants(s.path)["a"] == [saved]
    names = timeline_files(s.path)
    assert not [n for n in names if n[:17] in s.writes[3:]], "rolled-back instants leave no timeline files"
    assert f"{result.restore_instant_time}.restore" in names
    restore_meta = avro_plans.deserialize(
        read_instant(s.table.storage, Instant(result.restore_instant_time, Action.RESTORE, State.COMPLETED)),
        "restore",
    )
    assert restore_meta["instantsToRollback"] == list(result.rolled_back)
    assert set(restore_meta["hoodieRestoreMetadata"]) == set(result.rolled_back)

    s.table = Table.open(s.path, options={"hoodie.cleaner.commits.retained": 2})
    s.upsert(20)
    s.upsert(21)
    s.assert_both_readers()
    s.assert_both_readers(as_of=saved)


def test_restore_mor_with_compactions_after_the_savepoint(tmp_path: Path) -> None:
    s = new_scenario(tmp_path / "t", "MERGE_ON_READ")
    for r in range(3):
        s.upsert(r)
    saved = s.writes[-1]
    s.table.savepoint(saved)
    s.upsert(3)
    done = s.table.schedule_compaction(force=True)
    assert done is not None
    s.table.run_compaction(done)
    s.upsert(4)
    pending = s.table.schedule_compaction(force=True)
    assert pending is not None
    s.upsert(5)
    result = s.table.restore(saved)
    assert set(result.rolled_back) == {*s.writes[3:], done, pending}
    s.rows = {r[0]: r for r in s.states[saved]}
    s.assert_both_readers()
    assert Table.open(s.path).pending_compactions() == []
    s.upsert(6)
    s.assert_both_readers()


@pytest.mark.parametrize("version", [8, 9])
def test_savepoint_of_a_write_compacted_before_the_savepoint_mor(tmp_path: Path, version: int) -> None:
    """Versions 8+ slice logs by their delta commit's completion time. A savepoint has the
    instant time of the write it saves but completes later: the write's logs must stay in
    the slice they joined when the write completed, not move to a slice that a compaction
    completed after the write and before the savepoint started (time travel to the
    savepointed write then missed that write's rows, issue 16)."""
    options = {"hoodie.cleaner.commits.retained": 2}
    s = new_scenario(tmp_path / "t", "MERGE_ON_READ", version, **options)
    s.upsert(0)
    s.upsert(1)
    saved = s.upsert(2)  # logs on top of the first base files
    compaction = s.table.schedule_compaction(force=True)
    assert compaction is not None and compaction > saved
    s.table.run_compaction(compaction)
    s.table.savepoint(saved)
    s.assert_both_readers(as_of=saved, what="after the savepoint")
    s.upsert(3)
    s.table.run_compaction(s.table.schedule_compaction(force=True))
    for r in range(4, 7):
        s.upsert(r)
    assert s.table.clean() is not None
    s.assert_both_readers(as_of=saved, what="after a clean")
    s.assert_both_readers()


def test_savepoint_and_restore_errors(tmp_path: Path) -> None:
    s = new_scenario(tmp_path / "t", **{"hoodie.cleaner.commits.retained": 1})
    for r in range(4):
        s.upsert(r)
    with pytest.raises(InstantNotFoundError, match="not a completed write"):
        s.table.savepoint("20000101000000000")
    with pytest.raises(InstantNotFoundError, match="no savepoint"):
        s.table.restore(s.writes[1])
    with pytest.raises(InstantNotFoundError, match="no savepoint"):
        s.table.delete_savepoint(s.writes[1])
    s.table.savepoint(s.writes[-1])
    with pytest.raises(InstantExistsError):
        s.table.savepoint(s.writes[-1])
    s.table.clean()
    with pytest.raises(InstantNotFoundError, match=f"no longer retained.*oldest readable instant is {s.writes[-1]}"):
        s.table.savepoint(s.writes[0])


@pytest.fixture(scope="module")
def restore_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[tuple]], list[str]]:
    path = tmp_path_factory.mktemp("restore-crash") / "t"
    s = new_scenario(path)
    for r in range(6):
        s.upsert(r)
    s.table.savepoint(s.writes[2])
    return path, s.states, s.writes


def _killed_restore(
    restore_template: tuple[Path, dict[str, list[tuple]], list[str]], tmp_path: Path, point: str
) -> tuple[str, dict[str, list[tuple]], list[str], str]:
    """A copy of the template table whose restore to its third write was SIGKILLed at `point`:
    (path, states by write, writes, the savepoint)."""
    source, states, writes = restore_template
    path = str(tmp_path / "t")
    shutil.copytree(source, path)
    saved = writes[2]
    run_and_kill(path, point, saved)
    return path, states, writes, saved


@pytest.mark.parametrize(
    "point, readable",
    [("restore_after_inflight", -1), ("restore_after_first_rollback", -2), ("restore_before_complete", 2)],
)
def test_restore_killed_then_rerun(
    restore_template: tuple[Path, dict[str, list[tuple]], list[str]], tmp_path: Path, point: str, readable: int
) -> None:
    path, states, writes, saved = _killed_restore(restore_template, tmp_path, point)
    # Readers see a consistent table: the last instant not yet rolled back.
    want = states[writes[readable]]
    assert as_tuples(Table.open(path).read()) == want
    assert as_tuples(hudi_read(path)) == want
    result = Table.open(path).restore(saved)
    assert set(result.rolled_back) == set(writes[3:])
    assert as_tuples(Table.open(path).read()) == states[saved]
    assert as_tuples(hudi_read(path)) == states[saved]
    restores = [n for n in os.listdir(os.path.join(path, ".hoodie")) if n.endswith(".restore")]
    assert len(restores) == 1


@pytest.mark.parametrize("version", [8, 9])
def test_reads_and_the_next_write_after_a_restore_killed_midway_mor(tmp_path: Path, version: int) -> None:
    """A restore killed after undoing its newest instant leaves that instant's log file listed by the
    metadata table (updated only as the restore completes): incremental and change reads skip it as
    snapshot reads do, and the next write finishes the restore before it writes anything."""
    s = new_scenario(tmp_path / "t", "MERGE_ON_READ", version, **{"hoodie.table.cdc.enabled": "true"})
    for r in range(5):
        s.upsert(r)
    saved = s.writes[1]
    s.table.savepoint(saved)
    run_and_kill(s.path, "restore_after_first_rollback", saved)
    table = Table.open(s.path)
    assert table.timeline().pending(Action.RESTORE), "the killed restore is pending"
    left = s.states[s.writes[-2]]  # the newest write is undone, the others not yet
    assert as_tuples(table.read()) == left
    assert as_tuples(table.read_incremental(s.writes[0])) == left
    changes = table.read_changes(s.writes[0], images="struct")
    assert sorted(c["after"]["ts"] for c in changes.to_pylist()) == sorted([0] * 5 + [1] * 5 + [2] * 5 + [3] * 5)

    # (round 4 undone; the range begins before round 0 completed)
    table.upsert(pa.table({"id": [9], "part": ["a"], "ts": [9], "val": ["new"]}))
    assert not table.timeline().pending(), "the write finished the interrupted restore first"
    assert [i.action for i in table.timeline().completed() if i.action is Action.RESTORE] == [Action.RESTORE]
    assert as_tuples(table.read()) == sorted([*s.states[saved], (9, "a", 9, "new")])


def test_the_rollback_service_reports_the_interrupted_restore_it_finished(
    restore_template: tuple[Path, dict[str, list[tuple]], list[str]], tmp_path: Path
) -> None:
    """The daemon's rollback action finishes a restore killed midway; its report says so (it said
    nothing_to_do, which hid the repair from the operator's run history)."""
    path, states, _, saved = _killed_restore(restore_template, tmp_path, "restore_after_first_rollback")
    restore = Table.open(path).timeline().pending(Action.RESTORE)[0].time
    service = Table.open(path).services["rollback"]
    report = service.report(service.execute())
    assert not report.nothing_to_do
    assert f"finished interrupted restore {restore}" in report.detail
    assert as_tuples(Table.open(path).read()) == states[saved]
    again = Table.open(path).services["rollback"]
    assert again.report(again.execute()).nothing_to_do


@pytest.mark.parametrize("version", [6, 8])
def test_a_table_service_finishes_an_interrupted_restore_before_it_plans(tmp_path: Path, version: int) -> None:
    """A compaction planned on a half-restored table merged the logs of writes the restore was undoing:
    once the restore finished, the compaction (newer than it) brought their rows back. Services now
    finish the interrupted restore first, as writers do."""
    s = new_scenario(tmp_path / "t", "MERGE_ON_READ", version)
    for r in range(5):
        s.upsert(r)
    saved = s.writes[1]
    s.table.savepoint(saved)
    run_and_kill(s.path, "restore_after_first_rollback", saved)
    table = Table.open(s.path)
    instant = table.schedule_compaction(force=True)
    assert not table.timeline().pending(Action.RESTORE), "the service finished the restore first"
    if instant is not None:
        table.run_compaction(instant)
    assert as_tuples(Table.open(s.path).read()) == s.states[saved]
    assert as_tuples(hudi_read(s.path)) == s.states[saved]


def test_a_write_with_the_savepoints_schema_finishes_an_interrupted_restore(tmp_path: Path) -> None:
    """The savepoint's schema lacks a column a later (undone) write added: a write with that schema was
    refused by the schema check, which ran on the half-restored table before the restore was finished."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts")
    table.upsert(pa.table({"id": [1], "part": ["a"], "ts": [1], "v": ["one"]}))
    saved = table.timeline().completed_writes()[-1].time
    table.savepoint(saved)
    table.upsert(pa.table({"id": [2], "part": ["a"], "ts": [2], "v": ["two"], "w": [2]}))
    table.upsert(pa.table({"id": [3], "part": ["a"], "ts": [3], "v": ["three"], "w": [3]}))
    run_and_kill(path, "restore_after_first_rollback", saved)
    table = Table.open(path)
    table.upsert(pa.table({"id": [4], "part": ["a"], "ts": [4], "v": ["four"]}))
    assert not table.timeline().pending(Action.RESTORE)
    assert sorted(Table.open(path).read().column("id").to_pylist()) == [1, 4]


def test_deleting_the_savepoint_of_an_interrupted_restore_finishes_the_restore_first(
    restore_template: tuple[Path, dict[str, list[tuple]], list[str]], tmp_path: Path
) -> None:
    """Deleting the savepoint left the half-done restore with no savepoint: `restore` could no longer finish it."""
    path, states, _, saved = _killed_restore(restore_template, tmp_path, "restore_after_first_rollback")
    Table.open(path).delete_savepoint(saved)
    table = Table.open(path)
    assert not table.timeline().pending(Action.RESTORE)
    assert not [i for i in table.timeline().completed() if i.action is Action.SAVEPOINT]
    assert as_tuples(table.read()) == states[saved]


def test_a_rollback_after_a_restore_killed_midway_finishes_the_restore_first(
    restore_template: tuple[Path, dict[str, list[tuple]], list[str]], tmp_path: Path
) -> None:
    """The rollback's own check ran on the half-restored timeline and refused ("came after it"), leaving
    the restore unfinished. It now finishes the restore first, then judges the rollback on the result:
    the write it named is gone with the restore."""
    path, states, writes, saved = _killed_restore(restore_template, tmp_path, "restore_after_first_rollback")
    latest = Table.open(path).timeline().completed_writes()[-1].time
    assert latest != saved
    with pytest.raises(InstantNotFoundError, match=latest):
        Table.open(path).rollback(latest)
    timeline = Table.open(path).timeline()
    assert timeline.pending() == []
    assert [i.time for i in timeline.completed_writes()][-1] == saved
    assert as_tuples(Table.open(path).read()) == states[saved]
    assert as_tuples(hudi_read(path)) == states[saved]
