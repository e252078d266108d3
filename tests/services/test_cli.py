"""The `lakeward` command line against real tables."""

from __future__ import annotations

import json
import os

import pyarrow as pa
from typer.testing import CliRunner

from lakeward import Table
from lakeward.services.api.reads import RunState
from lakeward.services.cli import app
from lakeward.services.model import ServiceAction

runner = CliRunner()


def _table(tmp_path) -> tuple[Table, str, str]:
    table = Table.create(str(tmp_path / "t"), record_key="id", partition_by="p", hive_style_partitioning=True)
    first = table.upsert(pa.table({"id": [1, 2], "p": ["a", "b"]})).instant_time
    second = table.upsert(pa.table({"id": [3], "p": ["a"]})).instant_time
    return table, first, second


def test_timeline_of_a_table_without_instants_says_so(tmp_path):
    table = Table.create(str(tmp_path / "empty"), record_key="id")
    result = runner.invoke(app, ["timeline", table.path])
    assert result.exit_code == 0 and result.output == "no instants\n", result.output


def test_timeline_lists_every_instant_with_action_and_state(tmp_path):
    table, first, second = _table(tmp_path)
    result = runner.invoke(app, ["timeline", table.path])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()[1:]]
    assert rows == [[first, "commit", "completed"], [second, "commit", "completed"]]


def test_timeline_prints_json_with_json(tmp_path):
    # docs/cli.md: listings print JSON with --json (`[]` when empty); timeline had no --json.
    table, first, second = _table(tmp_path)
    result = runner.invoke(app, ["timeline", table.path, "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert [(i["instant"], i["action"], i["state"]) for i in listed] == [
        (first, "commit", "completed"),
        (second, "commit", "completed"),
    ]
    assert set(listed[0]) == {"instant", "action", "state", "completion_time", "archived"}
    empty = Table.create(str(tmp_path / "empty"), record_key="id")
    assert runner.invoke(app, ["timeline", empty.path, "--json"]).output == "[]\n"


def test_help_lists_every_action_and_run_state_the_api_takes():
    trigger = " ".join(runner.invoke(app, ["trigger", "--help"], env={"COLUMNS": "200"}).output.split())
    for action in ServiceAction:
        assert action.value in trigger, action
    runs = " ".join(runner.invoke(app, ["runs", "--help"], env={"COLUMNS": "200"}).output.split())
    for state in RunState.__args__:
        assert state in runs, state


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


def test_plans_and_health_read_a_table_named_by_dot_or_a_bare_folder_name(tmp_path, monkeypatch):
    table = _mor(tmp_path)
    folder = os.path.dirname(table.path)
    planned = Table.open(table.path).schedule_compaction(force=True)
    monkeypatch.chdir(folder)
    for target in (os.path.basename(table.path), f"./{os.path.basename(table.path)}"):
        listed = runner.invoke(app, ["plans", target])
        assert listed.exit_code == 0 and planned in listed.output, listed.output
    monkeypatch.chdir(table.path)
    assert planned in runner.invoke(app, ["plans", "."]).output
    health = runner.invoke(app, ["health", "."])
    assert health.exit_code == 0 and "cannot reach the daemon" not in health.output, health.output


def test_compact_reports_bad_input_with_exit_code_2(tmp_path):
    table, _, _ = _table(tmp_path)  # copy-on-write
    result = runner.invoke(app, ["compact", table.path, "--force"])
    assert result.exit_code == 2
    assert "MERGE_ON_READ" in result.output
    mor = _mor(tmp_path)
    result = runner.invoke(app, ["compact", mor.path, "--instant", "20200101000000000"])
    assert result.exit_code == 2
    assert "no compaction plan" in result.output
    result = runner.invoke(app, ["clean", mor.path, "-o", "hoodie.cleaner.commits.retained=1", "-o", "foo.bar=1"])
    assert result.exit_code == 2 and "option 'foo.bar' is not a hoodie.* or lakeward.* option" in result.output


def _many_commits(tmp_path, n: int = 4) -> tuple[Table, list[str]]:
    # the metadata table compacted with every commit: archival stays behind its last compaction (Hudi's rule)
    compact = {"hoodie.metadata.compact.max.delta.commits": 1}
    table = Table.create(str(tmp_path / "c"), record_key="id", partition_by="p", options=compact)
    instants = [table.upsert(pa.table({"id": [1, 2], "p": ["a", "a"], "v": [i, i]})).instant_time for i in range(n)]
    return table, instants


def test_clean_deletes_old_file_versions_with_options(tmp_path):
    table, instants = _many_commits(tmp_path)
    before = len(list((tmp_path / "c" / "a").glob("*.parquet")))
    result = runner.invoke(app, ["clean", table.path, "-o", "hoodie.cleaner.commits.retained=1"])
    assert result.exit_code == 0, result.output
    assert "completed clean" in result.output
    after = len(list((tmp_path / "c" / "a").glob("*.parquet")))
    assert after < before == len(instants)
    assert sorted(Table.open(table.path).read().column("v").to_pylist()) == [3, 3]
    again = runner.invoke(app, ["clean", table.path, "-o", "hoodie.cleaner.commits.retained=1"])
    assert again.exit_code == 0 and "nothing to clean" in again.output
    bad = runner.invoke(app, ["clean", table.path, "-o", "hoodie.cleaner.commits.retained"])
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output


def test_savepoint_list_restore_and_delete(tmp_path):
    table, instants = _many_commits(tmp_path, 3)
    assert runner.invoke(app, ["savepoint", table.path, instants[0]]).exit_code == 0
    listed = runner.invoke(app, ["savepoints", table.path])
    assert listed.output.split() == ["instant", instants[0]]
    result = runner.invoke(app, ["restore", table.path, instants[0]])
    assert result.exit_code == 0, result.output
    assert "2 instant(s) rolled back" in result.output
    assert sorted(Table.open(table.path).read().column("v").to_pylist()) == [0, 0]
    assert runner.invoke(app, ["delete-savepoint", table.path, instants[0]]).exit_code == 0
    assert runner.invoke(app, ["savepoints", table.path]).output == "no savepoints\n"
    missing = runner.invoke(app, ["restore", table.path, instants[0]])
    assert missing.exit_code == 2


def test_cluster_rewrites_small_files_into_fewer(tmp_path):
    table = Table.create(str(tmp_path / "k"), record_key="id", partition_by="p")
    opts = {"hoodie.parquet.small.file.limit": 0}  # every insert starts its own file group
    for i in range(4):
        Table.open(table.path, options=opts).insert(pa.table({"id": [i], "p": ["a"], "v": [i]}))
    assert len(Table.open(table.path).file_slices()) == 4
    result = runner.invoke(app, ["cluster", table.path])
    assert result.exit_code == 0, result.output
    assert "completed clustering" in result.output
    assert len(Table.open(table.path).file_slices()) == 1
    assert sorted(Table.open(table.path).read().column("v").to_pylist()) == [0, 1, 2, 3]


def test_rollback_undoes_the_latest_commit(tmp_path):
    table, first, second = _table(tmp_path)
    refused = runner.invoke(app, ["rollback", table.path, first])
    assert refused.exit_code == 2 and "came after it" in refused.output
    result = runner.invoke(app, ["rollback", table.path, second])
    assert result.exit_code == 0, result.output
    assert f"rolled back {second}" in result.output
    assert sorted(Table.open(table.path).read().column("id").to_pylist()) == [1, 2]


def test_archive_moves_old_instants(tmp_path):
    table, instants = _many_commits(tmp_path, 6)
    keep = ["-o", "hoodie.keep.min.commits=2", "-o", "hoodie.keep.max.commits=3"]
    result = runner.invoke(app, ["archive", table.path, *keep])
    assert result.exit_code == 0, result.output
    assert "archived 4 instant(s)" in result.output
    left = [i.time for i in Table.open(table.path).completed_instants()]
    assert left == instants[-2:]
    assert sorted(Table.open(table.path).read().column("v").to_pylist()) == [5, 5]
    again = runner.invoke(app, ["archive", table.path, *keep])
    assert again.exit_code == 0 and "nothing to archive" in again.output


def test_an_error_met_on_the_way_is_one_error_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """`show` of a table whose pending compaction plan is damaged, and `timeline` of one whose timeline
    folder is a file, printed Python tracebacks (exit code 1)."""
    import sys

    import pytest

    from lakeward.services.cli import main

    table = Table.create(str(tmp_path / "t"), record_key="id", table_type="MERGE_ON_READ")
    table.upsert(pa.table({"id": [1, 2]}))
    table.upsert(pa.table({"id": [1]}))
    plan = table.schedule_compaction(force=True)
    (tmp_path / "t" / ".hoodie" / f"{plan}.compaction.requested").write_bytes(b"not avro")
    other = Table.create(str(tmp_path / "v9"), record_key="id", table_version=9)
    os.rmdir(tmp_path / "v9" / ".hoodie" / "timeline" / "history")
    (tmp_path / "v9" / ".hoodie" / "timeline" / "history").write_text("a file")
    for argv in (["show", table.path], ["timeline", other.path]):
        monkeypatch.setattr(sys, "argv", ["lakeward", *argv])
        with pytest.raises(SystemExit) as exited:
            main()
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.startswith("error: ") and "Traceback" not in err, (argv, err)


def test_a_malformed_daemon_url_is_an_error_line_not_a_traceback() -> None:
    """`--url http://h:abc` (or LAKEWARD_URL) raised httpx.InvalidURL out of the CLI: a traceback, exit 1."""
    for url in ("http://[::1", "http://127.0.0.1:8080 x", "http://127.0.0.1:abc"):
        for args, env in ((["tables", "--url", url], {}), (["runs"], {"LAKEWARD_URL": url})):
            result = runner.invoke(app, args, env=env)
            assert result.exit_code == 2, (url, result.output, result.exception)
            assert "error:" in result.output and "not a valid daemon URL" in result.output, result.output
