"""End to end (issue 6): three daemon replicas, 20 tables, writer processes, then SIGKILL in a compaction.

Real parts only: a ZooKeeper server (fixture `zookeeper_server`), three `lakeward serve`
processes each with PySpark in local mode, four writer processes (`writer.py`) upserting
into 20 merge-on-read tables under the same ZooKeeper table lock as the daemons, files on
disk, and hudi-rs as the reader oracle. The tables mix Hudi table versions 6, 8 and 9
(`TABLE_VERSIONS`, by table index), so the same checks hold for Hudi 1.x tables (issue 16):
completion-time file slicing, the v2 timeline and the LSM history of archived instants.

While the writers run, one replica is SIGKILLed while a compaction it runs is in its Spark
phase; another replica must complete that plan after the dead one's claim expires. The
writers stop, the survivors drain the backlog, and then the test checks:

- every compaction and clean instant that completed (active and archived timeline) has
  exactly one run that succeeded, across all replicas; no run failed;
- no two replicas held the claim of the same key at the same time (claim logs);
- `lakeward_runs_total` of each survivor equals its list of runs;
- every survivor's `GET /api/v1/runs` lists every run of the deployment, each with the replica
  that ran it and its outcome (the killed replica's unfinished ones as `lost`);
- every table's timeline has no duplicate completed instant and nothing pending (no plan,
  no write) and the survivors' `GET /api/v1/plans` is empty;
- every table reads to the same rows with hudi-rs and lakeward, and those are the rows the
  writers' deterministic batches imply;
- on-call through the real CLI (issue 20): `lakeward trigger --mode run --instant I --wait`
  through one survivor follows the run another survivor executes and exits with its outcome;
  a cancel through one survivor stops the run another executes and quarantines its plan, a
  release and a resume let it complete; each survivor's audit
  log holds every mutating call (trigger, pause, resume, cancel, release) made through any
  replica, with the token's name;
- the survivors exit 0 on SIGTERM, and replicas started again in their place list the same
  runs (same replica, same outcome) and the same audit log: the history outlives them all.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kazoo.client import KazooClient
from typer.testing import CliRunner, Result

from lakeward.core.locks import lock_provider_for
from lakeward.core.table import Table
from lakeward.core.timeline import Instant, Timeline
from lakeward.core.timeline.archived import read_archived_entries
from lakeward.core.timeline.metadata import COMPACT
from lakeward.core.timeline.transitions import read_commit_metadata
from lakeward.services.cli import app as cli_app
from lakeward.services.client import DaemonAPIError
from lakeward.services.daemon import table_lock_options
from lakeward.services.settings import load_settings
from tests.e2e import writer as workload
from tests.interop.compare import comparable_rows, hudi_snapshot, hudi_table, same_rows
from tests.support import waiting
from tests.support.daemon_process import DaemonProcess, runs_total
from tests.support.zookeeper import free_port

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.spark, pytest.mark.timeout(900)]

N_TABLES = 20
N_WRITERS = 4
REPLICAS = ("d1", "d2", "d3")
TOKEN = "e2e-token"
#: The name the replicas know the token by: what the audit log records (never the token).
TOKEN_NAME = "e2e-oncall"
MAX_DELTA_COMMITS = 3
SESSION_TIMEOUT_S = 4.0
WRITER_SCRIPT = Path(__file__).with_name("writer.py")
PLANNED = ("compaction", "clean")
BAD_OUTCOMES = ("failed", "timed_out", "cancelled", "claim_lost")
#: How long a change of the shared state (history, quarantine) may take to show on another replica.
VIEW_S = 10.0
#: Table i is created with table version TABLE_VERSIONS[i % 3].
TABLE_VERSIONS = (6, 8, 9)


# -- the pieces ---------------------------------------------------------------------------------
def daemon_config(table_paths: list[str], zk_hosts: str, chroot: str, port: int) -> dict[str, Any]:
    return {
        "tables": {"static": [{"path": p} for p in table_paths], "refresh_interval_s": 1},
        "policies": {
            "defaults": {
                "compaction": {"max_delta_commits": MAX_DELTA_COMMITS},
                "clean": {"min_commits_between": 4, "commits_retained": 3},
                "archival": {"keep_min_commits": 20, "keep_max_commits": 30},
            },
        },
        "concurrency": {
            "max_running": 2,
            "max_running_per_table": 1,
            "retries": {"max_attempts": 3, "backoff_base_s": 1, "backoff_max_s": 2},
        },
        "zookeeper": {"hosts": zk_hosts, "chroot": chroot, "session_timeout_s": SESSION_TIMEOUT_S},
        "spark": {
            "engine": "spark",
            "master": "local[1]",
            "conf": {
                "spark.sql.shuffle.partitions": 1,
                "spark.ui.enabled": False,
                "spark.driver.memory": "512m",
            },
        },
        "http": {"host": "127.0.0.1", "port": port, "api_tokens": [{"name": TOKEN_NAME, "token": TOKEN}]},
        # a cancelled Spark run that waited for the table lock finishes its Spark work before its fence
        # refuses it: time enough for that, the driver is not killed (the on-call part)
        "resources": {"terminate_grace_s": 20},
        "log": {"format": "json"},
        "drain_time_s": 10,
    }


class Observer(threading.Thread):
    """Polls every live replica's runs and claim log and keeps everything it ever saw.

    Every replica lists the runs of the whole deployment (the shared history), each with the
    replica that ran it; a killed replica answers no more: what was seen before is kept here,
    keyed by (the run's replica, run id) and (replica, claim log entry). A finished run is never
    replaced by an older view of it (another replica may read its start record from the history
    just after its own replica reported it finished).
    """

    def __init__(self, replicas: Callable[[], list[DaemonProcess]], interval_s: float = 0.5):
        super().__init__(name="e2e-observer", daemon=True)
        self._replicas = replicas
        self.interval_s = interval_s
        self.lock = threading.Lock()
        self.runs: dict[tuple[str, str], dict[str, Any]] = {}
        self.claims: dict[str, dict[tuple[float, str, str], dict[str, Any]]] = collections.defaultdict(dict)
        self.errors: list[str] = []
        self._halt = threading.Event()

    def poll(self, replica: DaemonProcess) -> list[dict[str, Any]]:
        """One full read of a replica (runs and claim log); its runs as read."""
        runs = replica.client.runs(state="all", limit=1000)
        claims = replica.client.claims(limit=10_000)
        with self.lock:
            for run in runs:
                known = self.runs.get((run["replica"], run["run_id"]))
                if known is None or known["state"] != "finished" or run["state"] == "finished":
                    self.runs[(run["replica"], run["run_id"])] = run
            for entry in claims["log"]:
                self.claims[replica.name][(entry["time"], entry["key"], entry["event"])] = entry
        return runs

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            for replica in self._replicas():
                if not replica.alive or replica.killed_at is not None:
                    continue
                try:
                    self.poll(replica)
                except DaemonAPIError as exc:
                    if replica.alive:
                        self.errors.append(f"{replica.name}: {exc}")

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)

    def snapshot(self) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
        with self.lock:
            runs = list(self.runs.values())
            claims = {r: sorted(e.values(), key=lambda e: e["time"]) for r, e in self.claims.items()}
        return runs, claims


class Cluster:
    """The replicas, the writers and their diagnostics."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.replicas: list[DaemonProcess] = []
        self.writers: list[tuple[subprocess.Popen[bytes], Path, Path]] = []

    def live(self) -> list[DaemonProcess]:
        return [r for r in self.replicas if r.killed_at is None]

    def tails(self, lines: int = 30) -> str:
        parts = [r.tail(lines) for r in self.replicas]
        for i, (_, _, err) in enumerate(self.writers):
            text = err.read_text(errors="replace") if err.exists() else ""
            parts.append(f"--- writer {i} stderr:\n{text[-3000:]}")
        return "\n".join(parts)

    def cleanup(self) -> None:
        for process, _, _ in self.writers:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        for replica in self.replicas:
            replica.cleanup()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        made.cleanup()


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, cluster: Cluster, step: float = 0.2) -> Any:
    return waiting.wait_until(predicate, timeout_s, what, cluster.tails, step)


# -- reading the outcome --------------------------------------------------------------------------
def was_compaction(table: Table, timeline: Timeline, instant: Instant) -> bool:
    """A completed `commit` that compacted: its plan is on the active timeline, or (archived into
    the LSM history of a version 8+ table, plan gone) its commit metadata says so."""
    if instant.action.value != "commit":
        return False
    if timeline.was_compaction(instant.time):
        return True
    return instant.is_archived and read_commit_metadata(table.storage, instant).operationType == COMPACT


def completed_services(path: str) -> dict[str, set[str]]:
    """Completed compaction and clean instants of a table, on the active and the archived timeline
    (version 6: `.hoodie/archived/`; versions 8+: the LSM history, part of `Table.timeline()`)."""
    table = Table.open(path)
    timeline = table.timeline()
    done: dict[str, set[str]] = {"compaction": set(), "clean": set()}
    for instant in timeline.completed():
        if was_compaction(table, timeline, instant):
            done["compaction"].add(instant.time)
        elif instant.action.value == "clean":
            done["clean"].add(instant.time)
    archived = read_archived_entries(Table.open(path).storage)
    compaction_plans = {str(e["commitTime"]) for e in archived if e.get("actionType") == "compaction"}
    for entry in archived:
        if entry.get("actionState") != "COMPLETED":
            continue
        time_, action = str(entry["commitTime"]), entry.get("actionType")
        if action == "commit" and time_ in compaction_plans:
            done["compaction"].add(time_)
        elif action == "clean":
            done["clean"].add(time_)
    return done


def claim_overlaps(claims: dict[str, list[dict[str, Any]]], ends: dict[str, float]) -> list[str]:
    """Pairs of claim intervals of one key held by two replicas at once.

    A claim is held from its `claimed` entry to the next released / lost / invalid entry of
    the same key on the same replica; one still open ends at `ends[replica]` (a killed
    replica's kill time; +inf for a live one).
    """
    intervals: dict[str, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for replica, entries in claims.items():
        open_at: dict[str, float] = {}
        for entry in entries:
            key, event = entry["key"], entry["event"]
            if event == "claimed":
                open_at[key] = entry["time"]
            elif event in ("released", "lost", "invalid") and key in open_at:
                intervals[key].append((open_at.pop(key), entry["time"], replica))
        for key, since in open_at.items():
            intervals[key].append((since, ends.get(replica, float("inf")), replica))
    problems = []
    for key, spans in intervals.items():
        spans.sort()
        for (s1, e1, r1), (s2, _e2, r2) in zip(spans, spans[1:]):
            if s2 < e1:
                problems.append(f"{key}: held by {r1} [{s1:.3f}, {e1:.3f}] and by {r2} from {s2:.3f}")
    return problems


def data_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.select(["id", "part", "amount", "ts"]).to_pylist(), key=lambda r: r["id"])


# -- on-call --------------------------------------------------------------------------------------
@contextlib.contextmanager
def table_lock_held(path: str, lock_options: dict[str, str]) -> Iterator[None]:
    """The table's ZooKeeper lock, held by the test: a run of the table waits for it where it schedules
    or completes a plan, so an on-call call surely acts on a run that is still running."""
    lock = lock_provider_for(path, Table.open(path).name, lock_options)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()
        lock.close()


def lakeward(replica: DaemonProcess, *args: str) -> Result:
    """`lakeward <args>` (the real CLI, in this process) against one replica's API, with the token."""
    return CliRunner().invoke(cli_app, [*args, "--url", replica.url, "--token", TOKEN])


def lakeward_process(replica: DaemonProcess, *args: str) -> subprocess.Popen[str]:
    """`lakeward <args>` against one replica's API as a process of its own (what on-call runs)."""
    command = [sys.executable, "-m", "lakeward.services.cli", *args, "--url", replica.url, "--token", TOKEN]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out = subprocess.PIPE
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)


def zookeeper_nodes(hosts: str, path: str) -> list[str]:
    """The children of a znode ([] when it does not exist), read through a client of the test's own."""
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=30)
    try:
        return list(zk.get_children(path)) if zk.exists(path) else []
    finally:
        zk.stop()
        zk.close()


def history_of(replica: DaemonProcess) -> dict[str, tuple[str, str, str | None]]:
    """Every run a replica lists for the deployment: run id -> (replica that ran it, state, outcome)."""
    return {r["run_id"]: (r["replica"], r["state"], r["outcome"]) for r in replica.client.runs("all", limit=1000)}


def audit_of(replica: DaemonProcess) -> list[tuple[Any, ...]]:
    """The deployment's audit log as a replica answers it, newest first: (token name, route, target,
    status, replica that answered)."""
    return [(e["token"], e["route"], e["target"], e["status"], e["replica"]) for e in replica.client.audit(1000)]


# -- the test ------------------------------------------------------------------------------------
def test_three_replicas_twenty_tables_exactly_once_and_sigkill_in_a_compaction(
    tmp_path: Path, zookeeper_server: Any, cluster: Cluster
) -> None:
    began = time.monotonic()
    lake = tmp_path / "lake"
    paths = [str(lake / f"t{i:02d}") for i in range(N_TABLES)]
    names = {p: Path(p).name for p in paths}
    chroot = f"/lakeward-e2e-{uuid.uuid4().hex[:12]}"

    for name in REPLICAS:
        config = daemon_config(paths, zookeeper_server.hosts, chroot, free_port())
        cluster.replicas.append(DaemonProcess(name, config, tmp_path, TOKEN))
    lock_options = table_lock_options(load_settings(cluster.replicas[0].config_path, env={}))
    assert lock_options["hoodie.write.lock.provider"] == "zookeeper"
    assert lock_options["hoodie.write.lock.zookeeper.url"] == zookeeper_server.hosts
    assert lock_options["hoodie.write.lock.zookeeper.base_path"] == f"{chroot}/locks"

    # Tables first (every key seeded, so the writers' upserts are updates that go to log files).
    for i, path in enumerate(paths):
        table = Table.create(
            path,
            record_key="id",
            partition_by="part",
            ordering_field="ts",
            table_type="MERGE_ON_READ",
            table_version=TABLE_VERSIONS[i % len(TABLE_VERSIONS)],
        )
        table.bulk_insert(workload.seed_batch(i))

    # Daemons, then writers.
    for replica in cluster.replicas:
        replica.start()
    deadline = time.monotonic() + 120
    for replica in cluster.replicas:
        replica.wait_ready(deadline)
    started_daemons = time.monotonic() - began

    observer = Observer(cluster.live)
    observer.start()
    stop_file = tmp_path / "writers.stop"
    for w in range(N_WRITERS):
        mine = [[i, p] for i, p in enumerate(paths) if i % N_WRITERS == w]
        out, err = tmp_path / f"writer{w}.jsonl", tmp_path / f"writer{w}.err"
        with open(err, "wb") as stderr:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(WRITER_SCRIPT),
                    json.dumps(lock_options),
                    json.dumps(mine),
                    str(stop_file),
                    str(out),
                ],
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
            )
        cluster.writers.append((process, out, err))

    def succeeded(action: str) -> list[dict[str, Any]]:
        runs, _ = observer.snapshot()
        return [r for r in runs if r["action"] == action and r["outcome"] == "succeeded"]

    # Steady state: compactions and cleans are being done while the writers write.
    wait_until(
        lambda: len(succeeded("compaction")) >= 8 and succeeded("clean"),
        150,
        "8 compactions and a clean to succeed",
        cluster,
        0.5,
    )

    # SIGKILL a replica while one of its compactions is in its Spark phase.
    victim: dict[str, Any] | None = None
    late_kills: list[str] = []
    # Runs a replica killed too late (after its compaction completed) had going: each may have completed
    # its plan just before the kill, with its success never reported.
    late_killed_running: set[str] = set()
    for _attempt in range(10):  # small compactions often finish between the last read and the kill
        found = wait_until(
            lambda: next(
                (
                    (replica, run)
                    for replica in cluster.live()
                    for run in _running(replica)
                    if run["replica"] == replica.name  # every replica lists the deployment's runs
                    and run["action"] == "compaction"
                    and run["phase"] == "running"
                    and run["instant"]
                ),
                None,
            ),
            60,
            "a compaction in its Spark phase",
            cluster,
            0.02,
        )
        replica, run = found
        # Last full read of the replica just before the kill; kill only if the run is still in Spark.
        before = {r["run_id"]: r for r in observer.poll(replica)}
        if before.get(run["run_id"], {}).get("phase") != "running":
            continue
        replica.kill()
        table_path = next(p for p in paths if names[p] == run["table"])
        if run["instant"] in completed_services(table_path)["compaction"]:
            late_kills.append(f"{run['key']} on {replica.name}")
            late_killed_running |= {r["key"] for r in before.values() if r["state"] != "finished" and r["key"]}
            late_killed_running.add(run["key"])
            replacement = DaemonProcess(
                f"d{len(cluster.replicas) + 1}",
                daemon_config(paths, zookeeper_server.hosts, chroot, free_port()),
                tmp_path,
                TOKEN,
            )
            cluster.replicas.append(replacement)
            replacement.start()
            replacement.wait_ready(time.monotonic() + 120)
            continue
        victim = {
            "replica": replica.name,
            "run": run,
            "table_path": table_path,
            "running_at_kill": {r["run_id"] for r in before.values() if r["state"] != "finished"},
        }
        break
    assert victim is not None, f"every kill came after the compaction completed: {late_kills}\n{cluster.tails()}"
    killed = next(r for r in cluster.replicas if r.name == victim["replica"])
    key, instant = victim["run"]["key"], victim["run"]["instant"]

    def survivor_completed() -> bool:
        return (
            any(
                r["key"] == key and r["outcome"] == "succeeded" and r["replica"] != killed.name
                for r in succeeded("compaction")
            )
            and instant in completed_services(victim["table_path"])["compaction"]
        )

    wait_until(survivor_completed, 90, f"a surviving replica to complete {key}", cluster, 0.5)
    recovered_after_s = time.time() - (killed.killed_at or 0.0)

    # Writers go on a little, then stop after their current round.
    time.sleep(3)
    stop_file.write_text("stop")
    for process, _, err in cluster.writers:
        code = process.wait(timeout=120)
        assert code == 0, f"writer exited with {code}:\n{err.read_text(errors='replace')[-3000:]}"

    # The survivors work the backlog off: nothing pending anywhere, nothing running, for a while.
    survivors = cluster.live()

    def settled() -> bool:
        if any(Table.open(p).timeline().pending() for p in paths):
            return False
        return not any(r.client.runs(state="running") for r in survivors)

    quiet_since: list[float] = []

    def quiet() -> bool:
        if not settled():
            quiet_since.clear()
            return False
        runs_seen = len(observer.snapshot()[0])
        if not quiet_since or quiet_since[1] != runs_seen:
            quiet_since[:] = [time.monotonic(), runs_seen]
        return time.monotonic() - quiet_since[0] >= 4.0

    wait_until(quiet, 120, "the survivors to drain the backlog", cluster, 0.5)
    for replica in survivors:
        observer.poll(replica)
    observer.stop()
    runs, claims = observer.snapshot()
    diagnostics = cluster.tails()

    # -- no plan and no write left behind; no instant completed twice -----------------------------
    completed: dict[str, dict[str, set[str]]] = {}
    for path in paths:
        timeline = Table.open(path).timeline()
        assert timeline.pending() == [], f"{names[path]}: pending at the end: {timeline.pending()}"
        times = collections.Counter(i.time for i in timeline.completed())
        assert [t for t, n in times.items() if n > 1] == [], f"{names[path]}: an instant time completed twice"
        completed[names[path]] = completed_services(path)
    for replica in survivors:
        assert replica.client.plans() == [], f"{replica.name} still lists pending plans"

    # -- exactly once: one succeeded run per completed plan, across replicas ----------------------
    by_key: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for run in runs:
        if run["action"] in PLANNED and run["instant"] and run["outcome"] == "succeeded":
            by_key[run["key"]].append(run)
    twice = {k: [(r["replica"], r["run_id"]) for r in v] for k, v in by_key.items() if len(v) > 1}
    assert twice == {}, f"plans run to success more than once: {twice}"
    completed_keys = {f"{t}/{a}/{i}" for t, done in completed.items() for a in PLANNED for i in done[a]}
    # A run of the killed replica that was running at its last read may have completed its plan
    # in the milliseconds before the kill: its success was never reported. Not the victim's plan.
    unreported_ok = {
        r["key"]
        for r in runs
        if r["replica"] == killed.name and r["run_id"] in victim["running_at_kill"] and r["key"] != key
    }
    without_run = sorted(completed_keys - set(by_key) - unreported_ok - late_killed_running)
    assert without_run == [], f"completed plans no replica reports a succeeded run for: {without_run}"
    not_completed = sorted(set(by_key) - completed_keys)
    assert not_completed == [], f"runs succeeded but their instants are not completed: {not_completed}"
    bad = [(r["replica"], r["key"], r["outcome"], r["error"]) for r in runs if r["outcome"] in BAD_OUTCOMES]
    assert bad == [], f"runs that did not end well: {bad}\n{diagnostics}"
    n_compactions = sum(len(d["compaction"]) for d in completed.values())
    n_cleans = sum(len(d["clean"]) for d in completed.values())
    assert n_compactions >= 20 and n_cleans >= 1, (n_compactions, n_cleans)
    for replica in REPLICAS:
        assert any(r["replica"] == replica and r["outcome"] == "succeeded" for r in runs), f"{replica} did nothing"

    # -- the SIGKILLed compaction: completed once, by a survivor, after the dead claim expired ----
    victim_runs = [r for r in runs if r["key"] == key]
    assert [r["replica"] for r in victim_runs if r["outcome"] == "succeeded"] != [killed.name]
    assert all(r["state"] != "finished" for r in victim_runs if r["replica"] == killed.name), victim_runs
    assert [r["replica"] for r in by_key[key]] != [] and by_key[key][0]["replica"] != killed.name
    survivor_claims = [
        e["time"] for r, entries in claims.items() if r != killed.name for e in entries if e["key"] == key
    ]
    survivor_claimed = [
        e["time"]
        for r, entries in claims.items()
        if r != killed.name
        for e in entries
        if e["key"] == key and e["event"] == "claimed"
    ]
    assert survivor_claimed, f"no survivor claimed {key}: {survivor_claims}"
    assert min(survivor_claimed) >= (killed.killed_at or 0.0), "a survivor claimed the plan before the kill"

    # -- claims: never held by two replicas at once ------------------------------------------------
    ends = {killed.name: killed.killed_at or 0.0}
    ends.update({r.name: r.killed_at for r in cluster.replicas if r.killed_at is not None})
    overlaps = claim_overlaps(claims, ends)
    assert overlaps == [], "claims held by two replicas at once:\n" + "\n".join(overlaps)
    claimed_total = sum(1 for entries in claims.values() for e in entries if e["event"] == "claimed")
    assert claimed_total >= len(by_key)

    # -- metrics agree with the runs lists -----------------------------------------------------------
    for replica in survivors:
        listed = collections.Counter(
            (r["table"], r["action"], r["outcome"]) for r in runs if r["replica"] == replica.name and r["outcome"]
        )
        assert runs_total(replica) == listed, f"{replica.name}: lakeward_runs_total differs from its runs"

    # -- data: hudi-rs == lakeward == the writers' batches --------------------------------------------
    rounds: dict[int, list[int]] = collections.defaultdict(list)
    for _, out, _ in cluster.writers:
        for line in out.read_text().splitlines():
            entry = json.loads(line)
            rounds[entry["table"]].append(entry["round"])
    for i, path in enumerate(paths):
        done = rounds[i]
        assert done == list(range(1, len(done) + 1)) and len(done) >= 5, f"{names[path]}: rounds {done}"
        assert Table.open(path).version.number == TABLE_VERSIONS[i % len(TABLE_VERSIONS)], names[path]
        ours = Table.open(path).read()
        theirs = hudi_snapshot(hudi_table(path))
        mine_rows, their_rows = comparable_rows(ours), comparable_rows(theirs)
        assert same_rows(mine_rows, their_rows), f"{names[path]}: lakeward and hudi-rs read different rows"
        assert data_rows(ours) == workload.expected_rows(i, len(done)), f"{names[path]}: rows differ from the model"

    # -- one view: every survivor lists every run of the deployment, the killed replica's included --
    every_run = {r["run_id"] for r in runs}
    for replica in survivors:
        listed_here = {r["run_id"]: r for r in replica.client.runs(state="all", limit=1000)}
        assert every_run <= set(listed_here), f"{replica.name} misses runs: {sorted(every_run - set(listed_here))}"
        wrong = [
            (r["run_id"], r["replica"], r["outcome"], listed_here[r["run_id"]]["replica"])
            for r in runs
            if r["state"] == "finished"
            and (listed_here[r["run_id"]]["replica"], listed_here[r["run_id"]]["outcome"])
            != (r["replica"], r["outcome"])
        ]
        assert wrong == [], f"{replica.name} shows runs with another replica or outcome than their own: {wrong}"
        killed_running = [r for r in listed_here.values() if r["replica"] == killed.name and r["state"] != "finished"]
        assert all(r["state"] == "lost" for r in killed_running), killed_running  # never running forever

    # -- audit: each mutating call is in every replica's audit log, with its token's name ---------
    first, last = survivors[0], survivors[-1]
    first.client.pause(names[paths[0]], "e2e audit")
    last.client.resume(names[paths[0]])
    for replica in survivors:
        audited = [(e["token"], e["route"], e["target"], e["status"]) for e in replica.client.audit()]
        assert audited[:2] == [
            (TOKEN_NAME, "/api/v1/tables/{name}/resume", names[paths[0]], 200),
            (TOKEN_NAME, "/api/v1/tables/{name}/pause", names[paths[0]], 200),
        ], audited

    # -- on-call through the real CLI: `trigger --wait` through one replica follows another's run ---
    # `there` runs the plan, `here` is the replica the on-call engineer's CLI reaches.
    there, here = survivors[0], survivors[-1]
    on_call_began = time.monotonic()
    on_call = paths[1]  # table 1
    table_name = names[on_call]
    assert lakeward(here, "pause", table_name, "--reason", "e2e on-call").exit_code == 0  # no scheduled runs
    # Two more rounds of the table's writer, each giving a plan to compact log files (its last compaction
    # may have compacted them all).
    writer_round = len(rounds[1])
    writer_round += 1
    Table.open(on_call, options=lock_options).upsert(workload.batch(1, writer_round))
    instant = Table.open(on_call, options=lock_options).schedule_compaction(force=True)
    assert instant is not None
    plan_key = f"{table_name}/compaction/{instant}"
    with table_lock_held(on_call, lock_options):  # `there`'s run waits for the lock to complete the plan
        run_id = there.client.trigger(table_name, "compaction", "run", instant)["run_id"]
        wait_until(
            lambda: run_id in {r["run_id"] for r in _running(here)}, 30, f"{here.name} to list {run_id}", cluster
        )
        waiter = lakeward_process(
            here, "trigger", "compaction", table_name, "--mode", "run", "--instant", instant, "--wait"
        )

        def refused_and_following() -> bool:  # the CLI's trigger met the claim of `there`'s run
            return any(e[1].endswith("/trigger") and e[3] == 409 and e[4] == here.name for e in audit_of(there)[:5])

        wait_until(refused_and_following, 60, f"the CLI's trigger through {here.name} to be refused", cluster)
        assert waiter.stdout is not None
        following = waiter.stdout.readline()  # printed once it found the run that holds the plan
        assert f"already running: following run {run_id} on {there.name}" in following, following
    output = following + waiter.communicate(timeout=180)[0]
    assert waiter.returncode == 0, output
    assert f"{plan_key}: succeeded (run {run_id} on {there.name})" in output, output
    assert instant in completed_services(on_call)["compaction"]

    # -- cancel, release, resume: the cancelled plan is quarantined until released, then completes ---
    writer_round += 1
    Table.open(on_call, options=lock_options).upsert(workload.batch(1, writer_round))
    with table_lock_held(on_call, lock_options):  # the run waits for the lock to write its plan
        started = lakeward(there, "trigger", "compaction", table_name)
        assert started.exit_code == 0, started.output
        found = re.search(r"started run (\S+):", started.output)
        assert found is not None, started.output
        cancelled_id = found.group(1)
        wait_until(lambda: cancelled_id in {r["run_id"] for r in _running(here)}, 30, "the run to show", cluster)
        cancel = lakeward(here, "cancel", cancelled_id)  # through another replica than the run's
        assert cancel.exit_code == 0 and f"cancelling run {cancelled_id} on {there.name}" in cancel.output, (
            cancel.output
        )
        # `there` takes the request `here` wrote (and removes it) before its run may go on
        wait_until(
            lambda: not zookeeper_nodes(zookeeper_server.hosts, f"{chroot}/cancels"),
            30,
            f"{there.name} to take the cancel request",
            cluster,
            0.5,
        )
    # The lock is free: the run writes its plan, its fence refuses it (its replica took the cancel request
    # `here` wrote), it ends cancelled, its plan quarantined.
    cancelled = wait_until(
        lambda: (r := there.client.run(cancelled_id))["state"] == "finished" and r, 120, "the cancel", cluster
    )
    assert (cancelled["replica"], cancelled["outcome"]) == (there.name, "cancelled"), cancelled
    assert f"through {here.name}" in cancelled["error"], cancelled
    cancelled_key = cancelled["key"]
    assert cancelled["instant"] and cancelled_key == f"{table_name}/compaction/{cancelled['instant']}"
    assert cancelled["instant"] not in completed_services(on_call)["compaction"]
    quarantined = wait_until(
        lambda: [q["key"] for q in here.client.quarantine() if q["key"].startswith(table_name + "/")],
        VIEW_S,
        "the quarantine to show on another replica",
        cluster,
    )
    assert quarantined == [cancelled_key]
    assert lakeward(here, "release", cancelled_key).exit_code == 0
    assert lakeward(here, "resume", table_name).exit_code == 0
    wait_until(
        lambda: (
            cancelled["instant"] in completed_services(on_call)["compaction"]
            and not Table.open(on_call).timeline().pending()
        ),
        180,
        f"the released plan {cancelled_key} to complete",
        cluster,
        0.5,
    )

    # -- audit: every one of those calls, in order, with the token's name, on every replica ----------
    expected_calls = [
        (TOKEN_NAME, "/api/v1/tables/{name}/pause", table_name, 200, here.name),
        (TOKEN_NAME, "/api/v1/tables/{name}/trigger", table_name, 202, there.name),
        (TOKEN_NAME, "/api/v1/tables/{name}/trigger", table_name, 409, here.name),
        (TOKEN_NAME, "/api/v1/tables/{name}/trigger", table_name, 202, there.name),
        (TOKEN_NAME, "/api/v1/runs/{run_id}/cancel", cancelled_id, 200, here.name),
        (TOKEN_NAME, "/api/v1/quarantine/release", cancelled_key, 200, here.name),
        (TOKEN_NAME, "/api/v1/tables/{name}/resume", table_name, 200, here.name),
    ]
    for replica in survivors:
        assert audit_of(replica)[:7] == expected_calls[::-1], f"{replica.name}: {audit_of(replica)[:9]}"

    # -- graceful stop ------------------------------------------------------------------------------
    history = {k: v for k, v in history_of(here).items() if v[1] != "running"}  # those change no more
    audited_calls = audit_of(here)
    assert history[run_id] == (there.name, "finished", "succeeded")
    assert every_run <= set(history)
    for replica in survivors:
        assert replica.terminate(timeout_s=60) == 0, f"{replica.name} did not exit 0:\n{replica.tail()}"

    # -- the history outlives every replica: started again, they list the same runs and audit log ----
    # The history is the deployment's (ZooKeeper), not the engine's: the replicas come back on the local
    # engine, so that the check does not wait for their Spark drivers' JVMs.
    restarted = [
        DaemonProcess(
            r.name,
            {**r.config, "spark": {"engine": "local"}, "http": {**r.config["http"], "port": free_port()}},
            tmp_path,
            TOKEN,
        )
        for r in survivors
    ]
    cluster.replicas.extend(restarted)
    for replica in restarted:
        replica.start()
    for replica in restarted:
        replica.wait_ready(time.monotonic() + 120)
    for replica in restarted:
        again = history_of(replica)
        lost = {k: (v, again.get(k)) for k, v in history.items() if again.get(k) != v}
        assert lost == {}, f"{replica.name}: runs changed or gone after the restart: {lost}"
        assert audit_of(replica)[: len(audited_calls)] == audited_calls, f"{replica.name}: the audit log changed"
    runs_cli = lakeward(restarted[0], "runs", "--limit", "1000")
    assert runs_cli.exit_code == 0 and run_id in runs_cli.output and there.name in runs_cli.output, runs_cli.output
    for replica in restarted:
        assert replica.terminate(timeout_s=60) == 0, f"{replica.name} did not exit 0:\n{replica.tail()}"

    elapsed = time.monotonic() - began
    print(
        f"\ne2e: daemons ready after {started_daemons:.0f}s; {n_compactions} compactions, {n_cleans} cleans, "
        f"{len(runs)} runs, {claimed_total} claims; {key} killed on {killed.name} and completed by a survivor "
        f"{recovered_after_s:.1f}s later; late kills: {late_kills}; observer errors: {len(observer.errors)}; "
        f"on-call and restart {time.monotonic() - on_call_began:.0f}s; total {elapsed:.0f}s"
    )


def _running(replica: DaemonProcess) -> list[dict[str, Any]]:
    try:
        return replica.client.runs(state="running")
    except DaemonAPIError:
        return []
