"""Explain: for each action, whether the daemon would run it now and every reason it does not, each
reason on a real table in a real daemon (in-process coordinator, local engine); the same reasons
are logged when a due action is skipped."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from lakeward import Table
from lakeward.core.locks import InProcessLockProvider
from lakeward.core.timeline import Action, new_instant_time
from lakeward.core.timeline.transitions import create_requested, transition_to_inflight
from lakeward.services.api import create_app
from lakeward.services.api.server import ApiServer
from lakeward.services.claims import OwnerInfo
from lakeward.services.cli import app as cli_app
from lakeward.services.daemon import Daemon
from lakeward.services.model import ServiceAction
from lakeward.services.planning import REASON_ORDER, Decision
from lakeward.services.settings import load_settings
from tests.services.test_daemon import wait_for
from tests.support.fixture_tables import unzip_table, with_unmaintained_index


def _rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"id": ids, "ts": [ts] * len(ids), "v": [f"v{ts}"] * len(ids)})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    orders = Table.create(str(tmp_path / "orders"), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    orders.bulk_insert(_rows(list(range(10)), 0))
    orders.upsert(_rows([1, 2], 1))  # two delta commits: under max_delta_commits=5
    customers = Table.create(str(tmp_path / "customers"), record_key="id", ordering_field="ts")
    customers.upsert(_rows([1, 2], 1))
    # with a metadata table partition lakeward cannot maintain: read-only
    with_unmaintained_index(unzip_table("cow", "v9_txns_simple_meta", tmp_path / "fixtures"))
    return tmp_path


def _daemon(root: Path, extra: str = "", max_running: int = 4) -> Daemon:
    # the data table's .hoodie (the metadata table has its own, deeper down)
    v9 = min(
        (p.parent.parent for p in (root / "fixtures").rglob("hoodie.properties") if p.parent.name == ".hoodie"),
        key=lambda path: len(path.parts),
    )
    config = root / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static:
    - path: {root / "orders"}
    - path: {root / "customers"}
    - {{name: v9, path: {v9}}}
  refresh_interval_s: 3600
policies:
  defaults:
    clean: {{enabled: false}}
    archival: {{enabled: true}}
{extra}
spark: {{engine: local}}
concurrency: {{max_running: {max_running}, max_running_per_table: 1}}
http: {{port: 0}}
log: {{format: text}}
"""
    )
    daemon = Daemon(load_settings(config, env={}))
    daemon.start()
    wait_for(lambda: daemon.ready)
    return daemon


@pytest.fixture
def daemon(root: Path) -> Iterator[Daemon]:
    d = _daemon(root)
    yield d
    d.drain(5)


def _one(decisions: list[Decision], action: str, new: bool = True) -> Decision:
    found = [d for d in decisions if d.action.value == action and (d.item is None or d.item.instant is None) == new]
    assert len(found) == 1, found
    return found[0]


def _codes(decision: Decision) -> list[str]:
    return [r.code.value for r in decision.reasons]


def test_explain_not_applicable_policy_disabled_and_not_due_with_numbers(daemon: Daemon) -> None:
    customers = daemon.explain("customers")
    assert _codes(_one(customers, "compaction")) == ["not_applicable"]
    assert "MERGE_ON_READ" in _one(customers, "compaction").reasons[0].message
    orders = daemon.explain("orders")
    compaction = _one(orders, "compaction")
    assert compaction.item is None and not compaction.runs and _codes(compaction) == ["not_due"]
    reason = compaction.reasons[0]
    assert (
        "2 delta commit(s) since the last compaction, fewer than policies.defaults.compaction.max_delta_commits=5"
        in (reason.message)
    )
    assert reason.evidence["delta_commits"] == 2 and reason.evidence["threshold"] == 5
    clean = _one(orders, "clean")  # disabled AND (merge-on-read, only delta commits) not due: both, in order
    assert _codes(clean) == ["policy_disabled", "not_due"]
    assert clean.reasons[0].evidence["key"] == "policies.defaults.clean.enabled"
    archival = _one(orders, "archival")
    assert _codes(archival) == ["not_due"] and "policies.defaults.archival.keep_max_commits=30" in (
        archival.reasons[0].message
    )
    assert [d.action.value for d in daemon.explain("orders", ServiceAction.CLEAN)] == ["clean"]


def test_explain_paused_by_on_call_and_by_policy_override(root: Path) -> None:
    d = _daemon(root, "  overrides:\n    customers: {paused: true}")
    try:
        Table.open(str(root / "orders")).schedule_compaction(force=True)
        d.set_paused("orders", True, "backfill")
        pending = _one(d.explain("orders"), "compaction", new=False)
        assert pending.item is not None and _codes(pending) == ["paused"]
        assert f"paused by on-call via {d.replica_id} since " in pending.reasons[0].message
        assert pending.reasons[0].message.endswith(": backfill")
        # the new plan: paused, and blocked by the pending one (which runs first)
        new = _one(d.explain("orders"), "compaction")
        assert {"paused", "blocked"} <= set(_codes(new))
        assert _codes(new).index("paused") < _codes(new).index("blocked")
        rollback = _one(d.explain("customers"), "rollback")
        assert "paused" in _codes(rollback)
        paused = next(r for r in rollback.reasons if r.code.value == "paused")
        assert paused.message == "paused by policy: policies.overrides.customers.paused=true"
    finally:
        d.drain(5)


def test_explain_quarantined_plan_with_its_failures_and_the_cycle_logs_it(
    daemon: Daemon, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    instant = Table.open(str(root / "orders")).schedule_compaction(force=True)
    key = f"orders/compaction/{instant}"
    daemon.control.quarantine(key, "OSError: disk full", 3, "replica-b")
    pending = _one(daemon.explain("orders"), "compaction", new=False)
    assert _codes(pending) == ["quarantined"] and not pending.runs
    reason = pending.reasons[0]
    assert reason.evidence["failures"] == 3 and reason.evidence["error"] == "OSError: disk full"
    assert f"{key} is quarantined after 3 failure(s) since " in reason.message
    assert f"lakeward release {key}" in reason.message
    with caplog.at_level(logging.INFO, logger="lakeward.services.daemon"):
        daemon.cycle()
        daemon.cycle()  # logged once while the reasons stay the same
    logged = [r.getMessage() for r in caplog.records if "not running due work" in r.getMessage()]
    assert logged == [f"not running due work {pending.summary()}"]
    assert daemon.runner is not None and not daemon.runner.running()


def test_explain_claimed_by_another_replica_since_the_claim(daemon: Daemon, root: Path) -> None:
    instant = Table.open(str(root / "orders")).schedule_compaction(force=True)
    key = f"orders/compaction/{instant}"
    daemon.set_paused("orders", True)  # no run of our own takes the plan meanwhile
    before = time.time()
    claim = daemon.coordinator.try_claim(key, OwnerInfo("replica-b", "host-b", 42, before))
    assert claim is not None
    daemon.set_paused("orders", False)
    pending = _one(daemon.explain("orders"), "compaction", new=False)
    assert _codes(pending) == ["claimed"]
    assert pending.reasons[0].evidence["replica"] == "replica-b"
    assert pending.reasons[0].message.startswith(f"{key} is claimed by replica replica-b since ")


def test_explain_blocked_by_a_pending_write_and_by_a_pending_plan(root: Path) -> None:
    # paused by policy: no run starts on its own while the test looks
    d = _daemon(
        root,
        "    paused: true\n    compaction: {max_delta_commits: 1}\n    clustering: {enabled: true, every_n_commits: 1}",
    )
    try:
        orders = Table.open(str(root / "orders"))
        time_ = new_instant_time(orders.timeline().latest_time(), orders.config.timeline_timezone)
        transition_to_inflight(orders.storage, create_requested(orders.storage, time_, Action.DELTA_COMMIT))
        decisions = d.explain("orders")
        compaction = _one(decisions, "compaction")
        assert compaction.item is not None  # due: 1 delta commit >= 1 ...
        assert _codes(compaction) == ["paused", "blocked"]  # ... but the table is paused and a write is pending
        blocked = compaction.reasons[1]
        assert blocked.evidence == {"pending_writes": [time_]} and time_ in blocked.message
        # a pending clustering plan blocks a new one (it runs first)
        Table.open(str(root / "customers")).bulk_insert(_rows([10, 11], 2))  # a second small file group
        plan = Table.open(str(root / "customers")).services["clustering"].schedule(force=True)
        assert plan is not None
        new = _one(d.explain("customers"), "clustering")
        assert "blocked" in _codes(new) and new.reasons[-1].evidence == {"pending_plans": [plan]}
        assert _one(d.explain("customers"), "clustering", new=False).item.instant == plan  # type: ignore[union-attr]
    finally:
        d.drain(5)


def test_explain_read_only_table_version(daemon: Daemon) -> None:
    decisions = daemon.explain("v9")
    assert decisions and all("read_only" in _codes(d) for d in decisions)
    reason = next(r for r in decisions[0].reasons if r.code.value == "read_only")
    assert (
        reason.evidence == {"table_version": 9} and "read-only: table version 9 with a metadata table" in reason.message
    )


def test_explain_lock_held_and_concurrency_limit_while_a_run_waits_for_the_lock(root: Path) -> None:
    d = _daemon(root, "    hoodie_options: {hoodie.write.lock.wait_time_ms: 20000}", max_running=1)
    plan = Table.open(str(root / "orders")).schedule_compaction(force=True)
    assert plan is not None
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        lock = InProcessLockProvider(str(root / "orders"))
        lock.acquire()
        held.set()
        release.wait(30)
        lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        submitted = d.trigger("orders", ServiceAction.COMPACTION)  # waits for the lock, in the only slot
        assert submitted.run is not None
        pending = _one(d.explain("orders"), "compaction", new=False)
        assert pending.item is not None and pending.item.instant == plan
        assert _codes(pending) == ["locked", "concurrency_limit"]
        locked, limit = pending.reasons
        assert locked.message.startswith("the table lock is held by another writer: timed out")
        assert "in-process lock of table" in locked.message
        assert "max_running=1" in limit.message and submitted.run.run_id in limit.message
    finally:
        release.set()
        holder.join()
        d.drain(5)
    # the probe gave the lock back: once the holder is gone, nothing is locked
    d2 = _daemon(root)
    try:
        assert all("locked" not in _codes(x) for x in d2.explain("orders"))
    finally:
        d2.drain(5)


def test_explain_api_and_cli(daemon: Daemon, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = TestClient(create_app(daemon))
    body = client.get("/api/v1/tables/orders/explain").json()
    assert body["table"] == "orders" and body["at"]
    by_action = {a["action"]: a for a in body["actions"] if a["instant"] is None}
    assert by_action["compaction"]["would_run"] is False
    assert by_action["compaction"]["reasons"][0]["code"] == "not_due"
    assert by_action["compaction"]["reasons"][0]["evidence"]["threshold"] == 5
    one = client.get("/api/v1/tables/orders/explain", params={"action": "clean"}).json()
    assert [a["action"] for a in one["actions"]] == ["clean"]
    assert client.get("/api/v1/tables/orders/explain", params={"action": "nope"}).status_code == 422
    assert client.get("/api/v1/tables/nope/explain").status_code == 404
    server = ApiServer(daemon, port=0)
    server.start()
    try:
        monkeypatch.setenv("LAKEWARD_URL", f"http://127.0.0.1:{server.port}")
        out = CliRunner().invoke(cli_app, ["explain", "orders", "compaction"])
        assert out.exit_code == 0, out.output
        assert out.output.startswith("compaction: not now (nothing to do)\n")
        assert "  - not_due: 2 delta commit(s) since the last compaction" in out.output
        disabled = CliRunner().invoke(cli_app, ["explain", "orders", "clean"])  # disabled, and not due
        assert disabled.output.startswith("clean: not now\n  - policy_disabled: "), disabled.output
        as_json = CliRunner().invoke(cli_app, ["explain", "orders", "--json"])
        assert '"code": "not_due"' in as_json.output
    finally:
        server.stop()


def test_reason_order_is_the_documented_one() -> None:
    assert [c.value for c in REASON_ORDER] == [
        "not_applicable",
        "policy_disabled",
        "not_due",
        "paused",
        "quarantined",
        "claimed",
        "blocked",
        "locked",
        "read_only",
        "unavailable",
        "concurrency_limit",
    ]
