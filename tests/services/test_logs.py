"""The daemon's log stream: every line a collector reads is one JSON object, uncaught errors included."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import threading
    from lakeward.services.logs import configure_logging

    configure_logging("json", "INFO", "replica-1")

    def fail():
        raise RuntimeError("boom in a worker thread")

    worker = threading.Thread(target=fail, name="spark-job-runner")
    worker.start()
    worker.join()
    raise ValueError("boom in the main thread")
    """
)


def test_uncaught_exceptions_are_logged_as_json_lines():
    """A thread or the main program dying of an uncaught exception: a JSON record with its traceback,
    not a plain multi-line traceback among the JSON lines."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}\n{done.stderr}") from None
    thread_error, main_error = records
    assert thread_error["level"] == "ERROR" and "spark-job-runner" in thread_error["message"]
    assert "RuntimeError: boom in a worker thread" in thread_error["error"]
    assert thread_error["replica"] == "replica-1"
    assert main_error["level"] == "CRITICAL" and "ValueError: boom in the main thread" in main_error["error"]
