"""`/readyz` answers 503, with a reason naming ZooKeeper, while the replica cannot reach its lock
service, and 200 again once it can (real ZooKeeper servers, stopped and started; issue 18, item 3).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from lakeward import Table
from lakeward.services.api import create_app
from lakeward.services.api.server import ApiServer
from lakeward.services.daemon import Daemon
from lakeward.services.settings import load_settings
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.zookeeper


def wait_for(predicate: Callable[[], Any], timeout_s: float = 30.0, show: Callable[[], Any] | None = None) -> Any:
    """`predicate()` once it is true; fails after `timeout_s`, with `show()` (the state it saw) in the message."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"condition not met in {timeout_s:.0f}s" + (f"; last seen: {show()!r}" if show else ""))


def daemon_on(tmp_path: Path, claims: ZooKeeperServer, policy_options: str = "") -> Daemon:
    table = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    table.bulk_insert(pa.table({"id": [1, 2], "v": [0, 0], "ts": [0, 0]}))
    config = tmp_path / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static:
    - path: {tmp_path / "t"}
  refresh_interval_s: 0.2
policies:
  defaults:
    compaction: {{max_delta_commits: 1}}
    clean: {{enabled: false}}
    archival: {{enabled: false}}
    {policy_options}
zookeeper: {{hosts: '{claims.hosts}', chroot: /ready, session_timeout_s: 20, connection_timeout_s: 2}}
spark: {{engine: local}}
log: {{format: text, level: WARNING}}
drain_time_s: 2
"""
    )
    return Daemon(load_settings(config, env={}))


def readyz(client: TestClient) -> tuple[int, list[str]]:
    response = client.get("/readyz")
    return response.status_code, response.json()["reasons"]


def compact_once(tmp_path: Path, daemon: Daemon) -> None:
    """A delta commit, then wait for the daemon's compaction: its table lock is in use."""
    Table.open(str(tmp_path / "t")).upsert(pa.table({"id": [1], "v": [1], "ts": [1]}))
    wait_for(lambda: any(r.outcome is not None and r.outcome.value == "succeeded" for r in daemon.runs()))


def test_readyz_is_503_naming_zookeeper_while_it_is_down_and_200_after(tmp_path, make_zookeeper_server):
    server = make_zookeeper_server(max_client_cnxns=5)
    daemon = daemon_on(tmp_path, server)
    daemon.start()
    try:
        client = TestClient(create_app(daemon))
        wait_for(lambda: readyz(client)[0] == 200)
        compact_once(tmp_path, daemon)
        server.stop()
        try:
            status, reasons = wait_for(lambda: (r := readyz(client))[0] == 503 and r, 15)
            assert any("ZooKeeper" in r and server.hosts in r for r in reasons), reasons
            assert not daemon.ready
        finally:
            server.start()
        wait_for(lambda: readyz(client) == (200, []), 60, show=lambda: readyz(client))
        assert daemon.ready
    finally:
        daemon.drain(2)


def test_readyz_is_503_while_the_table_lock_ensemble_is_down(tmp_path, make_zookeeper_server):
    """Claims reachable, table locks not (another ensemble): before the fix /readyz said 200."""
    claims, locks = make_zookeeper_server(max_client_cnxns=5), make_zookeeper_server(max_client_cnxns=5)
    lock_options = (
        "hoodie_options: {hoodie.write.lock.provider: zookeeper, "
        f"hoodie.write.lock.zookeeper.url: '{locks.hosts}', hoodie.write.lock.zookeeper.base_path: /locks, "
        "hoodie.write.lock.zookeeper.connection_timeout_ms: '2000', "
        # Its clients back off up to a third of the session timeout between reconnection
        # attempts: 60 s by default would leave them asleep up to 20 s after the server is back.
        "hoodie.write.lock.zookeeper.session_timeout_ms: '15000', "
        "hoodie.write.concurrency.mode: optimistic_concurrency_control}"
    )
    daemon = daemon_on(tmp_path, claims, lock_options)
    daemon.start()
    try:
        client = TestClient(create_app(daemon))
        wait_for(lambda: readyz(client)[0] == 200)
        compact_once(tmp_path, daemon)
        locks.stop()
        try:
            status, reasons = wait_for(lambda: (r := readyz(client))[0] == 503 and r, 15)
            assert any("lock" in r and locks.hosts in r for r in reasons), reasons
            assert daemon.coordinator.connected  # the claims' ZooKeeper is fine
        finally:
            locks.start()
        wait_for(lambda: readyz(client) == (200, []), 60, show=lambda: readyz(client))
    finally:
        daemon.drain(2)


def test_api_answers_while_requests_wait_on_zookeeper(tmp_path, make_zookeeper_server):
    """Reads that wait on ZooKeeper (the audit log, here while the server is down: each waits
    up to the connection timeout) run on the server's thread pool, side by side, and /healthz and
    /readyz answer at once meanwhile. As `async` routes they held up the event loop: four such
    reads took turns. The runs list waits on nothing: it is served from the history view."""
    server = make_zookeeper_server(max_client_cnxns=5)
    daemon = daemon_on(tmp_path, server)
    daemon.start()
    api = ApiServer(daemon, port=0)
    api.start()
    url = f"http://127.0.0.1:{api.port}"
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_for(lambda: client.get("/readyz").status_code == 200)
            server.stop()
            wait_for(lambda: client.get("/readyz").status_code == 503, 15)
            waited: list[float] = []

            def read_audit() -> None:
                started = time.monotonic()
                with httpx.Client(base_url=url, timeout=30) as own:
                    own.get("/api/v1/audit")
                waited.append(time.monotonic() - started)

            readers = [threading.Thread(target=read_audit) for _ in range(4)]
            for reader in readers:
                reader.start()
            time.sleep(0.3)  # the reads are waiting on ZooKeeper now
            started = time.monotonic()
            assert client.get("/healthz").status_code == 200
            assert client.get("/readyz").status_code == 503
            answered_in = time.monotonic() - started
            started = time.monotonic()
            assert client.get("/api/v1/runs").status_code == 200
            runs_in = time.monotonic() - started
            for reader in readers:
                reader.join(30)
        assert min(waited) >= 1.0, f"the audit reads did not wait on ZooKeeper ({waited}): nothing was tested"
        # Side by side, each about one connection timeout (2 s); on the event loop they took turns (6-9 s).
        assert max(waited) < 3 * 2.0, f"the audit reads waited one after another: {waited}"
        assert answered_in < 0.5 * min(waited), f"/healthz and /readyz took {answered_in:.2f}s behind {waited}"
        assert runs_in < 0.5 * min(waited), f"/api/v1/runs took {runs_in:.2f}s: it read ZooKeeper, not the view"
    finally:
        server.start()
        api.stop()
        daemon.drain(2)
