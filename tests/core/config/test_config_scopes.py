"""Config in scopes: read keys, lock keys, one boolean and one field-list parser, TableConfig.from_options."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core import locks
from lakeward.core.config import lock, read
from lakeward.core.config.table import (
    DEFAULT_PAYLOAD,
    INITIAL_VERSION_KEY,
    MERGER_STRATEGY_KEY,
    KeyGeneratorType,
    TableConfig,
    TableType,
)
from lakeward.core.config.values import parse_bool, parse_fields
from lakeward.core.exceptions import ConfigError
from lakeward.core.spark import changes, datasource
from lakeward.core.table_version import table_version


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("true", True), ("FALSE", False), (" True ", True)],
)
def test_parse_bool_accepts_bools_and_true_false_in_any_case(value: object, expected: bool) -> None:
    assert parse_bool(value, "k") is expected


@pytest.mark.parametrize("value", ["yes", "1", 1, "", None])
def test_parse_bool_other_values_raise_naming_the_key(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^hoodie\.x=.* must be true or false$"):
        parse_bool(value, "hoodie.x")


def test_parse_bool_exact_takes_only_the_properties_spelling() -> None:
    assert parse_bool("true", "k", exact=True) is True
    assert parse_bool("false", "k", exact=True) is False
    for value in ("TRUE", " true", True):
        with pytest.raises(ConfigError, match="must be exactly 'true' or 'false'"):
            parse_bool(value, "k", exact=True)


def test_parse_fields_splits_strips_and_keeps_sequences() -> None:
    assert parse_fields("a, b,,c ") == ("a", "b", "c")
    assert parse_fields(["a", "b"]) == ("a", "b")
    assert parse_fields(None) == () and parse_fields("") == ()


def test_read_keys_are_defined_once_and_used_by_the_spark_data_source() -> None:
    assert datasource.READ_KEYS is read.READ_KEYS
    assert (datasource.QUERY_TYPE, datasource.BEGIN, datasource.END, datasource.AS_OF) == (
        "hoodie.datasource.query.type",
        "hoodie.datasource.read.begin.instanttime",
        "hoodie.datasource.read.end.instanttime",
        "as.of.instant",
    )
    assert changes.INCREMENTAL_FORMAT == read.INCREMENTAL_FORMAT == "hoodie.datasource.query.incremental.format"
    assert {changes.IMAGES, changes.STREAM_START} == read.CDC_READ_KEYS <= read.READ_KEYS
    assert set(read.READ_DEFAULTS) <= read.READ_KEYS
    assert read.READ_DEFAULTS[read.QUERY_TYPE] in read.QUERY_TYPES


def test_lock_config_lives_in_the_config_and_core_locks_re_exports_it() -> None:
    assert locks.LockConfig is lock.LockConfig
    assert locks.parse_lock_config is lock.parse_lock_config
    assert locks.LOCK_OPTION_KEYS == lock.LOCK_OPTION_KEYS
    assert "hoodie.write.lock.provider" in lock.LOCK_OPTION_KEYS


def test_from_options_infers_name_and_key_generator_and_keywords_win() -> None:
    config = TableConfig.from_options(
        {
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.partitionpath.field": "region",
            "hoodie.datasource.write.hive_style_partitioning": "true",
            "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        },
        base_path="file:///data/my-orders/",
        ordering_field="ts",
    )
    assert config.name == "my_orders"
    assert config.key_generator is KeyGeneratorType.SIMPLE
    assert config.table_type is TableType.MERGE_ON_READ and config.extra[MERGER_STRATEGY_KEY]
    assert config.hive_style_partitioning is True and config.precombine_field == "ts"
    wins = TableConfig.from_options(
        {"hoodie.datasource.write.recordkey.field": "id", "hoodie.datasource.write.hive_style_partitioning": "true"},
        base_path="/t",
        record_key=["a", "b"],
        hive_style_partitioning=False,
        table_name="named",
    )
    assert (wins.name, wins.record_key_fields, wins.hive_style_partitioning) == ("named", ("a", "b"), False)
    assert wins.key_generator is KeyGeneratorType.NON_PARTITION


def test_from_options_version_8_records_the_initial_version() -> None:
    config = TableConfig.from_options({}, base_path="/t", record_key="id", version=table_version(8))
    assert config.table_version == 8 and config.extra[INITIAL_VERSION_KEY] == "8"


@pytest.mark.parametrize(
    ("options", "kwargs", "message"),
    [
        ({"hoodie.datasource.write.payload.class": "x.Payload"}, {}, "payload.class"),
        ({"hoodie.datasource.write.hive_style_partitioning": "maybe"}, {}, "hive_style_partitioning"),
        ({"hoodie.table.cdc.enabled": "yes"}, {}, "hoodie.table.cdc.enabled"),
        ({}, {"schema": pa.schema([("other", pa.int64())])}, "lacks the record key"),
    ],
)
def test_from_options_bad_values_raise_naming_the_key(options: dict, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TableConfig.from_options(options, base_path="/t", record_key="id", **kwargs)


def test_table_create_writes_the_config_from_options(tmp_path: Path) -> None:
    options = {
        "hoodie.datasource.write.payload.class": DEFAULT_PAYLOAD,
        "hoodie.table.cdc.enabled": "true",
        "hoodie.table.timeline.timezone": "utc",
    }
    schema = pa.schema([("id", pa.string()), ("p", pa.string()), ("ts", pa.int64())])
    table = Table.create(
        str(tmp_path / "t"), record_key="id", partition_by="p", ordering_field="ts", schema=schema, options=options
    )
    expected = TableConfig.from_options(
        options, base_path=table.storage.uri, record_key="id", partition_by="p", ordering_field="ts", schema=schema
    )
    assert Table.open(str(tmp_path / "t")).config == expected
