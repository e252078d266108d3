"""The daemon with Hudi 1.x tables (versions 8 and 9): served without a metadata table, read-only with one.

Discovery reads their timeline from `.hoodie/timeline/` and reports each table's version.
A v8/v9 table without a metadata table is served like a version 6 one (the v8 fixture);
one with a metadata-table index partition lakeward neither keeps nor drops (the v9 fixture, given
an expression index) stays read-only with the reason: `/tables` and
the CLI show `read-only: table version 9 with a metadata table (...)`, a metric counts
tables per version, and planning proposes nothing on it (not even the plans Hudi left
pending), so no run ever touches it. A real daemon (in-process coordinator, local engine)
over real fixture tables written by Hudi 1.x, next to a version 6 table lakeward writes.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from lakeward import Table
from lakeward.services.api import create_app
from lakeward.services.api.server import ApiServer
from lakeward.services.cli import app as cli_app
from lakeward.services.daemon import Daemon
from lakeward.services.discovery import DiscoveryCache, discover
from lakeward.services.model import TableRef
from lakeward.services.planning import Policy, plan_work, skip_reason
from lakeward.services.settings import load_settings
from tests.interop.compare import fail_on, snapshot_mismatches
from tests.support.fixture_tables import unzip_table, with_unmaintained_index

TOKEN = "s3cret-token"
#: Plans everything it can: a table that gets no work under it gets none under any policy.
EAGER = Policy(compaction_delta_commits=1, clean_every_commits=1, clustering_enabled=True, clustering_every_commits=1)


def wait_for(predicate: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _files(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_size for p in path.rglob("*") if p.is_file()}


@pytest.fixture
def tables(tmp_path: Path) -> dict[str, Path]:
    """A version 6 table lakeward wrote, a v9 MOR table with a pending compaction Hudi scheduled
    (its completed commit removed) and an index partition lakeward cannot maintain, and a v8
    copy-on-write table."""
    v6 = Table.create(str(tmp_path / "orders"), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    v6.bulk_insert(pa.table({"id": list(range(10)), "v": [0] * 10, "ts": [0] * 10}))
    v6.upsert(pa.table({"id": [1, 2], "v": [1, 1], "ts": [1, 1]}))
    v9 = with_unmaintained_index(unzip_table("mor/avro", "v9_txns_simple_meta", tmp_path / "fixtures"))
    compaction = next((v9 / ".hoodie" / "timeline").glob("*.compaction.requested")).name.split(".")[0]
    completed = next((v9 / ".hoodie" / "timeline").glob(f"{compaction}_*.commit"))
    completed.unlink()  # the compaction is pending now: a plan Hudi left for a table service
    v8 = unzip_table("cow", "v8_timebasedkeygen_nonhivestyle", tmp_path / "fixtures")
    return {"orders": tmp_path / "orders", "v9_txns": v9, "v8_cow": v8}


def test_discovery_reports_versions_and_reads_the_layout_2_timeline(tables):
    refs = [TableRef(name, str(path)) for name, path in tables.items()]
    cache = DiscoveryCache()
    result = discover(refs, cache=cache, workers=1)
    assert not result.problems
    states = {s.ref.name: s for s in result.states}
    assert {n: s.table_version for n, s in states.items()} == {"orders": 6, "v9_txns": 9, "v8_cow": 8}
    assert states["orders"].read_only is None
    assert states["v9_txns"].read_only is not None
    assert states["v9_txns"].read_only.startswith("read-only: table version 9 with a metadata table (column_stats,")
    assert "hoodie.metadata.enable=false" in states["v9_txns"].read_only
    assert states["v8_cow"].read_only is None
    for name in ("v9_txns", "v8_cow"):
        active = Table.open(str(tables[name])).timeline().active()
        assert states[name].completed_count == sum(1 for i in active if i.is_completed) > 0
        assert all(i.completion_time for i in states[name].completed)
    assert [(p.action.value, p.state) for p in states["v9_txns"].pending_plans] == [("compaction", "inflight")]
    # a second cycle with nothing changed reuses every state (two listings per layout-2 table)
    before = cache.listings
    discover(refs, cache=cache, workers=1)
    assert cache.hits == 3 and cache.listings - before == 1 + 2 + 2


def test_discovery_reports_a_version_10_table_as_a_problem_naming_the_version(tables):
    """A table of a version lakeward does not know is neither served nor planned: discovery
    reports it with the error that names its version, and the other tables are unaffected."""
    props = tables["v9_txns"] / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("hoodie.table.version=9", "hoodie.table.version=10"))
    result = discover([TableRef(name, str(path)) for name, path in tables.items()], cache=DiscoveryCache(), workers=1)
    assert [p.table.name for p in result.problems] == ["v9_txns"]
    assert "UnsupportedTableVersionError" in result.problems[0].error
    assert "hoodie.table.version=10" in result.problems[0].error
    assert sorted(s.ref.name for s in result.states) == ["orders", "v8_cow"]


def test_planning_skips_read_only_tables_with_a_reason(tables):
    refs = [TableRef(name, str(path)) for name, path in tables.items()]
    states = discover(refs, workers=1).states
    items = plan_work(states, EAGER, dt.datetime.now(dt.UTC))
    assert {i.table.name for i in items} == {"orders", "v8_cow"}, items
    by_name = {s.ref.name: s for s in states}
    assert skip_reason(by_name["orders"]) is None
    assert skip_reason(by_name["v8_cow"]) is None
    reason = skip_reason(by_name["v9_txns"])
    assert reason is not None and reason.startswith("read-only: table version 9 with a metadata table")
    assert reason.endswith(": lakeward does not plan or run table services on it")


def _settings(root: Path, tables: dict[str, Path]) -> Any:
    config = root / "lakeward.yaml"
    static = "\n".join(f"    - {{name: {name}, path: {path}}}" for name, path in tables.items())
    config.write_text(
        f"""
tables:
  static:
{static}
  refresh_interval_s: 3600
policies:
  defaults:
    compaction: {{enabled: true, max_delta_commits: 1}}
    clean: {{enabled: true, min_commits_between: 1}}
    clustering: {{enabled: true, every_n_commits: 1}}
spark: {{engine: local}}
http: {{port: 0, api_tokens: [{TOKEN}]}}
log: {{format: text}}
"""
    )
    return load_settings(config, env={})


@pytest.fixture
def daemon(tmp_path: Path, tables: dict[str, Path]) -> Iterator[Daemon]:
    d = Daemon(_settings(tmp_path, tables))
    d.start()
    wait_for(lambda: d.ready)
    yield d
    d.drain(5)


def test_the_daemon_serves_v8_without_and_never_runs_on_v9_with_a_metadata_table(daemon, tables):
    before = {name: _files(tables[name]) for name in ("v9_txns",)}
    # the test drives the cycles: a background cycle (started after each finished run) would add runs
    # still in flight when the runs are read below
    assert daemon.scheduler is not None
    daemon.scheduler.shutdown(wait=True)
    for _ in range(3):
        daemon.cycle()
    wait_for(lambda: daemon.runner is not None and not daemon.runner.running_keys())
    client = TestClient(create_app(daemon))
    shown = {t["name"]: t for t in client.get("/api/v1/tables").json()}
    assert shown["v9_txns"]["read_only"].startswith("read-only: table version 9 with a metadata table")
    assert shown["v9_txns"]["table_version"] == 9
    assert shown["v8_cow"]["read_only"] is None and shown["v8_cow"]["table_version"] == 8
    assert shown["orders"]["read_only"] is None and shown["orders"]["table_version"] == 6
    assert shown["v9_txns"]["healthy"] and shown["v9_txns"]["completed_instants"] > 0
    assert [p["action"] for p in shown["v9_txns"]["pending_plans"]] == ["compaction"]

    metrics = client.get("/metrics").text
    assert 'lakeward_tables_by_version{read_only="true",version="9"} 1.0' in metrics
    assert 'lakeward_tables_by_version{read_only="false",version="8"} 1.0' in metrics
    assert 'lakeward_tables_by_version{read_only="false",version="6"} 1.0' in metrics

    runs = client.get("/api/v1/runs").json()
    assert {r["table"] for r in runs} <= {"orders", "v8_cow"}, runs
    assert any(r["table"] == "orders" for r in runs), "the eager policy should have run something on orders"
    assert any(r["table"] == "v8_cow" for r in runs), "the eager policy should have run something on v8_cow"
    assert {r["outcome"] for r in runs if r["table"] == "v8_cow"} <= {"succeeded", "nothing_to_do"}, runs
    assert {name: _files(tables[name]) for name in ("v9_txns",)} == before
    v8_rows = Table.open(str(tables["v8_cow"])).read()
    fail_on(snapshot_mismatches(str(tables["v8_cow"])))
    assert v8_rows.num_rows > 0

    refused = client.post(
        "/api/v1/tables/v9_txns/trigger",
        json={"action": "compaction"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert refused.status_code in (400, 409, 422), refused.text
    assert "read-only: table version 9 with a metadata table" in refused.text


def test_cli_tables_shows_read_only(daemon, monkeypatch):
    server = ApiServer(daemon, port=0)
    server.start()
    try:
        monkeypatch.setenv("LAKEWARD_URL", f"http://127.0.0.1:{server.port}")
        result = CliRunner().invoke(cli_app, ["tables"])
        assert result.exit_code == 0, result.output
        lines = {line.split()[0]: line for line in result.output.splitlines()[1:]}
        assert "read-only: table version 9 with a metadata table" in lines["v9_txns"]
        assert "read-only" not in lines["v8_cow"]
        assert "read-only" not in lines["orders"]
    finally:
        server.stop()
