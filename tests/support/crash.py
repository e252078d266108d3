"""The crash-and-rerun harness: kill a write or table service at a chosen point with SIGKILL.

The `tests/core/scripts/crash_*.py` scripts run one write or service in a subprocess with
hooks (`freeze_points.py`) that freeze it at a named point of lakeward's code: there they
print `REACHED <point>` and sleep. `run_and_kill` starts one, waits for that line and kills
the process with SIGKILL, so that the table is left exactly as a crash there leaves it; the
test then runs the write or service again and checks what the rerun finishes or undoes.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
from pathlib import Path

import pytest

#: Where the crash scripts live.
SCRIPTS = Path(__file__).parents[1] / "core" / "scripts"


def run_and_kill(script: str, path: str | Path, point: str, *args: str, timeout: float = 60.0) -> None:
    """Run `python <SCRIPTS>/<script> <path> <point> <args...>`, wait for `REACHED <point>`, SIGKILL it.

    Fails the test, with the script's stderr, when the script prints anything else first,
    exits, or does not reach the point within `timeout` seconds.
    """
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / script), str(path), point, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout)
        line = proc.stdout.readline().strip() if ready else ""
        if line != f"REACHED {point}":
            proc.kill()
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"{script} did not reach {point!r} (stdout {line!r}, exit {proc.returncode}):\n{err}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
