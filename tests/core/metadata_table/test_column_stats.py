"""The `column_stats` and `partition_stats` partitions as Hudi 1.1 writes them, and data skipping.

Checked against the `_meta` fixtures (written by Hudi 1.1.1): the keys, the values (byte for byte),
the file groups records go to, and every Parquet file's stats recomputed from its footer equal
Hudi's records; filtered reads that skip files through them give the rows an unpruned read and
hudi-rs give, and actually skip files.
"""

from __future__ import annotations

import datetime
import decimal
import io
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.file_group import log_file
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.metadata_table.column_stats import (
    COLUMN_STATS_PARTITION,
    column_stats_key,
    decode_range,
    encode_range,
    file_group_index,
    file_id_hash,
    hash_id,
    parquet_ranges,
    read_ranges,
)
from lakeward.core.metadata_table.index_ids import xxh64
from lakeward.core.metadata_table.partition_stats import PARTITION_STATS_PARTITION, partition_stats_key
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA, MetadataRecordType
from lakeward.core.metadata_table.stats_writer import StatsChange, column_stats_cells, latest_files
from lakeward.core.read.filters import to_expression
from tests.interop.compare import comparable_rows, hudi_snapshot, hudi_table
from tests.support.fixture_tables import META_FIXTURES

_SCHEMA = fastavro.parse_schema(METADATA_RECORD_SCHEMA)
UTC = datetime.UTC
#: Filters of every pruning operator over the fixtures' columns (and some no file can match).
FILTERS: list[Any] = [
    [("currency", "=", "GBP")],
    [("currency", "in", ["JPY", "GBP"])],
    [("txn_ts", ">", 1700700000000)],
    [("txn_ts", "<=", 1700000000003)],
    [("merchant_name", "is null", None)],
    [("merchant_name", "is not null", None)],
    [("txn_date", "=", datetime.date(2024, 1, 16))],
    [("fee_amount", ">", decimal.Decimal("30"))],
    [("txn_datetime", ">=", datetime.datetime(2024, 1, 18, tzinfo=UTC))],
    [[("currency", "=", "GBP")], [("txn_ts", ">", 1700700000000)]],
    [("currency", "=", "XXX")],
    [("currency", "!=", "USD")],
]


def _cells(folder: Path) -> list[tuple[str, str, bytes]]:
    """(file name, key, value) of every cell of a metadata partition's HFiles and HFile log blocks."""
    out = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".hoodie"):
            continue
        data = path.read_bytes()
        if path.name.endswith(".hfile"):
            blobs = [data]
        else:
            blobs = [b.content for b in log_file.scan_blocks(data) if b.block_type is log_file.BlockType.HFILE_DATA]
        for blob in blobs:
            out.extend((path.name, k.decode(), v) for k, v in HFileReader(blob, path.name).items())
    return out


def _data_files(path: str) -> dict[str, str]:
    """File name -> partition path of every Parquet file of a table."""
    return {
        p.name: posixpath.dirname(str(p.relative_to(path))).replace(".", "")
        for p in Path(path).rglob("*.parquet")
        if ".hoodie" not in p.parts
    }


def test_key_hashes_are_hudis():
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999  # the XXH64 reference vector
    assert hash_id("currency") == "/m6lxu4Dh5w="
    assert hash_id("region=us") == "431THTTwO5Q="
    assert hash_id(".") == "FXThHwelITM="
    assert len(hash_id("x" * 100)) == 12  # the 32-byte stripes too
    name = ".3e93c8a9-f2c4-4d4d-8d4d-6f62a3c5e6f9-0_20260307162604102.log.1_0-52-126"
    assert len(file_id_hash(name)) == 24


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_hudis_column_stats_records_are_reproduced(fixture_table: Callable[[str, str], str], kind: str, name: str):
    path = fixture_table(kind, name)
    files = _data_files(path)
    schema = pq.read_schema(next(Path(path).rglob("*.parquet")))
    cells = _cells(Path(path) / ".hoodie" / "metadata" / COLUMN_STATS_PARTITION)
    checked = 0
    for file_name, key, value in cells:
        stats = decode_range(fastavro.schemaless_reader(io.BytesIO(value), _SCHEMA, None))  # type: ignore[arg-type]
        group = int(file_name.lstrip(".").split("-")[2])
        assert file_group_index(key, 2) == group
        if not file_name.endswith(".hfile"):  # base HFiles carry their own name in _hoodie_file_name
            assert encode_range(stats, schema.field(stats.column).type, 2, MetadataRecordType.COLUMN_STATS) == value
        if stats.file_name in files:
            partition = files[stats.file_name]
            assert key == column_stats_key(stats.column, partition, stats.file_name)
            data = (Path(path) / partition / stats.file_name).read_bytes()
            assert parquet_ranges(data, stats.file_name, [stats.column])[stats.column] == stats
            checked += 1
    assert checked > 50


@pytest.mark.parametrize(("kind", "name"), [f for f in META_FIXTURES if "nonpart" not in f[1]])
def test_hudis_partition_stats_keys_and_values(fixture_table: Callable[[str, str], str], kind: str, name: str):
    path = fixture_table(kind, name)
    schema = pq.read_schema(next(Path(path).rglob("*.parquet")))
    cells = _cells(Path(path) / ".hoodie" / "metadata" / PARTITION_STATS_PARTITION)
    assert cells
    for file_name, key, value in cells:
        stats = decode_range(fastavro.schemaless_reader(io.BytesIO(value), _SCHEMA, None))  # type: ignore[arg-type]
        assert key == partition_stats_key(stats.column, stats.file_name)
        assert stats.tight_bound
        if not file_name.endswith(".hfile"):
            assert encode_range(stats, schema.field(stats.column).type, 2, MetadataRecordType.PARTITION_STATS) == value


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    data = table.drop_columns([c for c in table.column_names if c.startswith("_hoodie")])
    return sorted(comparable_rows(data), key=repr)


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_data_skipping_gives_the_rows_of_a_full_read_and_of_hudi_rs(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    path = fixture_table(kind, name)
    table = Table.open(path)
    assert read_ranges(table.storage)
    theirs = pa.Table.from_batches(hudi_snapshot(hudi_table(path)))
    skipped = 0
    for filters in FILTERS:
        scan = table.scan(filters=filters)
        plan = scan.plan()
        full = table.scan(filters=filters, use_index=False)
        mine = scan.to_arrow()
        assert _sorted(mine) == _sorted(full.to_arrow()), filters
        expression = full.filters
        expected = theirs.filter(_expr(expression))
        assert _sorted(mine) == _sorted(expected), filters
        assert len(plan.splits) + len([p for p in plan.pruned if "stats" in p.pruner]) == len(full.plan().splits)
        skipped += len(full.plan().splits) - len(plan.splits)
    assert skipped > 0  # files are actually skipped
    explained = str(table.scan(filters=[("txn_ts", ">", 1700700000000)]).explain())
    assert "pruned by column stats" in explained or "pruned by partition stats" in explained


def _expr(filters: Any) -> pc.Expression:
    expression = to_expression(filters)
    assert expression is not None
    return expression


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_rebuilt_column_stats_equal_hudis(fixture_table: Callable[[str, str], str], kind: str, name: str):
    """The records lakeward builds for the latest base files of Hudi's table (as its initialisation
    does) are Hudi's records for the same files, value for value."""
    path = fixture_table(kind, name)
    table = Table.open(path)
    files = latest_files(table.storage, table.timeline())
    bases = {p: {n: s for n, s in names.items() if not n.startswith(".")} for p, names in files.items()}
    cells, _ = column_stats_cells(table.storage, StatsChange(bases, {}), 2)
    hudis = read_ranges(table.storage)
    assert cells and set(cells) <= set(hudis)
    for key, value in cells.items():
        mine = decode_range(fastavro.schemaless_reader(io.BytesIO(value), _SCHEMA, None))  # type: ignore[arg-type]
        assert mine == hudis[key], key
