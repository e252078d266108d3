"""Writers that cannot see each other lose nothing: rollbacks never remove a completed instant,
heartbeats exist before instants are visible, and a second process writing with the in-process
lock is refused with an error that says which lock to configure (issue 18, item 2)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakeward.core.write.client as client_mod
from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConcurrentWriteError, RollbackAbortedError, SharedLockRequiredError
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.table import Table
from lakeward.core.table_services.rollback import resume_rollback, rollback_pending_instant
from lakeward.core.timeline import Action, Instant, State, Timeline, avro_plans
from lakeward.core.timeline.instant_time import new_instant_time
from lakeward.core.timeline.transitions import create_requested, transition_to_inflight
from lakeward.core.write import active
from lakeward.core.write.heartbeat import heartbeat_path

SCRIPTS = Path(__file__).parents[1] / "scripts"
LAZY = {"hoodie.cleaner.policy.failed.writes": "LAZY", "hoodie.client.heartbeat.interval_in_ms": 200}


def _batch(part: str, ids: Sequence[str], v: str) -> pa.Table:
    return pa.table({"id": list(ids), "part": [part] * len(ids), "ts": [0] * len(ids), "v": [v] * len(ids)})


def _rows(path: str) -> dict[str, str]:
    """The table's rows as lakeward and hudi-rs read them (they must agree, without duplicate keys)."""
    ours = Table.open(path).read(columns=["id", "v"])
    mine = dict(zip(ours.column("id").to_pylist(), ours.column("v").to_pylist(), strict=True))
    assert len(mine) == ours.num_rows, "lakeward returned duplicate keys"
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read()
    theirs_table = pa.Table.from_batches(batches) if batches else None
    theirs = (
        dict(zip(theirs_table.column("id").to_pylist(), theirs_table.column("v").to_pylist(), strict=True))
        if theirs_table is not None
        else {}
    )
    assert theirs_table is None or len(theirs) == theirs_table.num_rows, "hudi-rs returned duplicate keys"
    assert mine == theirs
    return mine


def _data_files(path: str) -> set[str]:
    root = Path(path)
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and not p.name.startswith(".hoodie_partition")
    }


def _table(tmp_path: Path, options: dict[str, Any] | None = None, **kwargs: Any) -> str:
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=options, **kwargs)
    table.upsert(_batch("a", ["a1", "a2"], "base"))
    return path


# -- 1. a rollback never removes an instant that completed -----------------------------------
def test_a_rollback_planned_on_a_stale_timeline_leaves_a_completed_instant_alone(tmp_path: Path) -> None:
    """Process A saw B's instant pending, B completed, then A rolls it back: nothing may be deleted."""
    path = _table(tmp_path)
    table = Table.open(path)
    done = table.upsert(_batch("b", ["b1"], "b")).instant_time
    files = _data_files(path)
    stale = Instant(done, Action.COMMIT, State.INFLIGHT)  # how A's timeline, loaded earlier, showed it
    with pytest.raises(RollbackAbortedError, match=done):
        rollback_pending_instant(table.storage, stale, new_instant_time(done))
    assert _data_files(path) == files
    timeline = Timeline.load(table.storage)
    assert [i.action for i in timeline.instants if i.action is Action.ROLLBACK] == [], "an aborted rollback stays"
    assert _rows(path) == {"a1": "base", "a2": "base", "b1": "b"}


def _plan_for(table: Table, target: str, files: set[str]) -> dict[str, Any]:
    return {
        "instantToRollback": {"commitTime": target, "action": "commit"},
        "RollbackRequests": [
            {
                "partitionPath": "b",
                "fileId": "",
                "latestBaseInstant": "",
                "filesToBeDeleted": [table.storage.full_path(f) for f in sorted(files)],
                "logBlocksToBeDeleted": {},
            }
        ],
        "version": 1,
    }


def test_an_interrupted_rollback_of_a_then_pending_instant_does_not_remove_it_once_completed(tmp_path: Path) -> None:
    """A rollback planned while B was pending (its runner died before deleting), then B completed."""
    path = _table(tmp_path)
    table = Table.open(path)
    done = table.upsert(_batch("b", ["b1"], "b")).instant_time
    files = {f for f in _data_files(path) if done in f}
    rollback_time = new_instant_time(done)
    plan = avro_plans.serialize(avro_plans.ROLLBACK_PLAN, _plan_for(table, done, files))
    create_requested(table.storage, rollback_time, Action.ROLLBACK, plan)
    with pytest.raises(RollbackAbortedError, match=done):
        resume_rollback(table.storage, Instant(rollback_time, Action.ROLLBACK, State.REQUESTED))
    assert files <= _data_files(path)
    assert Timeline.load(table.storage).pending() == [], "the stale plan is dropped"
    assert _rows(path) == {"a1": "base", "a2": "base", "b1": "b"}


def test_the_next_writer_drops_a_stale_rollback_plan_of_a_completed_instant(tmp_path: Path) -> None:
    path = _table(tmp_path)
    table = Table.open(path)
    done = table.upsert(_batch("b", ["b1"], "b")).instant_time
    files = {f for f in _data_files(path) if done in f}
    plan = avro_plans.serialize(avro_plans.ROLLBACK_PLAN, _plan_for(table, done, files))
    create_requested(table.storage, new_instant_time(done), Action.ROLLBACK, plan)
    Table.open(path).upsert(_batch("c", ["c1"], "c"))
    assert _rows(path) == {"a1": "base", "a2": "base", "b1": "b", "c1": "c"}
    assert Timeline.load(table.storage).pending() == []


# -- 2. the heartbeat exists before the instant is visible ------------------------------------
@pytest.mark.parametrize("options", [{}, LAZY, {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}])
def test_the_heartbeat_exists_before_the_requested_instant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    """As Hudi: another writer must never see a pending instant without a heartbeat while its writer lives."""
    path = _table(tmp_path, options)
    seen: list[bool] = []
    original = client_mod.create_requested

    def spy(storage: Any, instant_time: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(storage.exists(heartbeat_path(instant_time)))
        return original(storage, instant_time, *args, **kwargs)

    monkeypatch.setattr(client_mod, "create_requested", spy)
    result = Table.open(path, options=options).upsert(_batch("b", ["b1"], "b"))
    assert seen == [True]
    assert not Table.open(path).storage.exists(heartbeat_path(result.instant_time)), "gone once completed"


# -- 3. a second process with the in-process lock is refused, clearly --------------------------
def _start_frozen_writer(path: str, options: dict[str, Any], batch_file: Path) -> tuple[subprocess.Popen[str], str]:
    """`scripts/heartbeat_writer.py`: a write of another process, frozen while inflight (alive)."""
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "heartbeat_writer.py"), path, json.dumps(options), str(batch_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(60)
    line = proc.stdout.readline().strip() if ready else ""
    if not line.startswith("REACHED "):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"writer did not get in flight (stdout {line!r}):\n{err}")
    return proc, line.split()[1]


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@pytest.fixture
def frozen_writer(tmp_path: Path) -> Iterator[Callable[[str, dict[str, Any]], tuple[subprocess.Popen[str], str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(path: str, options: dict[str, Any]) -> tuple[subprocess.Popen[str], str]:
        batch_file = tmp_path / f"batch{len(procs)}.parquet"
        pq.write_table(_batch("a", ["a1", "a3"], "other-process"), batch_file)
        proc, instant = _start_frozen_writer(path, options, batch_file)
        procs.append(proc)
        return proc, instant

    yield start
    for proc in procs:
        if proc.poll() is None:
            _stop(proc)


@pytest.mark.parametrize("options", [{}, LAZY], ids=["eager", "lazy"])
def test_a_second_process_with_the_in_process_lock_gets_a_clear_error(
    tmp_path: Path, frozen_writer: Any, options: dict[str, Any]
) -> None:
    path = _table(tmp_path, options)
    proc, other = frozen_writer(path, options)
    before = _data_files(path)
    with pytest.raises(SharedLockRequiredError) as raised:
        Table.open(path, options=options).upsert(_batch("b", ["b1"], "b"))
    message = str(raised.value)
    for words in (other, f"pid {proc.pid}", "hoodie.write.lock.provider", "hoodie.write.lock.zookeeper.url"):
        assert words in message, message
    assert "hoodie.write.concurrency.mode=optimistic_concurrency_control" in message
    assert [i.time for i in Timeline.load(Table.open(path).storage).pending()] == [other], "the table changed"
    assert _data_files(path) == before
    # Once that process is gone, its write is a failed write: the next writer rolls it back at once.
    _stop(proc)
    Table.open(path, options=options).upsert(_batch("b", ["b1"], "b"))
    assert _rows(path) == {"a1": "base", "a2": "base", "b1": "b"}
    assert Timeline.load(Table.open(path).storage).pending() == []


def _foreign_pending_write(path: str, after: str) -> str:
    """A write of a writer on another machine (a Hudi Java writer: empty heartbeat file), in flight."""
    storage = Table.open(path).storage
    instant = new_instant_time(after)
    storage.write_bytes(heartbeat_path(instant), b"")
    transition_to_inflight(storage, create_requested(storage, instant, Action.COMMIT))
    return instant


class _Between(Engine):
    """Delegates to the writer's engine; runs `between` once, after the data files are written."""

    name = "between"

    def __init__(self, inner: Engine, between: Callable[[], Any]):
        self.inner = inner
        self.between = between
        self.ran = False

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], description: str = "") -> list[Any]:
        result = self.inner.map(fn, items, description)
        if description == "write file groups" and not self.ran:
            self.ran = True
            self.between()
        return result


def test_a_writer_that_started_alongside_another_process_does_not_complete(tmp_path: Path) -> None:
    """Neither saw the other when it started (no shared lock): at commit time the live one is seen."""
    path = _table(tmp_path)
    table = Table.open(path)
    client = table._writer()
    foreign: list[str] = []
    client.engine = _Between(client.engine, lambda: foreign.append(_foreign_pending_write(path, "20990101000000000")))
    with pytest.raises(SharedLockRequiredError, match="hoodie.write.lock.provider"):
        table.upsert(_batch("a", ["a1"], "mine"))
    pending = Timeline.load(table.storage).pending()
    assert [i.time for i in pending] == foreign, "this write is rolled back, the other one left alone"
    assert _rows(path) == {"a1": "base", "a2": "base"}


def test_a_write_of_a_writer_on_another_machine_is_rolled_back_once_its_heartbeat_expired(tmp_path: Path) -> None:
    path = _table(tmp_path, LAZY)
    table = Table.open(path, options=LAZY)
    foreign = _foreign_pending_write(path, "20000101000000000")
    with pytest.raises(SharedLockRequiredError, match=foreign):
        table.upsert(_batch("b", ["b1"], "b"))
    old = time.time() - 10  # far beyond interval (0.2 s) x tolerable misses (2)
    os.utime(Path(path) / heartbeat_path(foreign), (old, old))
    table.upsert(_batch("b", ["b1"], "b"))
    assert Timeline.load(table.storage).pending() == []
    assert _rows(path) == {"a1": "base", "a2": "base", "b1": "b"}


# -- 4. the same new key from two writers: BUCKET index ---------------------------------------
def test_two_writers_inserting_the_same_new_key_conflict_with_the_bucket_index(tmp_path: Path) -> None:
    options = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "4"}
    path = _table(tmp_path, options)
    first = Table.open(path, options=options)
    second = Table.open(path, options=options)
    client = first._writer()
    client.engine = _Between(client.engine, lambda: second.upsert(_batch("n", ["new"], "second")))
    with pytest.raises(ConcurrentWriteError, match="bucket"):
        first.upsert(_batch("n", ["new"], "first"))
    assert _rows(path) == {"a1": "base", "a2": "base", "new": "second"}
    assert Timeline.load(first.storage).pending() == []


def test_a_running_write_is_known_under_every_spelling_of_its_table(tmp_path: Path) -> None:
    """Else a write of this process, seen through another spelling, would look like a leftover of it."""
    active.register("s3a://bucket/t/", "20250101000000000")
    try:
        assert active.active_instants("s3://bucket/t") == {"20250101000000000"}
        local = tmp_path / "t"
        active.register(str(local / "." / ""), "20250101000000001")
        assert active.active_instants(f"file://{local}") == {"20250101000000001"}
    finally:
        active.unregister("s3://bucket/t", "20250101000000000")
        active.unregister(str(local), "20250101000000001")
    assert active.active_instants("s3a://bucket/t") == set()


def test_a_failed_write_whose_rollback_time_another_process_took_is_still_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers refused at the same moment (each saw the other in flight) roll their writes back at
    once and can take the same rollback instant time (the file creation then raises InstantExistsError).
    The loser takes a later time: its write must not stay pending until some next write comes."""
    path = _table(tmp_path)
    table = Table.open(path)
    client = table._writer()
    client.engine = _Between(client.engine, lambda: _foreign_pending_write(path, "20990101000000000"))
    real = client_mod.rollback_pending_instant
    taken: list[str] = []

    def another_process_took_the_time(storage: Any, instant: Instant, rollback_time: str, tz: str = "LOCAL") -> Any:
        if not taken:
            taken.append(rollback_time)
            raise client_mod.InstantExistsError(f"{rollback_time}.rollback.requested already exists")
        return real(storage, instant, rollback_time, tz)

    monkeypatch.setattr(client_mod, "rollback_pending_instant", another_process_took_the_time)
    with pytest.raises(SharedLockRequiredError):
        table.upsert(_batch("a", ["a1"], "mine"))
    assert taken, "the rollback was not attempted"
    timeline = Timeline.load(table.storage)
    assert [i.time for i in timeline.pending() if i.time < "2099"] == [], "the refused write stayed pending"
    assert any(i.action is Action.ROLLBACK and i.time > taken[0] for i in timeline.completed())


def test_an_instant_time_another_process_took_and_completed_meanwhile_is_a_clear_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the in-process lock another process can take the same instant time and complete its write
    between this writer's timeline read and its requested file (seen with six writer processes): the
    write failed with a raw InstantExistsError instead of the refusal that names the shared lock."""
    path = _table(tmp_path)
    taken = Table.open(path).upsert(_batch("b", ["b1"], "theirs")).instant_time  # the other process's write
    monkeypatch.setattr(client_mod, "new_instant_time", lambda *_: taken)  # the same moment, as it raced
    files = _data_files(path)
    with pytest.raises(SharedLockRequiredError, match="hoodie.write.lock.provider"):
        Table.open(path).upsert(_batch("a", ["a1"], "mine"))
    assert _data_files(path) == files
    assert _rows(path) == {"a1": "base", "a2": "base", "b1": "theirs"}


def test_a_metadata_compaction_another_process_completed_meanwhile_is_a_clear_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On version 6 a commit first finishes a pending metadata-table compaction. Under the in-process
    lock another writer process can finish the same one at the same moment (seen with six writer
    processes): the write failed with a raw InstantExistsError on the metadata table's `.commit`
    instead of the refusal that names the shared lock, and must leave nothing behind."""
    import lakeward.core.metadata_table.compaction as mdt_compaction

    path = _table(tmp_path, table_version=6)
    table = Table.open(path)
    planned = mdt_compaction.schedule_metadata_compaction(
        table.storage, table.timeline(), 10, table.config.timeline_timezone, force=True
    )
    assert planned is not None
    real = mdt_compaction._compact_operation
    raced: list[str] = []

    def another_process_finishes_it_first(storage: Any, *args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append("theirs")
            monkeypatch.setattr(mdt_compaction, "_compact_operation", real)
            mdt_compaction.execute_metadata_compaction(storage, planned)  # the other process
        return real(storage, *args, **kwargs)

    monkeypatch.setattr(mdt_compaction, "_compact_operation", another_process_finishes_it_first)
    files = _data_files(path)
    with pytest.raises(SharedLockRequiredError, match="hoodie.write.lock.provider"):
        table.upsert(_batch("a", ["a1"], "mine"))
    assert raced
    assert _rows(path) == {"a1": "base", "a2": "base"}
    assert [i.time for i in Timeline.load(table.storage).pending()] == []
    assert _data_files(path) == files
    monkeypatch.undo()
    Table.open(path).upsert(_batch("a", ["a1"], "next"))
    assert _rows(path) == {"a1": "next", "a2": "base"}
    assert compare_files_partition(Table.open(path).storage).ok
