"""How a new table merges a stored record with an incoming one, as Apache Hudi decides it.

Hudi 1.x (table versions 8 and 9) infers EVENT_TIME_ORDERING when the table has an ordering
(precombine) field and no payload class or merge mode is given (`HoodieTableConfig`'s
`RECORD_MERGE_MODE` default; the `_meta` fixtures that Hudi 1.x wrote all carry it), and
COMMIT_TIME_ORDERING without one. Hudi 0.x (version 6) defaults to OverwriteWithLatestAvroPayload:
the latest write wins. The expected rows here follow those rules; hudi-rs reads the same table.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.config.properties import parse_properties
from lakeward.core.exceptions import ConfigError
from lakeward.core.table import Table
from tests.interop.compare import hudi_snapshot, hudi_table


def row(ts: int, v: str) -> pa.Table:
    return pa.table({"id": ["a"], "v": [v], "ts": pa.array([ts], pa.int64())})


def properties(path: Path) -> dict[str, str]:
    return parse_properties((path / ".hoodie" / "hoodie.properties").read_text())


def snapshot(path: Path) -> list[tuple[str, str, int]]:
    table = Table.open(str(path)).read(engine="local")
    return sorted(zip(*(table.column(c).to_pylist() for c in ("id", "v", "ts"))))


def hudi_rs(path: Path) -> list[tuple[str, str, int]]:
    table = pa.Table.from_batches(hudi_snapshot(hudi_table(str(path))))
    return sorted(zip(*(table.column(c).to_pylist() for c in ("id", "v", "ts"))))


def older_after_newer(path: Path, table_type: str, version: int, options: dict[str, str], ordering: bool = True):
    table = Table.create(
        str(path),
        record_key="id",
        ordering_field="ts" if ordering else None,
        table_type=table_type,
        table_version=version,
        options=options,
    )
    table.upsert(row(10, "newer"))
    table.upsert(row(5, "older"))
    return snapshot(path)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_a_hudi_1x_table_with_an_ordering_field_merges_by_event_time_by_default(tmp_path, version, table_type):
    path = tmp_path / "t"
    assert older_after_newer(path, table_type, version, {}) == [("a", "newer", 10)]
    assert properties(path)["hoodie.record.merge.mode"] == "EVENT_TIME_ORDERING"
    assert hudi_rs(path) == [("a", "newer", 10)]


@pytest.mark.parametrize("version", [8, 9])
def test_a_hudi_1x_table_without_an_ordering_field_merges_by_commit_time(tmp_path, version):
    path = tmp_path / "t"
    assert older_after_newer(path, "MERGE_ON_READ", version, {}, ordering=False) == [("a", "older", 5)]
    assert properties(path)["hoodie.record.merge.mode"] == "COMMIT_TIME_ORDERING"


def test_a_version_6_table_keeps_hudi_0x_default_the_latest_write_wins(tmp_path):
    path = tmp_path / "t"
    assert older_after_newer(path, "COPY_ON_WRITE", 6, {}) == [("a", "older", 5)]
    assert properties(path)["hoodie.compaction.payload.class"].endswith("OverwriteWithLatestAvroPayload")


@pytest.mark.parametrize("key", ["hoodie.record.merge.mode", "hoodie.write.record.merge.mode"])
@pytest.mark.parametrize("version", [8, 9])
def test_the_merge_mode_option_chooses_commit_time(tmp_path, version, key):
    path = tmp_path / "t"
    options = {key: "COMMIT_TIME_ORDERING"}
    assert older_after_newer(path, "MERGE_ON_READ", version, options) == [("a", "older", 5)]
    assert properties(path)["hoodie.record.merge.mode"] == "COMMIT_TIME_ORDERING"
    assert hudi_rs(path) == [("a", "older", 5)]


def test_the_merge_mode_option_chooses_event_time_on_version_6(tmp_path):
    path = tmp_path / "t"
    options = {"hoodie.record.merge.mode": "EVENT_TIME_ORDERING"}
    assert older_after_newer(path, "COPY_ON_WRITE", 6, options) == [("a", "newer", 10)]
    assert properties(path)["hoodie.compaction.payload.class"].endswith("DefaultHoodieRecordPayload")


@pytest.mark.parametrize(
    ("options", "ordering", "message"),
    [
        ({"hoodie.record.merge.mode": "CUSTOM"}, True, "hoodie.record.merge.mode='CUSTOM' is not supported"),
        ({"hoodie.record.merge.mode": "EVENT_TIME_ORDERING"}, False, "needs an ordering field"),
        (
            {
                "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
                "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
            },
            True,
            "merges differently",
        ),
        (
            {
                "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
                "hoodie.write.record.merge.mode": "EVENT_TIME_ORDERING",
            },
            True,
            "disagree",
        ),
    ],
)
def test_bad_merge_options_are_refused_and_create_no_table(tmp_path, options, ordering, message):
    path = tmp_path / "t"
    with pytest.raises(ConfigError, match=message):
        Table.create(str(path), record_key="id", ordering_field="ts" if ordering else None, options=options)
    assert not path.exists()


@pytest.mark.parametrize(
    "options",
    [
        {"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"},
        {"hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"},
    ],
)
def test_a_write_asking_for_other_merging_than_the_tables_is_refused(tmp_path, options):
    path = tmp_path / "t"
    Table.create(str(path), record_key="id", ordering_field="ts", table_version=9).upsert(row(10, "newer"))
    before = sorted(p.name for p in (path / ".hoodie" / "timeline").iterdir())
    with pytest.raises(ConfigError, match="merging is fixed when it is created"):
        Table.open(str(path), options=options).upsert(row(5, "older"))
    assert sorted(p.name for p in (path / ".hoodie" / "timeline").iterdir()) == before
    assert snapshot(path) == [("a", "newer", 10)]
    # the same merging as the table's is accepted
    Table.open(str(path), options={"hoodie.record.merge.mode": "EVENT_TIME_ORDERING"}).upsert(row(11, "later"))
    assert snapshot(path) == [("a", "later", 11)]


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize(("ordering_type", "deleted"), [(pa.int64(), False), (pa.int32(), True)], ids=["long", "int"])
def test_a_flagged_delete_with_ordering_value_zero_on_merge_on_read(tmp_path, version, ordering_type, deleted):
    """Only Java's Integer 0 is Hudi's "no ordering value" (`HoodieRecord.DEFAULT_ORDERING_VALUE`, compared
    with `equals`): a Long 0 is an ordinary value, smaller than the stored 10, so its delete loses;
    an Integer 0 deletes in natural order. The same before and after a compaction."""
    path = tmp_path / "t"
    table = Table.create(
        str(path),
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        table_version=version,
        options={"hoodie.record.merge.mode": "EVENT_TIME_ORDERING"},
    )

    def flagged(ts: int, v: str, flag: bool) -> pa.Table:
        return pa.table({"id": ["a"], "v": [v], "ts": pa.array([ts], ordering_type), "_hoodie_is_deleted": [flag]})

    table.upsert(flagged(10, "stored", False))
    table.upsert(flagged(0, "delete", True))
    expected = [] if deleted else [("a", "stored", 10)]
    assert snapshot(path) == expected
    batches = hudi_snapshot(hudi_table(str(path)))
    assert (hudi_rs(path) if batches else []) == expected
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    table.run_compaction(instant)
    assert snapshot(path) == expected
