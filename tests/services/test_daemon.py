"""The daemon's cycle and lifecycle: policy-driven plans run, idle tables stay quiet, problems are
isolated, pause holds work back, SIGTERM-style drain cancels what is left and releases claims."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.services.daemon import Daemon, table_lock_options
from lakeward.services.model import Outcome
from lakeward.services.settings import load_settings
from tests.services.test_runner import GatedEngine


def wait_for(predicate: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def mor(path: Path, delta_commits: int) -> Table:
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    table.bulk_insert(pa.table({"id": list(range(30)), "v": [0] * 30, "ts": [0] * 30}))
    for i in range(1, delta_commits + 1):
        table.upsert(pa.table({"id": [1, 2], "v": [i, i], "ts": [i, i]}))
    return table


def daemon_for(tmp_path: Path, extra: str = "", tables: tuple[str, ...] = ("busy", "idle")) -> Daemon:
    static = "\n".join(f"    - path: {tmp_path / t}" for t in tables)
    config = tmp_path / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static:
{static}
  refresh_interval_s: 0.2
policies:
  defaults:
    compaction: {{max_delta_commits: 3}}
    clean: {{enabled: false}}
    archival: {{enabled: false}}
spark: {{engine: local}}
log: {{format: text}}
drain_time_s: 0.5
{extra}
"""
    )
    return Daemon(load_settings(config, env={}))


def outcomes(daemon: Daemon, table: str) -> list[tuple[str, str | None]]:
    return [(r.action.value, r.outcome.value if r.outcome else None) for r in daemon.runs() if r.table.name == table]


def test_cycles_compact_a_busy_table_and_leave_an_idle_one_alone(tmp_path):
    busy, idle = mor(tmp_path / "busy", 3), mor(tmp_path / "idle", 1)
    daemon = daemon_for(tmp_path, tables=("busy", "idle", "missing"))
    daemon.start()
    try:
        wait_for(lambda: ("compaction", "succeeded") in outcomes(daemon, "busy"))
        compactions = [i for i in Table.open(busy.path).completed_instants() if i.action.value == "commit"]
        assert len(compactions) == 1
        time.sleep(1.0)  # several more cycles
        assert outcomes(daemon, "busy").count(("compaction", "succeeded")) == 1
        assert outcomes(daemon, "idle") == []  # 1 delta commit: nothing due, nothing tried
        views = {v.ref.name: v for v in daemon.tables()}
        assert views["missing"].problem is not None and "not a table" in views["missing"].problem
        assert daemon.metrics.registry.get_sample_value("lakeward_tables_failing_discovery") == 1
        assert Table.open(idle.path).read().num_rows == 30
    finally:
        daemon.drain()


def test_nothing_due_is_not_retried_until_the_table_changes(tmp_path):
    table = Table.create(str(tmp_path / "busy"), record_key="id", ordering_field="ts")
    table.upsert(pa.table({"id": [1], "v": [1], "ts": [1]}))
    # Clean is due by count, but with every file version retained there is nothing to delete.
    daemon = daemon_for(tmp_path, tables=("busy",), extra="policies: {defaults: {clean: {min_commits_between: 1}}}\n")
    daemon.start()
    try:
        wait_for(lambda: ("clean", "nothing_to_do") in outcomes(daemon, "busy"))
        time.sleep(1.0)
        assert outcomes(daemon, "busy").count(("clean", "nothing_to_do")) == 1
        table.upsert(pa.table({"id": [2], "v": [2], "ts": [2]}))  # the timeline moves: try again
        wait_for(lambda: outcomes(daemon, "busy").count(("clean", "nothing_to_do")) == 2)
    finally:
        daemon.drain()


def test_paused_table_keeps_its_pending_plan_until_resumed(tmp_path):
    table = mor(tmp_path / "busy", 1)
    instant = table.schedule_compaction(force=True)
    daemon = daemon_for(tmp_path, tables=("busy",))
    daemon.control.set_paused("busy", True, "test")
    daemon.start()
    try:
        wait_for(lambda: daemon.ready)
        time.sleep(0.8)
        assert Table.open(table.path).pending_compactions() == [instant]
        daemon.set_paused("busy", False)
        wait_for(lambda: Table.open(table.path).pending_compactions() == [])
    finally:
        daemon.drain()


def test_drain_cancels_runs_past_the_drain_time_and_releases_claims(tmp_path):
    table = mor(tmp_path / "busy", 3)
    daemon = daemon_for(tmp_path, tables=("busy",))
    daemon.start()
    assert daemon.runner is not None
    engine = GatedEngine()
    daemon.runner.engine = engine
    wait_for(lambda: engine.arrived.is_set())
    run = daemon.runner.running()[0]
    opener = threading.Timer(0.6, engine.gate.set)  # the plan's work ends after its cancellation
    opener.start()
    daemon.drain(0.3)
    assert not daemon.ready
    assert run.outcome is Outcome.CANCELLED and "drain" in (run.error or "")
    assert run.key not in daemon.control.quarantined()
    assert run.instant is not None and Table.open(table.path).pending_compactions() == [run.instant]
    assert daemon.coordinator.held_claims() == []
    assert daemon.wait_stopped(1)


def test_lock_defaults_follow_zookeeper_settings_unless_the_policy_names_a_lock(tmp_path):
    mor(tmp_path / "busy", 1)
    daemon = daemon_for(tmp_path, tables=("busy",), extra="zookeeper: {hosts: 'zk1:2181,zk2:2181', chroot: /lw}\n")
    assert table_lock_options(daemon.settings) == {
        "hoodie.write.lock.provider": "zookeeper",
        "hoodie.write.lock.zookeeper.url": "zk1:2181,zk2:2181",
        "hoodie.write.lock.zookeeper.base_path": "/lw/locks",
        "hoodie.write.lock.zookeeper.session_timeout_ms": "30000",
        "hoodie.write.lock.zookeeper.connection_timeout_ms": "10000",
        "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    }
    assert daemon.table_options(daemon.table_ref("busy"))["hoodie.write.lock.provider"] == "zookeeper"
    own = daemon_for(
        tmp_path,
        tables=("busy",),
        extra="zookeeper: {hosts: 'zk1:2181'}\npolicies: {defaults: {hoodie_options: "
        "{hoodie.write.lock.provider: in_process}}}\n",
    )
    options = own.table_options(own.table_ref("busy"))
    assert options["hoodie.write.lock.provider"] == "in_process"
    assert "hoodie.write.lock.zookeeper.url" not in options
    # a lock knob without a provider tunes the daemon's ZooKeeper lock: it dropped it, and the daemon's
    # runs took the in-process lock beside ingestion writers holding the ZooKeeper one
    tuned = daemon_for(
        tmp_path,
        tables=("busy",),
        extra="zookeeper: {hosts: 'zk1:2181'}\npolicies: {defaults: {hoodie_options: "
        "{hoodie.write.lock.wait_time_ms: 300}}}\n",
    )
    options = tuned.table_options(tuned.table_ref("busy"))
    assert (
        options["hoodie.write.lock.provider"] == "zookeeper"
        and options["hoodie.write.lock.zookeeper.url"] == "zk1:2181"
    )
    assert options["hoodie.write.lock.wait_time_ms"] == "300"


@pytest.mark.zookeeper
def test_two_daemons_on_zookeeper_run_each_plan_once(tmp_path, zookeeper_server):
    tables = tuple(f"t{i}" for i in range(4))
    for name in tables:
        mor(tmp_path / name, 3)
    chroot = f"/lakeward-daemon-test-{tmp_path.name[-12:]}"
    extra = f"zookeeper: {{hosts: '{zookeeper_server.hosts}', chroot: {chroot}, session_timeout_s: 4}}\n"
    daemons = [daemon_for(tmp_path, extra=extra, tables=tables) for _ in range(2)]
    for d in daemons:
        d.start()
    try:
        for name in tables:
            wait_for(
                lambda n=name: (
                    Table.open(str(tmp_path / n)).pending_compactions() == []
                    and any(i.action.value == "commit" for i in Table.open(str(tmp_path / n)).completed_instants())
                )
            )

        def recorded() -> list[tuple[str, str, Outcome | None]]:
            runs = [r for d in daemons for r in d.runs() if r.action.value == "compaction"]
            return [(r.table.name, r.state, r.outcome) for r in runs]

        # the runner records a run as finished (with its outcome) after the instant completes: wait
        # until every compaction run of both replicas is finished, and each table has a succeeded
        # one, before counting them
        wait_for(
            lambda: (
                all(state == "finished" for _, state, _ in recorded())
                and {n for n, _, o in recorded() if o is Outcome.SUCCEEDED} == set(tables)
            )
        )
        succeeded = [n for n, _, o in recorded() if o is Outcome.SUCCEEDED]
        assert sorted(succeeded) == sorted(tables)  # one compaction per table, by one replica
        for name in tables:
            commits = [i for i in Table.open(str(tmp_path / name)).completed_instants() if i.action.value == "commit"]
            assert len(commits) == 1
    finally:
        for d in daemons:
            d.drain()


def test_a_busy_table_still_gets_compacted_when_its_cleans_find_nothing(tmp_path):
    """No-op cleans (due by count after every write) must not keep the table's only slot.

    The writer is a thread of this process, under the default in-process table lock: the daemon runs
    plans in threads here (`isolation: thread`), so that the lock excludes them. A child process would not
    share it (several processes need the ZooKeeper lock), and the two commits could race."""
    table = mor(tmp_path / "busy", 0)
    daemon = daemon_for(
        tmp_path,
        tables=("busy",),
        extra="policies: {defaults: {clean: {min_commits_between: 1}}}\nresources: {isolation: thread}\n",
    )
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.wait(0.1):
            i += 1
            Table.open(table.path).upsert(pa.table({"id": [i % 30], "v": [i], "ts": [i]}))

    writer = threading.Thread(target=write)
    daemon.start()
    writer.start()
    try:
        wait_for(lambda: ("compaction", "succeeded") in outcomes(daemon, "busy"), timeout_s=30)
    finally:
        stop.set()
        writer.join()
        daemon.drain()


def test_a_not_due_clean_is_retried_after_a_rewrite_even_when_another_clean_ran_meanwhile(tmp_path):
    """The hold-back after a run that found nothing counts the rewrites since that run. It counted
    rewrites since the last clean: a clean by someone else reset that count below the mark, and the
    daemon held its clean back until the table had more rewrites than before (archival shrank the
    completed count of other actions the same way). Found by a report-only exploration."""
    table = Table.create(str(tmp_path / "busy"), record_key="id", ordering_field="ts")
    for i in range(4):
        table.upsert(pa.table({"id": [1], "v": [i], "ts": [i]}))
    daemon = daemon_for(tmp_path, tables=("busy",), extra="policies: {defaults: {clean: {min_commits_between: 1}}}\n")
    daemon.start()
    try:
        wait_for(lambda: ("clean", "nothing_to_do") in outcomes(daemon, "busy"))  # 10 commits retained
        assert Table.open(table.path, options={"hoodie.cleaner.commits.retained": "1"}).clean() is not None
        table.upsert(pa.table({"id": [2], "v": [9], "ts": [9]}))  # one rewrite since the daemon's clean
        wait_for(lambda: outcomes(daemon, "busy").count(("clean", "nothing_to_do")) == 2, timeout_s=15)
    finally:
        daemon.drain()
