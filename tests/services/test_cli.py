"""The `lakeward` command line against real tables."""

from __future__ import annotations

import json

import pyarrow as pa
from typer.testing import CliRunner

from lakeward import Table
from lakeward.services.cli import app

runner = CliRunner()


def _table(tmp_path) -> tuple[Table, str, str]:
    table = Table.create(str(tmp_path / "t"), record_key="id", partition_by="p", hive_style_partitioning=True)
    first = table.upsert(pa.table({"id": [1, 2], "p": ["a", "b"]})).instant_time
    second = table.upsert(pa.table({"id": [3], "p": ["a"]})).instant_time
    return table, first, second


def test_timeline_lists_every_instant_with_action_and_state(tmp_path):
    table, first, second = _table(tmp_path)
    result = runner.invoke(app, ["timeline", table.path])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()[1:]]
    assert rows == [[first, "commit", "completed"], [second, "commit", "completed"]]


def test_show_prints_properties_and_file_groups_as_json(tmp_path):
    table, _, second = _table(tmp_path)
    result = runner.invoke(app, ["show", table.path, "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["properties"]["hoodie.table.recordkey.fields"] == "id"
    assert sorted(g["partition"] for g in shown["file_groups"]) == ["p=a", "p=b"]
    assert {g["partition"]: g["base_instant"] for g in shown["file_groups"]}["p=a"] == second


def test_commands_on_a_path_that_is_not_a_table_fail_clearly(tmp_path):
    result = runner.invoke(app, ["timeline", str(tmp_path)])
    assert result.exit_code == 2
    assert "is not a Hudi table" in result.output


def test_demo_prints_snapshot_time_travel_and_incremental(tmp_path):
    result = runner.invoke(app, ["demo", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    snapshot = out[out.index("snapshot:") : out.index("time travel")]
    travel = out[out.index("time travel") : out.index("incremental")]
    incremental = out[out.index("incremental") :]
    assert "30.0" in snapshot and "27.7" not in snapshot  # t2 updated
    assert "27.7" in travel and "t5" not in travel  # as of the first commit
    assert "t2" in incremental and "t5" in incremental and "t1" not in incremental
