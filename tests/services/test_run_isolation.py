"""Runs in child processes (local engine): a dead child is a failed run with its exit reason,
cancel and timeout terminate the child, memory is bounded and reported, and a killed plan
completes on its next run.

Real tables and real child processes; a `FileGatedEngine` (the local engine, held at a gate
of files, so it works inside the child) lets a test act while the child is half-way through.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakeward import Table
from lakeward.services.model import Outcome, ServiceAction
from lakeward.services.runner import Runner, RunRecord
from lakeward.services.settings import ActionMemory, ActionTimeouts, ResourceSettings
from lakeward.services.supervisor import exit_reason, resident_bytes, tree_resident_bytes
from tests.services import test_runner
from tests.services.test_runner import concurrency, item, make_runner, mor_table, sample, states
from tests.support.gated_engine import FileGatedEngine
from tests.support.waiting import wait_until

in_process = test_runner.in_process  # the fixture


def gone(pid: int) -> bool:
    """The process no longer exists (reaped, not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


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
