"""Soak (issue 20, acceptance): 2 replicas x 30 minutes of steady writes into 20 tables.

Marked `soak`: the default run (and CI, `./test.sh`) deselects it; run it with

    LAKEWARD_SOAK_S=1800 ./test.sh -m soak tests/e2e/test_soak.py -s

(`LAKEWARD_SOAK_S`, default 1800, is how long the writers write; `-s` shows the figures.)

Two `lakeward serve` replicas on a real ZooKeeper, the local engine with every run in a
child process (the defaults), and four writer processes (`writer.py`) upserting into 20
merge-on-read tables under the daemons' table lock. Every `SAMPLE_S` the test reads each
replica's own process from `/proc` -- threads, open file descriptors, resident memory,
connections to ZooKeeper, processes below it (forkserver, runs) -- and prints them. After the writers stop and
the replicas settle:

- threads, file descriptors, ZooKeeper connections and processes are flat: the settled value
  is the warm baseline's (the lowest reading over a quarter of the run, from when the first
  quarter is over and the replica has finished `WARM_RUNS` runs) within `THREADS_SLACK` /
  `FDS_SLACK`, and no reading ever exceeded the baseline by more than the `max_running` runs
  in flight can hold (a run pool thread each; a pipe and a sentinel each; a child each, and
  one more exiting);
- resident memory is flat: the last quarter's median is within `RSS_GROWTH_MB` of the
  second quarter's (caches and the bounded run lists fill in the first quarter);
- a short run (`LAKEWARD_SOAK_S=120`) checks the test itself; below that, a loaded machine
  may not finish `WARM_RUNS` runs in time and the test says so.
- no run was stuck (running longer than `STUCK_S`), none failed, timed out or lost its
  claim, and nothing is left pending: no plan, no write, no running run;
- both replicas exit 0 on SIGTERM.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from lakeward.core.table import Table
from lakeward.services.daemon import table_lock_options
from lakeward.services.settings import load_settings
from tests.e2e import writer as workload
from tests.support import waiting
from tests.support.daemon_process import DaemonProcess, runs_total
from tests.support.footprint import Footprint, read_footprint
from tests.support.zookeeper import free_port

DURATION_S = float(os.environ.get("LAKEWARD_SOAK_S", "1800"))

pytestmark = [
    pytest.mark.soak,
    pytest.mark.slow,
    pytest.mark.zookeeper,
    pytest.mark.timeout(int(DURATION_S) + 900),
]

N_TABLES = 20
N_WRITERS = 4
REPLICAS = ("s1", "s2")
TOKEN = "soak-token"
MAX_RUNNING = 2
#: Writers pause this long after each write: a table gets a delta commit every ~5 x this.
WRITE_PAUSE_S = float(os.environ.get("LAKEWARD_SOAK_WRITE_PAUSE_S", "1.0"))
SAMPLE_S = max(5.0, min(60.0, DURATION_S / 30))
#: The baseline is taken once a replica has finished this many runs (and after the first quarter).
WARM_RUNS = 10
#: A run still running after this long counts as stuck (the compaction timeout is far above it).
STUCK_S = 120.0
#: Allowed growth of the settled reading over the warm baseline.
THREADS_SLACK = 2
FDS_SLACK = 8
RSS_GROWTH_MB = 48.0
BAD_OUTCOMES = ("failed", "timed_out", "cancelled", "claim_lost")


def soak_config(paths: list[str], zk_hosts: str, chroot: str, port: int) -> dict[str, Any]:
    return {
        "tables": {"static": [{"path": p} for p in paths], "refresh_interval_s": 1},
        "policies": {
            "defaults": {
                "compaction": {"max_delta_commits": 3},
                "clean": {"min_commits_between": 4, "commits_retained": 3},
                "archival": {"keep_min_commits": 20, "keep_max_commits": 30},
            },
        },
        "concurrency": {
            "max_running": MAX_RUNNING,
            "max_running_per_table": 1,
            "retries": {"max_attempts": 3, "backoff_base_s": 1, "backoff_max_s": 2},
        },
        "resources": {"isolation": "process"},
        "zookeeper": {"hosts": zk_hosts, "chroot": chroot, "session_timeout_s": 10},
        "spark": {"engine": "local"},
        "http": {"host": "127.0.0.1", "port": port, "api_tokens": [TOKEN]},
        "log": {"format": "json", "level": "WARNING"},
        "drain_time_s": 10,
    }


class Readings:
    """Every footprint reading of each replica, with when it was taken (seconds since the writers started)."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[float, Footprint]]] = {name: [] for name in REPLICAS}
        #: When each replica had finished WARM_RUNS runs (its pools, forkserver and caches are up).
        self.warm_at: dict[str, float] = {}

    def take(self, replicas: list[DaemonProcess], zk_port: int, since: float) -> None:
        at = time.monotonic() - since
        for replica in replicas:
            reading = read_footprint(replica.pid, zk_port)
            self.series[replica.name].append((at, reading))
            finished = sum(runs_total(replica).values())
            if finished >= WARM_RUNS:
                self.warm_at.setdefault(replica.name, at)
            print(f"soak {at:7.0f}s {replica.name}: {reading.row()}  runs {finished}", flush=True)

    def window(self, name: str, start: float, end: float) -> list[Footprint]:
        return [f for at, f in self.series[name] if start <= at < end]


def stuck_runs(replicas: list[DaemonProcess]) -> list[dict[str, Any]]:
    """Runs of the deployment that have been running for longer than STUCK_S."""
    found = {}
    for replica in replicas:
        for run in replica.client.runs(state="running", limit=1000):
            if run["state"] == "running" and run["duration_s"] > STUCK_S:
                found[run["run_id"]] = run
    return list(found.values())


def check_flat(name: str, readings: Readings, settled: Footprint) -> list[str]:
    """What grew on replica `name` (module doc); [] when everything stayed flat."""
    warm = max(DURATION_S / 4, readings.warm_at.get(name, DURATION_S))
    baseline_window = readings.window(name, warm, warm + max(SAMPLE_S * 3, DURATION_S / 4))
    assert baseline_window, f"{name}: no reading after the warm-up ({WARM_RUNS} runs, {DURATION_S / 4:g}s)"
    every = readings.window(name, warm, float("inf"))
    base_threads = min(f.threads for f in baseline_window)
    base_fds = min(f.fds for f in baseline_window)
    problems = []
    if settled.threads > base_threads + THREADS_SLACK:
        problems.append(f"threads: baseline {base_threads}, settled {settled.threads}")
    if max(f.threads for f in every) > base_threads + 3 * MAX_RUNNING:
        problems.append(f"threads: baseline {base_threads}, peak {max(f.threads for f in every)}")
    if settled.fds > base_fds + FDS_SLACK:
        problems.append(f"fds: baseline {base_fds}, settled {settled.fds}")
    if max(f.fds for f in every) > base_fds + FDS_SLACK + 6 * MAX_RUNNING:
        problems.append(f"fds: baseline {base_fds}, peak {max(f.fds for f in every)}")
    if max(f.zk_connections for f in every) > 1 or settled.zk_connections != 1:
        problems.append(f"ZooKeeper connections: {[f.zk_connections for f in every]}, settled {settled.zk_connections}")
    # At rest: the forkserver and its resource tracker; in flight: the runs and the children of
    # finished runs still exiting (at most one per slot).
    rest = min(f.descendants for f in every)
    if max(f.descendants for f in every) > rest + 2 * MAX_RUNNING or settled.descendants > rest:
        problems.append(f"processes: {[f.descendants for f in every]}, settled {settled.descendants}")
    second = [f.rss_mb for f in readings.window(name, warm, max(warm + SAMPLE_S, DURATION_S / 2))]
    last = [f.rss_mb for f in readings.window(name, DURATION_S * 3 / 4, float("inf"))]
    if second and last and statistics.median(last) > statistics.median(second) + RSS_GROWTH_MB:
        problems.append(f"rss: median {statistics.median(second):.0f} MiB -> {statistics.median(last):.0f} MiB")
    return problems


def test_two_replicas_twenty_tables_steady_writes_stay_flat(tmp_path: Path, zookeeper_server: Any) -> None:
    lake = tmp_path / "lake"
    paths = [str(lake / f"t{i:02d}") for i in range(N_TABLES)]
    chroot = f"/lakeward-soak-{uuid.uuid4().hex[:12]}"
    replicas = [
        DaemonProcess(name, soak_config(paths, zookeeper_server.hosts, chroot, free_port()), tmp_path, TOKEN)
        for name in REPLICAS
    ]
    lock_options = table_lock_options(load_settings(replicas[0].config_path, env={}))
    for i, path in enumerate(paths):
        table = Table.create(
            path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ"
        )
        table.bulk_insert(workload.seed_batch(i))
    writers: list[tuple[subprocess.Popen[bytes], Path]] = []

    def tails() -> str:
        parts = [r.tail(20) for r in replicas]
        parts += [f"--- {err}:\n{err.read_text(errors='replace')[-2000:]}" for _, err in writers if err.exists()]
        return "\n".join(parts)

    try:
        for replica in replicas:
            replica.start()
        deadline = time.monotonic() + 120
        for replica in replicas:
            replica.wait_ready(deadline)
        stop_file = tmp_path / "writers.stop"
        for w in range(N_WRITERS):
            mine = [[i, p] for i, p in enumerate(paths) if i % N_WRITERS == w]
            out, err = tmp_path / f"writer{w}.jsonl", tmp_path / f"writer{w}.err"
            args = [json.dumps(lock_options), json.dumps(mine), str(stop_file), str(out), str(WRITE_PAUSE_S)]
            with open(err, "wb") as stderr:
                process = subprocess.Popen(
                    [sys.executable, str(Path(workload.__file__)), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=stderr,
                    stderr=subprocess.STDOUT,
                    cwd=tmp_path,
                )
            writers.append((process, err))

        began = time.monotonic()
        readings = Readings()
        stuck: list[dict[str, Any]] = []
        while time.monotonic() - began < DURATION_S:
            readings.take(replicas, zookeeper_server.port, began)
            stuck += stuck_runs(replicas)
            assert all(r.alive for r in replicas), tails()
            assert all(p.poll() is None for p, _ in writers), tails()
            time.sleep(SAMPLE_S)
        stop_file.write_text("stop")
        for process, err in writers:
            assert process.wait(timeout=120) == 0, err.read_text(errors="replace")[-3000:]

        def settled() -> bool:
            if any(Table.open(p).timeline().pending() for p in paths):
                return False
            return not any(r.client.runs(state="running") for r in replicas)

        waiting.wait_until(settled, 300, "the replicas to work off the backlog", tails, 1.0)
        time.sleep(3)  # children of the last runs reaped, their threads gone
        readings.take(replicas, zookeeper_server.port, began)
        final = {name: series[-1][1] for name, series in readings.series.items()}

        problems = {name: check_flat(name, readings, final[name]) for name in REPLICAS}
        assert all(not p for p in problems.values()), f"grew: {problems}"
        assert stuck == [], f"runs stuck longer than {STUCK_S:g}s: {stuck}"
        outcomes: dict[str, int] = {}
        for replica in replicas:
            for (_, _, outcome), n in runs_total(replica).items():
                outcomes[outcome] = outcomes.get(outcome, 0) + n
        bad = {o: n for o, n in outcomes.items() if o in BAD_OUTCOMES}
        assert bad == {}, f"runs that did not end well: {bad}\n{tails()}"
        assert outcomes.get("succeeded", 0) >= N_TABLES, outcomes
        for path in paths:
            assert Table.open(path).timeline().pending() == [], f"{path}: pending at the end"
        for replica in replicas:
            assert replica.client.plans() == [], f"{replica.name} still lists pending plans"
        for replica in replicas:
            assert replica.terminate(timeout_s=60) == 0, f"{replica.name} did not exit 0:\n{replica.tail()}"
        print(f"\nsoak: {DURATION_S:.0f}s of writes, runs by outcome {outcomes}")
        for name in REPLICAS:
            first = readings.window(name, max(DURATION_S / 4, readings.warm_at[name]), float("inf"))[0]
            print(f"soak {name}: after warm-up {first.row()}\nsoak {name}: settled       {final[name].row()}")
    finally:
        for process, _ in writers:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        for replica in replicas:
            replica.cleanup()
