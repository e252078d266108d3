"""One view across replicas: two daemons on a real ZooKeeper share their run history and audit log.

Replica B's API lists and follows runs executed by replica A (`trigger --wait` against B
returns the outcome of A's run), every mutating call is in the audit log with its token's
name, the history survives restarting both replicas, a run whose replica died shows as
lost, and the retention prunes.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from typer.testing import CliRunner

from lakeward import Table
from lakeward.services.api import create_app
from lakeward.services.api.server import ApiServer
from lakeward.services.claims import ZooKeeperCoordinator
from lakeward.services.cli import app as cli_app
from lakeward.services.daemon import Daemon
from lakeward.services.history import LOST, Retention, SharedHistory, ZooKeeperRecordLog, cap_record
from lakeward.services.model import Outcome, ServiceAction
from lakeward.services.runner import RunRecord
from lakeward.services.settings import DaemonSettings, HistorySettings, load_settings
from tests.services.test_api import wait_for
from tests.services.test_runner import GatedEngine, mor_table

pytestmark = pytest.mark.zookeeper

#: How long another replica's run may take to show in a replica's history view: its refresh
#: interval (`RunsView.REFRESH_S`, 1 s) and the time a refresh takes on a loaded machine.
VIEW_BOUND_S = 5.0

ONCALL = {"Authorization": "Bearer t-oncall"}
PLAIN = {"Authorization": "Bearer t-plain"}


def settings_for(root: Path, hosts: str, chroot: str, extra: str = "") -> DaemonSettings:
    config = root / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static:
    - path: {root / "orders"}
  refresh_interval_s: 3600
policies:
  defaults:
    compaction: {{enabled: false}}
    clean: {{enabled: false}}
    archival: {{enabled: false}}
spark: {{engine: local}}
zookeeper: {{hosts: '{hosts}', chroot: {chroot}, session_timeout_s: 4}}
http:
  port: 0
  api_tokens: [{{name: oncall, token: t-oncall}}, t-plain]
log: {{format: text}}
drain_time_s: 1
{extra}
"""
    )
    return load_settings(config, env={})


@pytest.fixture
def deployment(tmp_path: Path, zookeeper_server: Any) -> Iterator[Callable[[], tuple[Daemon, Daemon]]]:
    """Starts replicas A and B of one deployment (call it again after draining them: a restart)."""
    mor_table(tmp_path / "orders")
    chroot = f"/lakeward-history-{uuid.uuid4().hex[:8]}"
    started: list[Daemon] = []

    def start() -> tuple[Daemon, Daemon]:
        pair = tuple(Daemon(settings_for(tmp_path, zookeeper_server.hosts, chroot)) for _ in range(2))
        for d in pair:
            d.start()
            started.append(d)
        for d in pair:
            wait_for(lambda d=d: d.ready)
        return pair[0], pair[1]

    yield start
    for d in started:
        d.drain(2)


def test_any_replica_lists_follows_and_audits_the_runs_of_the_deployment(deployment, tmp_path):
    a, b = deployment()
    api_a, api_b = TestClient(create_app(a)), TestClient(create_app(b))
    instant = Table.open(str(tmp_path / "orders")).schedule_compaction(force=True)
    gated = GatedEngine()
    assert a.runner is not None
    a.runner.engine = gated
    submitted = a.trigger("orders", ServiceAction.COMPACTION, "run", instant)
    assert submitted.run is not None
    run_id = submitted.run.run_id
    assert gated.arrived.wait(30)

    # B shows A's running run (within its history view's refresh, about 1 s), its claim and the plan
    # running on A.
    running = wait_for(lambda: api_b.get("/api/v1/runs", params={"state": "running"}).json(), VIEW_BOUND_S)
    assert [(r["run_id"], r["replica"], r["state"]) for r in running] == [(run_id, a.replica_id, "running")]
    claims = api_b.get("/api/v1/claims").json()
    assert {"key": f"orders/compaction/{instant}", "replica": a.replica_id} in [
        {"key": c["key"], "replica": c["replica"]} for c in claims["deployment"]
    ]
    b.cycle()
    plan = api_b.get("/api/v1/plans").json()[0]
    assert (plan["run_id"], plan["running_on"], plan["running_here"]) == (run_id, a.replica_id, None)

    # `trigger --wait` against B: the plan is claimed by A's run (409), the CLI follows that run
    # through B's API and exits with its outcome once A completes it.
    server = ApiServer(b, port=0)
    server.start()
    result: dict[str, Any] = {}

    def wait_through_b() -> None:
        args = ["trigger", "compaction", "orders", "--mode", "run", "--instant", instant, "--wait"]
        url = f"http://127.0.0.1:{server.port}"
        result["cli"] = CliRunner().invoke(cli_app, [*args, "--url", url, "--token", "t-oncall"])

    waiter = threading.Thread(target=wait_through_b)
    try:
        waiter.start()
        wait_for(lambda: any(e["status"] == 409 for e in api_a.get("/api/v1/audit").json()))
        time.sleep(0.5)  # the CLI is polling A's run through B now
        gated.gate.set()
        waiter.join(60)
    finally:
        gated.gate.set()
        server.stop()
    cli = result["cli"]
    assert cli.exit_code == 0, cli.output
    assert f"following run {run_id} on {a.replica_id}" in cli.output
    assert f"orders/compaction/{instant}: succeeded (run {run_id} on {a.replica_id})" in cli.output

    done = api_b.get(f"/api/v1/runs/{run_id}").json()
    assert (done["replica"], done["state"], done["outcome"], done["instant"]) == (
        a.replica_id,
        "finished",
        "succeeded",
        instant,
    )
    assert run_id in [r["run_id"] for r in api_b.get("/api/v1/runs", params={"table": "orders"}).json()]

    # Every mutating call lands in the shared audit log, with its token's name (never the token).
    assert api_b.post("/api/v1/tables/orders/pause", json={"reason": "look"}, headers=PLAIN).status_code == 200
    assert api_a.post("/api/v1/tables/orders/resume", headers=ONCALL).status_code == 200
    assert api_b.post("/api/v1/runs/nope/cancel", headers=ONCALL).status_code == 404
    assert api_b.post("/api/v1/quarantine/release", json={"key": "orders/compaction/1"}, headers=ONCALL).status_code
    assert api_a.post("/api/v1/tables/orders/pause", headers={"Authorization": "Bearer wrong"}).status_code == 403
    audit = api_b.get("/api/v1/audit").json()
    seen = [(e["token"], e["route"], e["target"], e["status"], e["replica"]) for e in reversed(audit)]
    assert seen == [
        ("oncall", "/api/v1/tables/{name}/trigger", "orders", 409, b.replica_id),
        ("token-2", "/api/v1/tables/{name}/pause", "orders", 200, b.replica_id),
        ("oncall", "/api/v1/tables/{name}/resume", "orders", 200, a.replica_id),
        ("oncall", "/api/v1/runs/{run_id}/cancel", "nope", 404, b.replica_id),
        ("oncall", "/api/v1/quarantine/release", "orders/compaction/1", 404, b.replica_id),
        (None, "/api/v1/tables/{name}/pause", "orders", 403, a.replica_id),
    ]
    assert '"reason":"look"' in audit[-2]["request"] and "t-oncall" not in str(audit)
    assert [e["status"] for e in api_a.get("/api/v1/audit", params={"token": "token-2"}).json()] == [200]

    # The history survives restarting both replicas; the CLI reads it through any of them.
    first_a = a.replica_id
    a.drain(2)
    b.drain(2)
    a2, b2 = deployment()
    again = TestClient(create_app(b2)).get(f"/api/v1/runs/{run_id}").json()
    assert (again["replica"], again["outcome"]) == (first_a, "succeeded")
    assert len(TestClient(create_app(a2)).get("/api/v1/audit").json()) == 6
    server = ApiServer(b2, port=0)
    server.start()
    try:
        url = ["--url", f"http://127.0.0.1:{server.port}"]
        listed = CliRunner().invoke(cli_app, ["audit", "--by", "oncall", *url], catch_exceptions=False)
        runs = CliRunner().invoke(cli_app, ["runs", *url], catch_exceptions=False)
    finally:
        server.stop()
    assert listed.exit_code == 0 and listed.output.count("oncall") == 4, listed.output
    assert run_id in runs.output and first_a in runs.output


def test_a_cancel_through_another_replica_stops_the_run_where_it_runs(deployment):
    """Behind a Service the cancel reaches any replica: the one running the run stops it (about a second
    later, through the shared control store), quarantines its plan, and the request is gone."""
    a, b = deployment()
    api_b = TestClient(create_app(b))
    assert a.runner is not None
    gated = GatedEngine()
    a.runner.engine = gated
    run = a.trigger("orders", ServiceAction.COMPACTION).run
    assert run is not None and gated.arrived.wait(30)
    try:
        wait_for(lambda: api_b.get(f"/api/v1/runs/{run.run_id}").json()["state"] == "running", VIEW_BOUND_S)
        answer = api_b.post(f"/api/v1/runs/{run.run_id}/cancel", headers=ONCALL)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"run_id": run.run_id, "cancelling": True, "replica": a.replica_id}
        wait_for(lambda: run.stop is not None, VIEW_BOUND_S)  # A took the request
    finally:
        gated.gate.set()
    done = wait_for(lambda: (r := api_b.get(f"/api/v1/runs/{run.run_id}").json())["state"] == "finished" and r)
    assert (done["replica"], done["outcome"]) == (a.replica_id, "cancelled"), done
    assert f"through {b.replica_id}" in done["error"]
    # B's view of the quarantine is its cached read, renewed by a ZooKeeper watch: it follows within the bound
    wait_for(lambda: [q["key"] for q in api_b.get("/api/v1/quarantine").json()] == [run.key], VIEW_BOUND_S)
    wait_for(lambda: a.control.cancel_requests() == {} and b.control.cancel_requests() == {}, VIEW_BOUND_S)
    missing = api_b.post("/api/v1/runs/nope/cancel", headers=ONCALL)
    assert missing.status_code == 404 and "no running run 'nope' in the deployment" in missing.text


def replica_with_a_held_compaction(
    settings: DaemonSettings,
) -> tuple[Daemon, ZooKeeperCoordinator, GatedEngine, RunRecord]:
    """Replica C of the deployment, running a compaction held at its engine's gate; C has a ZooKeeper
    session of its own, so closing its coordinator is what a crash does to its nodes."""
    zk = settings.zookeeper
    coordinator = ZooKeeperCoordinator(
        zk.hosts or "", chroot=zk.chroot, base_path="/", session_timeout_s=zk.session_timeout_s, private_client=True
    )
    c = Daemon(settings, coordinator=coordinator)
    c.start()
    assert c.runner is not None
    gated = GatedEngine()
    c.runner.engine = gated
    run = c.trigger("orders", ServiceAction.COMPACTION).run
    assert run is not None and gated.arrived.wait(30)
    return c, coordinator, gated, run


def test_a_run_of_a_replica_that_died_shows_as_lost(deployment):
    a, b = deployment()
    c, coordinator, gated, run = replica_with_a_held_compaction(a.settings)
    api_b = TestClient(create_app(b))
    assert api_b.get(f"/api/v1/runs/{run.run_id}").json()["state"] == "running"
    coordinator.close()  # the replica's session ends: its claims and its replica node go
    shown = wait_for(lambda: (r := api_b.get(f"/api/v1/runs/{run.run_id}").json())["state"] == LOST and r)
    assert shown["replica"] == coordinator.replica_id and "is gone" in shown["progress"]
    # it keeps what it recorded: the plan it scheduled (left inflight for another replica) and its start
    assert run.instant is not None and (shown["instant"], shown["key"]) == (run.instant, run.key), shown
    assert shown["started_at"] == run.created_at and shown["duration_s"] > 0, shown
    # the list comes from B's history view: lost there too within its refresh
    wait_for(
        lambda: run.run_id in [r["run_id"] for r in api_b.get("/api/v1/runs", params={"state": "lost"}).json()],
        VIEW_BOUND_S,
    )
    gated.gate.set()
    c.drain(2)


def test_a_cancel_request_for_a_replica_that_died_is_pruned(deployment):
    """A replica that dies between on-call's cancel (through another replica) and taking it leaves
    the request behind; once the history shows its run lost, any replica's cycle drops it. A request
    for a run still running stays (its replica takes it)."""
    a, b = deployment()
    c, coordinator, gated, dead = replica_with_a_held_compaction(a.settings)
    coordinator.close()  # C is gone before it could take the request below
    try:
        wait_for(lambda: (b.history.run(dead.run_id) or {}).get("state") == LOST, VIEW_BOUND_S)
        b.control.request_cancel(dead.run_id, coordinator.replica_id, "cancelled from the API (through B)")
        running = {"run_id": "r-live", "replica": a.replica_id, "started_at": time.time(), "state": "running"}
        a.history.record_run(running)  # as A records a run it starts
        b.control.request_cancel("r-live", a.replica_id, "kept: its run is running")
        assert set(b.control.cancel_requests()) == {dead.run_id, "r-live"}
        b.cycle()
        wait_for(lambda: set(b.control.cancel_requests()) == {"r-live"}, VIEW_BOUND_S)
    finally:
        gated.gate.set()
        c.drain(2)


def test_a_cancel_request_for_a_run_of_this_replica_is_not_pruned_by_its_own_cycle(deployment):
    """On-call cancels a run through another replica; the run's own replica prunes requests in its cycle
    before its runner took this one (`Runner._take_cancel_requests`, every second). Its history shows
    its own runs as lost (it asks only about other runs), so the prune dropped the request, and the
    run went on to complete (the e2e test's cancel step ended `succeeded`). The request must stay
    for the runner: the run ends cancelled."""
    a, _ = deployment()
    c, _, gated, run = replica_with_a_held_compaction(a.settings)
    try:
        # what A writes when on-call's cancel reaches it (`Daemon.cancel`); C's cycle comes at once, most
        # often before C's runner looks at the requests (every second)
        assert c.runner is not None
        c.control.request_cancel(run.run_id, c.runner.replica, "cancelled from the API (through A)")
        c.cycle()
        wait_for(lambda: run.stop is not None, VIEW_BOUND_S)  # C's runner took the request
        gated.gate.set()
        assert c.runner is not None and c.runner.wait_idle(60)
        assert run.outcome is Outcome.CANCELLED, (run.outcome, run.error)
        assert run.error == "cancelled from the API (through A)"
    finally:
        gated.gate.set()
        c.drain(2)


def test_paused_table_accepts_explicit_triggers(deployment):
    """Pause holds back the daemon's own scheduling, not on-call: a trigger on a paused table runs."""
    a, _ = deployment()
    api = TestClient(create_app(a))
    assert api.post("/api/v1/tables/orders/pause", headers=ONCALL).json()["paused"] is True
    started = api.post("/api/v1/tables/orders/trigger", json={"action": "compaction"}, headers=ONCALL)
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    done = wait_for(lambda: (r := api.get(f"/api/v1/runs/{run_id}").json())["state"] == "finished" and r)
    assert done["outcome"] == "succeeded"
    assert api.get("/api/v1/tables/orders").json()["paused"] is True


def test_run_reads_come_from_the_view_refreshed_in_the_background(zookeeper_server):
    """`/runs` reads the view, not ZooKeeper: another replica's run shows after a refresh, a run id the
    view does not hold yet is read from ZooKeeper, and the refresh thread keeps the view within its bound."""
    coordinator = ZooKeeperCoordinator(zookeeper_server.hosts, base_path=f"/lakeward-view-{uuid.uuid4().hex[:8]}")
    coordinator.start()
    writer = SharedHistory.for_coordinator(coordinator, HistorySettings())
    reader = SharedHistory.for_coordinator(coordinator, HistorySettings())
    try:
        run = {"run_id": "r1", "replica": "elsewhere", "started_at": time.time(), "state": "running"}
        reader.view.refresh()
        writer.record_run(run)
        assert reader.runs(10) == [], "read ZooKeeper instead of the view"
        assert reader.run("r1") is not None, "a run id missing from the view is read from ZooKeeper"
        reader.view.refresh()
        assert [(r["run_id"], r["state"]) for r in reader.runs(10)] == [("r1", LOST)]  # its replica is not live
        writer.record_run({**run, "state": "finished", "outcome": "succeeded"})
        reader.view.refresh()
        assert [(r["run_id"], r["state"]) for r in reader.runs(10)] == [("r1", "finished")]
        # a finished record is not read again by later refreshes (it does not change): only new ones are
        folder = f"{coordinator.base_path}/history/runs"
        coordinator.client.set(f"{folder}/{writer.runs_log.names()[0]}", b'{"run_id": "changed"}')
        writer.record_run({**run, "run_id": "r2", "started_at": run["started_at"] + 1, "state": "finished"})
        reader.view.refresh()
        assert [r["run_id"] for r in reader.runs(10)] == ["r2", "r1"]
        assert reader.runs(10, skip={"r2"})[0]["run_id"] == "r1"

        reader.start_view()
        writer.record_run({**run, "run_id": "r3", "started_at": run["started_at"] + 2, "state": "finished"})
        wait_for(lambda: reader.runs(1)[0]["run_id"] == "r3", VIEW_BOUND_S)
    finally:
        reader.stop_view()
        coordinator.close()


def test_retention_prunes_by_count_and_age(zookeeper_server):
    coordinator = ZooKeeperCoordinator(zookeeper_server.hosts, base_path=f"/lakeward-retention-{uuid.uuid4().hex[:8]}")
    coordinator.start()
    try:
        log = ZooKeeperRecordLog(coordinator, f"{coordinator.base_path}/history/runs", Retention(3, 3600, 1024))
        now = time.time()
        log.put(now - 7200, "old", {"n": 0})  # past max_age_s: the prune after this first write removes it
        assert log.get("old") is None
        for n in range(1, 6):
            log.put(now + n, f"r{n}", {"n": n})  # prunes again only after PRUNE_EVERY_S
        assert log.prune(now + 10) == 2  # r1, r2: beyond the newest 3
        assert [r["n"] for r in log.newest(10)] == [5, 4, 3]
        assert log.get("r4") == {"n": 4} and log.get("r1") is None
    finally:
        coordinator.close()


def test_history_requests_give_up_after_the_connection_timeout_while_zookeeper_is_down(make_zookeeper_server):
    """A run's end is written to the history from its thread, and the drain waits for that thread:
    with ZooKeeper unreachable a write must fail after the connection timeout, not wait for the server
    (kazoo queues requests until it reconnects; a drain hung forever on one)."""
    server = make_zookeeper_server()
    coordinator = ZooKeeperCoordinator(
        server.hosts, base_path=f"/lakeward-down-{uuid.uuid4().hex[:8]}", connection_timeout_s=1.0
    )
    coordinator.start()
    try:
        log = ZooKeeperRecordLog(coordinator, f"{coordinator.base_path}/history/runs", Retention(3, 3600, 1024))
        log.put(time.time(), "before", {"n": 0})
        server.stop()
        started = time.monotonic()
        with pytest.raises((KazooTimeoutError, KazooException)) as raised:
            log.put(time.time(), "during", {"n": 1})
        assert time.monotonic() - started < 5, f"waited {time.monotonic() - started:.1f}s: {raised.value!r}"
        started = time.monotonic()
        with pytest.raises((KazooTimeoutError, KazooException)):
            log.newest(10)
        assert time.monotonic() - started < 5
    finally:
        coordinator.close()


def test_a_record_is_capped_by_shortening_its_longest_texts():
    data = cap_record({"run_id": "x", "error": "e" * 10_000, "detail": "d" * 300}, 1024)
    assert len(data) <= 1024 and b"[cut]" in data and b'"run_id": "x"' in data
    assert b"d" * 300 in data  # shortened the longest first, and only as far as needed


def test_unmatched_overrides_are_reported_on_tables_and_in_the_log(tmp_path, caplog):
    mor_table(tmp_path / "orders")
    config = tmp_path / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  roots: [{{path: {tmp_path}, max_depth: 1}}]
  refresh_interval_s: 3600
policies:
  overrides:
    {tmp_path.name}.orders: {{compaction: {{enabled: false}}}}
    {tmp_path.name}.ordres: {{compaction: {{enabled: false}}}}
spark: {{engine: local}}
log: {{format: text}}
"""
    )
    daemon = Daemon(load_settings(config, env={}))
    with caplog.at_level("WARNING"):
        daemon.start()
        wait_for(lambda: daemon.ready)
    try:
        response = TestClient(create_app(daemon)).get("/api/v1/tables")
        assert [t["name"] for t in response.json()] == [f"{tmp_path.name}.orders"]
        assert response.headers["X-Lakeward-Unmatched-Overrides"] == f"{tmp_path.name}.ordres"
        assert f"policies.overrides name no discovered table: {tmp_path.name}.ordres" in caplog.text
        server = ApiServer(daemon, port=0)
        server.start()
        try:
            listed = CliRunner().invoke(cli_app, ["tables", "--url", f"http://127.0.0.1:{server.port}"])
        finally:
            server.stop()
        assert listed.exit_code == 0 and f"warning: policies.overrides name no table: {tmp_path.name}.ordres" in (
            listed.output
        )
    finally:
        daemon.drain(2)


def test_a_run_that_ends_while_zookeeper_is_down_is_recorded_once_it_is_back(tmp_path, make_zookeeper_server, caplog):
    """The end of a run could not be written while ZooKeeper was unreachable, and was never written
    again: every other replica showed the finished run as running for good (its replica came back
    under the same incarnation, so the record was not even shown as lost)."""
    server = make_zookeeper_server()
    mor_table(tmp_path / "orders")
    settings = settings_for(tmp_path, server.hosts, f"/lakeward-history-{uuid.uuid4().hex[:8]}")
    a = Daemon(settings)
    a.start()
    wait_for(lambda: a.ready)
    c, coordinator, gated, run = replica_with_a_held_compaction(settings)
    api_a = TestClient(create_app(a))
    try:
        assert api_a.get(f"/api/v1/runs/{run.run_id}").json()["state"] == "running"
        server.stop()
        gated.gate.set()  # the run ends (its claim is gone with the session) while nothing can be written
        wait_for(lambda: run.outcome is not None, 30)
        wait_for(lambda: f"could not write run {run.run_id}" in caplog.text, 30)  # after the connection timeout
        # While ZooKeeper is known down a cycle does not try again: each try waits out the connection timeout.
        wait_for(lambda: not c.coordinator.connected, 30)
        tries: list[object] = []
        record_run = c.history.record_run
        c.history.record_run = lambda record: (tries.append(record), record_run(record))[1]  # type: ignore[method-assign]
        c._record_unrecorded()
        assert tries == []
        server.start()
        wait_for(lambda: a.ready and c.ready, 60)
        shown = wait_for(lambda: (r := api_a.get(f"/api/v1/runs/{run.run_id}").json())["state"] == "finished" and r, 30)
        assert shown["outcome"] == run.outcome.value, shown
    finally:
        gated.gate.set()
        c.drain(2)
        a.drain(2)
