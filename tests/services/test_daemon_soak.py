"""Soak: a daemon replica on a real ZooKeeper with a low `maxClientCnxns` runs plan after plan,
and its ZooKeeper connections, threads and open files stay flat (issue 18, item 3).

Before the shared client, every run's table lock opened a ZooKeeper connection and three
threads that nothing closed: with `maxClientCnxns=12` the daemon stopped working after 12
runs. Here an ingestion writer in the same process upserts one row at a time into two tiny
merge-on-read tables (through the daemon's ZooKeeper lock options, never closing its
tables), and the daemon compacts after every delta commit. The CI version stops at 100
compactions; `-m slow` runs 300. Both run the cleaner and the archiver along (a clean every 10
commits, the active timeline kept between 10 and 20 commits), as a production table does: their
runs must succeed too, and they keep every run's cost flat (without them every run reads a
longer timeline than the one before, and 500 runs no longer fitted 600 s on a 2-core machine).

With runs in child processes (`resources.isolation: process`, the default) each run's
table lock connects from its child and disconnects when the child ends: the daemon's own
connections stay at one and the server never sees more than one per running plan besides.

Threads are measured twice at rest (no run in flight, every child reaped): after 10 runs and at
the end; the two must agree (a leak is a thread that never goes away). While runs are in flight
the count may rise only by what is documented at `PEAK_THREADS_SLACK`.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.services import supervisor
from lakeward.services.daemon import Daemon, table_lock_options
from lakeward.services.settings import load_settings
from tests.support.zookeeper import ZooKeeperServer, alive_connections

pytestmark = pytest.mark.zookeeper

TABLES = ("a", "b")


def soak_daemon(tmp_path: Path, server: ZooKeeperServer, isolation: str, housekeeping: bool = False) -> Daemon:
    static = "\n".join(f"    - path: {tmp_path / t}" for t in TABLES)
    on = "true" if housekeeping else "false"  # clean and archival
    config = tmp_path / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static:
{static}
  refresh_interval_s: 0.1
policies:
  defaults:
    compaction: {{max_delta_commits: 1}}
    clean: {{enabled: {on}, commits_retained: 2, min_commits_between: 10}}
    archival: {{enabled: {on}, keep_min_commits: 10, keep_max_commits: 20}}
concurrency: {{max_running: 2}}
resources: {{isolation: {isolation}}}
zookeeper: {{hosts: '{server.hosts}', chroot: /soak, session_timeout_s: 10, connection_timeout_s: 5}}
spark: {{engine: local}}
log: {{format: text, level: WARNING}}
drain_time_s: 5
"""
    )
    return Daemon(load_settings(config, env={}))


def runs_of(daemon: Daemon, action: str, outcome: str) -> int:
    """How many runs of `action` over both tables ended with `outcome` (the daemon's counter)."""
    value = 0.0
    for table in TABLES:
        value += (
            daemon.metrics.registry.get_sample_value(
                "lakeward_runs_total", {"table": table, "action": action, "outcome": outcome}
            )
            or 0.0
        )
    return int(value)


def compactions(daemon: Daemon, outcome: str) -> int:
    return runs_of(daemon, "compaction", outcome)


def new_threads(before: frozenset[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not alive at `before`: in a full test run, threads of earlier tests
    (Spark's gateway, their writers' heartbeats, clients still closing) come and go in this process too,
    and are not the soak's to count."""
    return [t for t in threading.enumerate() if t not in before]


#: How far the open descriptors may end above the at-rest baseline. At least 20 runs separate the two
#: (10 before the baseline, `runs` >= 30 in all), so a leak of a descriptor per run (or per few runs)
#: exceeds it; what it allows is process-wide noise of a full test run: clients of earlier tests that
#: still reconnect, each holding a socket for a moment.
FD_SLACK = 6


def open_files() -> dict[int, str]:
    """This process's open descriptors and what each points to (a file, a socket, a pipe)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile
            continue
    return found


def footprint(server: ZooKeeperServer, before: frozenset[threading.Thread]) -> tuple[int, int, int]:
    """(ZooKeeper connections of this process, threads started since `before`, open file descriptors)."""
    return alive_connections(server), len(new_threads(before)), len(os.listdir("/proc/self/fd"))


#: How far above the at-rest baseline the thread count may go while runs are in flight. Every thread
#: the daemon's process keeps per run is bounded up front: the runner's pool (`max_running`, counted
#: apart since it starts lazily), one watch thread for every timeout, one reaper for every child, one
#: discovery and one health pool for every cycle. What remains is transient: in thread mode the local
#: engine's task threads of the plans running in the daemon; in process mode nothing (the slack of 1
#: covers a ZooKeeper event thread). A leak of one thread per run passes it within a few runs.
PEAK_THREADS_SLACK = {"thread": 3, "process": 1}


def at_rest(daemon: Daemon, server: ZooKeeperServer, before: frozenset[threading.Thread]) -> tuple[int, int, int]:
    """The footprint with no run in flight: nothing running for a while and every child reaped (the
    writer has stopped writing, so no new run starts)."""
    assert daemon.runner is not None
    quiet_since = time.monotonic()
    deadline = quiet_since + 60
    while time.monotonic() - quiet_since < 1.0:
        assert time.monotonic() < deadline, f"runs did not come to rest: {[r.key for r in daemon.runner.running()]}"
        if daemon.runner.running() or supervisor.unreaped_children():
            quiet_since = time.monotonic()
        time.sleep(0.05)
    # the fewest over a few samples: the daemon's cycle (health, discovery) opens timeline files for a
    # moment even at rest, which is no leak; a leaked descriptor stays in every sample
    samples = []
    for _ in range(10):
        samples.append(footprint(server, before))
        time.sleep(0.05)
    return min(samples, key=lambda f: f[2])


def pool_threads(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def soak(
    tmp_path: Path,
    server: ZooKeeperServer,
    runs: int,
    stall_s: float,
    isolation: str = "thread",
    housekeeping: bool = False,
) -> None:
    """Compactions until `runs` succeeded; then threads and open files are where they were at rest after
    the first 10 (no leak), they never rose by more than `PEAK_THREADS_SLACK` while runs were in flight
    (no per-run growth), and ZooKeeper connections stayed within bounds throughout."""
    before = frozenset(threading.enumerate())
    for name in TABLES:
        table = Table.create(str(tmp_path / name), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
        table.bulk_insert(pa.table({"id": list(range(5)), "v": [0] * 5, "ts": [0] * 5}))
    daemon = soak_daemon(tmp_path, server, isolation, housekeeping)
    # Runs in child processes hold a connection each while they run (max_running=2).
    connections = 1 if isolation == "thread" else 1 + 2
    lock_options = table_lock_options(daemon.settings)
    daemon.start()
    try:
        progress_at, progressed = time.monotonic(), 0  # a hang guard: the last time a compaction succeeded
        baseline: tuple[int, int, int] | None = None
        idle_run_threads = 0  # runner pool threads not started yet at the baseline (they start lazily)
        peak = (0, 0, 0)
        peak_threads: list[str] = []
        baseline_files: set[str] = set()
        written = 0
        while compactions(daemon, "succeeded") < runs:
            if compactions(daemon, "succeeded") > progressed:
                progress_at, progressed = time.monotonic(), compactions(daemon, "succeeded")
            assert time.monotonic() - progress_at < stall_s, (
                f"no compaction succeeded for {stall_s:.0f}s after {progressed} of {runs}; "
                f"failed runs: {compactions(daemon, 'failed')}, footprint {footprint(server, before)}"
            )
            assert compactions(daemon, "failed") == 0, [r.to_dict() for r in daemon.runs() if r.error][:3]
            name = TABLES[written % len(TABLES)]
            # An ingestion writer in the same process, with the daemon's lock settings; never closed.
            Table.open(str(tmp_path / name), options=lock_options).upsert(
                pa.table({"id": [written % 5], "v": [written], "ts": [written + 1]})
            )
            written += 1
            done = compactions(daemon, "succeeded")
            if baseline is None and done >= 10:
                baseline = at_rest(daemon, server, before)  # thread pools and caches are warm by now
                baseline_files = set(open_files().values())
                idle_run_threads = 2 - pool_threads("run_")
            elif baseline is not None:
                now = footprint(server, before)
                if now[1] > peak[1]:
                    peak_threads = sorted(t.name for t in new_threads(before))
                peak = (max(peak[0], now[0]), max(peak[1], now[1]), max(peak[2], now[2]))
            time.sleep(0.02)
        assert baseline is not None
        final = at_rest(daemon, server, before)
        assert final[0] <= connections and peak[0] <= connections, (
            f"ZooKeeper connections: baseline {baseline}, peak {peak}"
        )
        # No leak: at rest after `runs` runs, exactly the threads of the baseline (and the run pool's).
        assert final[1] <= baseline[1] + idle_run_threads, (
            f"threads leaked: {baseline[1]} at rest after 10 runs, {final[1]} after {runs}: "
            f"{sorted(t.name for t in new_threads(before))}"
        )
        slack = idle_run_threads + PEAK_THREADS_SLACK[isolation]
        assert peak[1] <= baseline[1] + slack, (
            f"threads grew with runs: baseline {baseline[1]}, peak {peak[1]}: {peak_threads}"
        )
        assert final[2] <= baseline[2] + FD_SLACK, (
            f"open files grew: baseline {baseline[2]}, final {final[2]}; "
            f"new: {sorted(set(open_files().values()) - baseline_files)}"
        )
        assert daemon.ready
        if housekeeping:  # the cleaner and the archiver ran along, and none of their runs failed
            for action in ("clean", "archival"):
                assert runs_of(daemon, action, "succeeded") > 0, f"no {action} run succeeded"
                assert runs_of(daemon, action, "failed") == 0, [r.to_dict() for r in daemon.runs() if r.error][:3]
    finally:
        daemon.drain(5)
    # The replica's claims and locks shared one session: once drained, nothing is left open.
    deadline = time.monotonic() + 10
    while alive_connections(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive_connections(server) <= 1  # the writer's never-closed tables keep the shared client


def test_daemon_soak_keeps_zookeeper_connections_and_threads_flat(tmp_path, make_zookeeper_server):
    soak(tmp_path, make_zookeeper_server(max_client_cnxns=5), runs=100, stall_s=90)  # the long soak adds housekeeping


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_daemon_long_soak_keeps_zookeeper_connections_and_threads_flat(tmp_path, make_zookeeper_server):
    # It guards against a hang, not speed (this soak checks leaks): 110-360 s alone, but full-suite runs
    # needed ~700 s and over 900 s (253 runs) with code that takes 142 s alone; so no total budget.
    soak(tmp_path, make_zookeeper_server(max_client_cnxns=5), runs=300, stall_s=120, housekeeping=True)


def test_daemon_soak_with_runs_in_child_processes_leaks_no_connections(tmp_path, make_zookeeper_server):
    soak(tmp_path, make_zookeeper_server(max_client_cnxns=5), runs=30, stall_s=90, isolation="process")
