"""Upgrades (6 -> 8, 6 -> 9) and the downgrade 9 -> 8 of tables with a metadata table, as Apache Hudi 1.x's
`UpgradeDowngrade` runs them: the metadata table first (its log files compacted, its timeline moved to
layout 2, its `hoodie.properties` at the new version: merge mode CUSTOM with `HoodieMetadataPayload`), then
the data table. After each, the `files` partition lists what storage holds and hudi-rs (which lists files
through the metadata table on 8/9) reads what lakeward reads; a SIGKILL at every step is safe.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.storage import Storage
from lakeward.core.table_services.upgrade import layout1_files
from tests.interop.compare import all_mismatches, both_readers, fail_on
from tests.support.crash import run_and_kill

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])
CRASH_POINTS = ["prepared", "timeline_copied", "metadata_switched", "switched"]


def _batch(ids: range, ts: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": f"k{i:03d}", "part": f"p{i % 3}", "ts": ts, "val": i * ts} for i in ids], schema=SCHEMA
    )


def _write(path: str, version: int, table_type: str, options: dict[str, str] | None = None) -> Table:
    """A table whose default-configured writer kept a metadata table through inserts, upserts and a delete."""
    keys = {"record_key": "id", "partition_by": "part", "ordering_field": "ts"}
    table = Table.create(path, **keys, table_type=table_type, table_version=version, options=options)
    table.insert(_batch(range(40), 1))
    table.upsert(_batch(range(0, 40, 3), 2))
    table.delete(_batch(range(0, 6), 3))
    table.upsert(_batch(range(30, 50), 4))
    return table


def _props(path: Path) -> dict[str, str]:
    return parse_properties((path / ".hoodie" / "hoodie.properties").read_text())


def _check(path: str) -> None:
    diff = compare_files_partition(Storage.for_uri(path))
    assert diff.ok, str(diff)
    ours, theirs = both_readers(path)
    assert ours == theirs


def _check_metadata_table(path: str, version: int) -> dict[str, str]:
    mdt = Path(path) / ".hoodie" / "metadata"
    props = _props(mdt)
    assert props["hoodie.table.version"] == str(version)
    assert props["hoodie.timeline.layout.version"] == "2"
    assert props["hoodie.record.merge.mode"] == "CUSTOM"
    assert props["hoodie.record.merge.strategy.id"] == "00000000-0000-0000-0000-000000000000"
    assert props["hoodie.compaction.payload.class"] == "org.apache.hudi.metadata.HoodieMetadataPayload"
    assert props["hoodie.table.keygenerator.type"] == "HOODIE_TABLE_METADATA"
    assert layout1_files(metadata_storage(Storage.for_uri(path))) == []
    return props


@pytest.mark.parametrize("index", ["BLOOM", "RECORD_INDEX"])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("to", [8, 9])
def test_upgrade_of_a_table_with_a_metadata_table_upgrades_it_too(
    tmp_path: Path, to: int, table_type: str, index: str
) -> None:
    path = str(tmp_path / "t")
    options = {"hoodie.index.type": index}
    _write(path, 6, table_type, options)
    partitions = _props(Path(path))["hoodie.table.metadata.partitions"]
    assert "files" in partitions
    before = Table.open(path).read().num_rows

    result = Table.open(path, options=options).upgrade(to=to)

    assert (result.from_version, result.to_version) == (6, to)
    assert _props(Path(path))["hoodie.table.metadata.partitions"] == partitions
    _check_metadata_table(path, to)
    _check(path)
    fail_on(all_mismatches(path))
    table = Table.open(path, options=options)
    assert table.read().num_rows == before
    table.upsert(_batch(range(45, 60), 5))  # the metadata table's writer and services go on at the new version
    table.delete(_batch(range(50, 52), 6))
    assert Table.open(path).read().num_rows == before + 10 - 2
    _check(path)


def test_downgrade_9_to_8_of_a_table_with_a_metadata_table(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _write(path, 9, "MERGE_ON_READ")
    before = Table.open(path).read().num_rows

    result = Table.open(path).downgrade(to=8)

    assert (result.from_version, result.to_version) == (9, 8)
    assert _props(Path(path))["hoodie.table.metadata.partitions"] == "files"
    _check_metadata_table(path, 8)
    _check(path)
    table = Table.open(path)
    table.upsert(_batch(range(100, 110), 5))
    assert Table.open(path).read().num_rows == before + 10
    _check(path)
    fail_on(all_mismatches(path))


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_upgrade_with_a_metadata_table_killed_is_safe_and_finished_by_running_it_again(
    tmp_path: Path, point: str
) -> None:
    path = str(tmp_path / "t")
    _write(path, 6, "MERGE_ON_READ")
    rows = sorted(Table.open(path).read().column("id").to_pylist())

    run_and_kill("crash_upgrader.py", path, point, "9")

    assert Table.open(path).version.number == (9 if point == "switched" else 6)
    assert sorted(Table.open(path).read().column("id").to_pylist()) == rows
    Table.open(path).upgrade(to=9)  # a metadata table left at another version than its data table is dropped

    assert Table.open(path).version.number == 9
    assert layout1_files(Storage.for_uri(path)) == []
    table = Table.open(path)
    table.upsert(_batch(range(60, 70), 5))  # builds it again at version 9 if it was dropped
    _check_metadata_table(path, 9)
    _check(path)
    assert sorted(Table.open(path).read().column("id").to_pylist()) == sorted(
        [*rows, *(f"k{i:03d}" for i in range(60, 70))]
    )
