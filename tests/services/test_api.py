"""The HTTP API and the CLI client: every endpoint, auth required and refused, bad input -> clear 4xx.

A real daemon (in-process coordinator, local engine) behind the real FastAPI app; the CLI
tests go through a real uvicorn server on a free port.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from starlette.middleware.base import BaseHTTPMiddleware
from typer.testing import CliRunner

from lakeward import Table
from lakeward.core.locks import InProcessLockProvider
from lakeward.services.api import create_app
from lakeward.services.api.audit import AuditMiddleware
from lakeward.services.api.server import ApiServer
from lakeward.services.cli import _pause_cell
from lakeward.services.cli import app as cli_app
from lakeward.services.client import DaemonClient
from lakeward.services.daemon import Daemon
from lakeward.services.settings import load_settings

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def wait_for(predicate: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def make_tables(root: Path) -> tuple[Table, Table]:
    orders = Table.create(str(root / "orders"), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    orders.bulk_insert(pa.table({"id": list(range(20)), "v": [0] * 20, "ts": [0] * 20}))
    orders.upsert(pa.table({"id": [1, 2], "v": [1, 1], "ts": [1, 1]}))
    customers = Table.create(str(root / "customers"), record_key="id", ordering_field="ts")
    customers.upsert(pa.table({"id": [1, 2], "v": [1, 1], "ts": [1, 1]}))
    return orders, customers


def settings_for(root: Path, max_running: int = 4, **http: Any) -> Any:
    config = root / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static:
    - path: {root / "orders"}
    - path: {root / "customers"}
    - path: {root / "gone"}
  refresh_interval_s: 3600
policies:
  defaults:
    compaction: {{enabled: false}}
    clean: {{enabled: false}}
    archival: {{enabled: false}}
spark: {{engine: local}}
concurrency: {{max_running: {max_running}}}
http: {{port: 0, api_tokens: [{TOKEN}], protect_reads: {str(http.get("protect_reads", False)).lower()}}}
log: {{format: text}}
"""
    )
    return load_settings(config, env={})


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    make_tables(tmp_path)
    d = Daemon(settings_for(tmp_path))
    d.start()
    wait_for(lambda: d.ready)
    yield d
    d.drain(5)


@pytest.fixture
def client(daemon: Daemon) -> TestClient:
    return TestClient(create_app(daemon))


def test_health_ready_and_metrics_are_open(client, daemon):
    assert client.get("/healthz").json() == {"status": "ok", "replica": daemon.replica_id}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and "lakeward_tables 3.0" in metrics.text
    assert 'lakeward_table_failing{table="gone"} 1.0' in metrics.text


def test_tables_and_plans_show_state_problems_and_pending_plans(client, tmp_path):
    orders = Table.open(str(tmp_path / "orders"))
    instant = orders.schedule_compaction(force=True)
    tables = {t["name"]: t for t in client.get("/api/v1/tables").json()}
    assert set(tables) == {"orders", "customers", "gone"}
    assert tables["gone"]["healthy"] is False and "not a table" in tables["gone"]["problem"]
    assert tables["customers"]["table_type"] == "COPY_ON_WRITE"
    # its plans and timeline are unknown, not empty (`lakeward plans gone` said "no pending plans")
    for read in ("plans", "timeline"):
        refused = client.get(f"/api/v1/tables/gone/{read}")
        assert refused.status_code == 409 and "gone cannot be read" in refused.json()["detail"], read
    # The last cycle ran before the plan was written: the next cycle (or the per-table view) shows it.
    one = client.get("/api/v1/tables/orders").json()
    assert one["name"] == "orders" and one["runs"] == []
    assert instant is not None


def test_plans_after_a_cycle(client, daemon, tmp_path):
    orders = Table.open(str(tmp_path / "orders"))
    instant = orders.schedule_compaction(force=True)
    daemon.set_paused("orders", True)  # keep the plan pending while we look at it
    daemon.cycle()
    plans = client.get("/api/v1/tables/orders/plans").json()
    assert plans == [
        {
            "table": "orders",
            "action": "compaction",
            "instant": instant,
            "state": "requested",
            "key": f"orders/compaction/{instant}",
            "quarantined": False,
            "running_here": None,
            "run_id": None,
            "running_on": None,
        }
    ]
    assert [p["instant"] for p in client.get("/api/v1/plans").json()] == [instant]
    assert client.get("/api/v1/tables/orders").json()["paused_by"] == "on-call"


def test_trigger_runs_and_runs_endpoints_report_it(client, tmp_path):
    started = client.post("/api/v1/tables/orders/trigger", json={"action": "compaction"}, headers=AUTH)
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    done = wait_for(lambda: (r := client.get(f"/api/v1/runs/{run_id}").json())["state"] == "finished" and r)
    assert done["outcome"] == "succeeded" and done["records_written"] == 20 and done["trigger"] == "api"
    completed = [i.time for i in Table.open(str(tmp_path / "orders")).completed_instants()]
    assert done["instant"] in completed
    listed = client.get("/api/v1/runs", params={"state": "finished", "table": "orders"}).json()
    assert [r["run_id"] for r in listed] == [run_id]
    assert client.get("/api/v1/runs", params={"state": "running"}).json() == []
    claims = client.get("/api/v1/claims").json()
    assert {"orders/compaction/new", f"orders/compaction/{done['instant']}"} <= {e["key"] for e in claims["log"]}
    assert claims["held"] == []


def test_trigger_schedule_only_then_run_the_pending_plan(client, daemon, tmp_path):
    daemon.set_paused("orders", True)  # the daemon's own cycles would run the pending plan at once
    scheduled = client.post(
        "/api/v1/tables/orders/trigger", json={"action": "compaction", "mode": "schedule"}, headers=AUTH
    ).json()
    plan = wait_for(
        lambda: (r := client.get(f"/api/v1/runs/{scheduled['run_id']}").json())["state"] == "finished" and r
    )
    assert plan["outcome"] == "succeeded" and plan["detail"].startswith("scheduled")
    assert Table.open(str(tmp_path / "orders")).pending_compactions() == [plan["instant"]]
    ran = client.post(
        "/api/v1/tables/orders/trigger",
        json={"action": "compaction", "mode": "run", "instant": plan["instant"]},
        headers=AUTH,
    )
    assert ran.status_code == 202, ran.text
    wait_for(lambda: client.get(f"/api/v1/runs/{ran.json()['run_id']}").json()["state"] == "finished")
    assert client.get(f"/api/v1/runs/{ran.json()['run_id']}").json()["outcome"] == "succeeded"
    assert Table.open(str(tmp_path / "orders")).pending_compactions() == []


def test_trigger_at_the_concurrency_limit_is_409_naming_the_run_holding_the_slot(tmp_path):
    make_tables(tmp_path)
    daemon = Daemon(settings_for(tmp_path, max_running=1))
    daemon.start()
    try:
        wait_for(lambda: daemon.ready)
        client = TestClient(create_app(daemon))
        with InProcessLockProvider(str(tmp_path / "orders")):  # the compaction waits for the table lock
            first = client.post("/api/v1/tables/orders/trigger", json={"action": "compaction"}, headers=AUTH)
            assert first.status_code == 202, first.text
            refused = client.post("/api/v1/tables/customers/trigger", json={"action": "clean"}, headers=AUTH)
        assert refused.status_code == 409, refused.text
        detail = refused.json()["detail"]
        assert f"run {first.json()['run_id']} (orders/compaction/" in detail and "max_running=1" in detail, detail
        run = f"/api/v1/runs/{first.json()['run_id']}"
        wait_for(lambda: client.get(run).json()["state"] == "finished")
    finally:
        daemon.drain(5)


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        ("/api/v1/tables/nope/trigger", {"action": "clean"}, 404, "unknown table 'nope'"),
        ("/api/v1/tables/orders/trigger", {"action": "explode"}, 422, "action: Input should be"),
        ("/api/v1/tables/orders/trigger", {"action": "clean", "when": "now"}, 422, "when: Extra inputs"),
        ("/api/v1/tables/orders/trigger", {}, 422, "action: Field required"),
        ("/api/v1/tables/orders/trigger", {"action": "clean", "mode": "later"}, 422, "mode: Input should be"),
        ("/api/v1/tables/customers/trigger", {"action": "compaction"}, 409, "applies to MERGE_ON_READ"),
        ("/api/v1/tables/orders/trigger", {"action": "index_build"}, 409, "has no secondary index"),
        ("/api/v1/tables/orders/trigger", {"action": "change_tracking"}, 409, "with CDC off"),
        ("/api/v1/tables/orders/trigger", {"action": "archival", "mode": "schedule"}, 409, "has no plan"),
        # a caller's mistake, whatever the table: 422 (it was 409)
        ("/api/v1/tables/orders/trigger", {"action": "compaction", "dry_run": True}, 422, "compaction has no dry run"),
        (
            "/api/v1/tables/orders/trigger",
            {"action": "compaction", "mode": "run", "instant": "20200101000000000"},
            409,
            "no pending compaction plan 20200101000000000",
        ),
        ("/api/v1/tables/orders/trigger", {"action": "compaction", "mode": "run"}, 409, "no pending compaction"),
        ("/api/v1/runs/zzz/cancel", None, 404, "no running run 'zzz'"),
        ("/api/v1/quarantine/release", {"key": "orders/clean/1"}, 404, "is not quarantined"),
        ("/api/v1/tables/%2Fetc%2Fpasswd/pause", None, 404, "no such endpoint"),
        ("/api/v1/tables/..%2F..%2Fetc/pause", None, 404, "no such endpoint"),
        ("/api/v1/tables/etc.passwd/pause", None, 404, "unknown table 'etc.passwd'"),
    ],
)
def test_bad_input_gets_a_clear_4xx(client, path, body, status, message):
    response = client.post(path, json=body, headers=AUTH)
    assert response.status_code == status, response.text
    assert message in response.json()["detail"], response.json()


def test_a_422_answer_does_not_echo_a_huge_input(client):
    reason = "x" * 900_000  # under the 1 MiB cap on a request body
    response = client.post("/api/v1/tables/orders/pause", json={"reason": reason}, headers=AUTH)
    assert response.status_code == 422, response.text[:500]
    assert "reason: String should have at most 500 characters" in response.json()["detail"]
    assert len(response.content) < 2_000, len(response.content)
    assert "(900000 characters)" in response.text


def test_reads_of_unknown_things_are_404(client):
    assert client.get("/api/v1/tables/nope").status_code == 404
    assert client.get("/api/v1/tables/nope/plans").status_code == 404
    assert client.get("/api/v1/runs/nope").status_code == 404
    assert client.get("/api/v1/runs", params={"table": "nope"}).status_code == 404
    assert client.get("/api/v1/runs", params={"state": "sideways"}).status_code == 422


@pytest.mark.parametrize(
    "path, body",
    [
        ("/api/v1/tables/orders/trigger", {"action": "clean"}),
        ("/api/v1/tables/orders/pause", None),
        ("/api/v1/tables/orders/resume", None),
        ("/api/v1/runs/abc/cancel", None),
        ("/api/v1/quarantine/release", {"key": "orders/clean/1"}),
    ],
)
def test_mutating_calls_need_a_configured_token(client, path, body):
    missing = client.post(path, json=body)
    assert missing.status_code == 401 and "Bearer" in missing.json()["detail"]
    wrong = client.post(path, json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403 and "not one of http.api_tokens" in wrong.json()["detail"]


def test_pause_resume_and_quarantine_release(client, daemon):
    assert client.post("/api/v1/tables/orders/pause", json={"reason": "incident 42"}, headers=AUTH).json() == {
        "table": "orders",
        "paused": True,
        "paused_by": "on-call",
        "changed": True,
    }
    paused = client.get("/api/v1/tables/orders").json()
    assert paused["paused"] is True
    assert (paused["pause_reason"], paused["paused_via"]) == ("incident 42", daemon.replica_id)
    assert _pause_cell(paused).startswith(f"by on-call: incident 42 (via {daemon.replica_id}, since ")
    assert daemon.control.paused()["orders"].reason == "incident 42"
    assert client.post("/api/v1/tables/orders/resume", headers=AUTH).json()["changed"] is True
    daemon.control.quarantine("orders/compaction/20260101000000000", "failed 3 time(s)", 3, "r")
    assert [q["key"] for q in client.get("/api/v1/quarantine").json()] == ["orders/compaction/20260101000000000"]
    released = client.post(
        "/api/v1/quarantine/release", json={"key": "orders/compaction/20260101000000000"}, headers=AUTH
    )
    assert released.json() == {"key": "orders/compaction/20260101000000000", "released": True}
    assert client.get("/api/v1/quarantine").json() == []


def test_protected_reads_and_disabled_mutations(tmp_path):
    make_tables(tmp_path)
    daemon = Daemon(settings_for(tmp_path, protect_reads=True))
    daemon.start()
    try:
        client = TestClient(create_app(daemon))
        assert client.get("/api/v1/tables").status_code == 401
        assert client.get("/api/v1/tables", headers=AUTH).status_code == 200
        assert client.get("/healthz").status_code == 200 and client.get("/metrics").status_code == 200
    finally:
        daemon.drain(5)
    config = tmp_path / "no-tokens.yaml"
    config.write_text(f"tables: {{static: [{{path: {tmp_path / 'orders'}}}]}}\nspark: {{engine: local}}\n")
    bare = Daemon(load_settings(config, env={}))
    bare.start()
    try:
        refused = TestClient(create_app(bare)).post("/api/v1/tables/orders/pause", headers=AUTH)
        assert refused.status_code == 403 and "no http.api_tokens are configured" in refused.json()["detail"]
    finally:
        bare.drain(5)


def test_readyz_turns_503_when_draining(client, daemon):
    daemon.drain(5)
    response = client.get("/readyz")
    assert response.status_code == 503 and "draining" in response.json()["reasons"]


def test_openapi_lists_every_endpoint(client):
    paths = set(client.get("/openapi.json").json()["paths"])
    assert {
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/v1/tables",
        "/api/v1/tables/{name}",
        "/api/v1/tables/{name}/plans",
        "/api/v1/plans",
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/tables/{name}/trigger",
        "/api/v1/tables/{name}/pause",
        "/api/v1/tables/{name}/resume",
        "/api/v1/runs/{run_id}/cancel",
        "/api/v1/quarantine",
        "/api/v1/quarantine/release",
        "/api/v1/claims",
    } <= paths


def test_cli_talks_to_a_running_daemon(daemon, tmp_path, monkeypatch):
    server = ApiServer(daemon, port=0)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        monkeypatch.setenv("LAKEWARD_URL", url)
        cli = CliRunner()
        tables = cli.invoke(cli_app, ["tables"])
        assert tables.exit_code == 0 and "orders" in tables.output and "FAILING" in tables.output
        refused = cli.invoke(cli_app, ["trigger", "compaction", "orders"])
        assert refused.exit_code == 2 and "401" in refused.output
        started = cli.invoke(cli_app, ["trigger", "compaction", "orders", "--token", TOKEN])
        assert started.exit_code == 0, started.output
        run_id = started.output.split()[2].rstrip(":")
        wait_for(lambda: daemon.runner and (r := daemon.runner.get(run_id)) and r.state == "finished")
        runs = cli.invoke(cli_app, ["runs", "--json"])
        assert runs.exit_code == 0 and '"outcome": "succeeded"' in runs.output
        paused = cli.invoke(cli_app, ["pause", "orders", "--token", TOKEN, "--reason", "backfill"])
        assert paused.exit_code == 0 and daemon.control.paused()["orders"].reason == "backfill"
        listed = cli.invoke(cli_app, ["tables"]).output
        assert f"by on-call: backfill (via {daemon.replica_id}, since " in listed, listed
        assert cli.invoke(cli_app, ["resume", "orders", "--token", TOKEN]).exit_code == 0
        assert cli.invoke(cli_app, ["plans", "orders"]).output == "no pending plans\n"  # as `plans PATH`
        unknown = cli.invoke(cli_app, ["plans", "nope"])
        assert unknown.exit_code == 2 and "unknown table 'nope'" in unknown.output
        assert cli.invoke(cli_app, ["cancel", "zzz", "--token", TOKEN]).exit_code == 2
        assert cli.invoke(cli_app, ["quarantine"]).output == "no quarantined plans\n"  # listings: "no ..."
    finally:
        server.stop()


@contextlib.contextmanager
def served_daemon(config: Path) -> Iterator[tuple[Daemon, str]]:
    """A started daemon of `config` and the URL of its API; stopped and drained after."""
    d = Daemon(load_settings(config, env={}))
    d.start()
    server = ApiServer(d, port=0)
    server.start()
    try:
        yield d, f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        d.drain(5)


def discovered_tables(root: Path, folders: list[str], table_version: int | None = None) -> Path:
    """A table in each of `folders` under `root / "ingest"`, and a daemon config discovering them."""
    for folder in folders:
        table = Table.create(str(root / "ingest" / folder), record_key="id", table_version=table_version)
        table.upsert(pa.table({"id": [1], "v": [1]}))
    config = root / "lakeward.yaml"
    config.write_text(
        f"tables: {{roots: [{{path: {root / 'ingest'}}}], refresh_interval_s: 3600}}\n"
        f"spark: {{engine: local}}\nhttp: {{port: 0, api_tokens: [{TOKEN}]}}\nlog: {{format: text}}\n"
    )
    return config


def test_resume_answers_the_truth_about_a_pause_by_policy(tmp_path):
    # A pause by policy stays: resume says so (it answered paused: false and the CLI "resumed").
    make_tables(tmp_path)
    settings_for(tmp_path)  # writes the file; then orders is paused by policy
    config = tmp_path / "lakeward.yaml"
    archival = "    archival: {enabled: false}\n"
    config.write_text(config.read_text().replace(archival, archival + "  overrides: {orders: {paused: true}}\n"))
    with served_daemon(config) as (_, url):
        http = DaemonClient(url, TOKEN)
        assert http.resume("orders") == {"table": "orders", "paused": True, "paused_by": "policy", "changed": False}
        assert http.resume("customers") == {"table": "customers", "paused": False, "paused_by": None, "changed": False}
        cli = CliRunner()
        by_policy = cli.invoke(cli_app, ["resume", "orders", "--token", TOKEN, "--url", url])
        assert by_policy.exit_code == 0, by_policy.output
        assert "resumed" not in by_policy.output and "stays paused by policy" in by_policy.output
        assert "policies.overrides.orders.paused" in by_policy.output
        not_paused = cli.invoke(cli_app, ["resume", "customers", "--token", TOKEN, "--url", url])
        assert not_paused.exit_code == 0 and not_paused.output == "customers was not paused\n", not_paused.output
        cli.invoke(cli_app, ["pause", "orders", "--token", TOKEN, "--url", url])
        lifted = cli.invoke(cli_app, ["resume", "orders", "--token", TOKEN, "--url", url])
        assert "on-call pause lifted" in lifted.output and "stays paused by policy" in lifted.output, lifted.output
        cli.invoke(cli_app, ["pause", "customers", "--token", TOKEN, "--url", url])
        resumed = cli.invoke(cli_app, ["resume", "customers", "--token", TOKEN, "--url", url])
        assert resumed.output == "customers resumed\n", resumed.output
        assert http.tables() and {t["name"]: t["paused"] for t in http.tables()}["orders"] is True
        http.close()


def test_cli_reports_an_unreachable_daemon(monkeypatch):
    result = CliRunner().invoke(cli_app, ["tables", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "cannot reach the daemon" in result.output


def test_reads_pass_no_http_middleware_of_starlette(daemon):
    """The audit middleware is plain ASGI: Starlette's `BaseHTTPMiddleware` wrapped every request, reads
    included, in a task, memory streams and a streamed response (a third of the API's CPU at 200 rps)."""
    app = create_app(daemon)
    assert [m.cls for m in app.user_middleware if m.cls is BaseHTTPMiddleware] == []
    assert AuditMiddleware in [m.cls for m in app.user_middleware]


def test_a_mutating_call_is_in_the_audit_log_before_it_is_answered(daemon, monkeypatch):
    """An answered call is audited: its entry is written before the answer goes out (written after it, a
    read right after the answer missed it, and a replica dying right after answering lost it)."""
    write = daemon.history.record_call

    def slow_write(entry: dict[str, Any]) -> None:  # a ZooKeeper slow to take the write
        time.sleep(1.0)
        write(entry)

    monkeypatch.setattr(daemon.history, "record_call", slow_write)
    server = ApiServer(daemon, port=0)
    server.start()
    try:
        with DaemonClient(f"http://127.0.0.1:{server.port}", TOKEN) as api:
            api.pause("orders", "audited first")
            audited = [(e["route"], e["target"], e["status"]) for e in api.audit(5)]
    finally:
        server.stop()
    assert audited[:1] == [("/api/v1/tables/{name}/pause", "orders", 200)], audited


def test_the_client_reaches_discovered_tables_whose_names_need_percent_encoding(tmp_path):
    # Discovered tables are named after their folders: '#', '?' and '%' reached the URL path raw.
    names = ["x#y", "q?z", "a%2Fb", "sp ace"]
    with served_daemon(discovered_tables(tmp_path, names)) as (_, url):
        with DaemonClient(url, TOKEN) as http:
            wait_for(lambda: len(http.tables()) == len(names))
            for folder in names:
                name = f"ingest.{folder}"
                assert http.table(name)["name"] == name
                assert http.plans(name) == []
                assert http.explain(name)["table"] == name
                assert http.health(name)["table"] == name
                assert http.pause(name, "why")["paused"] is True
                assert http.resume(name)["changed"] is True
            cli = CliRunner()
            for folder in names:
                paused = cli.invoke(cli_app, ["pause", f"ingest.{folder}", "--token", TOKEN, "--url", url])
                assert paused.exit_code == 0, paused.output
            assert {t["name"] for t in http.tables() if t["paused"]} == {f"ingest.{f}" for f in names}


def test_an_oversized_body_is_refused_unread_and_unauthenticated_calls_do_not_fill_the_audit_log(daemon):
    """A 200 MiB POST without a token took a minute of CPU (the body was built by repeated `+=`) and a GiB
    of memory before its 401; and 401 calls were audited, so anyone could push every real entry out of the
    capped audit log."""
    cap = 1024 * 1024  # the documented cap on a request body
    server = ApiServer(daemon, port=0)
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        with DaemonClient(base, TOKEN) as api:
            api.pause("orders", "kept in the audit log")
        big = httpx.post(f"{base}/api/v1/tables/orders/pause", content=b"x" * (cap + 1), timeout=30)
        assert big.status_code == 413 and "request body over" in big.text, big.text

        def chunks() -> Iterator[bytes]:  # no Content-Length: the cap holds while the body streams in
            for _ in range(cap // 65536 + 2):
                yield b"y" * 65536

        streamed = httpx.post(f"{base}/api/v1/tables/orders/pause", content=chunks(), timeout=30)
        assert streamed.status_code == 413, streamed.text
        for _ in range(20):  # not recorded: so they cannot push real entries out of the capped log
            assert httpx.post(f"{base}/api/v1/tables/orders/resume", timeout=30).status_code == 401
        with DaemonClient(base, TOKEN) as api:
            audited = [(e["route"], e["status"]) for e in api.audit(10)]
    finally:
        server.stop()
    assert ("/api/v1/tables/{name}/pause", 200) in audited, audited
    assert all(status != 401 for _, status in audited), audited


def test_the_cli_prints_names_and_reasons_with_control_characters_escaped(tmp_path):
    """A pause reason (any token holder can set one) reached the on-call terminal raw: a newline forged a
    row of `lakeward tables`, escape sequences cleared the screen and set the window title."""
    hostile = "x\nlake.fake  MERGE_ON_READ  0  no  ok\x1b[2J\x1b]0;pwned\x07"
    with served_daemon(discovered_tables(tmp_path, ["a", "b"])) as (d, url):
        wait_for(lambda: len(d.tables()) == 2)
        answer = httpx.post(f"{url}/api/v1/tables/ingest.a/pause", json={"reason": hostile}, headers=AUTH)
        assert answer.status_code == 200, answer.text
        result = CliRunner().invoke(cli_app, ["tables", "--url", url])
    assert result.exit_code == 0, result.output
    lines = result.output.rstrip("\n").split("\n")
    assert len(lines) == 3, lines  # the header and the two tables: no forged row
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "\\n" in lines[1] and "\\x1b[2J" in lines[1]  # shown, escaped


def test_pausing_a_paused_table_says_the_first_pause_and_its_reason_stay(tmp_path):
    """The API keeps the first pause (changed: false) but `lakeward pause T --reason new` printed "T paused",
    as if the new reason were recorded."""
    with served_daemon(discovered_tables(tmp_path, ["a"])) as (d, url):
        wait_for(lambda: len(d.tables()) == 1)
        env = {"LAKEWARD_URL": url, "LAKEWARD_API_TOKEN": TOKEN}
        first = CliRunner().invoke(cli_app, ["pause", "ingest.a", "--reason", "incident 1"], env=env)
        assert first.exit_code == 0 and first.output.strip() == "ingest.a paused", first.output
        again = CliRunner().invoke(cli_app, ["pause", "ingest.a", "--reason", "incident 2"], env=env)
        assert again.exit_code == 0, again.output
        assert "already paused" in again.output and "incident 1" in again.output, again.output
        assert d.table("ingest.a").to_dict()["pause_reason"] == "incident 1"
