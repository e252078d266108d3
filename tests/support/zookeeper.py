"""A real standalone ZooKeeper server for the tests (Debian package `zookeeper`).

The session-scoped fixture `zookeeper_server` starts
`org.apache.zookeeper.server.ZooKeeperServerMain` from `/usr/share/java/zookeeper.jar`
on a free loopback port with a temporary data dir, waits until the `srvr` four-letter
command answers `Mode: standalone`, and stops it with SIGTERM at the end of the session.
Tests that need a session to expire call `stop()`, wait, and `start()` again (same data
dir, same port).

The function-scoped factory `make_zookeeper_server(max_client_cnxns=5)` starts a server of
the test's own (a cap on connections per client address, as `maxClientCnxns` in production),
and `alive_connections(server)` counts the client connections it holds (from `mntr`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from lakeward.core.locks.zk_client import close_shared_clients
from lakeward.services.claims import OwnerInfo, ZooKeeperCoordinator

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
SETUP_HINT = (
    "run the project's test set-up command, which installs the Debian package "
    "`zookeeper` (`apt-get install -y zookeeper`)"
)
STARTUP_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hudi_lock_options(hosts: str, base_path: str, lock_key: str | None = None) -> dict[str, str]:
    """Hudi's ZooKeeper lock provider options for a server at `hosts` ("host:port"), under `base_path`;
    `lock_key` names the lock (default: the table's name, as Hudi's)."""
    host, port = hosts.split(":")
    options = {
        "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider",
        "hoodie.write.lock.zookeeper.url": host,
        "hoodie.write.lock.zookeeper.port": port,
        "hoodie.write.lock.zookeeper.base_path": base_path,
    }
    if lock_key is not None:
        options["hoodie.write.lock.zookeeper.lock_key"] = lock_key
    return options


def four_letter_word(port: int, command: str, timeout_s: float = 1.0) -> str:
    """Send a four-letter command (`srvr`, `ruok`, ...) and return the answer ('' if none)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(command.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def _class_path() -> str:
    """zookeeper.jar plus the dependencies its manifest lists (and slf4j-simple for logs)."""
    if shutil.which("java") is None:
        pytest.fail(f"ZooKeeper tests need `java` on PATH; {SETUP_HINT}", pytrace=False)
    if not ZOOKEEPER_JAR.is_file():
        pytest.fail(f"ZooKeeper jar not found at {ZOOKEEPER_JAR}; {SETUP_HINT}", pytrace=False)
    with zipfile.ZipFile(ZOOKEEPER_JAR) as jar:
        manifest = jar.read("META-INF/MANIFEST.MF").decode("utf-8")
    # Manifest lines are wrapped at 72 bytes; a continuation line starts with one space.
    unwrapped = manifest.replace("\r\n", "\n").replace("\n ", "")
    entries: list[str] = []
    for line in unwrapped.splitlines():
        if line.startswith("Class-Path:"):
            entries = line.split(":", 1)[1].split()
    jars = [str(ZOOKEEPER_JAR), *(e for e in entries if Path(e).is_file())]
    if SLF4J_SIMPLE_JAR.is_file():
        jars.append(str(SLF4J_SIMPLE_JAR))
    return os.pathsep.join(jars)


class ZooKeeperServer:
    """One standalone ZooKeeper process; `stop()`/`start()` keep its data dir and port."""

    def __init__(self, workdir: Path, port: int, tick_time_ms: int = 500, max_client_cnxns: int = 0):
        self.workdir = workdir
        self.max_client_cnxns = max_client_cnxns
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.config_path = workdir / "zoo.cfg"
        self.log_path = workdir / "zookeeper.log"
        self.startup_seconds: float | None = None
        self._class_path = _class_path()
        self._process: subprocess.Popen[bytes] | None = None
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "\n".join(
                [
                    f"tickTime={tick_time_ms}",
                    f"dataDir={workdir / 'data'}",
                    f"clientPort={port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons",
                    f"maxClientCnxns={max_client_cnxns}",
                    "",
                ]
            )
        )

    @property
    def hosts(self) -> str:
        """The connect string for clients, `127.0.0.1:PORT`."""
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server and wait until it serves (`srvr` says `Mode: standalone`)."""
        if self.running:
            return
        began = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [
                    "java",
                    "-Xms64m",
                    "-Xmx256m",
                    "-XX:+UseSerialGC",
                    "-cp",
                    self._class_path,
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    str(self.config_path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        deadline = began + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with code {self._process.returncode} while starting; log:\n{self._log_tail()}"
                )
            if "Mode: standalone" in four_letter_word(self.port, "srvr"):
                self.startup_seconds = time.monotonic() - began
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(
            f"ZooKeeper did not answer `srvr` on port {self.port} within {STARTUP_TIMEOUT_S}s; log:\n{self._log_tail()}"
        )

    def stop(self) -> None:
        """SIGTERM the server and wait for it (SIGKILL after 10 s)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def _log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """A real standalone ZooKeeper on 127.0.0.1 for the whole test session."""
    workdir = Path(tempfile.mkdtemp(prefix="lakeward-zookeeper-"))
    server = ZooKeeperServer(workdir, free_port())
    try:
        server.start()
        yield server
    finally:
        close_shared_clients(server.hosts)
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def make_zookeeper_server() -> Iterator[Callable[..., ZooKeeperServer]]:
    """Factory of ZooKeeper servers of one test's own (e.g. with a low `maxClientCnxns`)."""
    made: list[tuple[ZooKeeperServer, Path]] = []

    def make(max_client_cnxns: int = 0, tick_time_ms: int = 500) -> ZooKeeperServer:
        """`tick_time_ms`: the server grants session timeouts of 2 to 20 ticks."""
        workdir = Path(tempfile.mkdtemp(prefix="lakeward-zookeeper-"))
        server = ZooKeeperServer(workdir, free_port(), tick_time_ms=tick_time_ms, max_client_cnxns=max_client_cnxns)
        made.append((server, workdir))
        server.start()
        return server

    yield make
    for server, workdir in made:
        # What a process exit would do: tables the test never closed keep a share of a client that
        # would otherwise reconnect to the stopped server for the rest of the test session.
        close_shared_clients(server.hosts)
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def alive_connections(server: ZooKeeperServer) -> int:
    """Client connections the server holds now, not counting the one asking (`mntr`)."""
    for line in four_letter_word(server.port, "mntr").splitlines():
        name, _, value = line.partition("\t")
        if name == "zk_num_alive_connections":
            return int(value) - 1
    raise AssertionError(
        f"no answer to mntr from the ZooKeeper server on port {server.port} (its maxClientCnxns "
        f"{server.max_client_cnxns} counts this connection too: is this process over the cap?)"
    )


@pytest.fixture
def make_coordinator(zookeeper_server) -> Iterator[Callable[..., ZooKeeperCoordinator]]:
    base = f"/lakeward-tests/claims-{uuid.uuid4().hex[:8]}"
    made: list[ZooKeeperCoordinator] = []

    def make(name: str = "r", **kwargs) -> ZooKeeperCoordinator:
        kwargs.setdefault("session_timeout_s", 4.0)
        kwargs.setdefault("connection_timeout_s", 5.0)
        coordinator = ZooKeeperCoordinator(
            zookeeper_server.hosts,
            base_path=base,
            owner=OwnerInfo.current(f"{name}-{len(made)}"),
            private_client=True,  # each plays a replica of its own: separate sessions, as separate processes
            **kwargs,
        )
        coordinator.start()
        made.append(coordinator)
        return coordinator

    yield make
    for coordinator in made:
        coordinator.close()


def expire_session(coordinator: ZooKeeperCoordinator, hosts: str) -> None:
    """Expire the coordinator's session on the server (attach to it and close, as ZooKeeper's tests do)."""
    expire_client_session(coordinator._client, hosts)  # type: ignore[arg-type]


def expire_client_session(client: KazooClient, hosts: str) -> None:
    """Expire a kazoo client's session on the server: attach a second connection to it and close that."""
    session_id, password = client.client_id
    hijacker = KazooClient(hosts=hosts, client_id=(session_id, password))
    hijacker.start(timeout=10)
    hijacker.stop()
    hijacker.close()
