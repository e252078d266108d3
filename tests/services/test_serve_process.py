"""`lakeward serve` as a real process: SIGTERM at any moment drains and exits 0, runs live in
child processes that the drain terminates within `drain_time_s`, and the API answers while
plans run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.services.test_daemon import mor
from tests.services.test_run_isolation import gone
from tests.support.daemon_process import DaemonProcess
from tests.support.gated_engine import FileGatedEngine
from tests.support.zookeeper import free_port

TOKEN = "test-token"
REPO = Path(__file__).resolve().parents[2]


def config_for(tables: list[Path], drain_time_s: float) -> dict[str, Any]:
    return {
        "tables": {"static": [{"path": str(t)} for t in tables], "refresh_interval_s": 0.5},
        "policies": {"defaults": {"compaction": {"enabled": False}, "clean": {"enabled": False}}},
        "concurrency": {"max_running": 2, "max_running_per_table": 1},
        "spark": {"engine": "local"},
        "http": {"host": "127.0.0.1", "port": free_port(), "api_tokens": [TOKEN]},
        "log": {"format": "text"},
        "drain_time_s": drain_time_s,
    }


@pytest.fixture
def replicas() -> Iterator[list[DaemonProcess]]:
    started: list[DaemonProcess] = []
    yield started
    for replica in started:
        replica.cleanup()


def launch(replicas: list[DaemonProcess], replica: DaemonProcess) -> DaemonProcess:
    replica.start()
    replicas.append(replica)
    return replica


def wait_healthz(replica: DaemonProcess, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert replica.alive, replica.tail()
        try:
            if httpx.get(f"{replica.url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"/healthz never answered:\n{replica.tail()}")


def test_sigterm_as_soon_as_healthz_answers_drains_and_exits_0(tmp_path, replicas):
    table = mor(tmp_path / "t", 1)
    replica = launch(replicas, DaemonProcess("early", config_for([Path(table.path)], 5), tmp_path, TOKEN))
    wait_healthz(replica)
    code = replica.terminate(timeout_s=60)
    log = replica.log_path.read_text()
    assert code == 0, replica.tail()
    assert "received SIGTERM: draining" in log, replica.tail()


def test_api_answers_while_two_plans_run_and_sigterm_ends_them_within_the_drain_time(tmp_path, replicas):
    tables = [mor(tmp_path / name, 3) for name in ("a", "b")]
    gate = FileGatedEngine(tmp_path / "gate")
    config = config_for([Path(t.path) for t in tables], drain_time_s=1)
    module = f"tests.support.serve_gated {gate.folder}"
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    gated = DaemonProcess("gated", config, tmp_path, TOKEN, module=module, env={"PYTHONPATH": pythonpath})
    replica = launch(replicas, gated)
    replica.wait_ready(time.monotonic() + 90)
    for table in tables:
        replica.client.trigger(table.name, "compaction")
    deadline = time.monotonic() + 60
    while len(gate.arrived_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    children = gate.arrived_pids()
    assert len(children) == 2 and replica.pid not in children, replica.tail()

    latencies = []
    for _ in range(10):  # answered while both plans run in their children (no timing assertion)
        started = time.perf_counter()
        running = replica.client.runs(state="running")
        latencies.append(time.perf_counter() - started)
        assert {r["pid"] for r in running} == children
    print(f"GET /runs while two plans run: {[round(s * 1000, 1) for s in latencies]} ms")

    asked = time.monotonic()
    replica.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    code = replica.process.wait(timeout=30)  # type: ignore[union-attr]
    took = time.monotonic() - asked
    assert code == 0, replica.tail()
    assert took <= 1 + 5, f"drained in {took:.1f}s\n{replica.tail()}"
    assert all(gone(pid) for pid in children)
    log = replica.log_path.read_text()
    assert "drain time over: cancelled 2 run(s)" in log, replica.tail()
    for table in tables:  # the plans stay inflight: the next start runs them
        assert len(table.pending_compactions()) == 1


def wait_for_log(replica: DaemonProcess, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert replica.alive, replica.tail()
        if text in replica.log_path.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never logged:\n{replica.tail()}")


def test_sigterm_while_start_up_waits_for_an_unreachable_zookeeper_exits_0(tmp_path, replicas):
    # Nothing listens on the port: the start-up waits for ZooKeeper (up to 10 minutes here); SIGTERM ends the wait.
    table = mor(tmp_path / "t", 1)
    config = config_for([Path(table.path)], 5)
    config["zookeeper"] = {"hosts": f"127.0.0.1:{free_port()}", "connection_timeout_s": 600}
    replica = launch(replicas, DaemonProcess("zk-down", config, tmp_path, TOKEN))
    wait_healthz(replica)
    wait_for_log(replica, "starting replica zk-down")
    code = replica.terminate(timeout_s=120)
    log = replica.log_path.read_text()
    assert code == 0, replica.tail()
    assert "received SIGTERM: draining" in log and "Traceback" not in log, replica.tail()


def serve_once(config: Path, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`lakeward serve --config CONFIG` that is expected to refuse to start."""
    return subprocess.run(
        [sys.executable, "-m", "lakeward.services.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def test_serve_on_a_port_in_use_prints_an_error_naming_it_and_exits_2(tmp_path):
    table = mor(tmp_path / "t", 1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = config_for([Path(table.path)], 5)
        config["http"]["port"] = port
        path = tmp_path / "busy.yaml"
        path.write_text(yaml.safe_dump(config))
        result = serve_once(path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert f"error: cannot listen on 127.0.0.1:{port}" in result.stderr and "http.port" in result.stderr


def test_serve_with_a_config_file_that_is_not_utf8_prints_an_error_and_exits_2(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe not utf-8")
    result = serve_once(path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert f"error: invalid lakeward configuration:\n  {path}: not UTF-8 text" in result.stderr


def test_serve_when_zookeeper_never_answers_prints_an_error_and_exits_2(tmp_path):
    table = mor(tmp_path / "t", 1)
    config = config_for([Path(table.path)], 5)
    config["zookeeper"] = {"hosts": f"127.0.0.1:{free_port()}", "connection_timeout_s": 1}
    path = tmp_path / "zk.yaml"
    path.write_text(yaml.safe_dump(config))
    result = serve_once(path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "error: cannot connect to ZooKeeper at 127.0.0.1:" in result.stderr


def test_a_table_whose_storage_hangs_leaves_the_api_answering_and_sigterm_exiting(tmp_path, replicas):
    """A hung mount or bucket (a FIFO stands in for one): a trigger naming its table answered never and,
    repeated, took every API thread, so /readyz and /metrics stopped answering too; and SIGTERM drained but
    the process never exited (the interpreter waited for the hung read's thread). The trigger now answers
    409 within `tables.load_timeout_s`, the API keeps answering, and the replica exits 0."""
    good = mor(tmp_path / "good", 1)
    hung = mor(tmp_path / "hung", 1)
    properties = Path(hung.path) / ".hoodie" / "hoodie.properties"
    config = config_for([Path(good.path), Path(hung.path)], 2)
    config["tables"]["load_timeout_s"] = 1
    replica = launch(replicas, DaemonProcess("hung", config, tmp_path, TOKEN))
    wait_healthz(replica)
    properties.unlink()
    os.mkfifo(properties)
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for _ in range(12):  # more than the API's threads would bear if each hung
            answer = httpx.post(
                f"{replica.url}/api/v1/tables/hung/trigger",
                json={"action": "clean", "dry_run": True},
                headers=headers,
                timeout=30,
            )
            assert answer.status_code == 409 and "hung storage" in answer.text, answer.text
        assert httpx.get(f"{replica.url}/readyz", timeout=10).status_code in (200, 503)
        assert httpx.get(f"{replica.url}/metrics", timeout=10).status_code == 200
        assert replica.terminate(timeout_s=60) == 0, replica.tail()
        assert "hung storage read" in replica.log_path.read_text(), replica.tail()
    finally:
        try:
            os.close(os.open(properties, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
