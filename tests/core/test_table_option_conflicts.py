"""Options that name a table property must agree with the table's `hoodie.properties`: a conflict is a
ConfigError naming the key when the table is opened, and nothing on the table changes (the
metadata-table gate of a write used to run first, deleting or building the metadata table before a
conflicting partition-folder option was refused)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.exceptions import ConfigError
from lakeward.core.table import Table

CONFLICTS = {
    "hoodie.datasource.write.recordkey.field": "v",
    "hoodie.datasource.write.partitionpath.field": "v",
    "hoodie.datasource.write.precombine.field": "v",
    "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.ComplexKeyGenerator",
    "hoodie.datasource.write.table.type": "MERGE_ON_READ",
    "hoodie.table.name": "other",
    "hoodie.write.table.version": "9",
    "hoodie.table.cdc.enabled": "true",
    "hoodie.table.timeline.timezone": "UTC",
    "hoodie.datasource.write.hive_style_partitioning": "true",
    "hoodie.datasource.write.partitionpath.urlencode": "true",
    "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
}


def _tree(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


@pytest.fixture
def table_path(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    t = Table.create(
        str(path), record_key="id", partition_by="part", ordering_field="ts", table_name="t", table_version=8
    )
    t.upsert(pa.table({"id": [1, 2], "part": ["a", "b"], "ts": [1, 1], "v": ["x", "y"]}))
    return path


@pytest.mark.parametrize("key", list(CONFLICTS))
def test_an_option_against_the_tables_properties_is_refused_at_open(table_path: Path, key: str) -> None:
    before = _tree(table_path)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        Table.open(str(table_path), options={key: CONFLICTS[key], "hoodie.metadata.enable": "false"})
    assert _tree(table_path) == before


def test_the_tables_own_values_are_accepted(table_path: Path) -> None:
    same = {
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "part",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
        "hoodie.table.name": "t",
        "hoodie.write.table.version": "8",
        "hoodie.table.cdc.enabled": "false",
        "hoodie.datasource.write.hive_style_partitioning": "false",
    }
    table = Table.open(str(table_path), options=same)
    table.upsert(pa.table({"id": [3], "part": ["a"], "ts": [1], "v": ["z"]}))
    assert sorted(Table.open(str(table_path)).read().column("id").to_pylist()) == [1, 2, 3]


@pytest.mark.parametrize(
    "key, value",
    [
        ("hoodie.metadata.enable", "yes"),  # pydantic took it, the metadata-table gate refused it mid-write
        ("hoodie.metadata.record.index.enable", "1"),
        ("hoodie.client.heartbeat.interval_in_ms", str(10**12)),  # overflowed after the commit
        ("hoodie.write.lock.wait_time_ms", str(10**13)),
        ("hoodie.metadata.record.index.min.filegroup.count", str(10**12)),
        ("hoodie.index.bloom.num_entries", "2000000000"),  # refused by the bloom filter after the instant began
    ],
)
def test_a_value_hudi_cannot_hold_is_refused_at_open(table_path: Path, key: str, value: str) -> None:
    before = _tree(table_path)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        Table.open(str(table_path), options={key: value})
    assert _tree(table_path) == before


@pytest.mark.parametrize(
    "options",
    [
        {"hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator"},
        {
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
            "hoodie.keygen.timebased.timestamp.type": "SCALAR",
            "hoodie.keygen.timebased.timestamp.scalar.time.unit": "FORTNIGHTS",
        },
        {
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
            "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
            "hoodie.keygen.timebased.timezone": "Not/AZone",
        },
    ],
)
def test_create_refuses_timestamp_key_generator_settings_every_write_would_refuse(
    tmp_path: Path, options: dict
) -> None:
    with pytest.raises(ConfigError, match="hoodie.keygen.timebased"):
        Table.create(str(tmp_path / "t"), record_key="id", partition_by="day", options=options)
    assert not (tmp_path / "t" / ".hoodie" / "hoodie.properties").exists()


def test_create_refuses_an_ordering_field_missing_from_the_schema(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    with pytest.raises(ConfigError, match="'ts'"):
        Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts", schema=schema)
    assert not (tmp_path / "t" / ".hoodie" / "hoodie.properties").exists()
