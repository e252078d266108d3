"""Table health in the daemon: computed at discovery with the table's configured options and the
settings' health policy, cached per cycle, exported as metrics, served by the API and the CLI."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
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
from lakeward.services.settings import load_settings
from tests.core.metadata_table.test_lag import lagging_table


def _rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"id": ids, "ts": [ts] * len(ids), "v": [f"v{ts}"] * len(ids)})


def _settings(root: Path, extra: str = "") -> Any:
    config = root / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static:
    - path: {root / "orders"}
    - path: {root / "customers"}
    - path: {root / "gone"}
  refresh_interval_s: 3600
  health_refresh_s: 3600
policies:
  defaults:
    paused: true
    clean: {{commits_retained: 2}}
    archival: {{keep_min_commits: 5, keep_max_commits: 8}}
  overrides:
    orders:
      health: {{thresholds: {{max_log_files: 3}}, weights: {{compaction: 85}}}}
spark: {{engine: local}}
http: {{port: 0}}
log: {{format: text}}
{extra}
"""
    )
    return load_settings(config, env={})


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    orders = Table.create(str(tmp_path / "orders"), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    orders.upsert(_rows([1, 2], 0))
    for ts in range(1, 6):  # 5 log files on one file group: over the override's 3, under the default 10
        orders.upsert(_rows([1], ts))
    customers = Table.create(str(tmp_path / "customers"), record_key="id", ordering_field="ts")
    for ts in range(10):  # 10 completed commits: over the configured archival.keep_max_commits of 8
        customers.upsert(_rows([1, 2], ts))
    d = _started(tmp_path)
    yield d
    d.drain(5)


def _started(root: Path) -> Daemon:
    """A daemon over `root`'s tables after its first cycles (no other runs: refresh_interval_s 3600)."""
    d = Daemon(_settings(root))
    d.start()
    deadline = time.monotonic() + 30
    while d.health("orders").report is None:  # the scheduler's first cycle ends with the health
        assert time.monotonic() < deadline, "no health after 30 s"
        time.sleep(0.05)
    d.cycle()  # and no other cycle runs (refresh_interval_s: 3600): the test's cycles are the only ones
    return d


def test_health_daemon_scores_tables_with_their_policy_and_options(daemon: Daemon) -> None:
    orders = daemon.health("orders")
    assert orders.report is not None and orders.error is None
    codes = {f.code: f for f in orders.report.findings}
    assert "compaction_behind" in codes  # 5 log files > the override's max_log_files=3
    assert "3 log files" in codes["compaction_behind"].message
    # compaction (weight 85 of 180) is critical, the metadata table's factor (weight 20) healthy: round(100 * 95 / 180)
    assert orders.report.score == 53
    customers = daemon.health("customers")
    assert customers.report is not None
    snap = customers.report.snapshot
    # opened with the daemon's options: the policy's retention and archival limits, not Hudi's defaults
    assert snap.cleaner_retention == "hoodie.cleaner.commits.retained=2"
    assert (snap.keep_min_commits, snap.keep_max_commits) == (5, 8)
    assert "archival_backlog" in {f.code for f in customers.report.findings}
    gone = daemon.health("gone")
    assert gone.report is None and gone.error is not None and "not a table" in gone.error


def test_health_daemon_reuses_the_snapshot_until_the_table_changes(daemon: Daemon, tmp_path: Path) -> None:
    first = daemon.health("orders").report
    assert first is not None
    daemon.cycle()
    reused = daemon.health("orders").report.snapshot  # type: ignore[union-attr]
    assert reused.taken_at == first.snapshot.taken_at  # not listed again (its ages grow with the clock)
    Table.open(str(tmp_path / "orders")).upsert(_rows([2], 9))
    daemon.cycle()
    again = daemon.health("orders").report
    assert again is not None and again.snapshot.taken_at > first.snapshot.taken_at
    assert again.snapshot.live_files > first.snapshot.live_files


def test_health_daemon_metrics_api_and_unknown_table(daemon: Daemon) -> None:
    client = TestClient(create_app(daemon))
    text = client.get("/metrics").text
    assert 'lakeward_table_health_score{table="orders"} 53.0' in text
    assert 'lakeward_table_health_factor_penalty{factor="compaction",table="orders"} 1.0' in text
    assert 'lakeward_table_health_factor_penalty{factor="small_files",table="orders"} 0.0' in text
    assert 'lakeward_table_health_findings{severity="critical",table="orders"} 1.0' in text
    assert 'table="gone"' not in "\n".join(line for line in text.splitlines() if "health" in line)

    one = client.get("/api/v1/tables/orders/health")
    assert one.status_code == 200
    body = one.json()
    assert body["table"] == "orders" and body["score"] == 53 and body["error"] is None
    assert body["factors"]["compaction"] == 1.0
    assert body["findings"][0]["code"] == "compaction_behind" and body["findings"][0]["severity"] == "critical"
    assert body["log_files"]["max"] == 5.0 and body["table_version"] == 6
    assert "log_files_per_group" not in body  # the per-file-group lists stay out of the API
    every = {h["table"]: h for h in client.get("/api/v1/health").json()}
    assert set(every) == {"orders", "customers", "gone"}
    assert every["gone"]["score"] is None and "not a table" in every["gone"]["error"]
    missing = client.get("/api/v1/tables/nope/health")
    assert missing.status_code == 404


def test_health_cli_by_name_all_and_by_path(daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = ApiServer(daemon, port=0)
    server.start()
    try:
        monkeypatch.setenv("LAKEWARD_URL", f"http://127.0.0.1:{server.port}")
        cli = CliRunner()
        every = cli.invoke(cli_app, ["health"])
        assert every.exit_code == 0, every.output
        lines = {line.split()[0]: line for line in every.output.splitlines()[1:]}
        assert every.output.splitlines()[0].split() == ["name", "score", "worst", "finding"]
        assert "53" in lines["orders"] and "critical: 1 file group(s) of 1 have > 3 log files" in lines["orders"]
        assert "not scored" in lines["gone"]
        one = cli.invoke(cli_app, ["health", "orders"])
        assert one.exit_code == 0 and "orders: score 53/100" in one.output
        assert "[critical] compaction_behind:" in one.output and "-> " in one.output
        as_json = cli.invoke(cli_app, ["health", "customers", "--json"])
        assert '"cleaner_retention": "hoodie.cleaner.commits.retained=2"' in as_json.output
        assert cli.invoke(cli_app, ["health", "nope"]).exit_code == 2
    finally:
        server.stop()
    by_path = CliRunner().invoke(
        cli_app, ["health", str(tmp_path / "orders"), "-o", "hoodie.cleaner.commits.retained=4"]
    )
    assert by_path.exit_code == 0, by_path.output
    assert "orders: score 100/100" in by_path.output and "no findings" in by_path.output  # default policy: 10 logs


def test_health_daemon_serves_the_metadata_table_lag(tmp_path: Path) -> None:
    table, missed = lagging_table(tmp_path / "lagging", 9)
    config = tmp_path / "lag.yaml"
    config.write_text(
        f"tables: {{static: [{{path: {table.path}}}], refresh_interval_s: 3600}}\n"
        "spark: {engine: local}\nhttp: {port: 0}\nlog: {format: text}\n"
    )
    d = Daemon(load_settings(config, env={}))
    d.start()
    try:
        deadline = time.monotonic() + 30
        while d.health("lagging").report is None:
            assert time.monotonic() < deadline, "no health after 30 s"
            time.sleep(0.05)
        client = TestClient(create_app(d))
        body = client.get("/api/v1/tables/lagging/health").json()
        assert body["metadata_lag_instants"] == 2 and body["metadata_lag_oldest"] == missed[0]
        assert body["factors"]["metadata_table"] == 0.5
        assert any(f["code"] == "metadata_table_lag" for f in body["findings"])
        assert 'lakeward_table_metadata_lag_instants{table="lagging"} 2.0' in client.get("/metrics").text
    finally:
        d.drain(5)


def test_health_daemon_flags_a_table_it_cannot_read(daemon: Daemon, tmp_path: Path) -> None:
    """A table whose commit metadata is damaged is no healthy table: the API says why it has no score,
    and `lakeward_table_failing` is 1 for it (the LakewardTableUnreadable alert's input), 0 for the
    tables that were read."""
    client = TestClient(create_app(daemon))
    assert 'lakeward_table_failing{table="customers"} 0.0' in client.get("/metrics").text
    # written elsewhere and copied: this process has not read the copy's commit metadata (it caches it)
    damaged = Table.create(str(tmp_path / "written"), record_key="id", ordering_field="ts")
    for ts in range(2):
        damaged.upsert(_rows([1, 2], ts))
    shutil.copytree(tmp_path / "written", tmp_path / "gone")  # a configured table, absent so far
    first = min((tmp_path / "gone" / ".hoodie").glob("*.commit"))
    first.write_text("{not json")
    daemon.cycle()
    health = client.get("/api/v1/tables/gone/health").json()
    assert health["score"] is None and first.name in health["error"], health
    text = client.get("/metrics").text
    assert 'lakeward_table_failing{table="gone"} 1.0' in text
    assert 'lakeward_table_failing{table="customers"} 0.0' in text
    assert 'lakeward_table_health_score{table="gone"}' not in text
