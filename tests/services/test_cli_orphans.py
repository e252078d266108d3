"""`lakeward orphans PATH`: a dry run by default that changes nothing and lists exactly the files
`--delete` then removes; files of a pending instant are kept."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from typer.testing import CliRunner

from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.table import Table
from lakeward.core.timeline import Action, new_instant_time
from lakeward.core.timeline.transitions import create_requested, transition_to_inflight
from lakeward.services.cli import app as cli_app
from tests.core.test_orphans import _hashes, _rows, _stray_copy, _table


def _pending_file(path: Path) -> Path:
    """A data file of a pending commit (its writer may still run): never an orphan."""
    table = Table.open(str(path))
    time_ = new_instant_time(table.timeline().latest_time(), table.config.timeline_timezone)
    transition_to_inflight(table.storage, create_requested(table.storage, time_, Action.COMMIT))
    base = next(p for p in path.rglob("*.parquet") if parse_base_file_name(p.name))
    parsed = parse_base_file_name(base.name)
    assert parsed is not None
    pending = base.with_name(f"{uuid.uuid4()}-0_{parsed.write_token}_{time_}.parquet")
    shutil.copy(base, pending)
    return pending


def test_cli_orphans_dry_run_lists_what_delete_removes_and_keeps_pending_files(tmp_path: Path) -> None:
    path = tmp_path / "t"
    rows = _rows(_table(path))
    renamed, manual = _stray_copy(path)
    pending = _pending_file(path)
    expected = {str(renamed.relative_to(path)), str(manual.relative_to(path))}
    cli = CliRunner()

    before = _hashes(path)
    listed = cli.invoke(cli_app, ["orphans", str(path), "--older-than", "0s", "--json"])
    assert listed.exit_code == 0, listed.output
    report = json.loads(listed.output)
    assert report["dry_run"] is True and {o["path"] for o in report["orphans"]} == expected
    assert not any(r["removed"] for r in report["removals"])
    text = cli.invoke(cli_app, ["orphans", str(path), "--older-than", "0s"])
    assert text.exit_code == 0 and "would be removed (dry run; --delete removes them)" in text.output
    assert all(p in text.output for p in expected) and pending.name not in text.output
    assert _hashes(path) == before  # the dry runs changed nothing

    young = cli.invoke(cli_app, ["orphans", str(path)])  # default --older-than 24h: every file is younger
    assert young.exit_code == 0 and young.output == "no orphan files\n"

    deleted = cli.invoke(cli_app, ["orphans", str(path), "--older-than", "0s", "--delete", "--json"])
    assert deleted.exit_code == 0, deleted.output
    done = json.loads(deleted.output)
    assert {r["path"] for r in done["removals"] if r["removed"]} == expected
    after = _hashes(path)
    assert set(before) - set(after) == expected and all(after[k] == before[k] for k in after)
    assert pending.exists()
    assert _rows(Table.open(str(path))) == rows

    bad = cli.invoke(cli_app, ["orphans", str(path), "--older-than", "soon"])
    assert bad.exit_code == 2 and "error: --older-than 'soon' is not a duration" in bad.output


def test_cli_orphans_refuses_negative_huge_and_non_finite_ages(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table(path)
    before = _hashes(path)
    cli = CliRunner()
    for age, why in (
        ("-5h", "must not be negative"),
        ("99999999999999999999d", "is too long"),
        ("infs", "is too long"),
        ("nan", "not a duration"),
    ):
        result = cli.invoke(cli_app, ["orphans", str(path), "--older-than", age, "--delete"])
        assert result.exit_code == 2, (age, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (age, result.exception)
        assert f"error: --older-than {age!r}" in result.output and why in result.output, (age, result.output)
    assert _hashes(path) == before
