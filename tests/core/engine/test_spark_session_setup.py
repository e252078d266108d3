"""Sessions lakeward creates (the daemon's): Python workers run lakeward's interpreter, format `lakeward`
resolves without `register(spark)`, the fair-scheduler scratch folder goes at exit; and a session whose
workers cannot import lakeward fails with an error that says what to do.

Each case needs a SparkSession of its own (not the shared test session, which has registered
everything already), so they run in one child process (one JVM start).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHILD = r"""
import json, os, sys
from lakeward.core.engine.spark import SparkEngine, WorkerImportError, python_worker_conf
from lakeward.services.daemon import build_spark_session
from lakeward.services.settings import SparkSettings

table_path, foreign_python = sys.argv[1], sys.argv[2]
quiet = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1", "spark.python.worker.reuse": "true"}
out = {}
session = build_spark_session(SparkSettings(master="local[1]", conf=quiet))
session.sparkContext.setLogLevel("OFF")
out["python"] = session.conf.get("spark.pyspark.python")
out["env_python"] = os.environ.get("PYSPARK_PYTHON")
out["allocation"] = session.conf.get("spark.scheduler.allocation.file")
out["allocation_existed"] = os.path.exists(out["allocation"])
# No lakeward.spark.register(spark) call: PySpark registered pyspark_lakeward.DefaultSource at start-up.
out["rows"] = session.read.format("lakeward").load(table_path).count()
session.stop()

from pyspark.sql import SparkSession

os.environ["PYSPARK_PYTHON"] = foreign_python  # RDD jobs read the environment (SparkContext.pythonExec)
other = SparkSession.builder.master("local[1]").config("spark.pyspark.python", foreign_python)
for key, value in quiet.items():
    other = other.config(key, value)
other = other.getOrCreate()
other.sparkContext.setLogLevel("OFF")
try:
    SparkEngine(other).map(python_worker_conf, [{}], "import check")
    out["error"] = None
except WorkerImportError as exc:
    out["error"] = str(exc)
other.stop()
print("RESULT " + json.dumps(out))
"""


def test_lakeward_sessions_and_the_worker_import_error(tmp_path: Path) -> None:
    # Workers run a Python of the same version that cannot import lakeward: a bare virtualenv made
    # from this interpreter (no site packages of its own or of the base installation).
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    foreign = str(tmp_path / "bare" / "bin" / "python")
    has_lakeward = subprocess.run([foreign, "-c", "import lakeward"], cwd=tmp_path, capture_output=True)
    assert has_lakeward.returncode != 0, f"{foreign} can import lakeward: the worker import error cannot be shown"

    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id")
    table.upsert(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))

    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    # pyspark_lakeward is found by PySpark's listing of the Python path: with the editable install of
    # the test environment, that needs the checkout on the path (a regular install has it in site-packages).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # PySpark's start-up lookup of data sources runs the default Python (PYSPARK_DRIVER_PYTHON, else
    # PYSPARK_PYTHON, else python3 on PATH): here python3 is this environment's, as in an activated virtualenv.
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", CHILD, path, foreign],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-3000:]
    out = json.loads(lines[0].removeprefix("RESULT "))

    assert out["python"] == out["env_python"] == sys.executable
    assert out["rows"] == 3
    assert out["allocation_existed"]
    assert not Path(out["allocation"]).parent.exists()  # removed when the child exited

    error = out["error"]
    assert error is not None
    assert "No module named 'lakeward" in error
    assert "PYSPARK_PYTHON" in error and "spark.pyspark.python" in error and sys.executable in error
