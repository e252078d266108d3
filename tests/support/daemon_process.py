"""A `lakeward serve` replica as a real OS process, for end-to-end tests.

`DaemonProcess(name, config, workdir)` writes the replica's YAML settings, starts
`python -m lakeward.services.cli serve --config ...` in a process group of its own with
`LAKEWARD_REPLICA_ID=<name>`, sends its stderr (the JSON log) to `<workdir>/<name>.log`,
and offers the API client, SIGTERM (graceful drain), SIGKILL and the log's tail for
assertion messages. `cleanup()` kills whatever is left of the process group (the Spark
JVM and its Python workers included).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from lakeward.services.client import DaemonAPIError, DaemonClient


class DaemonProcess:
    """One replica of the daemon in its own process (module doc)."""

    def __init__(
        self,
        name: str,
        config: dict[str, Any],
        workdir: Path,
        token: str,
        module: str = "lakeward.services.cli serve",
        env: dict[str, str] | None = None,
    ):
        self.name = name
        self.config = config
        self.workdir = workdir
        self.token = token
        #: What runs: `python -m <module> --config <file>` (the module may carry arguments before it).
        self.module = module.split()
        self.extra_env = env or {}
        self.config_path = workdir / f"{name}.yaml"
        self.log_path = workdir / f"{name}.log"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = int(config["http"]["port"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.killed_at: float | None = None
        self._client: DaemonClient | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        env = dict(os.environ)
        env["LAKEWARD_REPLICA_ID"] = self.name
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.update(self.extra_env)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", *self.module, "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def client(self) -> DaemonClient:
        if self._client is None:
            self._client = DaemonClient(self.url, self.token, timeout_s=10.0)
        return self._client

    def is_ready(self) -> bool:
        try:
            return bool(self.client.ready().get("ready"))
        except DaemonAPIError:
            return False

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if not self.alive:
                raise AssertionError(f"replica {self.name} exited with {self.process.returncode}:\n{self.tail()}")
            if self.is_ready():
                return
            time.sleep(0.2)
        raise AssertionError(f"replica {self.name} not ready in time:\n{self.tail()}")

    def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (graceful drain) and wait; the exit code (None -> AssertionError)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"replica {self.name} did not exit {timeout_s:g}s after SIGTERM:\n{self.tail()}"
            ) from None

    def kill(self) -> None:
        """SIGKILL the daemon's own process (not its group: its JVM notices its parent is gone)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.killed_at = time.time()
        self.process.wait(timeout=30)

    def cleanup(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # leftovers of its group (JVM, Python workers)
        except (ProcessLookupError, PermissionError):
            pass

    # -- diagnostics ----------------------------------------------------------------------------
    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return f"--- {self.name}: (no log)"
        return f"--- {self.name} ({self.log_path}), last {lines} lines:\n" + "\n".join(text[-lines:])


def runs_total(replica: DaemonProcess) -> collections.Counter[tuple[str, str, str]]:
    """`lakeward_runs_total` of a replica by (table, action, outcome), read from its `/metrics`."""
    text = replica.client._http.get("/metrics").text
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "lakeward_runs":
            continue
        for sample in family.samples:
            if sample.name == "lakeward_runs_total" and sample.value:
                labels = sample.labels
                counts[(labels["table"], labels["action"], labels["outcome"])] += int(sample.value)
    return counts


__all__ = ["DaemonProcess", "runs_total"]
