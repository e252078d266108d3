"""Spark-engine runs execute in the Spark driver process, not the daemon's: under their job group,
stopped by a cancel of their Spark jobs or, when that is not enough, by killing the driver; a
driver that dies is a failed run with its reason, and the next run starts a new driver; a run past
its `resources.max_memory_mb` (the driver's process tree) fails with that reason.

Real tables, a real SparkSession in a real driver process (`SparkDriver`, local master); a
`GatedSparkEngine` holds a run at a gate of files -- in its Spark tasks or in the driver's
Python -- so that a test acts while the run is half-way through.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakeward.core.locks import lock_provider_for
from lakeward.services.attempt import AttemptSpec
from lakeward.services.daemon import Daemon
from lakeward.services.model import Outcome, ServiceAction, TableRef
from lakeward.services.runner import Runner, RunRecord
from lakeward.services.settings import ActionMemory, ActionTimeouts, ResourceSettings, SparkSettings, load_settings
from lakeward.services.spark_driver import SparkDriver
from lakeward.services.worker import WorkerJob
from tests.services import test_runner
from tests.services.test_run_isolation import StoppedOnceCommitting, gone, lock_waiters, zookeeper_lock_options
from tests.services.test_runner import concurrency, item, make_runner, mor_table, states
from tests.support.gated_spark import gated_spark
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

in_process = test_runner.in_process  # the fixture
QUIET = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1", "spark.python.worker.reuse": "true"}
#: The driver's start (a JVM) takes a while on a loaded machine.
START_S = 120.0


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-gate")


@pytest.fixture(scope="module")
def driver(gate: Path) -> Iterator[SparkDriver]:
    """One driver for the module (a JVM start is slow); tests that kill it leave the next run a new one."""
    found = SparkDriver(SparkSettings(master="local[2]", conf=QUIET), engine_factory=gated_spark(gate))
    found.start()
    yield found
    found.close()
    assert found.pid is None


@pytest.fixture
def held(gate: Path) -> Iterator[Path]:
    """The gate, closed; opened at the end so that nothing stays held."""
    for name in ("gate", "arrived", "task-started", "hold-in-driver"):
        (gate / name).unlink(missing_ok=True)
    yield gate
    (gate / "gate").touch()


def arrived(gate: Path) -> int:
    """The pid of the process whose engine reached the gate."""
    marker = gate / "arrived"
    wait_until(lambda: marker.exists() and marker.read_text(), START_S, "the run to reach the gate")
    return int(marker.read_text())


def finished(runner: Runner, run: RunRecord, timeout_s: float) -> RunRecord:
    assert runner.wait_idle(timeout_s), f"run {run.run_id} still running: {run.phase}"
    found = runner.get(run.run_id)
    assert found is not None
    return found


def rerun_on_a_new_driver(
    coordinator: Any, driver: SparkDriver, table: Any, run: RunRecord, old_pid: int | None
) -> RunRecord:
    """Run the plan `run` left pending again, on a new runner: it succeeds, in a driver other than `old_pid`."""
    again = make_runner(coordinator, driver)
    rerun = again.submit(item(table, instant=run.instant), mode="run").run
    assert rerun is not None and run.instant is not None
    done = finished(again, rerun, START_S)
    assert done.outcome is Outcome.SUCCEEDED, done.error
    assert driver.pid not in (None, old_pid)
    assert states(table, run.instant)[-1] == "completed"
    again.close()
    return done


def test_a_spark_run_executes_in_the_driver_process_under_its_job_group(tmp_path, in_process, driver, held):
    table = mor_table(tmp_path / "t")
    runner = make_runner(in_process, driver)
    assert runner.isolated and runner.driver is driver
    assert driver.wait_ready(START_S) and driver.ready and driver.application_id
    run = runner.submit(item(table), force=True).run
    assert run is not None
    pid = arrived(held)
    assert pid == driver.pid and pid != os.getpid() and run.pid == pid  # not the daemon's process
    wait_until((held / "task-started").exists, 60, "a Spark task to start")
    wait_until(lambda: "Spark tasks" in runner.progress_of(run), 30, "the driver to report the run's Spark tasks")
    (held / "gate").touch()
    run = finished(runner, run, 120)
    assert run.outcome is Outcome.SUCCEEDED, run.error
    assert run.instant is not None and states(table, run.instant) == ["completed"]
    assert run.records == 50 and run.pid is None and run.peak_rss_bytes > 0
    assert in_process.held_claims() == []
    runner.close()


def test_a_cancel_stops_the_runs_spark_jobs_and_the_driver_lives_on(tmp_path, in_process, driver, held):
    table = mor_table(tmp_path / "t", commits=1)
    runner = make_runner(in_process, driver, resources=ResourceSettings(terminate_grace_s=30))
    run = runner.submit(item(table), force=True).run
    assert run is not None
    pid = arrived(held)
    wait_until((held / "task-started").exists, 60, "a Spark task to start")
    asked = time.monotonic()
    assert runner.cancel(run.run_id, reason="cancelled by the test")
    run = finished(runner, run, 40)
    assert time.monotonic() - asked < 30  # the job group's cancel ended it, no kill after the grace
    assert run.outcome is Outcome.CANCELLED and run.error == "cancelled by the test"
    assert run.instant is not None and states(table, run.instant) == ["inflight"]
    assert driver.pid == pid and not gone(pid)  # the driver was not killed
    assert in_process.held_claims() == []
    runner.close()


def test_a_timeout_of_driver_side_work_kills_the_driver_and_the_next_run_completes(tmp_path, in_process, driver, held):
    table = mor_table(tmp_path / "t", commits=1)
    (held / "hold-in-driver").touch()  # Python work in the driver: no Spark job to cancel
    assert driver.wait_ready(START_S)  # the timeout counts from the run's start, not the JVM's
    settings = concurrency(timeouts_s=ActionTimeouts(compaction=3))
    runner = make_runner(in_process, driver, settings=settings, resources=ResourceSettings(terminate_grace_s=1))
    run = runner.submit(item(table), force=True).run
    assert run is not None
    pid = arrived(held)
    run = finished(runner, run, START_S)
    assert run.outcome is Outcome.TIMED_OUT and "timed out after 3s" in (run.error or ""), run.error
    wait_until(lambda: gone(pid), 30, "the killed driver to be reaped")  # killed: the run is not stuck
    assert driver.pid is None  # the next run starts a new driver
    assert run.instant is not None and states(table, run.instant) == ["inflight"]
    assert in_process.held_claims() == []
    runner.close()

    (held / "hold-in-driver").unlink()
    (held / "gate").touch()
    rerun_on_a_new_driver(in_process, driver, table, run, pid)


def test_a_spark_run_past_its_memory_bound_fails_and_the_next_run_gets_a_new_driver(tmp_path, in_process, driver, held):
    """`resources.max_memory_mb` holds for Spark runs: the driver's process tree (its Python, its JVM with
    the local executor, Spark's Python workers) is sampled while the run executes; past a tiny bound the run
    is stopped without completing its instant and fails naming the bound, and the driver, whose memory does
    not come back under it, is replaced for the next run."""
    table = mor_table(tmp_path / "t", commits=1)
    assert driver.wait_ready(START_S)
    pid = driver.pid
    (held / "gate").touch()  # nothing held: the run goes as far as it can
    tiny = ResourceSettings(max_memory_mb=ActionMemory(compaction=1), terminate_grace_s=60)
    runner = make_runner(in_process, driver, resources=tiny)
    run = runner.submit(item(table), force=True).run
    assert run is not None
    run = finished(runner, run, START_S)
    assert run.outcome is Outcome.FAILED, run.error
    error = run.error or ""
    assert "memory limit exceeded" in error and "Spark driver" in error and "> max_memory_mb 1" in error, error
    assert run.peak_rss_bytes > 100 * 2**20  # the tree's memory, the JVM's included
    assert run.instant is not None and states(table, run.instant)[-1] != "completed"
    wait_until(lambda: gone(pid), 30, "the driver, its memory still past the bound, to be killed")
    assert driver.pid is None
    assert in_process.held_claims() == []
    runner.close()

    done = rerun_on_a_new_driver(in_process, driver, table, run, pid)  # with the default bounds
    print(f"\ndriver tree peak: {run.peak_rss_bytes / 2**20:.0f} MiB, then {done.peak_rss_bytes / 2**20:.0f} MiB")
    assert 0 < done.peak_rss_bytes < 4096 * 2**20


def test_a_stop_once_the_completion_is_underway_reports_the_completed_instant(tmp_path, driver, held):
    """The stop lands while the run completes its instant (fence passed, table lock held): the attempt's
    result is what it did (a run must not be reported cancelled while its plan is completed: the plan
    would count as done by no run, and a quarantine would hold back a plan that is no more), and a
    `grace_s` shorter than the completion does not kill the driver in the middle of it. As a local
    run's child (test_run_isolation)."""
    table = mor_table(tmp_path / "t", commits=1)
    (held / "gate").touch()
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    spec = AttemptSpec(ServiceAction.COMPACTION, instant, "run", True)
    job = WorkerJob("late-stop", TableRef(table.name, table.path), {}, spec)
    hooks = StoppedOnceCommitting()
    pid = driver.pid
    result = driver.run(
        job, hooks, pool="compaction", description="late stop", stopped=lambda: hooks.stop, grace_s=0.01
    )
    assert hooks.stop is not None, hooks.phases
    assert result.instant == instant and result.outcome is None
    assert states(table, instant)[-1] == "completed"
    assert driver.pid == pid  # not killed


@pytest.mark.zookeeper
def test_a_stop_while_a_spark_run_waits_for_the_table_lock_to_complete_cancels_it(
    tmp_path, in_process, driver, held, zookeeper_server
):
    """Passed its fence, waiting for the table lock to complete, the run is cancelled: nothing interrupts a
    thread waiting for a lock, but once it has the lock its completion is refused -- `cancelled`, the
    instant not completed -- as a local run's child (test_run_isolation). The driver lives on."""
    table = mor_table(tmp_path / "t", commits=1)
    (held / "gate").touch()
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    options = zookeeper_lock_options(zookeeper_server.hosts)
    resources = ResourceSettings(terminate_grace_s=60)  # the driver is not killed: the run ends by itself
    runner = make_runner(in_process, driver, table_options=lambda ref: options, resources=resources)
    held_lock = lock_provider_for(table.path, table.name, options)
    held_lock.acquire()
    try:
        run = runner.submit(item(table, instant=instant), mode="run").run
        assert run is not None
        wait_until(lambda: run.phase == "completing", START_S, "the run to pass its fence")
        wait_until(lambda: lock_waiters(zookeeper_server.hosts, options) == 2, 30, "the run to wait for the lock")
        pid = driver.pid
        assert runner.cancel(run.run_id, reason="cancelled by on-call", quarantine=True)
        time.sleep(2)  # the driver has the cancel well before the lock is free
    finally:
        held_lock.release()
        held_lock.close()
    done = finished(runner, run, 60)
    assert done.outcome is Outcome.CANCELLED and done.error == "cancelled by on-call", done.error
    assert states(table, instant) == ["inflight"]
    assert driver.pid == pid and pid is not None and not gone(pid)
    runner.close()


def test_a_driver_killed_from_outside_is_a_failed_run_with_its_reason(tmp_path, in_process, driver, held):
    table = mor_table(tmp_path / "t", commits=1)
    runner = make_runner(in_process, driver)
    run = runner.submit(item(table), force=True).run
    assert run is not None
    pid = arrived(held)
    os.kill(pid, signal.SIGKILL)  # a crash, the OOM killer, an operator's kill -9
    run = finished(runner, run, 60)
    assert run.outcome is Outcome.FAILED
    assert run.error is not None and "the Spark driver process was killed by signal 9" in run.error, run.error
    assert run.instant is not None and states(table, run.instant) == ["inflight"]
    assert in_process.held_claims() == []  # not stuck: its claims are released
    wait_until(lambda: driver.pid is None, 30, "the runner to see the driver gone")
    runner.close()


def test_a_spark_engine_daemon_holds_no_session_and_is_ready_once_its_driver_is(tmp_path):
    table = mor_table(tmp_path / "t", commits=2)
    config = tmp_path / "lakeward.yaml"
    quiet = ", ".join(f"{k}: '{v}'" for k, v in QUIET.items())
    config.write_text(
        f"""
tables: {{static: [{{path: {table.path}}}], refresh_interval_s: 0.2}}
policies:
  defaults: {{compaction: {{max_delta_commits: 1}}, clean: {{enabled: false}}, archival: {{enabled: false}}}}
spark: {{engine: spark, master: 'local[1]', conf: {{{quiet}}}}}
log: {{format: text, level: WARNING}}
drain_time_s: 5
"""
    )
    daemon = Daemon(load_settings(config, env={}))
    started = time.monotonic()
    daemon.start()
    try:
        assert time.monotonic() - started < 10  # no SparkSession built in the daemon's start
        driver = daemon.runner.driver if daemon.runner is not None else None
        assert driver is not None and daemon._spark is None
        assert any("Spark driver" in r for r in daemon.readiness_problems()) or driver.ready
        wait_until(lambda: daemon.ready, START_S, "the replica to be ready", lambda: str(daemon.readiness_problems()))
        assert driver.ready

        def compacted() -> bool:
            return any(r.action.value == "compaction" and r.outcome is Outcome.SUCCEEDED for r in daemon.runs())

        wait_until(compacted, START_S, "a compaction by the daemon", lambda: str([r.to_dict() for r in daemon.runs()]))
        run = next(r for r in daemon.runs() if r.outcome is Outcome.SUCCEEDED)
        assert run.to_dict()["peak_rss_mb"] > 0
    finally:
        daemon.drain(5)
    assert driver.pid is None  # the drain stopped the driver


def _java_children(pid: int) -> list[int]:
    """The java processes whose parent is `pid` (the driver's JVM), from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm", encoding="ascii", errors="replace") as comm:
                name = comm.read().strip()
        except OSError:
            continue
        if int(fields[1]) == pid and name == "java":
            found.append(int(entry))
    return found


def _dead(pid: int) -> bool:
    """Gone, or a zombie its parent (the driver, still alive) has not reaped."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_driver_whose_jvm_died_is_replaced_and_the_run_does_not_hang(tmp_path, in_process, driver, held):
    """The driver's JVM died under a live driver process: the next run's Spark job group failed in a thread
    that reported nothing, so the run hung until its action timeout (an hour for compaction), and every
    later run went to the same dead session. Now the driver reports its session broken and exits, the run
    fails with that reason, and the next run gets a new driver (found by a report-only exploration)."""
    table = mor_table(tmp_path / "t", commits=1)
    (held / "gate").touch()
    assert driver.wait_ready(START_S)
    old = driver.pid
    assert old is not None
    [jvm] = _java_children(old)
    os.kill(jvm, signal.SIGKILL)
    wait_until(lambda: _dead(jvm), 30, "the JVM to end")
    runner = make_runner(in_process, driver)
    run = runner.submit(item(table), force=True).run
    assert run is not None
    run = finished(runner, run, 60)  # not the action timeout
    assert run.outcome is Outcome.FAILED
    assert run.error is not None and "Spark session" in run.error, run.error
    assert in_process.held_claims() == []
    runner.close()
    again = make_runner(in_process, driver)  # the next run: a new driver, and it completes
    rerun = again.submit(item(table), force=True).run
    assert rerun is not None
    done = finished(again, rerun, START_S)
    assert done.outcome is Outcome.SUCCEEDED, done.error
    assert driver.pid not in (None, old)
    assert done.instant is not None and states(table, done.instant)[-1] == "completed"
    again.close()
