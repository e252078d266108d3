"""The runner: plans run under claims, fenced before completion, retried, quarantined, timed out, cancelled.

Real tables, the real ZooKeeper (fixture) or the in-process coordinator, the local engine or
the session's Spark. A `GatedEngine` (the local engine, held at a gate before its tasks)
lets a test act while a plan is half-way through.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.engine import LocalEngine
from lakeward.core.exceptions import StorageError
from lakeward.services.claims import InProcessCoordinator, OwnerInfo
from lakeward.services.control import MemoryControlStore, ZooKeeperControlStore
from lakeward.services.metrics import DaemonMetrics
from lakeward.services.model import ACTION_PRIORITY, Outcome, ServiceAction, TableRef, WorkItem
from lakeward.services.runner import Runner, storage_failed
from lakeward.services.settings import ActionTimeouts, ConcurrencySettings, ResourceSettings, RetrySettings
from lakeward.services.supervisor import ChildFailed
from tests.support.waiting import wait_until
from tests.support.zookeeper import expire_session


class GatedEngine(LocalEngine):
    """The local engine, but every map waits at a gate first (and says it got there)."""

    def __init__(self) -> None:
        super().__init__(1)
        self.arrived = threading.Event()
        self.gate = threading.Event()

    def map(self, fn: Callable[[Any], Any], items: Any, description: str = "") -> list[Any]:
        self.arrived.set()
        self.gate.wait(30)
        return super().map(fn, items, description)


def mor_table(path: Path, commits: int = 3) -> Table:
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    table.bulk_insert(pa.table({"id": list(range(50)), "v": [0] * 50, "ts": [0] * 50}))
    for i in range(1, commits + 1):
        table.upsert(pa.table({"id": [1, 2, 3], "v": [i] * 3, "ts": [i] * 3}))
    return table


def item(table: Table, action: ServiceAction = ServiceAction.COMPACTION, instant: str | None = None) -> WorkItem:
    return WorkItem(ACTION_PRIORITY[action], instant or "", TableRef(table.name, table.path), action, instant)


def states(table: Table, instant: str) -> list[str]:
    return [i.state.value for i in Table.open(table.path).timeline() if i.time == instant]


def concurrency(**kwargs: Any) -> ConcurrencySettings:
    kwargs.setdefault("retries", RetrySettings(max_attempts=1, backoff_base_s=0.05, backoff_max_s=0.1))
    return ConcurrencySettings(**kwargs)


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[InProcessCoordinator]:
    coordinator = InProcessCoordinator([str(tmp_path)], lock_dir=tmp_path / "locks", owner=OwnerInfo.current("r1"))
    coordinator.start()
    yield coordinator
    coordinator.close()


def make_runner(coordinator: Any, engine: Any = "local", control: Any = None, **kwargs: Any) -> Runner:
    return Runner(
        coordinator,
        control or MemoryControlStore(),
        DaemonMetrics(),
        kwargs.pop("settings", None) or concurrency(),
        engine=engine,
        **kwargs,
    )


def sample(runner: Runner, name: str, **labels: str) -> float:
    return runner.metrics.registry.get_sample_value(name, labels) or 0.0


def test_new_compaction_is_scheduled_claimed_by_instant_run_and_reported(tmp_path, in_process):
    table = mor_table(tmp_path / "t")
    runner = make_runner(in_process)
    submitted = runner.submit(item(table), force=True)
    assert submitted.run is not None, submitted.reason
    assert runner.wait_idle(60)
    run = runner.get(submitted.run.run_id)
    assert run is not None and run.outcome is Outcome.SUCCEEDED, run
    assert run.instant is not None and states(table, run.instant) == ["completed"]
    assert run.records == 50 and run.bytes_written > 0
    events = [(e.key, e.event) for e in in_process.claim_log]
    assert (f"{table.name}/compaction/new", "claimed") in events
    assert (f"{table.name}/compaction/{run.instant}", "claimed") in events
    assert in_process.held_claims() == []  # every claim released
    labels = {"table": table.name, "action": "compaction"}
    assert sample(runner, "lakeward_runs_total", outcome="succeeded", **labels) == 1
    assert sample(runner, "lakeward_records_written_total", **labels) == 50
    assert sample(runner, "lakeward_running_plans", action="compaction") == 0
    runner.close()


def test_a_plan_claimed_elsewhere_is_skipped(tmp_path, in_process):
    table = mor_table(tmp_path / "t")
    instant = table.schedule_compaction(force=True)
    work = item(table, instant=instant)
    other = in_process.try_claim(work.key, OwnerInfo.current("someone-else"))
    assert other is not None
    runner = make_runner(in_process)
    submitted = runner.submit(work)
    assert submitted.run is None and "claimed" in submitted.reason
    assert sample(runner, "lakeward_claim_attempts_total", result="conflict") == 1
    assert states(table, instant) == ["requested"]
    runner.close()


def test_a_run_whose_new_plan_another_replica_claimed_leaves_that_plans_failure_count(tmp_path, in_process):
    """The plan this run wrote was claimed first by another replica, which runs it: the failures that
    replica counted for it are its own to reset (they lead to quarantine), not this run's."""
    table = mor_table(tmp_path / "t")
    control = MemoryControlStore()
    plan_keys: list[str] = []
    try_claim = in_process.try_claim

    def other_replica_first(key: str, owner: Any = None) -> Any:
        if key.startswith(f"{table.name}/compaction/") and not key.endswith("/new") and not plan_keys:
            plan_keys.append(key)  # the other replica discovered the new plan and claimed it first
            assert try_claim(key, OwnerInfo.current("other-replica")) is not None
            control.record_failure(key, "the other replica's first attempt failed")
        return try_claim(key) if owner is None else try_claim(key, owner)

    in_process.try_claim = other_replica_first  # type: ignore[method-assign]
    runner = make_runner(in_process, control=control)
    submitted = runner.submit(item(table), force=True)
    assert submitted.run is not None and runner.wait_idle(60)
    run = runner.get(submitted.run.run_id)
    assert run is not None and run.outcome is Outcome.SKIPPED_CLAIMED, run
    assert control.record_failure(plan_keys[0], "its second attempt failed") == 2
    runner.close()


def test_concurrency_limit_per_table(tmp_path, in_process):
    table = mor_table(tmp_path / "t")
    engine = GatedEngine()
    runner = make_runner(in_process, engine, settings=concurrency(max_running=2, max_running_per_table=1))
    first = runner.submit(item(table), force=True)
    assert first.run is not None and engine.arrived.wait(20)
    second = runner.submit(item(table, ServiceAction.CLEAN))
    assert second.run is None and "max_running_per_table=1" in second.reason
    assert f"run {first.run.run_id} ({first.run.key})" in second.reason  # names the run holding the slot
    engine.gate.set()
    assert runner.wait_idle(60)
    runner.close()


def test_slot_taken_while_claiming_refuses_naming_the_run_that_took_it(tmp_path, in_process):
    """Two submits race for the last slot: the one that finds it gone after claiming releases its
    claim and, like the early check, names the run holding the slot."""
    table, other = mor_table(tmp_path / "t", commits=1), mor_table(tmp_path / "u", commits=1)
    engine = GatedEngine()
    runner = make_runner(in_process, engine, settings=concurrency(max_running=1))
    claim = in_process.try_claim
    winner: list[Any] = []
    raced = threading.Event()

    def racing_claim(*args: Any) -> Any:
        if not raced.is_set():  # another submit takes the only slot while this one claims
            raced.set()
            winner.append(runner.submit(item(other), force=True))
        return claim(*args)

    in_process.try_claim = racing_claim  # type: ignore[method-assign]
    loser = runner.submit(item(table, ServiceAction.CLEAN))
    assert winner[0].run is not None and loser.run is None
    assert f"run {winner[0].run.run_id} ({winner[0].run.key})" in loser.reason, loser.reason
    assert "max_running=1" in loser.reason
    assert claim(item(table, ServiceAction.CLEAN).key) is not None  # the loser's claim was released
    engine.gate.set()
    assert runner.wait_idle(60)
    runner.close()


@pytest.mark.zookeeper
def test_claim_lost_before_completion_leaves_the_instant_inflight_and_another_run_completes_it(
    tmp_path, make_coordinator, zookeeper_server
):
    table = mor_table(tmp_path / "t")
    instant = table.schedule_compaction(force=True)
    a = make_coordinator("a")
    engine = GatedEngine()
    runner_a = make_runner(a, engine)
    started = runner_a.submit(item(table, instant=instant))
    assert started.run is not None and engine.arrived.wait(20)
    expire_session(a, zookeeper_server.hosts)  # the replica's session dies while its plan runs
    deadline = time.monotonic() + 20
    while a.is_valid(started.run.claims[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    engine.gate.set()
    assert runner_a.wait_idle(60)
    assert started.run.outcome is Outcome.CLAIM_LOST, started.run
    assert states(table, instant) == ["inflight"]  # the work was done, not completed
    # Recovery: another replica claims the inflight plan and runs it again.
    b = make_coordinator("b")
    runner_b = make_runner(b)
    again = runner_b.submit(item(table, instant=instant))
    assert again.run is not None, again.reason
    assert runner_b.wait_idle(60)
    assert again.run.outcome is Outcome.SUCCEEDED
    assert states(table, instant) == ["completed"]
    assert Table.open(table.path).read().num_rows == 50
    runner_a.close()
    runner_b.close()


def test_failures_are_retried_then_quarantined_until_released(tmp_path, in_process):
    table = mor_table(tmp_path / "t")
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    for log_file in tmp_path.glob("t/.*.log.*"):
        log_file.unlink()  # the plan names log files that are gone: every attempt fails
    control = MemoryControlStore()
    settings = concurrency(
        retries=RetrySettings(max_attempts=2, backoff_base_s=0.05, backoff_max_s=0.1), quarantine_after_failures=2
    )
    runner = make_runner(in_process, control=control, settings=settings)
    work = item(table, instant=instant)
    run = runner.submit(work).run
    assert run is not None and runner.wait_idle(60)
    assert run.outcome is Outcome.FAILED and run.attempts == 2
    assert "log" in (run.error or "").lower() or "No such file" in (run.error or ""), run.error
    assert work.key in control.quarantined()
    assert "failed 2 time(s)" in control.quarantined()[work.key].reason
    refused = runner.submit(work)
    assert refused.run is None and "quarantined" in refused.reason
    assert states(table, instant) == ["requested"]  # refused before the plan was claimed
    assert control.release(work.key) and work.key not in control.quarantined()
    assert runner.submit(work).run is not None
    assert runner.wait_idle(60)
    runner.close()


class StorageDownEngine(LocalEngine):
    """The local engine while storage fails: every map raises what lakeward raises when S3 is down."""

    def __init__(self) -> None:
        super().__init__(1)
        self.down = True

    def map(self, fn: Callable[[Any], Any], items: Any, description: str = "") -> list[Any]:
        if self.down:
            raise StorageError("cannot read s3://lake/t/p/f.parquet: Could not connect to server")
        return super().map(fn, items, description)


def test_storage_failures_are_retried_and_never_quarantine_the_plan(tmp_path, in_process):
    """An S3 outage during a run failed every attempt and quarantined the plan: once S3 was back, the plan
    (and every later plan of its service on the table) waited for on-call to release it."""
    table = mor_table(tmp_path / "t")
    instant = table.schedule_compaction(force=True)
    control = MemoryControlStore()
    settings = concurrency(
        retries=RetrySettings(max_attempts=2, backoff_base_s=0.05, backoff_max_s=0.1), quarantine_after_failures=2
    )
    engine = StorageDownEngine()
    runner = make_runner(in_process, engine=engine, control=control, settings=settings)
    work = item(table, instant=instant)
    for _ in range(2):  # four failed attempts in all, twice the quarantine threshold
        run = runner.submit(work).run
        assert run is not None and runner.wait_idle(60)
        assert run.outcome is Outcome.FAILED and run.attempts == 2 and "StorageError" in (run.error or "")
    assert control.quarantined() == {}
    engine.down = False
    run = runner.submit(work).run
    assert run is not None and runner.wait_idle(60)
    assert run.outcome is Outcome.SUCCEEDED, run.error
    runner.close()
    assert storage_failed(ChildFailed("StorageError: cannot list s3://lake/t: connection refused"))
    assert not storage_failed(ChildFailed("CorruptFileError: s3://lake/t/p/f.parquet is cut short"))


def test_a_failure_after_the_claim_was_lost_ends_claim_lost_and_is_not_counted(
    tmp_path, make_coordinator, zookeeper_server
):
    """An attempt that fails once its claim no longer holds (a ZooKeeper outage: the run's own
    lock fails in it) is the outage's doing, not the plan's: counted, a few such outages
    quarantined healthy plans. The failure here comes back before the session event reached the
    runner (its listener removed), the race an exploration hit with child processes' locks."""
    table = mor_table(tmp_path / "t")
    instant = table.schedule_compaction(force=True)
    a = make_coordinator("a")
    engine = GatedEngine()
    control = MemoryControlStore()
    runner = make_runner(a, engine, control=control, settings=concurrency(quarantine_after_failures=1))
    a.remove_session_listener(runner._on_session)  # the session event arrives late
    work = item(table, instant=instant)
    started = runner.submit(work)
    assert started.run is not None and engine.arrived.wait(20)
    expire_session(a, zookeeper_server.hosts)
    wait_until(lambda: not a.is_valid(started.run.claims[0]), 20, "the claim to be invalid")
    for log_file in tmp_path.glob("t/.*.log.*"):
        log_file.unlink()  # the attempt now fails
    engine.gate.set()
    assert runner.wait_idle(60)
    assert started.run.outcome is Outcome.CLAIM_LOST, started.run
    assert work.key not in control.quarantined()
    assert control.record_failure(work.key, "the next failure") == 1  # none was counted before
    runner.close()


def test_a_plan_a_writer_completes_while_the_run_starts_is_nothing_to_do_not_a_failure(
    tmp_path, in_process, monkeypatch
):
    """A writer runs the metadata table's pending compaction after its commits (as Hudi does); when it
    completes the plan between the run's "still pending?" check and its execution, the run failed
    with InstantNotFoundError, a failure counted toward quarantine (seen by an exploration on S3)."""
    import lakeward.services.execution as execution

    table = mor_table(tmp_path / "t")
    instant = table.services.metadata_compaction.schedule(force=True)
    assert instant is not None
    real = execution.execute

    def a_writer_completes_it_first(t: Table, action: ServiceAction, plan: str | None, engine: Any = None) -> Any:
        Table.open(table.path).services.metadata_compaction.execute(plan)
        return real(t, action, plan, engine)

    monkeypatch.setattr(execution, "execute", a_writer_completes_it_first)
    control = MemoryControlStore()
    runner = make_runner(in_process, control=control, resources=ResourceSettings(isolation="thread"))
    work = item(table, ServiceAction.METADATA_COMPACTION, instant)
    run = runner.submit(work).run
    assert run is not None and runner.wait_idle(60)
    assert run.outcome is Outcome.NOTHING_TO_DO and run.attempts == 1, (run.detail, run.error)
    assert control.record_failure(work.key, "the next failure") == 1  # none was counted before
    runner.close()


class _UnreachableFailureCounts(MemoryControlStore):
    """A control store whose failure counts cannot be written (ZooKeeper down: kazoo's ConnectionLoss)."""

    def record_failure(self, key: str, error: str) -> int:
        from kazoo.exceptions import ConnectionLoss

        raise ConnectionLoss()


def test_a_failed_run_whose_failure_cannot_be_counted_ends_with_its_own_error(tmp_path, in_process):
    """The run ended `failed` with "ConnectionLoss: " and no other word: its real error was lost."""
    table = mor_table(tmp_path / "t")
    instant = table.schedule_compaction(force=True)
    for log_file in tmp_path.glob("t/.*.log.*"):
        log_file.unlink()  # the plan names log files that are gone: the attempt fails
    runner = make_runner(in_process, control=_UnreachableFailureCounts())
    run = runner.submit(item(table, instant=instant)).run
    assert run is not None and runner.wait_idle(60)
    assert run.outcome is Outcome.FAILED
    assert "ConnectionLoss" not in (run.error or "") and ".log" in (run.error or ""), run.error
    runner.close()


def test_timeout_stops_the_run_and_counts_a_failure(tmp_path, in_process):
    table = mor_table(tmp_path / "t")
    instant = table.schedule_compaction(force=True)
    engine = GatedEngine()
    control = MemoryControlStore()
    settings = concurrency(timeouts_s=ActionTimeouts(compaction=0.5), quarantine_after_failures=1)
    runner = make_runner(in_process, engine, control=control, settings=settings)
    run = runner.submit(item(table, instant=instant)).run
    assert run is not None and engine.arrived.wait(20)
    time.sleep(1.0)
    engine.gate.set()
    assert runner.wait_idle(60)
    assert run.outcome is Outcome.TIMED_OUT and "timed out after 0.5s" in (run.error or "")
    assert states(table, instant) == ["inflight"]
    assert run.key in control.quarantined()  # one failure is the threshold here
    runner.close()


def test_cancel_from_on_call_quarantines_and_drain_cancel_does_not(tmp_path, in_process):
    table = mor_table(tmp_path / "t")
    instant = table.schedule_compaction(force=True)
    control = MemoryControlStore()
    for quarantine in (True, False):
        engine = GatedEngine()
        runner = make_runner(in_process, engine, control=control)
        run = runner.submit(item(table, instant=instant)).run
        assert run is not None and engine.arrived.wait(20)
        assert runner.cancel(run.run_id, Outcome.CANCELLED, "test", quarantine=quarantine)
        engine.gate.set()
        assert runner.wait_idle(60)
        assert run.outcome is Outcome.CANCELLED
        assert states(table, instant) == ["inflight"]
        assert (run.key in control.quarantined()) is quarantine
        control.release(run.key)
        runner.close()


@pytest.mark.zookeeper
def test_quarantine_and_pause_are_shared_through_zookeeper(make_coordinator):
    a, b = make_coordinator("a"), make_coordinator("b")
    store_a, store_b = ZooKeeperControlStore(a), ZooKeeperControlStore(b)
    key = "orders/compaction/20260101000000000"
    assert store_a.record_failure(key, "boom") == 1
    assert store_b.record_failure(key, "boom again") == 2
    store_a.quarantine(key, "failed twice", 2, a.replica_id)
    assert store_b.quarantined()[key].failures == 2
    assert store_b.set_paused("orders", True, b.replica_id, "investigating")
    assert not store_a.set_paused("orders", True, a.replica_id)  # already paused
    assert store_a.paused()["orders"].reason == "investigating"
    assert store_b.release(key) and key not in store_a.quarantined()
    assert store_a.record_failure(key, "after release") == 1  # counting starts over
    assert store_a.set_paused("orders", False, a.replica_id) and store_b.paused() == {}


@pytest.mark.zookeeper
def test_a_pause_through_another_replica_reaches_a_store_that_already_read(make_coordinator):
    """Reads are served from the store's last read of ZooKeeper; its background reads bring in what
    other replicas change (within about `CACHE_S`), and its own writes show at once."""
    a, b = make_coordinator("a"), make_coordinator("b")
    store_a, store_b = ZooKeeperControlStore(a), ZooKeeperControlStore(b)
    key = "orders/compaction/20260101000000000"
    try:
        assert store_b.paused() == {} and store_b.quarantined() == {}  # read once: served from now on
        assert store_a.set_paused("orders", True, a.replica_id, "incident")
        store_a.quarantine(key, "failed 3 time(s)", 3, a.replica_id)
        assert store_a.paused()["orders"].reason == "incident" and key in store_a.quarantined()  # its own writes
        wait_until(lambda: "orders" in store_b.paused() and key in store_b.quarantined(), 10, "b to see a's changes")
        assert store_b.release(key) and store_b.set_paused("orders", False, b.replica_id)
        assert store_b.paused() == {} and store_b.quarantined() == {}
        wait_until(lambda: store_a.paused() == {} and store_a.quarantined() == {}, 10, "a to see b's changes")
    finally:
        store_a.close()
        store_b.close()


@pytest.mark.spark
def test_spark_run_uses_its_job_group_and_a_cancel_stops_its_spark_job(tmp_path, in_process, spark):
    from lakeward.core.engine.spark import SparkEngine

    table = mor_table(tmp_path / "t")
    instant = table.schedule_compaction(force=True)
    in_task = tmp_path / "task-started"

    class SlowSparkEngine(SparkEngine):
        """Each Spark task first says it started, then takes a minute."""

        def map(self, fn: Callable[[Any], Any], items: Any, description: str = "") -> list[Any]:
            marker = str(in_task)

            def slow(x: Any) -> Any:
                Path(marker).touch()
                time.sleep(60)
                return fn(x)

            return super().map(slow, items, description)

    runner = make_runner(in_process, SlowSparkEngine(spark), spark=spark)
    run = runner.submit(item(table, instant=instant)).run
    assert run is not None
    deadline = time.monotonic() + 60
    while not in_task.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert in_task.exists(), "the Spark task never started"
    tracker = spark.sparkContext.statusTracker()
    assert tracker.getJobIdsForGroup(run.run_id), "the run's Spark job is not in its job group"
    assert "Spark tasks" in runner.progress_of(run)
    started = time.monotonic()
    assert runner.cancel(run.run_id, Outcome.CANCELLED, "test cancel")
    assert runner.wait_idle(30)
    assert time.monotonic() - started < 30  # the 60 s task was interrupted
    assert run.outcome is Outcome.CANCELLED
    assert states(table, instant) == ["inflight"]
    runner.close()
