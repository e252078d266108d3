"""Runs in child processes (local engine): a dead child is a failed run with its exit reason,
cancel and timeout terminate the child, memory is bounded and reported, and a killed plan
completes on its next run. A stop ends a run `cancelled` up to the moment it holds the table
lock for its completion (waiting for that lock included); once its completion is underway the
child finishes it and the run reports what it did.

Real tables and real child processes; a `FileGatedEngine` (the local engine, held at a gate
of files, so it works inside the child) lets a test act while the child is half-way through.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hudi
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kazoo.client import KazooClient

from lakeward import Table
from lakeward.core.locks import lock_provider_for
from lakeward.services.attempt import COMMITTING, AttemptSpec, RunStopped
from lakeward.services.model import Outcome, ServiceAction, TableRef
from lakeward.services.runner import Runner, RunRecord
from lakeward.services.settings import ActionMemory, ActionTimeouts, ResourceSettings
from lakeward.services.supervisor import exit_reason, resident_bytes, run_in_child, tree_resident_bytes
from lakeward.services.worker import WorkerJob
from tests.services import test_runner
from tests.services.test_runner import concurrency, item, make_runner, mor_table, sample, states
from tests.support.gated_engine import FileGatedEngine
from tests.support.waiting import wait_until
from tests.support.zookeeper import hudi_lock_options

in_process = test_runner.in_process  # the fixture


def gone(pid: int) -> bool:
    """The process no longer exists (reaped, not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class StoppedOnceCommitting:
    """The runner's side of an attempt (`AttemptHooks`) that stops the run the moment the child reports
    that its completion is underway (fence passed, table lock held): a cancel that lands while the
    child writes the metadata table's commit and the timeline's."""

    def __init__(self) -> None:
        self.stop: RunStopped | None = None
        self.phases: list[str] = []

    def fence(self) -> None:
        if self.stop is not None:
            raise self.stop

    def claim_plan(self, instant: str) -> bool:
        return True

    def set_phase(self, phase: str) -> None:
        self.phases.append(phase)
        if phase == COMMITTING:
            self.stop = RunStopped(Outcome.CANCELLED, "cancelled while completing")

    @contextmanager
    def completing(self) -> Iterator[None]:  # the attempt's own side; a child asks its link, not this
        yield


def zookeeper_lock_options(hosts: str) -> dict[str, str]:
    """Hudi's ZooKeeper lock for one test table (a lock the test and a run's child process share)."""
    return hudi_lock_options(hosts, "/lakeward/late-cancel", f"t{uuid.uuid4().hex}")


def lock_waiters(hosts: str, options: dict[str, str]) -> int:
    """How many hold or wait for the table lock `options` names (its contender nodes in ZooKeeper)."""
    path = f"{options['hoodie.write.lock.zookeeper.base_path']}/{options['hoodie.write.lock.zookeeper.lock_key']}"
    zk = KazooClient(hosts=hosts)
    zk.start()
    try:
        return len(zk.get_children(path)) if zk.exists(path) else 0
    finally:
        zk.stop()
        zk.close()


def hudi_rs_view(table: Table) -> tuple[dict[int, int], set[tuple[str, bool]]]:
    """What hudi-rs (the oracle) reads now: id -> v, and each file slice's (creation instant, has logs)."""
    found = hudi.HudiTableBuilder.from_base_uri(table.path).build()
    read = pa.Table.from_batches(found.read())
    rows = dict(zip(read.column("id").to_pylist(), read.column("v").to_pylist(), strict=True))
    return rows, {(s.creation_instant_time, s.has_log_files()) for s in found.get_file_slices()}


def start_held(runner: Runner, table: Table, engine: FileGatedEngine) -> tuple[RunRecord, int]:
    """Submit a compaction and wait until its child process waits at the gate; (run, child pid)."""
    submitted = runner.submit(item(table), force=True)
    assert submitted.run is not None, submitted.reason
    pid = engine.arrived_pid()
    assert pid != os.getpid()  # the work runs in another process
    assert submitted.run.pid == pid
    return submitted.run, pid


def finished(runner: Runner, run: RunRecord, timeout_s: float = 30.0) -> RunRecord:
    assert runner.wait_idle(timeout_s), f"run {run.run_id} still running: {run.phase}"
    found = runner.get(run.run_id)
    assert found is not None
    return found


def test_a_child_killed_from_outside_is_a_failed_run_and_the_plan_completes_next_time(tmp_path, in_process):
    table = mor_table(tmp_path / "t")
    engine = FileGatedEngine(tmp_path / "gate")
    runner = make_runner(in_process, engine)
    run, pid = start_held(runner, table, engine)
    os.kill(pid, signal.SIGKILL)  # a crash, the OOM killer, an operator's kill -9
    run = finished(runner, run)
    assert run.outcome is Outcome.FAILED
    assert run.error is not None and "killed by signal 9" in run.error, run.error
    assert run.instant is not None and states(table, run.instant) == ["inflight"]
    assert in_process.held_claims() == []  # not stuck: its claims are released
    runner.close()

    again = make_runner(in_process, "local")
    rerun = again.submit(item(table, instant=run.instant), mode="run")
    assert rerun.run is not None, rerun.reason
    done = finished(again, rerun.run, 60)
    assert done.outcome is Outcome.SUCCEEDED, done.error
    assert states(table, run.instant)[-1] == "completed"
    rows = Table.open(table.path).read().sort_by("id")
    assert rows.num_rows == 50 and rows.column("id").to_pylist() == list(range(50))
    latest = rows.filter(pc.is_in(rows.column("id"), value_set=pa.array([1, 2, 3])))
    assert latest.column("v").to_pylist() == [3, 3, 3]  # the last upsert wins
    assert done.peak_rss_bytes > 0 and done.to_dict()["peak_rss_mb"] > 0
    assert sample(again, "lakeward_run_peak_rss_bytes_count", action="compaction") == 1
    again.close()


def test_cancel_terminates_the_child_promptly(tmp_path, in_process):
    table = mor_table(tmp_path / "t", commits=1)
    engine = FileGatedEngine(tmp_path / "gate")
    runner = make_runner(in_process, engine)
    run, pid = start_held(runner, table, engine)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, own + 10)  # resources.nice: the API comes first
    asked = time.monotonic()
    assert runner.cancel(run.run_id, reason="cancelled by the test")
    run = finished(runner, run, 15)
    assert time.monotonic() - asked < 10  # SIGTERM ends the gate's wait at once; SIGKILL after 3 s at worst
    assert gone(pid)
    assert run.outcome is Outcome.CANCELLED and run.pid is None
    assert run.instant is not None and states(table, run.instant) == ["inflight"]
    runner.close()


def test_timeout_terminates_the_child(tmp_path, in_process):
    table = mor_table(tmp_path / "t", commits=1)
    engine = FileGatedEngine(tmp_path / "gate")
    settings = concurrency(timeouts_s=ActionTimeouts(compaction=1.5))
    runner = make_runner(in_process, engine, settings=settings)
    run, pid = start_held(runner, table, engine)
    run = finished(runner, run, 20)
    assert run.outcome is Outcome.TIMED_OUT and "timed out after 1.5s" in (run.error or "")
    assert gone(pid)
    runner.close()


def test_a_child_over_its_memory_limit_is_killed_and_reported(tmp_path, in_process):
    table = mor_table(tmp_path / "t", commits=1)
    # A Python process with pyarrow resides in well over 32 MiB: the limit is crossed at start.
    resources = ResourceSettings(max_memory_mb=ActionMemory(compaction=32))
    runner = make_runner(in_process, FileGatedEngine(tmp_path / "gate"), resources=resources)
    submitted = runner.submit(item(table), force=True)
    assert submitted.run is not None
    run = finished(runner, submitted.run, 60)
    assert run.outcome is Outcome.FAILED
    assert run.error is not None and "memory limit exceeded" in run.error and "max_memory_mb 32" in run.error
    assert run.peak_rss_bytes > 32 * 2**20
    assert sample(runner, "lakeward_run_peak_rss_bytes_count", action="compaction") == 1
    runner.close()


def test_a_childs_exception_comes_back_with_its_type_and_message(tmp_path, in_process):
    table = mor_table(tmp_path / "t", commits=1)
    instant = table.schedule_compaction(force=True)
    (Path(table.path) / ".hoodie" / "hoodie.properties").write_text("garbage")  # the child cannot open it
    runner = make_runner(in_process, "local")
    submitted = runner.submit(item(table, instant=instant), mode="run")
    assert submitted.run is not None
    run = finished(runner, submitted.run, 60)
    assert run.outcome is Outcome.FAILED and run.error is not None
    assert not run.error.startswith("ChildFailed") and ": " in run.error, run.error
    assert run.error.split(":")[0].endswith("Error"), run.error  # the child's exception type
    runner.close()


def test_thread_isolation_runs_in_the_daemon_process(tmp_path, in_process):
    table = mor_table(tmp_path / "t", commits=1)
    engine = FileGatedEngine(tmp_path / "gate")
    runner = make_runner(in_process, engine, resources=ResourceSettings(isolation="thread"))
    assert not runner.isolated
    submitted = runner.submit(item(table, ServiceAction.COMPACTION), force=True)
    assert submitted.run is not None
    assert engine.arrived_pid() == os.getpid()
    engine.open()
    run = finished(runner, submitted.run, 60)
    assert run.outcome is Outcome.SUCCEEDED and run.peak_rss_bytes == 0
    runner.close()


@pytest.mark.parametrize(
    ("exitcode", "words"),
    [(-9, "killed by signal 9 (SIGKILL"), (-15, "killed by signal 15 (SIGTERM)"), (3, "exited with code 3")],
)
def test_exit_reasons_name_the_signal_or_code(exitcode, words):
    assert words in exit_reason(exitcode)


def test_tree_resident_bytes_counts_descendants_in_groups_of_their_own(tmp_path):
    """The Spark driver's memory is its process tree's: PySpark's worker daemon (a grandchild of the
    driver) makes a process group of its own, and its memory still counts."""
    ready = tmp_path / "ready"
    grandchild = (
        "import os, pathlib, time; os.setpgid(0, 0); held = bytearray(b'x' * (96 * 2**20)); "
        f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(60)"
    )
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"
    proc = subprocess.Popen([sys.executable, "-c", child])
    try:
        wait_until(lambda: ready.exists() and ready.read_text(), 30, "the grandchild to hold its memory")
        assert tree_resident_bytes(proc.pid) > 96 * 2**20
        assert resident_bytes(proc.pid)[0] < 96 * 2**20  # not the child's own
        assert tree_resident_bytes(2**22 + 7) == 0  # no such process
    finally:
        if ready.exists() and ready.read_text():
            os.kill(int(ready.read_text()), signal.SIGKILL)
        proc.wait(30)


def test_a_stop_once_the_completion_is_underway_lets_the_child_complete_and_report_it(tmp_path):
    """The stop lands while the child completes its instant (it holds the table lock, writing the metadata
    table's commit and the timeline's): the child finishes the completion and the attempt's result is
    what it did -- not a cancel, which would count the plan done by no run, nor a half-completed
    instant. A `grace_s` far shorter than any completion does not cut it short either."""
    table = mor_table(tmp_path / "t", commits=1)
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    spec = AttemptSpec(ServiceAction.COMPACTION, instant, "run", True)
    job = WorkerJob("late-stop", TableRef(table.name, table.path), {}, spec)
    hooks = StoppedOnceCommitting()
    pids: list[int] = []
    result = run_in_child(
        job, hooks, stopped=lambda: hooks.stop, max_memory_mb=None, grace_s=0.01, on_start=pids.append
    )
    assert hooks.stop is not None, f"the child never reported its completion underway: {hooks.phases}"
    assert hooks.phases[-2:] == ["completing", COMMITTING]
    assert result.instant == instant and result.outcome is None and not result.execution.nothing_to_do
    assert states(table, instant)[-1] == "completed"
    wait_until(lambda: gone(pids[0]), 30, "the child to exit after its result")
    rows, slices = hudi_rs_view(table)
    assert slices == {(instant, False)}  # readers see the compacted slice
    assert rows == {i: (1 if i in (1, 2, 3) else 0) for i in range(50)}


@pytest.mark.zookeeper
def test_a_stop_while_the_run_waits_for_the_table_lock_to_complete_cancels_it(tmp_path, in_process, zookeeper_server):
    """The run passed its fence and waits for the table lock to complete its instant when on-call cancels
    it: it ends `cancelled` (its plan quarantined), its child gone, its instant not completed -- the
    completion had not begun. (Holding SIGTERM back from the fence on let such a run complete.)"""
    table = mor_table(tmp_path / "t", commits=1)
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    options = zookeeper_lock_options(zookeeper_server.hosts)
    resources = ResourceSettings(terminate_grace_s=10)  # SIGKILL must not be what ends the run
    runner = make_runner(in_process, "local", table_options=lambda ref: options, resources=resources)
    held = lock_provider_for(table.path, table.name, options)
    held.acquire()
    try:
        submitted = runner.submit(item(table, instant=instant), mode="run")
        run = submitted.run
        assert run is not None, submitted.reason
        wait_until(lambda: run.phase == "completing", 60, "the run to pass its fence")
        wait_until(lambda: lock_waiters(zookeeper_server.hosts, options) == 2, 30, "the child to wait for the lock")
        pid = run.pid
        assert pid is not None
        assert runner.cancel(run.run_id, reason="cancelled by on-call", quarantine=True)
        deadline = time.monotonic() + 2  # SIGTERM ends the wait for the lock: the child is soon gone
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:  # then the lock is free, well within the grace: a child still there could complete now
        held.release()
        held.close()
    done = finished(runner, run, 30)
    assert (done.outcome, done.phase) == (Outcome.CANCELLED, "finished"), done.error
    assert gone(pid)
    assert states(table, instant) == ["inflight"]
    assert list(runner.control.quarantined()) == [done.key]
    rows, slices = hudi_rs_view(table)
    assert instant not in {created for created, _ in slices}  # readers see no compaction
    assert rows == {i: (1 if i in (1, 2, 3) else 0) for i in range(50)}
    runner.close()


@pytest.mark.zookeeper
def test_a_stop_while_a_thread_run_waits_for_the_table_lock_refuses_its_completion(
    tmp_path, in_process, zookeeper_server
):
    """`resources.isolation: thread`: nothing interrupts the daemon's thread waiting for the table lock, but
    once it has the lock the completion is refused -- `cancelled`, nothing completed -- as in a child."""
    table = mor_table(tmp_path / "t", commits=1)
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    options = zookeeper_lock_options(zookeeper_server.hosts)
    resources = ResourceSettings(isolation="thread")
    runner = make_runner(in_process, "local", table_options=lambda ref: options, resources=resources)
    held = lock_provider_for(table.path, table.name, options)
    held.acquire()
    try:
        run = runner.submit(item(table, instant=instant), mode="run").run
        assert run is not None
        wait_until(lambda: run.phase == "completing", 60, "the run to pass its fence")
        wait_until(lambda: lock_waiters(zookeeper_server.hosts, options) == 2, 30, "the run to wait for the lock")
        assert runner.cancel(run.run_id, reason="cancelled by on-call")
    finally:
        held.release()
        held.close()
    done = finished(runner, run, 30)
    assert done.outcome is Outcome.CANCELLED and done.error == "cancelled by on-call", done.error
    assert states(table, instant) == ["inflight"]
    runner.close()


def open_files() -> dict[int, str]:
    """This process's open file descriptors and what they are."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the directory's own descriptor, closed by now
    return found


def test_stopped_runs_leave_no_open_file_behind(tmp_path):
    """Each run stopped in its child (cancel, timeout, claim lost) kept a pipe of its process open: the
    stop the run record keeps holds the process object through its traceback. Over the daemon's
    history (1,000 runs) that reached the default limit of 1,024 open files. Found by a report-only
    exploration (ZooKeeper outages: every outage stops the runs in flight)."""
    table = mor_table(tmp_path / "t", commits=1)
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    spec = AttemptSpec(ServiceAction.COMPACTION, instant, "run", True)
    job = WorkerJob("stopped", TableRef(table.name, table.path), {}, spec)
    kept: list[RunStopped] = []  # as run records keep their stop

    def stopped_run() -> None:
        stop = RunStopped(Outcome.CANCELLED, "cancelled by on-call")
        with pytest.raises(RunStopped) as raised:
            run_in_child(job, StoppedOnceCommitting(), stopped=lambda: stop, max_memory_mb=None, grace_s=5)
        kept.append(raised.value)

    stopped_run()  # the first one starts what stays (the fork server, its pipes)
    before = open_files()
    for _ in range(8):
        stopped_run()
    after = open_files()
    assert len(after) <= len(before), sorted(set(after.values()) - set(before.values()))
    assert states(table, instant)[-1] != "completed"
