"""Against a running daemon: `lakeward serve` exports every metric the dashboard and alerts use."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
import yaml

import lakeward
from tests.deploy.promql import exported_series
from tests.deploy.test_deploy_observability import DASHBOARD, RULES, dashboard_queries, rules_queries

CLI = [sys.executable, "-c", "from lakeward.services.cli import main; main()"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow  # ~10 s: a daemon process runs plans
def test_running_daemon_exports_every_metric_the_dashboard_and_alerts_use(tmp_path: Path) -> None:
    table_path = str(tmp_path / "orders")
    schema = pa.schema([("id", pa.int64()), ("amount", pa.float64())])
    table = lakeward.Table.create(table_path, record_key="id", schema=schema)
    table.upsert(pa.table({"id": [1, 2, 3], "amount": [1.0, 2.5, 4.0]}, schema=schema))

    port = _free_port()
    config = tmp_path / "lakeward.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "tables": {"static": [{"path": table_path}], "refresh_interval_s": 1},
                "spark": {"engine": "local"},
                "http": {"host": "127.0.0.1", "port": port},
                "log": {"format": "text"},
                "drain_time_s": 5,
            }
        ),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEWARD_")}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([*CLI, "serve", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        ready = False
        with httpx.Client(timeout=5) as client:
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    ready = client.get(f"{base}/readyz").status_code == 200
                except httpx.TransportError:
                    ready = False
                if ready:
                    break
                time.sleep(0.3)
            assert ready, f"/readyz never answered 200:\n{(tmp_path / 'serve.log').read_text()[-3000:]}"
            assert client.get(f"{base}/healthz").status_code == 200
            # Wait for a discovery cycle that saw the table.
            while True:
                text = client.get(f"{base}/metrics").text
                if any(line.startswith("lakeward_tables 1") for line in text.splitlines()):
                    break
                assert time.monotonic() < deadline, f"no discovery of the table in /metrics:\n{text[-3000:]}"
                time.sleep(0.5)
        served = exported_series(text)
        dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
        for where, names in dashboard_queries(dashboard) + rules_queries(rules):
            assert not names - served, f"{where}: not served at /metrics: {sorted(names - served)}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        finally:
            log.close()
    assert code == 0, f"lakeward serve exited {code} on SIGTERM"
