"""The API's read endpoints answer from what the daemon already holds: none of them waits on
ZooKeeper (issue 20, the API under load). A real daemon with a real ZooKeeper server, which is
then frozen (SIGSTOP: its connections stay open and nothing answers, as a server stuck behind
slow disk syncs): every read the benchmark's load uses must still be answered.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
import yaml

from lakeward import Table
from lakeward.services.api.server import ApiServer
from lakeward.services.control import ZooKeeperControlStore
from lakeward.services.daemon import Daemon
from lakeward.services.settings import load_settings
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.zookeeper

TOKEN = "frozen-zookeeper-test-token"
#: The reads `benchmarks/api_latency.py` drives (with `/readyz`, which may say 503 then: it answers).
READS = ("/healthz", "/metrics", "/api/v1/tables", "/api/v1/plans", "/api/v1/runs?limit=100")


def daemon_on(tmp_path: Path, server: ZooKeeperServer) -> Daemon:
    """A daemon on one table; its ZooKeeper session (60 s) outlives the few seconds the server is frozen."""
    Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ").bulk_insert(
        pa.table({"id": [1, 2], "v": [0, 0], "ts": [0, 0]})
    )
    settings = {
        "tables": {"static": [{"path": str(tmp_path / "t")}], "refresh_interval_s": 0.2},
        "zookeeper": {"hosts": server.hosts, "chroot": "/frozen", "session_timeout_s": 60, "connection_timeout_s": 2},
        "spark": {"engine": "local"},
        "http": {"host": "127.0.0.1", "port": 0, "api_tokens": [{"name": "oncall", "token": TOKEN}]},
        "log": {"format": "text", "level": "WARNING"},
        "drain_time_s": 2,
    }
    config = tmp_path / "lakeward.yaml"
    config.write_text(yaml.safe_dump(settings))
    return Daemon(load_settings(config, env={}))


def test_api_reads_answer_while_zookeeper_answers_nothing(tmp_path, make_zookeeper_server):
    server = make_zookeeper_server()
    daemon = daemon_on(tmp_path, server)
    daemon.start()
    api = ApiServer(daemon)
    api.start()
    pid = server._process.pid if server._process is not None else None
    assert pid is not None
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{api.port}", timeout=10.0) as client:
            wait_until(lambda: client.get("/readyz").status_code == 200, 60, "the replica to be ready")
            assert (
                client.post(
                    "/api/v1/tables/t/pause",
                    json={"reason": "before the freeze"},
                    headers={"Authorization": f"Bearer {TOKEN}"},
                ).status_code
                == 200
            )
            before = {path: client.get(path).status_code for path in READS}
            assert before == dict.fromkeys(READS, 200)

            os.kill(pid, signal.SIGSTOP)
            try:
                # Past the age at which the daemon used to read the pause and quarantine folders again
                # inside a request: now a background read is stuck on the frozen server instead.
                time.sleep(ZooKeeperControlStore.CACHE_S * 3)
                during = {path: client.get(path).status_code for path in READS}
                tables = client.get("/api/v1/tables").json()
                ready = client.get("/readyz")
            finally:
                os.kill(pid, signal.SIGCONT)
            assert during == dict.fromkeys(READS, 200)
            assert [(t["name"], t["paused"], t["pause_reason"]) for t in tables] == [("t", True, "before the freeze")]
            assert ready.status_code in (200, 503)  # answered: readiness may already see the lost pings
    finally:
        api.stop()
        daemon.drain()
