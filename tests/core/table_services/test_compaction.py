"""Compaction of merge-on-read tables: scheduling (plan, strategies, trigger), execution, and writers meanwhile.

Every table here is real (files on disk). Expected rows come from the input batches
(`Model`), and hudi-rs (PyPI `hudi` 0.5.0) reads the same tables. hudi-rs hides log files
based on a still-pending compaction (format reference 11.3), so it is compared only when no
write happened after a pending plan, or once the compaction completed.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakeward.core.table_services.compaction.execute as execute_mod
import lakeward.core.write.client as client_mod
from lakeward.core.exceptions import (
    ConfigError,
    InstantExistsError,
    InstantNotFoundError,
    MissingFileError,
    SharedLockRequiredError,
)
from lakeward.core.table import Table
from lakeward.core.timeline import Action, State
from tests.core.table_services.compaction_helpers import (
    Background,
    Gate,
    HeldWriter,
    Scenario,
    base_files,
    base_files_of,
    commit_json,
    expected_operations,
    loaded,
    log_files,
    markers_of,
    planned_groups,
    read_optimized_mismatches,
    read_plan,
    timeline_files,
    tree_digest,
)
from tests.interop.compare import comparable_rows
from tests.interop.test_hudi_rs_mor_writes import as_tuples, hudi_read, records, to_batch

SCRIPTS = Path(__file__).parents[1] / "scripts"
PLAN_SCHEMA = "org.apache.hudi.avro.model.HoodieCompactionPlan"
STRATEGIES = "org.apache.hudi.table.action.compact.strategy."


def _write_instants(table: Table) -> list[str]:
    return [i.time for i in table.timeline().completed_writes()]


# == schedule ==================================================================================
def test_plan_is_a_hoodie_compaction_plan_naming_every_slice_with_logs(tmp_path: Path) -> None:
    s = loaded(tmp_path / "t")
    expected = expected_operations(s.path)
    assert len(expected) == 6, "setup: two file groups per partition, all with log files"
    data_before = {k: v for k, v in tree_digest(s.path).items() if not k.startswith(".hoodie")}
    timeline_before = timeline_files(s.path)

    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    assert instant > max(_write_instants(s.table))
    assert timeline_files(s.path) - timeline_before == {f"{instant}.compaction.requested"}
    assert {k: v for k, v in tree_digest(s.path).items() if not k.startswith(".hoodie")} == data_before

    record, schema, codec = read_plan(s.path, instant)
    assert schema["name"] == PLAN_SCHEMA
    assert codec == "null"
    assert record["version"] == 2
    assert record["strategy"]["compactorClassName"] == STRATEGIES + "LogFileSizeBasedCompactionStrategy"
    ops = record["operations"]
    assert len(ops) == len(expected), "one operation per slice with log files"
    for op in ops:
        want = expected[(op["partitionPath"], op["fileId"])]
        assert {k: op[k] for k in want} == want
        assert op["metrics"]["TOTAL_LOG_FILES"] == len(want["deltaFilePaths"])
        sizes = [os.path.getsize(Path(s.path, op["partitionPath"], n)) for n in want["deltaFilePaths"]]
        assert op["metrics"]["TOTAL_LOG_FILES_SIZE"] == sum(sizes)
    # LogFileSizeBasedCompactionStrategy ranks by log size, largest first.
    sizes = [op["metrics"]["TOTAL_LOG_FILES_SIZE"] for op in ops]
    assert sizes == sorted(sizes, reverse=True)

    assert s.table.pending_compactions() == [instant]
    assert Table.open(s.path).timeline().state_of(instant, Action.COMPACTION) is State.REQUESTED
    # A plan changes no data: both readers still read what the writes imply.
    s.assert_both_readers("with a requested compaction")


def _skewed(path: Path) -> tuple[Scenario, dict[str, int]]:
    """sf's file group has a big log, nyc's a small one, chennai's none; returns log bytes per partition."""
    s = Scenario.create(path, seed="skewed")
    s.insert(range(60), 1, "load")
    s.upsert(range(0, 60, 3), 2, "big-update-of-sf")  # 20 records, all in sf
    s.upsert([1], 2, "small-update-of-nyc")
    sizes: dict[str, int] = {}
    for rel in log_files(s.path):
        sizes[rel.split(os.sep)[0]] = sizes.get(rel.split(os.sep)[0], 0) + os.path.getsize(Path(s.path, rel))
    assert set(sizes) == {"city=sf", "city=nyc"} and sizes["city=sf"] > sizes["city=nyc"], sizes
    return s, sizes


def test_log_size_threshold_excludes_slices_with_small_logs(tmp_path: Path) -> None:
    s, sizes = _skewed(tmp_path / "t")
    # Above every slice's log size: nothing qualifies, nothing is written.
    before = tree_digest(s.path)
    table = Table.open(s.path, options={"hoodie.compaction.logfile.size.threshold": sizes["city=sf"] + 1})
    assert table.schedule_compaction(force=True) is None
    assert tree_digest(s.path) == before

    threshold = (sizes["city=sf"] + sizes["city=nyc"]) // 2
    table = Table.open(s.path, options={"hoodie.compaction.logfile.size.threshold": threshold})
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    assert {p for p, _ in planned_groups(s.path, instant)} == {"city=sf"}
    table.run_compaction(instant)
    s.assert_both_readers()
    # nyc's slice keeps its log: read-optimized reads miss exactly its update.
    assert as_tuples(hudi_read(s.path, read_optimized=True)) != s.expected()


def test_unbounded_strategy_takes_every_slice_with_logs(tmp_path: Path) -> None:
    s, sizes = _skewed(tmp_path / "t")
    options = {
        "hoodie.compaction.strategy": "UnBoundedCompactionStrategy",
        # ignored by the unbounded strategy
        "hoodie.compaction.logfile.size.threshold": sizes["city=sf"] + 1,
    }
    instant = Table.open(s.path, options=options).schedule_compaction(force=True)
    assert instant is not None
    record, _, _ = read_plan(s.path, instant)
    assert {op["partitionPath"] for op in record["operations"]} == {"city=sf", "city=nyc"}
    assert record["strategy"]["compactorClassName"] == STRATEGIES + "UnBoundedCompactionStrategy"


def test_strategy_given_as_hudi_class_name(tmp_path: Path) -> None:
    s, _ = _skewed(tmp_path / "t")
    options = {"hoodie.compaction.strategy": STRATEGIES + "UnBoundedCompactionStrategy"}
    instant = Table.open(s.path, options=options).schedule_compaction(force=True)
    assert instant is not None
    record, _, _ = read_plan(s.path, instant)
    assert record["strategy"]["compactorClassName"] == STRATEGIES + "UnBoundedCompactionStrategy"


def test_default_log_size_strategy_takes_every_slice_with_logs_largest_first(tmp_path: Path) -> None:
    s, _ = _skewed(tmp_path / "t")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    record, _, _ = read_plan(s.path, instant)
    assert [op["partitionPath"] for op in record["operations"]] == ["city=sf", "city=nyc"]


@pytest.mark.slow  # ~17 s under load: many delta commits
def test_trigger_after_max_delta_commits(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path / "t", {"hoodie.compact.inline.max.delta.commits": 3})
    s.insert(range(30), 1, "load")  # delta commit 1 (base files only)
    s.upsert(range(0, 30, 2), 2, "u1")  # 2
    before = tree_digest(s.path)
    assert s.table.schedule_compaction() is None, "only 2 delta commits since the start"
    assert tree_digest(s.path) == before, "a compaction that is not due writes nothing"
    s.upsert(range(1, 30, 2), 3, "u2")  # 3
    first = s.table.schedule_compaction()
    assert first is not None and len(planned_groups(s.path, first)) == 3
    s.table.run_compaction(first)

    # The count restarts after a completed compaction.
    s.upsert(range(0, 30, 5), 4, "u3")
    assert s.table.schedule_compaction() is None
    forced = s.table.schedule_compaction(force=True)
    assert forced is not None and len(planned_groups(s.path, forced)) == 3
    s.table.run_compaction(forced)
    s.upsert(range(0, 30, 7), 5, "u4")
    s.upsert(range(0, 30, 9), 6, "u5")
    assert s.table.schedule_compaction() is None
    s.upsert(range(0, 30, 11), 7, "u6")
    assert s.table.schedule_compaction() is not None
    s.assert_both_readers()


def test_default_trigger_is_five_delta_commits(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path / "t")
    s.insert(range(30), 1, "load")
    for n in range(2, 6):
        assert s.table.schedule_compaction() is None, f"{n - 1} delta commit(s)"
        s.upsert(range(n, 30, 4), n, f"u{n}")
    assert s.table.schedule_compaction() is not None


def test_nothing_to_compact_without_log_files(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path / "t")
    s.insert(range(30), 1, "a")
    s.insert(range(30, 40), 1, "b")
    assert log_files(s.path) == {}
    before = tree_digest(s.path)
    assert s.table.schedule_compaction(force=True) is None
    assert tree_digest(s.path) == before
    assert s.table.pending_compactions() == []


@pytest.mark.parametrize("version", [6, 9])
def test_a_lost_log_file_stops_scheduling_and_running_a_compaction(tmp_path: Path, version: int) -> None:
    """A log file of a completed delta commit that is gone from storage (an operator's mistake, a bucket
    lifecycle rule) holds rows no other file has: a compaction of its slice would write a base file without
    them and the next clean would make the loss permanent. Reads refuse such a table; so must compaction,
    whether the plan is made after the loss or before it, leaving the table exactly as it was. On version 9
    the metadata table still lists the lost file, so the listing alone cannot tell."""
    s = loaded(tmp_path / "t", table_version=version)
    lost = sorted(log_files(s.path))[0]

    planned = s.table.schedule_compaction(force=True)  # planned while the file was there
    assert planned is not None
    os.remove(os.path.join(s.path, lost))
    before = tree_digest(s.path)
    with pytest.raises(MissingFileError, match=os.path.basename(lost)):
        s.table.run_compaction(planned)
    assert tree_digest(s.path) == before
    with pytest.raises(MissingFileError, match=os.path.basename(lost)):
        Table.open(s.path).read()

    other = loaded(tmp_path / "u", table_version=version)
    os.remove(os.path.join(other.path, sorted(log_files(other.path))[0]))
    before = tree_digest(other.path)
    with pytest.raises(MissingFileError):
        other.table.schedule_compaction(force=True)
    assert tree_digest(other.path) == before
    assert other.table.pending_compactions() == []


def test_scheduling_on_a_copy_on_write_table_raises_and_changes_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "cow")
    table = Table.create(path, record_key="id", partition_by="city", ordering_field="ts")
    rng = random.Random(1)
    table.upsert(to_batch(records(range(20), 1, "a", rng)))
    table.upsert(to_batch(records(range(0, 20, 2), 2, "b", rng)))
    before = tree_digest(path)
    with pytest.raises(ConfigError, match="MERGE_ON_READ"):
        table.schedule_compaction(force=True)
    with pytest.raises(ConfigError):
        table.schedule_compaction()
    assert tree_digest(path) == before


def test_inline_compaction_is_ignored_on_a_copy_on_write_table(tmp_path: Path) -> None:
    options = {"hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": 1}
    path = str(tmp_path / "cow")
    table = Table.create(path, record_key="id", partition_by="city", ordering_field="ts", options=options)
    rng = random.Random(2)
    table.upsert(to_batch(records(range(20), 1, "a", rng)))
    table.upsert(to_batch(records(range(0, 20, 2), 2, "b", rng)))
    assert not any(".compaction." in n for n in timeline_files(path))


def test_no_plan_while_a_write_is_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write running in this process (its log files written, not completed) blocks scheduling."""
    s = loaded(tmp_path / "t")
    # The writer stops after its files are written, before it takes the lock to complete.
    gate = Gate(monkeypatch, client_mod, "reconcile_markers")
    writer = Table.open(s.path, options=dict(s.table.options))
    job = Background(lambda: s.upsert(range(0, 90, 6), 3, "in-flight", table=writer))
    gate.wait()
    [pending] = Table.open(s.path).timeline().pending_writes()
    assert pending.action is Action.DELTA_COMMIT and pending.state is State.INFLIGHT
    before = tree_digest(s.path)

    assert s.table.schedule_compaction(force=True) is None
    assert tree_digest(s.path) == before, "no plan written and the running write was not rolled back"
    assert s.table.pending_compactions() == []

    gate.release()
    in_flight = job.result()
    assert in_flight == pending.time
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    # The plan names the log files the (now completed) write added.
    record, _, _ = read_plan(s.path, instant)
    planned_logs = {os.path.join(op["partitionPath"], n) for op in record["operations"] for n in op["deltaFilePaths"]}
    assert planned_logs == set(log_files(s.path))
    s.table.run_compaction(instant)
    s.assert_both_readers()


def test_a_crashed_write_blocks_planning_until_the_next_write_rolls_it_back(tmp_path: Path) -> None:
    """A deltacommit left pending by a killed process: the scheduler cannot tell it from a running
    write of another process, so it neither plans nor rolls it back; the next write does."""
    from tests.core.test_crash_recovery import run_and_kill

    s = loaded(tmp_path / "t")
    logs_before = set(log_files(s.path))
    batch = tmp_path / "crash.parquet"
    pq.write_table(to_batch(records(range(0, 90, 3), 5, "crashed", s.rng)), batch)
    run_and_kill(Path(s.path), "after_first_log_file", batch)
    [failed] = Table.open(s.path).timeline().pending_writes()
    crashed_logs = set(log_files(s.path)) - logs_before
    assert len(crashed_logs) == 1
    before = tree_digest(s.path)

    assert s.table.schedule_compaction(force=True) is None
    assert tree_digest(s.path) == before, "neither a plan nor a rollback"

    s.upsert(range(1, 90, 10), 6, "next")  # rolls the crashed write back
    timeline = Table.open(s.path).timeline()
    assert timeline.pending_writes() == []
    assert failed.time not in timeline.completed_write_times()
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    record, _, _ = read_plan(s.path, instant)
    planned_logs = {os.path.join(op["partitionPath"], n) for op in record["operations"] for n in op["deltaFilePaths"]}
    assert planned_logs == set(log_files(s.path)) and planned_logs.isdisjoint(crashed_logs)
    assert not any(Path(s.path, rel).exists() for rel in crashed_logs)
    s.table.run_compaction(instant)
    s.assert_both_readers()


def test_a_running_write_of_another_process_is_left_alone(tmp_path: Path) -> None:
    """The scheduler must not roll back a pending write of another process: it may be running, and
    would then complete with its log files deleted (its updates silently lost)."""
    s = loaded(tmp_path / "t")
    rows = records(range(0, 90, 6), 3, "other-process", s.rng)
    batch = tmp_path / "batch.parquet"
    pq.write_table(to_batch(rows), batch)
    with HeldWriter(s.path, batch) as writer:
        before = tree_digest(s.path)
        assert s.table.schedule_compaction(force=True) is None
        assert tree_digest(s.path) == before, "the running write was rolled back or a plan was written"
        assert writer.release() == f"DONE {writer.instant}"
    s.model.upsert(writer.instant, rows)
    s.states[writer.instant] = s.model.snapshot()
    s.assert_both_readers("after the other process's write")

    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    s.table.run_compaction(instant)
    s.assert_both_readers("after the compaction")


def test_a_running_write_of_another_process_survives_a_write_here(tmp_path: Path) -> None:
    s = loaded(tmp_path / "t")
    rows = records(range(0, 90, 6), 3, "other-process", s.rng)
    batch = tmp_path / "batch.parquet"
    pq.write_table(to_batch(rows), batch)
    with HeldWriter(s.path, batch) as writer:
        before = tree_digest(s.path)
        # Both use the in-process lock, which cannot order two processes: this one is refused, clearly.
        with pytest.raises(SharedLockRequiredError, match="hoodie.write.lock.provider"):
            s.upsert([1000], 4, "here")  # disjoint keys: a new file group
        assert tree_digest(s.path) == before
        outcome = writer.release()
    assert outcome == f"DONE {writer.instant}"
    s.model.upsert(writer.instant, rows)
    s.assert_lakeward("a completed write's updates")


def test_a_second_schedule_does_not_replan_pending_slices(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path / "t")
    s.insert(range(60), 1, "load")  # groups A (one per partition)
    s.insert(range(60, 90), 1, "load2")  # groups B
    s.upsert(range(0, 60, 4), 2, "a-only")  # logs in A only
    first = s.table.schedule_compaction(force=True)
    assert first is not None
    groups_a = planned_groups(s.path, first)
    assert len(groups_a) == 3

    # Writes to A (into the slices based on `first`) and to B.
    s.upsert(range(0, 90, 5), 3, "both")
    logs_on_first = {rel for rel, (_, base, _) in log_files(s.path).items() if base == first}
    assert len(logs_on_first) == 3, "writes to groups under the pending plan go to slices based on it"
    second = s.table.schedule_compaction(force=True)
    assert second is not None
    groups_b = planned_groups(s.path, second)
    assert len(groups_b) == 3 and groups_a.isdisjoint(groups_b)
    s.assert_lakeward("with two pending plans")
    assert s.table.pending_compactions() == [first, second]
    assert s.table.schedule_compaction(force=True) is None, "every slice with logs is planned already"

    # Completed out of order.
    s.table.run_compaction(second)
    s.table.run_compaction(first)
    assert s.table.pending_compactions() == []
    s.assert_both_readers("after both compactions")

    # A's newer logs (based on `first`) are compacted onto `first`'s base files by a third plan.
    third = s.table.schedule_compaction(force=True)
    assert third is not None
    record, _, _ = read_plan(s.path, third)
    assert {(op["partitionPath"], op["fileId"]) for op in record["operations"]} == groups_a
    for op in record["operations"]:
        assert op["baseInstantTime"] == first
        assert op["dataFilePath"].endswith(f"_{first}.parquet")
        assert {os.path.join(op["partitionPath"], n) for n in op["deltaFilePaths"]} <= logs_on_first
    s.table.run_compaction(third)
    s.assert_both_readers("after the third compaction")
    assert read_optimized_mismatches(s.path, _write_instants(s.table)) == []


# == run =======================================================================================
def test_run_compaction_writes_base_files_and_a_compact_commit(tmp_path: Path) -> None:
    s = loaded(tmp_path / "t")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    record, _, _ = read_plan(s.path, instant)
    ops = {(op["partitionPath"], op["fileId"]): op for op in record["operations"]}
    # Before: read-optimized reads miss the logged changes (so the check below can fail).
    assert as_tuples(s.table.read(read_optimized=True)) != s.expected()
    seqno_before = {r["_hoodie_record_key"]: r["_hoodie_commit_seqno"] for r in hudi_read_table(s.path).to_pylist()}
    base_before = set(base_files(s.path))

    result = s.table.run_compaction(instant)

    assert result.instant_time == instant and result.file_slices == len(ops)
    new = base_files_of(s.path, instant)
    assert sorted(Path(p).name for p in new) == sorted(Path(p).name for p in result.files_written)
    assert {(str(Path(p).parent), fid) for p, fid in new.items()} == set(ops), "one new base file per planned slice"
    assert base_before <= set(base_files(s.path)), "the old slices stay (for time travel) until cleaned"
    # Every expected row lives either in a compacted slice or in a file group without logs.
    unplanned = [p for p, (fid, t) in base_files(s.path).items() if (str(Path(p).parent), fid) not in ops]
    assert result.records_written + sum(pq.read_metadata(Path(s.path, p)).num_rows for p in unplanned) == len(
        s.expected()
    )

    meta = commit_json(s.path, instant)
    assert meta["operationType"] == "COMPACT" and meta["compacted"] is True
    stats = [st for sts in meta["partitionToWriteStats"].values() for st in sts]
    assert {(st["partitionPath"], st["fileId"]) for st in stats} == set(ops)
    for st in stats:
        op = ops[(st["partitionPath"], st["fileId"])]
        assert st["path"] in new and st["prevCommit"] == op["baseInstantTime"]
        assert st["totalLogFilesCompacted"] == len(op["deltaFilePaths"])
        assert pq.read_metadata(Path(s.path, st["path"])).num_rows == st["numWrites"]
    timeline = Table.open(s.path).timeline()
    assert timeline.state_of(instant, Action.COMPACTION) is State.COMPLETED
    assert {f"{instant}.compaction.requested", f"{instant}.compaction.inflight", f"{instant}.commit"} <= timeline.files
    assert markers_of(s.path, instant) == []
    assert s.table.pending_compactions() == []
    for sl in s.table.file_slices():
        if (sl.partition_path, sl.file_id) in ops:
            assert sl.base_instant_time == instant and sl.log_files == ()

    # Same rows (commit times included) from both readers, latest and as of every earlier write.
    s.assert_both_readers("after the compaction")
    # Read-optimized reads now see the compacted data.
    assert as_tuples(s.table.read(read_optimized=True)) == s.expected()
    assert as_tuples(hudi_read(s.path, read_optimized=True)) == s.expected()
    # Records keep their commit sequence numbers.
    seqno_after = {r["_hoodie_record_key"]: r["_hoodie_commit_seqno"] for r in hudi_read_table(s.path).to_pylist()}
    assert seqno_after == seqno_before
    assert read_optimized_mismatches(s.path, _write_instants(s.table)) == []


def hudi_read_table(path: str) -> pa.Table:
    return pa.Table.from_batches(hudi_read(path))


def test_a_slice_whose_records_are_all_deleted_compacts_to_an_empty_base_file(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path / "t")
    s.insert(range(30), 1, "load")
    s.delete_keys(range(0, 30, 3))  # every record of sf
    s.upsert(range(1, 30, 3), 2, "nyc")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    s.table.run_compaction(instant)
    [empty] = [p for p in base_files_of(s.path, instant) if p.startswith("city=sf")]
    assert pq.read_metadata(Path(s.path, empty)).num_rows == 0
    s.assert_both_readers()
    assert as_tuples(hudi_read(s.path, read_optimized=True)) == s.expected()


def test_rolled_over_log_files_are_all_planned_and_compacted(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path / "t", {"hoodie.logfile.max.size": 300})
    s.insert(range(45), 1, "load")
    s.upsert(range(0, 45, 2), 2, "u1")
    s.upsert(range(1, 45, 2), 3, "u2", deleted=[5, 7])
    expected = expected_operations(s.path)
    assert max(len(op["deltaFilePaths"]) for op in expected.values()) > 2, "setup: logs rolled over"
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    record, _, _ = read_plan(s.path, instant)
    assert {(op["partitionPath"], op["fileId"]): op["deltaFilePaths"] for op in record["operations"]} == {
        k: v["deltaFilePaths"] for k, v in expected.items()
    }
    s.table.run_compaction(instant)
    s.assert_both_readers()
    assert as_tuples(s.table.read(read_optimized=True)) == s.expected()


def test_running_an_unknown_or_completed_compaction_fails_and_changes_nothing(tmp_path: Path) -> None:
    s = loaded(tmp_path / "t")
    before = tree_digest(s.path)
    last_write = _write_instants(s.table)[-1]
    for unknown in ("20200101000000000", last_write):
        with pytest.raises(InstantNotFoundError):
            s.table.run_compaction(unknown)
        assert tree_digest(s.path) == before

    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    s.table.run_compaction(instant)
    after = tree_digest(s.path)
    with pytest.raises(InstantExistsError):
        s.table.run_compaction(instant)
    assert tree_digest(s.path) == after
    s.assert_both_readers()


def test_run_compaction_on_a_copy_on_write_table_is_refused_as_not_applying(tmp_path: Path) -> None:
    path = str(tmp_path / "cow")
    table = Table.create(path, record_key="id", partition_by="city", ordering_field="ts")
    rng = random.Random(1)
    commit = table.upsert(to_batch(records(range(20), 1, "a", rng))).instant_time
    before = tree_digest(path)
    with pytest.raises(ConfigError, match="compaction applies to MERGE_ON_READ tables; cow is COPY_ON_WRITE"):
        table.run_compaction(commit)
    assert tree_digest(path) == before


# == writers while a compaction is pending or running ========================================
@pytest.mark.parametrize(
    ("index", "block_format"), [("BLOOM", "avro"), ("SIMPLE", "parquet"), ("BUCKET", "avro"), ("BUCKET", "parquet")]
)
def test_writes_while_a_compaction_is_pending(tmp_path: Path, index: str, block_format: str) -> None:
    """Order 1: writes complete before the compaction does; nothing lost or duplicated."""
    s = loaded(
        tmp_path / "t",
        {
            "hoodie.index.type": index,
            "hoodie.bucket.index.num.buckets": 2,
            "hoodie.logfile.data.block.format": block_format,
        },
    )
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    planned = planned_groups(s.path, instant)
    logs_before = set(log_files(s.path))

    # Updates of keys in planned groups (and one `_hoodie_is_deleted`), new keys, then deletes.
    w1 = s.upsert([*range(0, 90, 7), 100, 101, 102], 3, "during", deleted=[14])
    w2 = s.delete_keys([3, 21, 63, 101])
    new_logs = {rel: meta for rel, meta in log_files(s.path).items() if rel not in logs_before}
    assert new_logs, "the writes appended log files"
    for rel, (file_id, base_instant, _) in new_logs.items():
        if (str(Path(rel).parent), file_id) in planned:
            assert base_instant == instant, f"{rel}: a write under a pending compaction starts a slice on it"
    s.assert_lakeward("while the compaction is pending")
    for as_of in (w1, w2):
        assert as_tuples(s.table.read(as_of=as_of)) == s.expected(as_of)

    s.table.run_compaction(instant)
    s.assert_both_readers("after the compaction")
    assert read_optimized_mismatches(s.path, _write_instants(s.table)) == []


def test_write_after_the_compaction_appends_to_the_compacted_slice(tmp_path: Path) -> None:
    """Schedule, write W1 (onto the pending slice), compact, write W2 (onto the compacted base file)."""
    s = loaded(tmp_path / "t")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    s.upsert(range(0, 90, 6), 3, "w1")
    s.table.run_compaction(instant)
    s.assert_both_readers("after W1 and the compaction")
    w1_logs = {rel: meta for rel, meta in log_files(s.path).items() if meta[1] == instant}
    s.upsert([*range(2, 90, 6), 110], 4, "w2", deleted=[14])
    s.delete_keys([0, 30])
    on_compacted = {rel: meta for rel, meta in log_files(s.path).items() if meta[1] == instant}
    assert len(on_compacted) > len(w1_logs), "W2 appends to the slices based on the compaction"
    s.assert_both_readers("after W2")
    assert read_optimized_mismatches(s.path, _write_instants(s.table)) == []


def test_compaction_completes_while_a_write_is_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Order 2: the compaction completes after the write appended its logs but before the write completes."""
    s = loaded(tmp_path / "t")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    gate = Gate(monkeypatch, client_mod, "reconcile_markers")
    writer = Table.open(s.path, options=dict(s.table.options))
    job = Background(lambda: s.upsert([*range(0, 90, 5), 120], 3, "racing", deleted=[10], table=writer))
    gate.wait()

    s.table.run_compaction(instant)  # the write's log files exist, its deltacommit does not yet
    assert s.table.pending_compactions() == []
    gate.release()
    job.result()  # no ConcurrentWriteError: the compaction is no conflict
    s.assert_both_readers("after the write completed")
    assert read_optimized_mismatches(s.path, _write_instants(s.table)) == []


def test_write_completes_while_the_compaction_is_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compaction has written one base file when a write starts, appends and completes."""
    s = loaded(tmp_path / "t", {"hoodie.upsert.shuffle.parallelism": 1})
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    gate = Gate(monkeypatch, execute_mod, "write_base_file", after=True)
    compactor = Table.open(s.path, options=dict(s.table.options))
    job = Background(lambda: compactor.run_compaction(instant))
    gate.wait()
    assert len(base_files_of(s.path, instant)) == 1

    s.upsert([*range(0, 90, 5), 130], 3, "meanwhile", deleted=[15])  # every planned group
    s.delete_keys([6])
    s.assert_lakeward("while the compaction runs")
    gate.release()
    job.result()
    s.assert_both_readers("after the compaction")
    assert read_optimized_mismatches(s.path, _write_instants(s.table)) == []


def test_compaction_in_another_process_while_a_write_is_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = loaded(tmp_path / "t")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    gate = Gate(monkeypatch, client_mod, "reconcile_markers")
    writer = Table.open(s.path, options=dict(s.table.options))
    job = Background(lambda: s.upsert(range(1, 90, 4), 3, "racing", table=writer))
    gate.wait()
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "crash_compactor.py"), s.path, "none", instant],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "FINISHED", done.stderr
    assert s.table.pending_compactions() == []
    gate.release()
    job.result()
    s.upsert(range(2, 90, 4), 4, "after")
    s.assert_both_readers()
    assert read_optimized_mismatches(s.path, _write_instants(s.table)) == []


# == inline ====================================================================================
def test_inline_compaction_after_max_delta_commits(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path / "t", {"hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": 2})
    s.insert(range(45), 1, "load")
    assert not any(n.endswith(".compaction.requested") for n in timeline_files(s.path))
    second = s.upsert(range(0, 45, 2), 2, "u1", deleted=[4])
    compactions = sorted(n.split(".")[0] for n in timeline_files(s.path) if n.endswith(".compaction.requested"))
    assert len(compactions) == 1 and compactions[0] > second
    [instant] = compactions
    assert f"{instant}.commit" in timeline_files(s.path), "the inline compaction completed"
    assert commit_json(s.path, instant)["operationType"] == "COMPACT"
    assert len(base_files_of(s.path, instant)) == 3
    assert as_tuples(s.table.read(read_optimized=True)) == s.expected()
    s.assert_both_readers("after the inline compaction")

    s.upsert(range(1, 45, 3), 3, "u2")  # 1 delta commit since
    assert len([n for n in timeline_files(s.path) if n.endswith(".compaction.requested")]) == 1
    s.upsert(range(2, 45, 3), 4, "u3")  # 2: the next one
    assert len([n for n in timeline_files(s.path) if n.endswith(".commit")]) == 2
    assert s.table.pending_compactions() == []
    s.assert_both_readers("after the second inline compaction")


# == Spark =====================================================================================
@pytest.mark.spark
def test_compaction_on_the_spark_engine_matches_local(tmp_path: Path, spark) -> None:  # type: ignore[no-untyped-def]
    from lakeward.spark import SparkEngine

    s = loaded(tmp_path / "local")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    on_spark = str(tmp_path / "spark")
    shutil.copytree(s.path, on_spark)

    local = s.table.run_compaction(instant)
    remote = Table.open(on_spark).run_compaction(instant, engine=SparkEngine(spark))
    assert sorted(remote.files_written) == sorted(local.files_written)
    assert remote.records_written == local.records_written
    assert sorted(base_files_of(on_spark, instant)) == sorted(base_files_of(s.path, instant))
    for rel in base_files_of(s.path, instant):
        assert pq.read_table(Path(on_spark, rel)).equals(pq.read_table(Path(s.path, rel))), rel
    assert as_tuples(Table.open(on_spark).read()) == s.expected()
    assert as_tuples(hudi_read(on_spark)) == s.expected()
    assert comparable_rows(hudi_read(on_spark, read_optimized=True)) == comparable_rows(
        hudi_read(s.path, read_optimized=True)
    )


@pytest.mark.spark
def test_spark_write_while_a_compaction_is_pending(tmp_path: Path, spark) -> None:  # type: ignore[no-untyped-def]
    """The Spark data plane appends to the slice based on the pending compaction, as the local one does."""
    from lakeward.spark import SparkEngine

    s = loaded(tmp_path / "t")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    planned = planned_groups(s.path, instant)
    logs_before = set(log_files(s.path))
    rows = records(range(0, 90, 3), 3, "spark", s.rng)
    w = s.table.upsert(to_batch(rows), engine=SparkEngine(spark)).instant_time
    s.model.upsert(w, rows)
    s.states[w] = s.model.snapshot()
    new_logs = {rel: m for rel, m in log_files(s.path).items() if rel not in logs_before}
    assert new_logs
    for rel, (file_id, base_instant, _) in new_logs.items():
        assert (str(Path(rel).parent), file_id) in planned
        assert base_instant == instant, f"{rel}: the Spark write must start a slice on the pending compaction"
    s.assert_lakeward("while the compaction is pending")
    s.table.run_compaction(instant)
    s.assert_both_readers("after the compaction")
