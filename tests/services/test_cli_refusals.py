"""A command that is refused leaves the table exactly as it was, on a Hudi 1.x table with secondary
indexes (which lakeward's writes and services drop first) and on a table without a metadata table
(which they build first): the request is checked before any of that. A savepoint keeps both (it
changes no data, and the metadata table does not record it)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakeward import Table
from lakeward.services.cli import app as cli_app

BOGUS = "99999999999999999"


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _without_metadata_table(path: Path, table_type: str) -> str:
    options = {"hoodie.metadata.enable": "false"}
    table = Table.create(
        str(path), record_key="id", ordering_field="ts", table_type=table_type, table_version=9, options=options
    )
    for ts in range(2):
        Table.open(str(path), options=options).upsert(pa.table({"id": [1, 2], "ts": [ts] * 2, "v": ["a", "b"]}))
    assert not (path / ".hoodie" / "metadata").exists()
    return table.path


REFUSED = [
    ["rollback", "{path}", BOGUS],
    ["restore", "{path}", BOGUS],
    ["savepoint", "{path}", BOGUS],
    ["delete-savepoint", "{path}", BOGUS],
    ["compact", "{path}", "--instant", BOGUS],
    ["cluster", "{path}", "--instant", BOGUS],
    ["index", "build", "{path}", "--instant", BOGUS],
    ["index", "drop", "{path}", "nosuch"],
]


@pytest.mark.parametrize("table_kind", ["hudi_secondary_indexes", "no_metadata_table"])
def test_refused_commands_change_nothing(
    tmp_path: Path, fixture_table: Callable[[str, str], str], table_kind: str
) -> None:
    if table_kind == "hudi_secondary_indexes":
        path = Path(fixture_table("cow", "v9_txns_simple_meta"))
        assert "secondary_index_merchant_idx" in (path / ".hoodie" / "hoodie.properties").read_text()
    else:
        path = Path(_without_metadata_table(tmp_path / "t", "COPY_ON_WRITE"))
    before = _hashes(path)
    cli = CliRunner()
    for args in [*REFUSED, ["compact", "{path}", "--force"]]:  # a copy-on-write table has no compaction
        result = cli.invoke(cli_app, [a.format(path=path) for a in args])
        assert result.exit_code == 2 and result.output.startswith("error: "), (args, result.output)
        assert _hashes(path) == before, args


def test_a_savepoint_keeps_hudis_secondary_indexes(fixture_table: Callable[[str, str], str]) -> None:
    path = Path(fixture_table("cow", "v9_txns_simple_meta"))
    table = Table.open(str(path))
    latest = table.timeline().completed_writes()[-1].time
    properties = (path / ".hoodie" / "hoodie.properties").read_text()
    result = CliRunner().invoke(cli_app, ["savepoint", str(path), latest])
    assert result.exit_code == 0, result.output
    assert Table.open(str(path)).savepoints() == [latest]
    assert (path / ".hoodie" / "hoodie.properties").read_text() == properties
    assert (path / ".hoodie" / "metadata" / "secondary_index_merchant_idx").is_dir()


def test_index_show_names_hudis_secondary_indexes_and_what_lakeward_does_with_them(
    fixture_table: Callable[[str, str], str],
) -> None:
    path = fixture_table("cow", "v9_txns_simple_meta")
    shown = CliRunner().invoke(cli_app, ["index", "show", path])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    hudi = ["secondary_index_merchant_idx", "secondary_index_txn_date_idx"]
    assert [line.split(":")[0] for line in lines[:2]] == hudi
    assert "next write or table service drops it" in lines[0] and lines[-1] == "no lakeward secondary index"
    as_json = CliRunner().invoke(cli_app, ["index", "show", path, "--json"])
    assert json.loads(as_json.output)["hudi_secondary_indexes"] == hudi


@pytest.mark.parametrize("command", ["upgrade", "downgrade"])
def test_a_change_to_the_version_a_table_has_keeps_hudis_secondary_indexes(
    fixture_table: Callable[[str, str], str], command: str
) -> None:
    path = Path(fixture_table("cow", "v9_txns_simple_meta"))
    before = _hashes(path)
    result = CliRunner().invoke(cli_app, [command, str(path), "--to", "9"])
    assert result.exit_code == 0 and "at table version 9 already" in result.output, result.output
    assert _hashes(path) == before
