"""Metadata-table lag: data-table instants the metadata table does not reflect, from the timelines only.

The lagging state is built the way it happens: a writer that opened the table before its
metadata table existed (so it does not maintain it) commits after `initialize_metadata_table`.
Tables Apache Hudi wrote (which keeps the metadata table in step) have no lag.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.health import Severity, health_report, table_health, take_snapshot
from lakeward.core.metadata_table.lag import metadata_table_lag
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import Action, CommitMetadata
from lakeward.core.timeline.transitions import complete, create_requested, transition_to_inflight
from tests.support.fixture_tables import unzip_table

META_FIXTURES = [
    ("cow", "v9_txns_simple_meta"),
    ("cow", "v9_txns_complex_meta"),
    ("cow", "v9_txns_nonpart_meta"),
    ("mor/avro", "v9_txns_simple_meta"),
    ("mor/avro", "v9_txns_complex_meta"),
]


def _rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"id": ids, "ts": [ts] * len(ids), "v": [f"v{i}-{ts}" for i in ids]})


def lagging_table(path: Path, version: int, table_type: str = "COPY_ON_WRITE") -> tuple[Table, list[str]]:
    """A table with a metadata table that misses the last two commits, and those commits' times: the
    metadata table as a writer that does not maintain it leaves it (no delta commits of those times)."""
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type=table_type, table_version=version)
    table.upsert(_rows([1, 2, 3], 0))
    Table.open(str(path)).initialize_metadata_table()
    missed = [table.upsert(_rows([4], 1)).instant_time, table.upsert(_rows([1], 2)).instant_time]
    metadata_timeline = path / ".hoodie" / "metadata" / ".hoodie" / "timeline"
    for instant_file in [p for p in metadata_timeline.iterdir() if p.is_file() and p.name.startswith(tuple(missed))]:
        instant_file.unlink()
    return Table.open(str(path)), missed


@pytest.mark.parametrize("version", [8, 9])
def test_no_lag_when_a_table_opened_before_initialisation_writes(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_version=version)
    table.upsert(_rows([1, 2, 3], 0))
    Table.open(str(path)).initialize_metadata_table()
    table.upsert(_rows([4], 1))  # this handle read hoodie.properties before the metadata table existed
    reopened = Table.open(str(path))
    assert metadata_table_lag(reopened.storage, reopened.timeline()).instants == 0


def _data_table(root: Path) -> Path:
    return min(
        (p.parent.parent for p in root.rglob("hoodie.properties") if p.parent.name == ".hoodie"),
        key=lambda p: len(p.parts),
    )


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_lag_hudi_written_tables_have_none_even_without_their_data_files(tmp_path: Path, kind: str, name: str) -> None:
    path = _data_table(unzip_table(kind, name, tmp_path))
    table = Table.open(str(path))
    completed = table.timeline().completed()
    assert len(completed) > 10
    assert metadata_table_lag(table.storage, table.timeline()).instants == 0
    report = table_health(table)
    assert report.snapshot.metadata_lag_instants == 0 and "metadata_table" in report.factors
    # timelines only: with every data file and metadata-table file gone, the answer is the same
    for file in [p for p in path.rglob("*") if p.is_file() and "timeline" not in p.parts and ".hoodie" not in p.parts]:
        file.unlink()
    shutil.rmtree(path / ".hoodie" / "metadata" / "files")
    assert metadata_table_lag(table.storage, Table.open(str(path)).timeline()).instants == 0


@pytest.mark.parametrize("version", [8, 9])
def test_lag_counts_commits_of_a_writer_that_does_not_maintain_the_metadata_table(tmp_path: Path, version: int) -> None:
    table, missed = lagging_table(tmp_path / "t", version)
    lag = metadata_table_lag(table.storage, table.timeline())
    assert [i.time for i in lag.behind] == missed and lag.oldest is not None and lag.oldest.time == missed[0]
    # the commit before initialisation is reflected by it (the initialisation listed the table as of then)
    first = table.timeline().completed()[0]
    assert first.time not in missed and first.time not in {i.time for i in lag.behind}


def test_lag_a_pending_metadata_delta_commit_does_not_count_a_completed_one_does(tmp_path: Path) -> None:
    table, missed = lagging_table(tmp_path / "t", 9)
    mdt = metadata_storage(table.storage)
    # the metadata table's own instant for the first missed commit (timeline only: what a repairing
    # writer records last), first pending, then completed
    inflight = transition_to_inflight(
        mdt, create_requested(mdt, missed[0], Action.DELTA_COMMIT, b"", TimelineLayout.V2)
    )
    assert metadata_table_lag(table.storage, table.timeline()).instants == 2
    complete(mdt, inflight, CommitMetadata(operationType="UPSERT_PREPPED").to_avro(), "LOCAL")
    lag = metadata_table_lag(table.storage, table.timeline())
    assert [i.time for i in lag.behind] == missed[1:]


def test_lag_health_finding_factor_score_and_metrics(tmp_path: Path) -> None:
    table, missed = lagging_table(tmp_path / "t", 9, "MERGE_ON_READ")
    snapshot = take_snapshot(table)
    assert snapshot.metadata_lag_instants == 2 and snapshot.metadata_lag_oldest == missed[0]
    assert snapshot.metadata_lag_seconds is not None and 0 <= snapshot.metadata_lag_seconds < 300
    report = health_report(snapshot)
    (finding,) = [f for f in report.findings if f.code == "metadata_table_lag"]
    assert finding.severity is Severity.WARNING and finding.factor == "metadata_table"
    assert finding.message.startswith(f"metadata table is 2 instant(s) behind since {missed[0]} (completed ")
    assert finding.message.endswith("readers that list through it miss files")
    assert report.factors["metadata_table"] == 0.5
    assert report.score == 92  # a warning: half of 20, of 120 (every factor of a table with a metadata table)
    later = health_report(take_snapshot(table, dt.datetime.now(dt.UTC) + dt.timedelta(minutes=20)))
    (critical,) = [f for f in later.findings if f.code == "metadata_table_lag"]
    assert critical.severity is Severity.CRITICAL and later.score == 83


def test_lag_tables_without_a_metadata_table_have_no_lag_factor(tmp_path: Path) -> None:
    table = Table.create(  # a table without a metadata table: what this test is about
        str(tmp_path / "t"),
        record_key="id",
        ordering_field="ts",
        table_version=9,
        options={"hoodie.metadata.enable": "false"},
    )
    table.upsert(_rows([1], 0))
    report = table_health(table)
    assert report.snapshot.metadata_lag_instants is None and "metadata_table" not in report.factors
    assert report.score == 100
