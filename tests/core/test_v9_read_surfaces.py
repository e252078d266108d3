"""Read surfaces on Hudi 1.x tables (versions 8 and 9) beyond the hudi-rs fixture matrix:
CDC (none of the fixtures has CDC enabled: the same clear error as a version 6 table
without CDC), reads with filters (lakeward's secondary indexes are not defined on these
tables, and the Hudi metadata-table secondary indexes do not change the rows), time travel
by date-time, and the `lakeward timeline|show|plans PATH` commands.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakeward import Table
from lakeward.core.exceptions import ConfigError
from lakeward.services.cli import app
from tests.interop.compare import comparable_rows, hudi_snapshot, hudi_table, same_rows
from tests.support.fixture_tables import all_fixtures, with_unmaintained_index
from tests.support.lsm_history import archive_instants, completed_times

V8_V9 = [(kind, name) for kind, name in all_fixtures() if name.startswith(("v8", "v9"))]
#: v9 tables with a Hudi secondary index on merchant_name in their metadata table.
WITH_HUDI_SECONDARY_INDEXES = [("cow", "v9_txns_simple_meta"), ("mor/avro", "v9_txns_complex_meta")]
CDC_OFF = re.compile(r"does not have CDC enabled \(hoodie\.table\.cdc\.enabled=false\)")


@pytest.mark.parametrize(("kind", "name"), V8_V9)
def test_read_changes_without_cdc_is_the_v6_error(fixture_table, kind, name):
    table = Table.open(fixture_table(kind, name))
    assert not table.config.cdc_enabled
    with pytest.raises(ConfigError, match=CDC_OFF) as v9_error:
        table.read_changes("earliest")
    v6 = Table.open(fixture_table("cow", "v6_nonpartitioned"))
    with pytest.raises(ConfigError, match=CDC_OFF) as v6_error:
        v6.read_changes("earliest")
    assert str(v9_error.value).replace(table.name, "T") == str(v6_error.value).replace(v6.name, "T")


def _hudi_rows_where(path: str, keep) -> list[dict]:
    return [r for r in comparable_rows(hudi_snapshot(hudi_table(path))) if keep(r)]


@pytest.mark.parametrize(("kind", "name"), WITH_HUDI_SECONDARY_INDEXES)
def test_filtered_reads_give_the_rows_hudi_rs_reads(fixture_table, kind, name):
    path = fixture_table(kind, name)
    table = Table.open(path)
    assert table.indexes() == []  # Hudi's metadata-table indexes are not lakeward index definitions
    merchants = sorted({r["merchant_name"] for r in _hudi_rows_where(path, lambda r: r["merchant_name"])})
    assert len(merchants) > 2
    cases = [
        ([("merchant_name", "=", merchants[0])], lambda r: r["merchant_name"] == merchants[0]),
        ([("merchant_name", "in", merchants[:2])], lambda r: r["merchant_name"] in merchants[:2]),
        ([("region", "=", "us")], lambda r: r["region"] == "us"),
        (
            [[("region", "=", "eu")], [("merchant_name", "=", merchants[-1])]],
            lambda r: r["region"] == "eu" or r["merchant_name"] == merchants[-1],
        ),
    ]
    for filters, keep in cases:
        explained = table.explain(filters)
        assert not explained.uses_index, filters
        got = comparable_rows(table.read(filters=filters))
        want = _hudi_rows_where(path, keep)
        assert want, filters
        assert same_rows(got, want), filters


def test_time_travel_by_date_time_equals_by_instant(fixture_table):
    table = Table.open(fixture_table("mor/avro", "v9_txns_simple_meta"))
    for instant in [i.time for i in table.timeline().completed_writes()][::3]:
        moment = dt.datetime.strptime(instant, "%Y%m%d%H%M%S%f")
        by_time = comparable_rows(table.read(as_of=moment))
        assert same_rows(by_time, comparable_rows(table.read(as_of=instant))), instant


runner = CliRunner()


def test_cli_timeline_shows_completion_times_and_archived_instants(fixture_table):
    path = fixture_table("mor/avro", "v9_txns_simple_meta")
    archived = completed_times(Path(path))[:2]
    archive_instants(Path(path), archived)
    result = runner.invoke(app, ["timeline", path])
    assert result.exit_code == 0, result.output
    header, *lines = result.output.splitlines()
    assert header.split() == ["instant", "time", "action", "state", "completion", "time"]
    timeline = Table.open(path).timeline()
    rows = [line.split() for line in lines]
    assert [r[0] for r in rows] == [i.time for i in timeline]
    for row, instant in zip(rows, timeline):
        assert row[1:3] == [instant.action.value, instant.state.value]
        assert row[3] == (instant.completion_time or "-")
        assert (row[4:] == ["archived"]) == (instant.time in archived)
    assert all(r[3] != "-" for r in rows if r[2] == "completed")


def test_cli_show_and_plans_on_a_v9_table(fixture_table):
    path = str(with_unmaintained_index(fixture_table("mor/avro", "v9_txns_simple_meta")))
    text = runner.invoke(app, ["show", path])
    assert text.exit_code == 0, text.output
    assert "read-only: table version 9" in text.output
    assert "hoodie.table.version = 9" in text.output
    shown = json.loads(runner.invoke(app, ["show", path, "--json"]).output)
    assert shown["read_only"].startswith("table version 9 with a metadata table")
    slices = Table.open(path).file_slices()
    assert sorted(g["file_id"] for g in shown["file_groups"]) == sorted(s.file_id for s in slices)
    assert runner.invoke(app, ["plans", path]).output.strip() == "no pending plans"
    # a compaction Hudi scheduled and did not complete is a pending plan
    timeline = Path(path) / ".hoodie" / "timeline"
    compaction = next(timeline.glob("*.compaction.requested")).name.split(".")[0]
    next(timeline.glob(f"{compaction}_*.commit")).unlink()
    plans = json.loads(runner.invoke(app, ["plans", path, "--json"]).output)
    assert plans == [{"instant": compaction, "action": "compaction", "state": "inflight"}]
