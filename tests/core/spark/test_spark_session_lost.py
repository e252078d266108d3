"""A Spark-engine write or table service whose session's JVM dies: a lakeward error that says so, and
the table as it was (the write rolled back, the service's plan pending), not py4j's raw socket error
(`ConnectionRefusedError`, often raised by a cleanup call that hid the first failure)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.table import Table

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SCRIPT = Path(__file__).parents[1] / "scripts" / "spark_jvm_lost.py"


def test_a_dead_jvm_is_a_clear_error_and_leaves_the_table_as_it_was(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), record_key="id", partition_by="p", table_type="MERGE_ON_READ")
    table.bulk_insert(pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"], "v": ["x", "y", "z"]}))
    table.upsert(pa.table({"id": [2], "p": ["a"], "v": ["y2"]}))
    compaction = table.schedule_compaction(force=True)
    assert compaction is not None
    before = sorted(table.read(columns=["id", "v"]).to_pylist(), key=lambda r: r["id"])

    child = subprocess.run(
        [sys.executable, str(SCRIPT), table.path, compaction], capture_output=True, text=True, timeout=300
    )
    assert child.returncode == 0, child.stderr[-3000:]
    outcomes = {o["call"]: o for o in map(json.loads, child.stdout.splitlines())}
    for call in ("upsert", "compaction"):
        assert outcomes[call]["error"] == "SparkSessionLostError", outcomes[call]
        assert "Spark session's JVM cannot be reached" in outcomes[call]["message"]

    reopened = Table.open(table.path)
    assert sorted(reopened.read(columns=["id", "v"]).to_pylist(), key=lambda r: r["id"]) == before
    assert reopened.timeline().pending_writes() == []  # the upsert was rolled back, or never began
    assert reopened.pending_compactions() == [compaction]
    reopened.run_compaction(compaction)  # the local engine runs the plan the dead session left
    assert reopened.check().ok
    assert sorted(reopened.read(columns=["id", "v"]).to_pylist(), key=lambda r: r["id"]) == before
