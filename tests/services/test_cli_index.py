"""`lakeward index create|drop|show|build` against a real table."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from typer.testing import CliRunner

from lakeward import Table
from lakeward.services.cli import app

runner = CliRunner()


def test_index_commands_create_build_show_and_drop(tmp_path: Any) -> None:
    table = Table.create(str(tmp_path / "t"), record_key="id", partition_by="p")
    table.bulk_insert(pa.table({"id": list(range(30)), "p": ["a", "b", "c"] * 10, "note": ["Buying x"] * 30}))
    created = runner.invoke(app, ["index", "create", table.path, "by_p_note", "id", "--type", "bitmap"])
    assert created.exit_code == 0, created.output
    assert "created bitmap index by_p_note on id" in created.output
    text = runner.invoke(
        app, ["index", "create", table.path, "words", "note", "--type", "text", "-o", "auto_build=true"]
    )
    assert text.exit_code == 0, text.output
    shown = runner.invoke(app, ["index", "show", table.path])
    assert "indexed 0/3 base file(s)" in shown.output and "auto_build" in shown.output
    scheduled = runner.invoke(app, ["index", "build", table.path, "--schedule-only"])
    assert scheduled.exit_code == 0 and "scheduled index build" in scheduled.output
    instant = scheduled.output.split()[-1]
    ran = runner.invoke(app, ["index", "build", table.path, "--instant", instant])
    assert ran.exit_code == 0, ran.output
    assert f"completed index build {instant}: 6 index file(s) for 3 base file(s)" in ran.output
    again = runner.invoke(app, ["index", "build", table.path])
    assert "every base file is indexed" in again.output
    status = json.loads(runner.invoke(app, ["index", "show", table.path, "--json"]).output)
    assert [i["indexed_base_files"] for i in status["indexes"]] == [3, 3]
    assert all(b["indexed_by"]["words"] == instant for b in status["base_files"])
    dropped = runner.invoke(app, ["index", "drop", table.path, "words"])
    assert dropped.exit_code == 0 and "3 file(s) removed" in dropped.output
    assert [d.name for d in Table.open(table.path).indexes()] == ["by_p_note"]


def test_index_commands_report_bad_input_as_errors(tmp_path: Any) -> None:
    table = Table.create(str(tmp_path / "t"), record_key="id")
    table.bulk_insert(pa.table({"id": [1, 2]}))
    missing = runner.invoke(app, ["index", "create", table.path, "i", "nope"])
    assert missing.exit_code == 2 and "column 'nope' is not in the table" in missing.output
    unknown = runner.invoke(app, ["index", "drop", table.path, "zzz"])
    assert unknown.exit_code == 2 and "no index named 'zzz'" in unknown.output
    nothing = runner.invoke(app, ["index", "build", table.path])
    assert nothing.exit_code == 2 and "no secondary index to build" in nothing.output
    assert runner.invoke(app, ["index", "create", table.path, "by_id", "id"]).exit_code == 0
    bad = runner.invoke(app, ["index", "build", table.path, "--strategy", "SOME"])
    assert bad.exit_code == 2 and "strategy" in bad.output
    assert runner.invoke(app, ["index", "drop", table.path, "by_id"]).exit_code == 0
    assert runner.invoke(app, ["index", "show", table.path]).output.strip() == "no secondary index"


def test_index_build_finishes_a_pending_build_first(tmp_path: Any) -> None:
    table = Table.create(str(tmp_path / "t"), record_key="id", partition_by="p")
    table.bulk_insert(pa.table({"id": list(range(30)), "p": ["a", "b", "c"] * 10}))
    assert runner.invoke(app, ["index", "create", table.path, "by_id", "id"]).exit_code == 0
    dead = runner.invoke(app, ["index", "build", table.path, "--schedule-only"]).output.split()[-1]
    table.bulk_insert(pa.table({"id": [100, 101], "p": ["d", "d"]}))
    built = runner.invoke(app, ["index", "build", table.path])
    assert built.exit_code == 0, built.output
    assert f"completed pending index build {dead}: 3 index file(s) for 3 base file(s)" in built.output
    assert "for 1 base file(s)" in built.output.splitlines()[-1]  # then the new base file
    status = json.loads(runner.invoke(app, ["index", "show", table.path, "--json"]).output)
    assert status["pending_builds"] == [] and status["indexes"][0]["indexed_base_files"] == 4
