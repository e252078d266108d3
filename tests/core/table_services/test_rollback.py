"""Explicit rollback (`Table.rollback`) of pending and completed instants, checked with hudi-rs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.exceptions import InstantExistsError, InstantNotFoundError, RollbackAbortedError
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.storage import Storage
from lakeward.core.table_services.rollback import resume_rollback, rollback_pending_instant
from lakeward.core.timeline import Action, Instant, State, Timeline, avro_plans, new_instant_time
from lakeward.core.timeline.transitions import create_requested, transition_to_inflight
from tests.core.test_crash_recovery import run_and_kill as run_writer_and_kill
from tests.interop.compare import comparable_rows, hudi_snapshot, hudi_table


def _batch(ids: list[int], v: str) -> pa.Table:
    return pa.table({"id": ids, "p": [("a", "b")[i % 2] for i in ids], "v": [f"{v}{i}" for i in ids]})


def _values(path: str) -> dict[int, str]:
    ours = {r["id"]: r["v"] for r in Table.open(path).read(columns=["id", "v"]).to_pylist()}
    theirs = {r["id"]: r["v"] for r in comparable_rows(hudi_snapshot(hudi_table(path)))}
    assert ours == theirs, (ours, theirs)
    return ours


def _data_files(path: str) -> set[str]:
    root = Path(path)
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and not p.name.startswith(".hoodie_partition")
    }


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_rolling_back_the_latest_commit_restores_the_previous_state(tmp_path: Path, table_type: str) -> None:
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="p", table_type=table_type)
    table.insert(_batch([1, 2, 3, 4], "a"))
    files_before = _data_files(path)
    last = table.upsert(_batch([1, 2, 5], "b")).instant_time
    assert _values(path)[1] == "b1"
    result = table.rollback(last)
    assert result.rolled_back_instant_time == last
    assert _values(path) == {1: "a1", 2: "a2", 3: "a3", 4: "a4"}
    assert _data_files(path) == files_before
    timeline = Timeline.load(Storage.for_uri(path))
    assert last not in {i.time for i in timeline.instants}
    assert [i.action for i in timeline.completed()][-1] is Action.ROLLBACK
    table.upsert(_batch([6], "c"))  # writes go on
    assert _values(path)[6] == "c6"


def test_rolling_back_a_completed_compaction(tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    table = Table.create(path, record_key="id", partition_by="p", table_type="MERGE_ON_READ")
    table.insert(_batch([1, 2, 3, 4], "a"))
    table.upsert(_batch([1, 4], "b"))
    before = _values(path)
    compaction = table.schedule_compaction(force=True)
    assert compaction is not None
    table.run_compaction(compaction)
    table.rollback(compaction)
    assert _values(path) == before
    assert table.pending_compactions() == []
    assert not any(compaction in f for f in _data_files(path))


def test_only_the_latest_unsavepointed_instant_can_be_rolled_back(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="p")
    first = table.insert(_batch([1, 2], "a")).instant_time
    second = table.upsert(_batch([1], "b")).instant_time
    with pytest.raises(InstantExistsError, match="came after it"):
        table.rollback(first)
    with pytest.raises(InstantNotFoundError):
        table.rollback("20200101000000000")
    table.savepoint(second)
    with pytest.raises(InstantExistsError, match="savepointed"):
        table.rollback(second)
    assert _values(path) == {1: "b1", 2: "a2"}


def test_an_interrupted_rollback_of_a_completed_instant_is_dropped_then_redone(tmp_path: Path) -> None:
    """The plan is written first; a runner that died right after it (before its first step) left nothing done."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="p")
    table.insert(_batch([1, 2], "a"))
    last = table.upsert(_batch([2, 3], "b")).instant_time
    storage = Storage.for_uri(path)
    plan = {
        "instantToRollback": {"commitTime": last, "action": "commit"},
        "RollbackRequests": [
            {
                "partitionPath": "",
                "fileId": "",
                "latestBaseInstant": "",
                "filesToBeDeleted": [
                    storage.full_path(f) for f in _data_files(path) if last in f and f.endswith(".parquet")
                ],
                "logBlocksToBeDeleted": {},
            }
        ],
        "version": 1,
    }
    rollback_time = "29990101000000000"
    create_requested(storage, rollback_time, Action.ROLLBACK, avro_plans.serialize(avro_plans.ROLLBACK_PLAN, plan))
    # The runner died here. Resumed, the plan cannot tell an explicit rollback of a completed
    # instant from a rollback planned while the instant was pending (whose writer then completed
    # it): a completed instant is never removed that way, the plan is dropped, nothing deleted.
    with pytest.raises(RollbackAbortedError):
        resume_rollback(storage, Instant(rollback_time, Action.ROLLBACK, State.REQUESTED))
    assert _values(path) == {1: "a1", 2: "b2", 3: "b3"}
    assert Timeline.load(storage).pending() == []
    # An explicit rollback does it again.
    Table.open(path).rollback(last)
    assert _values(path) == {1: "a1", 2: "a2"}


@pytest.mark.parametrize("version", [6, 8])
def test_rolling_back_a_write_that_left_no_markers_keeps_the_change_data_of_others(
    tmp_path: Path, version: int
) -> None:
    """A writer that died right after requesting its delta commit leaves no markers: the rollback
    lists the table for its files. It deleted every `.cdc` file (of completed commits and of change
    tracking), which broke every CDC read and, on version 6, every later write."""
    path = str(tmp_path / "t")
    options = {"hoodie.table.cdc.enabled": "true", "hoodie.metadata.enable": "false"}
    table = Table.create(
        path, record_key="id", partition_by="p", table_type="MERGE_ON_READ", table_version=version, options=options
    )
    first = table.upsert(_batch([1, 2], "a")).instant_time
    table.insert(_batch([4], "a"))  # rewrites the small base file: a .cdc file
    table.upsert(_batch([2], "b"))  # a log append
    table.run_change_tracking(table.schedule_change_tracking())  # its changes persisted: another .cdc file
    cdc_before = {f for f in _data_files(path) if f.endswith(".cdc")}
    changes_before = table.read_changes(first).to_pylist()
    assert len(cdc_before) >= 2 and changes_before

    dead = new_instant_time(table.timeline().latest_time())  # requested, then its writer died
    create_requested(table.storage, dead, Action.DELTA_COMMIT, layout=table.timeline().instants[-1].layout)
    table.upsert(_batch([3], "c"))  # rolls `dead` back first

    assert {f for f in _data_files(path) if f.endswith(".cdc")} >= cdc_before
    reopened = Table.open(path)
    assert reopened.check().problems == []
    assert reopened.read_changes(first).to_pylist()[: len(changes_before)] == changes_before
    reopened.upsert(_batch([5], "d"))  # writes go on
    assert _values(path)[5] == "d5"


@pytest.mark.parametrize("version", [6, 8])
def test_a_rollback_without_markers_keeps_log_files_with_no_readable_block(tmp_path: Path, version: int) -> None:
    """A failed delta commit without per-file markers (a Hudi job with timeline-server markers, or a
    writer that died early) is rolled back by listing log files that hold its blocks alone. A log file
    with no readable block at all gives no sign of being its: a completed commit's damaged log (kept
    for repair) or another writer's file being written must stay."""
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        record_key="id",
        partition_by="p",
        table_type="MERGE_ON_READ",
        table_version=version,
        options={"hoodie.metadata.enable": "false"},
    )
    table.upsert(_batch([1, 2], "a"))
    table.upsert(_batch([2], "b"))  # a log file of a completed delta commit
    [log] = [Path(path) / f for f in _data_files(path) if ".log." in f]
    data = bytearray(log.read_bytes())
    data[-8:] = (1).to_bytes(8, "big")  # its trailing block length damaged: no readable block left
    log.write_bytes(bytes(data))
    dead = new_instant_time(table.timeline().latest_time())  # requested, then its writer died: no markers
    requested = create_requested(table.storage, dead, Action.DELTA_COMMIT, layout=table.timeline().instants[-1].layout)
    transition_to_inflight(table.storage, requested)
    [pending] = Table.open(path).timeline().pending_writes()
    result = rollback_pending_instant(table.storage, pending, new_instant_time(pending.time))
    assert str(log.relative_to(path)) not in result.deleted_files
    assert log.exists()
    assert dead not in {i.time for i in Table.open(path).timeline().instants}


def test_rolling_back_a_commit_whose_blocks_share_a_log_file_is_refused(tmp_path: Path) -> None:
    """Hudi 0.x on HDFS appends a delta commit's blocks to the slice's latest log file. Rolling such a
    commit back takes a rollback command block, which lakeward does not write yet: deleting nothing
    left its blocks on storage, and once archival moved past it readers took them for committed and
    brought the rolled-back rows back. The rollback is refused, the table left as it was."""
    import json

    path = str(tmp_path / "t")
    table, second, first_log, offset = _appended_to_the_first_log(path, "c")
    commit = Path(path) / ".hoodie" / f"{second}.deltacommit"
    metadata = json.loads(commit.read_text())
    for stat in [s for stats in metadata["partitionToWriteStats"].values() for s in stats]:
        stat["path"] = str(first_log.relative_to(path))
        stat["logOffset"], stat["fileSizeInBytes"], stat["logFiles"] = (
            offset,
            first_log.stat().st_size,
            [first_log.name],
        )
    commit.write_text(json.dumps(metadata))
    assert _values(path)[2] == "c2"
    before = sorted(str(p) for p in Path(path).rglob("*"))
    with pytest.raises(RollbackAbortedError, match="rollback command block"):
        Table.open(path).rollback(second)
    assert sorted(str(p) for p in Path(path).rglob("*")) == before
    assert _values(path)[2] == "c2"


def test_a_failed_write_whose_blocks_share_a_log_file_is_rolled_back_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed Hudi 0.x delta commit that appended its blocks to a log file holding committed blocks
    (as on HDFS): the file stays (the committed blocks are in it), readers skip the failed blocks, and
    the rollback says that only a rollback command block, which lakeward does not write, removes them
    for good."""
    from lakeward.core.write.markers import create_marker

    path = str(tmp_path / "t")
    table, failed, first_log, _ = _appended_to_the_first_log(path, "x")
    (Path(path) / ".hoodie" / f"{failed}.deltacommit").unlink()  # as if its writer died before completing
    create_marker(table.storage, failed, "a", first_log.name, "APPEND")
    [pending] = Table.open(path).timeline().pending_writes()
    with caplog.at_level("WARNING"):
        result = rollback_pending_instant(table.storage, pending, new_instant_time(pending.time))
    assert result.deleted_files == ()
    assert first_log.exists()
    assert "rollback command block" in caplog.text and first_log.name in caplog.text
    assert _values(path)[2] == "b2"


def _appended_to_the_first_log(path: str, last: str) -> tuple[Table, str, Path, int]:
    """A v6 merge-on-read table whose last delta commit (values `last`) appended its blocks to the log
    file of the commit before, as a Hudi 0.x writer does on HDFS: (table, its instant, that log file,
    the offset its blocks start at)."""
    table = Table.create(
        path,
        record_key="id",
        partition_by="p",
        table_type="MERGE_ON_READ",
        table_version=6,
        options={"hoodie.metadata.enable": "false"},
    )
    table.upsert(_batch([1, 2], "a"))
    table.upsert(_batch([2], "b"))
    instant = table.upsert(_batch([2], last)).instant_time
    first_log, second_log = sorted((Path(path) / f for f in _data_files(path) if ".log." in f), key=lambda p: p.name)
    offset = first_log.stat().st_size
    with first_log.open("ab") as out:
        out.write(second_log.read_bytes())
    second_log.unlink()
    return table, instant, first_log, offset


@pytest.mark.parametrize("version", [6, 8, 9])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_the_last_two_commits_are_rolled_back_one_after_the_other(
    tmp_path: Path, table_type: str, version: int
) -> None:
    """The first rollback's own instant does not block the second (as in Hudi, which counts only commits
    after the target): before the fix `rollback(second)` asked to roll back the rollback instant first,
    which is refused, so a commit before a rolled-back one could never be undone."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="p", table_type=table_type, table_version=version)
    table.insert(_batch([1, 2, 3], "a"))
    second = table.upsert(_batch([1, 4], "b").append_column("n", pa.array(["x", "y"]))).instant_time  # adds `n`
    third = table.upsert(_batch([2, 5], "c").append_column("n", pa.array(["z", "w"]))).instant_time
    table.rollback(third)
    table.rollback(second)
    assert _values(path) == {1: "a1", 2: "a2", 3: "a3"}
    assert "n" not in Table.open(path).schema().names
    diff = compare_files_partition(Table.open(path).storage)
    assert diff.ok, str(diff)
    table.upsert(_batch([6], "d"))  # writes go on
    assert _values(path) == {1: "a1", 2: "a2", 3: "a3", 6: "d6"}


@pytest.mark.parametrize("version", [6, 9])
def test_rolling_back_the_pending_write_of_a_dead_writer_reports_it(tmp_path: Path, version: int) -> None:
    """Before the fix the rollback's own repair step rolled the dead writer's write back first, and the
    explicit rollback then raised InstantNotFoundError for the instant it had just undone."""
    path = tmp_path / "t"
    table = Table.create(str(path), record_key="id", partition_by="p", table_version=version)
    table.insert(_batch([1, 2], "a"))
    batch_file = tmp_path / "batch.parquet"
    pq.write_table(_batch([1, 3], "b"), batch_file)
    run_writer_and_kill(path, "before_complete", batch_file)
    [pending] = [i.time for i in Table.open(str(path)).timeline().pending_writes()]
    result = Table.open(str(path)).rollback(pending)
    assert result.rolled_back_instant_time == pending and result.rollback_instant_time
    timeline = Table.open(str(path)).timeline()
    assert not timeline.pending()
    assert [i.time for i in timeline.completed() if i.action is Action.ROLLBACK] == [result.rollback_instant_time]
    assert _values(str(path)) == {1: "a1", 2: "a2"}
