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


def _mor(tmp_path) -> Table:
    table = Table.create(str(tmp_path / "m"), record_key="id", partition_by="p", table_type="MERGE_ON_READ")
    table.insert(pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"], "v": [1, 1, 1]}))
    table.upsert(pa.table({"id": [1, 3], "p": ["a", "b"], "v": [2, 2]}))  # log files in both groups
    return table


def test_compact_schedules_and_runs_a_compaction(tmp_path):
    table = _mor(tmp_path)
    result = runner.invoke(app, ["compact", table.path])
    assert result.exit_code == 0, result.output
    assert "no compaction scheduled" in result.output  # 1 delta commit since the start: not due
    result = runner.invoke(app, ["compact", table.path, "--force", "--schedule-only"])
    assert result.exit_code == 0, result.output
    planned = result.output.split()[-1]
    assert Table.open(table.path).pending_compactions() == [planned]
    listed = runner.invoke(app, ["plans", table.path])
    assert [planned, "compaction", "requested"] in [line.split() for line in listed.output.splitlines()]
    result = runner.invoke(app, ["compact", table.path, "--instant", planned])
    assert result.exit_code == 0, result.output
    assert f"completed compaction {planned}: 2 file slice(s)" in result.output
    assert Table.open(table.path).pending_compactions() == []
    assert sorted(Table.open(table.path).read(read_optimized=True).column("v").to_pylist()) == [1, 2, 2]


def test_compact_reports_bad_input_with_exit_code_2(tmp_path):
    table, _, _ = _table(tmp_path)  # copy-on-write
    result = runner.invoke(app, ["compact", table.path, "--force"])
    assert result.exit_code == 2
    assert "MERGE_ON_READ" in result.output
    mor = _mor(tmp_path)
    result = runner.invoke(app, ["compact", mor.path, "--instant", "20200101000000000"])
    assert result.exit_code == 2
    assert "no compaction plan" in result.output
