"""The daemon on a real Spark standalone cluster (issue 20, section 4).

A master and two workers (fixture `spark_cluster`, 1 core and 1 GB each) on loopback; the
daemon runs as `lakeward serve` in a process of its own (this test process holds no
SparkSession, and one process has one) with `spark.master: spark://...`, one executor per
worker, and the driver's UI on so that its status API (`/api/v1/applications/...`) tells which
executor ran which task.

- Every table service that runs as a Spark job -- compaction, clustering, clean, change
  tracking and index builds -- runs on the cluster: each has a succeeded job of its own, and
  executors on both workers ran tasks. Then the same checks as the e2e test: every completed
  plan has exactly one succeeded run and no run failed, the claim log shows no lost claim,
  nothing is pending, and the tables read to the rows a model gives, with lakeward and hudi-rs.
- SIGKILL of one worker's JVM while a compaction's first task runs: its executor goes, Spark
  runs the lost tasks on the other worker's executor, and the plan completes exactly once with
  the right rows.
"""

from __future__ import annotations

import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.table import Table
from lakeward.core.timeline import Action
from tests.interop.compare import comparable_rows, hudi_snapshot, hudi_table, project
from tests.support.daemon_process import DaemonProcess
from tests.support.spark_cluster import SparkCluster, get_json
from tests.support.waiting import wait_until
from tests.support.zookeeper import free_port

pytestmark = [pytest.mark.spark, pytest.mark.timeout(420)]

TOKEN = "spark-cluster-token"
COLUMNS = ["id", "p", "v", "ts"]
BAD_OUTCOMES = ("failed", "timed_out", "cancelled", "claim_lost")
#: The job description each service's Spark job carries ("lakeward: <what> <instant>").
JOB_PREFIXES = {
    "compaction": "lakeward: compact ",
    "clustering": "lakeward: cluster ",
    "clean": "lakeward: clean ",
    "change_tracking": "lakeward: change tracking ",
    "index_build": "lakeward: index build ",
}
QUIET = {"compaction": {"enabled": False}, "clean": {"enabled": False}, "archival": {"enabled": False}}


# -- the daemon ----------------------------------------------------------------------------------
def daemon_config(paths: list[Path], master_url: str, ui_port: int, policies: dict[str, Any]) -> dict[str, Any]:
    """`lakeward serve` settings: the cluster as master, one 1-core executor per worker, the driver UI on."""
    return {
        "tables": {"static": [{"path": str(p)} for p in paths], "refresh_interval_s": 0.5},
        "policies": policies,
        "concurrency": {
            "max_running": 2,
            "max_running_per_table": 1,
            "retries": {"max_attempts": 2, "backoff_base_s": 1, "backoff_max_s": 2},
        },
        "spark": {
            "engine": "spark",
            "master": master_url,
            "conf": {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.memory": "512m",
                "spark.executor.memory": "512m",
                "spark.executor.cores": 1,
                "spark.cores.max": 2,
                # Start running only once both executors are there (one per worker).
                "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
                "spark.ui.enabled": True,
                "spark.ui.port": ui_port,
                "spark.sql.shuffle.partitions": 2,
                "spark.python.authenticate.socketTimeout": "120s",
            },
        },
        "http": {"host": "127.0.0.1", "port": free_port(), "api_tokens": [TOKEN]},
        "log": {"format": "json"},
        "drain_time_s": 10,
    }


class Driver:
    """The daemon's Spark application, seen through its driver's status API."""

    def __init__(self, ui_port: int, diagnostics: Callable[[], str]):
        self.base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
        apps = wait_until(lambda: get_json(self.base), 120, "the driver's status API", diagnostics)
        assert len(apps) == 1, f"expected the daemon's one Spark application, got {apps}"
        self.app_id: str = apps[0]["id"]

    def get(self, path: str, *, polling: bool = False) -> Any:
        """A status page; no answer fails the test, unless `polling` (then None: ask again)."""
        found = get_json(f"{self.base}/{self.app_id}/{path}")
        assert found is not None or polling, f"Spark status API: no answer for {path}"
        return found

    def executors(self) -> list[dict[str, Any]]:
        """Every executor the application had (dead ones too), without the driver."""
        return [e for e in self.get("allexecutors") if e["id"] != "driver"]

    def jobs(self, *, polling: bool = False) -> list[dict[str, Any]]:
        return list(self.get("jobs", polling=polling) or [])

    def tasks_of(self, job: dict[str, Any], *, polling: bool = False) -> list[dict[str, Any]]:
        """Every task attempt of the job's stages."""
        tasks: list[dict[str, Any]] = []
        for stage_id in job["stageIds"]:
            for stage in self.get(f"stages/{stage_id}", polling=polling) or []:
                path = f"stages/{stage_id}/{stage['attemptId']}/taskList?length=1000"
                tasks += self.get(path, polling=polling) or []
        return tasks


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[list[DaemonProcess]]:
    started: list[DaemonProcess] = []
    try:
        yield started
    finally:
        for daemon in started:
            daemon.cleanup()


def start_daemon(
    started: list[DaemonProcess], cluster: SparkCluster, workdir: Path, config: dict[str, Any]
) -> DaemonProcess:
    daemon = DaemonProcess("d1", config, workdir, TOKEN)
    started.append(daemon)
    daemon.start()
    try:
        daemon.wait_ready(time.monotonic() + 180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.tails()}") from None
    return daemon


# -- tables and their model ------------------------------------------------------------------------
class Model:
    """The rows a table must read to: the last write of each key wins (no deletes here)."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}

    def batch(self, ids: list[int], v: int, partitions: int) -> pa.Table:
        rows: list[dict[str, Any]] = [{"id": i, "p": f"p{i % partitions}", "v": v, "ts": v} for i in ids]
        for row in rows:
            self.rows[row["id"]] = row
        return pa.Table.from_pylist(rows)

    def expected(self) -> list[dict[str, Any]]:
        return [self.rows[k] for k in sorted(self.rows)]


def mor(
    path: Path, model: Model, partitions: int, rows: int, deltas: int, options: dict[str, str] | None = None
) -> None:
    """A merge-on-read table: a bulk insert, then `deltas` upserts of every fifth key (log files in
    every file group, as long as `partitions` is prime to 5)."""
    table = Table.create(
        str(path),
        record_key="id",
        partition_by="p",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        options=options,
    )
    table.bulk_insert(model.batch(list(range(rows)), 0, partitions))
    for v in range(1, deltas + 1):
        table.upsert(model.batch(list(range(v, rows, 5)), v, partitions))


def small_files(path: Path, model: Model, partitions: int, batches: int) -> None:
    """A copy-on-write table whose partitions hold one small file per batch (clustering's input)."""
    table = Table.create(str(path), record_key="id", partition_by="p", ordering_field="ts")
    for b in range(batches):
        table.bulk_insert(model.batch(list(range(b * 20, (b + 1) * 20)), b, partitions))


def versions(path: Path, model: Model, partitions: int, rows: int, upserts: int) -> None:
    """A copy-on-write table whose file groups hold `upserts` + 1 versions (the older ones: a clean's input)."""
    table = Table.create(str(path), record_key="id", partition_by="p", ordering_field="ts")
    table.bulk_insert(model.batch(list(range(rows)), 0, partitions))
    for v in range(1, upserts + 1):
        table.upsert(model.batch(list(range(0, rows, 3)), v, partitions))


def read_rows(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The latest snapshot with lakeward and with hudi-rs, as model rows sorted by key."""

    def rows(data: Any) -> list[dict[str, Any]]:
        return sorted(project(comparable_rows(data), COLUMNS), key=lambda r: r["id"])

    return rows(Table.open(str(path)).read()), rows(hudi_snapshot(hudi_table(str(path))))


def completed_plans(path: Path) -> dict[str, list[str]]:
    """Completed instants of each service action on the table's timeline (a list: duplicates show)."""
    timeline = Table.open(str(path)).timeline()
    done: dict[str, list[str]] = {a: [] for a in JOB_PREFIXES}
    for instant in timeline.completed():
        if instant.action is Action.COMMIT and timeline.was_compaction(instant.time):
            done["compaction"].append(instant.time)
        elif instant.action is Action.REPLACE_COMMIT:
            done["clustering"].append(instant.time)
        elif instant.action is Action.CLEAN:
            done["clean"].append(instant.time)
        elif instant.action is Action.CHANGE_TRACKING:
            done["change_tracking"].append(instant.time)
        elif instant.action is Action.INDEXING:
            done["index_build"].append(instant.time)
    return done


def check_exactly_once(daemon: DaemonProcess, paths: list[Path]) -> list[dict[str, Any]]:
    """The e2e checks: each completed plan has one succeeded run, no run failed, no claim was lost,
    nothing is pending on any table. The daemon's runs."""
    runs = daemon.client.runs(state="all", limit=1000)
    bad = [r for r in runs if r["outcome"] in BAD_OUTCOMES]
    assert not bad, f"runs that did not succeed: {bad}\n{daemon.tail()}"
    for path in paths:
        table = Table.open(str(path))
        timeline = table.timeline()
        assert not timeline.pending(), f"{path.name}: pending instants {timeline.pending()}"
        for action, instants in completed_plans(path).items():
            assert len(instants) == len(set(instants)), f"{path.name}: {action} completed twice: {instants}"
            for instant in instants:
                ran = [
                    r
                    for r in runs
                    if (r["table"], r["action"], r["instant"], r["outcome"])
                    == (path.name, action, instant, "succeeded")
                ]
                assert len(ran) == 1, f"{path.name}: {action} {instant} succeeded {len(ran)} times: {runs}"
    lost = [e for e in daemon.client.claims()["log"] if e["event"] in ("lost", "invalid")]
    assert not lost, f"claims lost while running: {lost}"
    # The daemon's plan list is its last discovery cycle's view: it shows a plan completed since as
    # pending until the next cycle sees the completed instant (the timeline above is read directly).
    wait_until(lambda: daemon.client.plans() == [], 60, "the daemon to list no pending plan", daemon.tail)
    return runs


def check_rows(path: Path, model: Model) -> None:
    ours, theirs = read_rows(path)
    expected = model.expected()
    assert ours == expected, f"{path.name}: lakeward reads other rows than the model"
    assert theirs == expected, f"{path.name}: hudi-rs reads other rows than the model"


# -- the tests -----------------------------------------------------------------------------------
def test_every_table_service_runs_on_both_workers_exactly_once(
    tmp_path: Path, spark_cluster: SparkCluster, daemons: list[DaemonProcess]
) -> None:
    spark_cluster.ensure_workers()
    lake = tmp_path / "lake"
    models = {name: Model() for name in ("compacted", "tracked", "clustered", "cleaned", "indexed")}
    mor(lake / "compacted", models["compacted"], partitions=4, rows=80, deltas=2)
    mor(
        lake / "tracked",
        models["tracked"],
        partitions=4,
        rows=80,
        deltas=2,
        options={"hoodie.table.cdc.enabled": "true", "hoodie.table.cdc.supplemental.logging.mode": "KEY_OP"},
    )
    changes = Table.open(str(lake / "tracked")).read_changes("earliest")  # inferred from the logs
    small_files(lake / "clustered", models["clustered"], partitions=2, batches=3)
    versions(lake / "cleaned", models["cleaned"], partitions=4, rows=80, upserts=2)
    mor(lake / "indexed", models["indexed"], partitions=4, rows=80, deltas=0)
    Table.open(str(lake / "indexed")).create_index("by_v", "v")
    paths = [lake / name for name in models]

    policies = {
        "defaults": QUIET,
        "overrides": {
            "cleaned": {"clean": {"enabled": True, "policy": "KEEP_LATEST_FILE_VERSIONS", "file_versions_retained": 1}},
            "compacted": {"compaction": {"enabled": True, "max_delta_commits": 2}},
            "tracked": {"change_tracking": {"enabled": True}},
            "clustered": {"clustering": {"enabled": True, "every_n_commits": 2, "max_num_groups": 4}},
            "indexed": {"index_build": {"enabled": True, "columns": ["v"]}},
        },
    }
    ui_port = free_port()
    config = daemon_config(paths, spark_cluster.master_url, ui_port, policies)
    daemon = start_daemon(daemons, spark_cluster, tmp_path, config)
    diagnostics = lambda: daemon.tail() + "\n" + spark_cluster.tails()  # noqa: E731
    driver = Driver(ui_port, diagnostics)

    def done() -> bool:
        succeeded = {r["action"] for r in daemon.client.runs(state="all", limit=1000) if r["outcome"] == "succeeded"}
        return succeeded >= set(JOB_PREFIXES) and not daemon.client.runs(state="running")

    wait_until(done, 240, "a succeeded run of every service", diagnostics)

    # Every service ran as a Spark job of the daemon's application, and both workers' executors ran tasks.
    jobs = driver.jobs()
    for action, prefix in JOB_PREFIXES.items():
        mine = [j for j in jobs if str(j.get("description", "")).startswith(prefix)]
        assert mine and all(j["status"] == "SUCCEEDED" for j in mine), f"{action}: jobs {mine}"
    placed = spark_cluster.executor_workers(driver.app_id)
    tasks_per_worker = {w.name: 0 for w in spark_cluster.workers}
    for executor in driver.executors():
        tasks_per_worker[placed[executor["id"]]] += executor["totalTasks"]
    assert all(n > 0 for n in tasks_per_worker.values()), f"tasks per worker: {tasks_per_worker}"

    runs = check_exactly_once(daemon, paths)
    assert {r["action"] for r in runs if r["outcome"] == "succeeded"} >= set(JOB_PREFIXES)
    for name, model in models.items():
        check_rows(lake / name, model)
    tracked = Table.open(str(lake / "tracked"))
    assert tracked.read_changes("earliest").equals(changes)  # persisted changes answer as the inferred ones did
    status = Table.open(str(lake / "indexed")).index_status()
    assert status.base_files and status.missing() == [] and status.pending_builds == (), status
    assert daemon.terminate() == 0


def slow_python_tasks(tmp_path: Path, delay_s: float) -> dict[str, str]:
    """Spark settings under which every Python task starts a fresh worker process that waits `delay_s`
    first: tasks of a small table then run long enough for the test to see one running and kill its
    worker (they take milliseconds otherwise, and the status API can miss them all)."""
    python = tmp_path / "slow-python"
    python.write_text(f'#!/bin/sh\nsleep {delay_s}\nexec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return {"spark.python.use.daemon": "false", "spark.pyspark.python": str(python)}


def test_sigkill_of_a_worker_in_a_compaction_retries_its_tasks_on_the_other(
    tmp_path: Path, spark_cluster: SparkCluster, daemons: list[DaemonProcess]
) -> None:
    spark_cluster.ensure_workers()
    path, model = tmp_path / "lake" / "big", Model()
    mor(path, model, partitions=12, rows=2400, deltas=1)  # 12 file groups: 12 tasks on 2 executors
    planned = Table.open(str(path)).schedule_compaction(force=True)
    assert planned is not None

    ui_port = free_port()
    config = daemon_config([path], spark_cluster.master_url, ui_port, {"defaults": QUIET})
    config["spark"]["conf"].update(slow_python_tasks(tmp_path, delay_s=2))
    daemon = start_daemon(daemons, spark_cluster, tmp_path, config)
    diagnostics = lambda: daemon.tail() + "\n" + spark_cluster.tails()  # noqa: E731
    driver = Driver(ui_port, diagnostics)

    def compaction_job(polling: bool = False) -> dict[str, Any] | None:
        jobs = driver.jobs(polling=polling)
        mine = [j for j in jobs if str(j.get("description", "")).startswith(JOB_PREFIXES["compaction"])]
        return mine[0] if mine else None

    def running_task() -> dict[str, Any] | None:
        job = compaction_job(polling=True)
        running = [t for t in driver.tasks_of(job, polling=True) if t["status"] == "RUNNING"] if job else []
        return running[0] if running else None

    first = wait_until(running_task, 120, "the compaction's first task to run", diagnostics)
    victim_name = spark_cluster.executor_workers(driver.app_id)[first["executorId"]]
    victim = next(w for w in spark_cluster.workers if w.name == victim_name)
    victim.kill()

    def compacted() -> bool:
        return any(
            r["outcome"] == "succeeded" and r["instant"] == planned for r in daemon.client.runs(state="all", limit=1000)
        )

    wait_until(compacted, 180, "the compaction to succeed after the worker's SIGKILL", diagnostics)
    job = compaction_job()
    assert job is not None and job["status"] == "SUCCEEDED", job
    tasks = driver.tasks_of(job)
    lost = [t for t in tasks if t["executorId"] == first["executorId"] and t["status"] != "SUCCESS"]
    assert lost, f"no task of the killed worker's executor failed: {tasks}"
    survivors = {t["executorId"] for t in tasks if t["status"] == "SUCCESS"}
    assert survivors - {first["executorId"]}, f"no task succeeded on the other worker: {tasks}"
    for task in lost:  # each lost task ran again, and succeeded once, elsewhere
        again = [t for t in tasks if t["index"] == task["index"] and t["status"] == "SUCCESS"]
        assert len(again) == 1 and again[0]["executorId"] != first["executorId"], (task, again)

    runs = check_exactly_once(daemon, [path])
    # One run, one attempt: Spark retried the tasks, the daemon did not retry the plan.
    assert [(r["action"], r["instant"], r["outcome"], r["attempts"]) for r in runs] == [
        ("compaction", planned, "succeeded", 1)
    ]
    assert completed_plans(path)["compaction"] == [planned]
    check_rows(path, model)
    assert daemon.terminate() == 0
