"""A real Spark standalone cluster for the tests: one master and two workers on loopback.

The module-scoped fixture `spark_cluster` starts them from the PySpark distribution
(`<pyspark>/bin/spark-class org.apache.spark.deploy.master.Master` and `...worker.Worker
spark://127.0.0.1:<port>`), each JVM in a process group of its own, on free ports, with small
memory (workers offer 1 core and 1 GB each, the daemons' own heaps 256 MB) and every directory
(work, local and log dirs) under a temporary folder. It waits until the master's JSON status
(`http://127.0.0.1:<webui>/json`) lists both workers ALIVE. At teardown it SIGKILLs every
process group it started (executors the workers launched belong to their worker's group) and
asserts that no process of those groups is left.

`SparkCluster.executor_workers()` maps the executor ids a worker runs (its own `/json`) to that
worker, so a test can tell on which worker a driver's executors ran tasks.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyspark
import pytest

from tests.support.zookeeper import free_port

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
STARTUP_TIMEOUT_S = 120.0
WORKER_CORES = 1
WORKER_MEMORY = "1g"
#: The line a master or worker logs once its web UI listens (Spark's `Utils.startServiceOnPort`).
UI_BOUND = re.compile(r"Successfully started service '(?:Master|Worker)UI' on port (\d+)")


def get_json(url: str, timeout_s: float = 5.0) -> Any:
    """GET a JSON status page; None if it does not answer (yet) or not with JSON."""
    try:
        response = httpx.get(url, timeout=timeout_s, follow_redirects=True)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        # Another web UI answered on that port (see `SparkDaemon.url`): not the status asked for.
        return None


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of the process group `pgid`, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its closing parenthesis.
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


@dataclass
class SparkDaemon:
    """One JVM of the cluster (master or worker), started by `spark-class` in its own process group."""

    name: str
    webui_port: int
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        """The JVM's pid: `spark-class` ends with `exec java ...`, so it is the started process."""
        return self.process.pid

    @property
    def url(self) -> str:
        """The web UI's address, at the port the JVM reports it bound.

        The port chosen by `free_port` is free when chosen but may be taken before the JVM binds it
        (the CI run saw another Spark UI answer there); Spark then binds the next port and logs it.
        """
        # A restarted worker appends to its log: its latest start counts.
        bound = UI_BOUND.findall(self.log_path.read_text(errors="replace")) if self.log_path.exists() else []
        return f"http://127.0.0.1:{bound[-1] if bound else self.webui_port}"

    def status(self) -> Any:
        return get_json(f"{self.url}/json")

    def kill(self) -> None:
        """SIGKILL the JVM and, for a worker, the executors it launched (with their Python workers), as
        when the worker's machine dies: they share its process group. Killing the JVM alone left its
        executors running until they noticed, and a test's short tasks could all finish first."""
        os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []
        return f"--- {self.name} ({self.log_path}):\n" + "\n".join(text[-lines:])


@dataclass
class SparkCluster:
    """A standalone master and its workers (module doc)."""

    root: Path
    master_port: int
    master: SparkDaemon | None = None
    workers: list[SparkDaemon] = field(default_factory=list)
    #: Every JVM started, killed ones too (their executors may outlive them): what `stop` ends.
    started: list[SparkDaemon] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        for key in [k for k in env if k.startswith(("SPARK_", "PYSPARK_"))]:
            del env[key]
        env.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_LOCAL_DIRS=str(self.root / name / "local"),
            SPARK_WORKER_DIR=str(self.root / name / "work"),
            SPARK_DAEMON_MEMORY="256m",
            # A lost worker is noticed by the master in seconds (default 60 s); workers heartbeat at a
            # quarter of the same timeout, so both read it.
            SPARK_MASTER_OPTS="-Dspark.worker.timeout=10",
            SPARK_WORKER_OPTS="-Dspark.worker.timeout=10",
        )
        (self.root / name / "local").mkdir(parents=True, exist_ok=True)
        (self.root / name / "work").mkdir(parents=True, exist_ok=True)
        return env

    def _start(self, name: str, main: str, *args: str) -> SparkDaemon:
        webui = free_port()
        log_path = self.root / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [str(SPARK_CLASS), main, "--host", "127.0.0.1", "--webui-port", str(webui), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=self._env(name),
                start_new_session=True,
            )
        daemon = SparkDaemon(name, webui, log_path, process)
        self.started.append(daemon)
        return daemon

    def _start_worker(self, name: str) -> SparkDaemon:
        return self._start(
            name,
            "org.apache.spark.deploy.worker.Worker",
            "--port",
            str(free_port()),
            "--cores",
            str(WORKER_CORES),
            "--memory",
            WORKER_MEMORY,
            "--work-dir",
            str(self.root / name / "work"),
            self.master_url,
        )

    def start(self) -> None:
        self.master = self._start("master", "org.apache.spark.deploy.master.Master", "--port", str(self.master_port))
        self.workers = [self._start_worker(f"worker{i}") for i in (1, 2)]
        self.wait_workers(len(self.workers))

    def ensure_workers(self) -> None:
        """Restart the workers a test killed, and wait until the master lists every worker ALIVE again."""
        for i, worker in enumerate(self.workers):
            if worker.process.poll() is not None:
                self.workers[i] = self._start_worker(worker.name)
        self.wait_workers(len(self.workers))

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers the master lists as ALIVE (its JSON status)."""
        assert self.master is not None
        status = self.master.status() or {}
        return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]

    def wait_workers(self, count: int, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for daemon in [self.master, *self.workers]:
                assert daemon is not None
                if daemon.process.poll() is not None:
                    raise AssertionError(f"{daemon.name} exited with {daemon.process.returncode}\n{self.tails()}")
            if len(self.alive_workers()) == count:
                return
            time.sleep(0.5)
        raise AssertionError(f"{count} Spark workers not registered in {timeout_s:g}s\n{self.tails()}")

    def executor_workers(self, app_id: str) -> dict[str, str]:
        """Executor id -> name of the worker that runs (or ran) it, for the application `app_id`."""
        placed: dict[str, str] = {}
        for worker in self.workers:
            status = worker.status() or {}
            for executor in [*status.get("executors", []), *status.get("finishedexecutors", [])]:
                if executor.get("appid") == app_id:
                    placed[str(executor["id"])] = worker.name
        return placed

    def tails(self) -> str:
        return "\n".join(d.tail() for d in [self.master, *self.workers] if d is not None)

    def stop(self) -> None:
        """SIGKILL every process group started (JVMs, executors, their Python workers) and wait for them."""
        daemons = list(reversed(self.started))
        for daemon in daemons:
            try:
                os.killpg(daemon.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            daemon.process.wait(timeout=30)
        deadline = time.monotonic() + 30
        left = {d.name: group_members(d.pid) for d in daemons}
        while any(left.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
            left = {d.name: group_members(d.pid) for d in daemons}
        assert not any(left.values()), f"processes left after stopping the Spark cluster: {left}"


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A Spark standalone master and two workers (1 core, 1 GB each) on loopback (module doc)."""
    if shutil.which("java") is None:
        pytest.fail("the Spark cluster tests need `java` on PATH", pytrace=False)
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"), free_port())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


__all__ = ["SparkCluster", "SparkDaemon", "get_json", "group_members", "spark_cluster"]
