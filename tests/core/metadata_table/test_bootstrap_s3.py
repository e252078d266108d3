"""Metadata-table initialisation of a v9 table on a real S3 server (SeaweedFS), and a v6 writer keeping
one there (its delta commits, compaction and clean, checked against a storage listing): no folders to
create, the properties replaced by one PUT, hudi-rs reads the table to the same rows, and
lakeward lists through the metadata table (a stray copy of a data file, put after
initialisation, is not seen).

hudi-rs 0.5.0 does not list through a metadata table on S3, whoever wrote it: with Hudi's own
fixture `cow/v9_txns_simple_meta` uploaded to SeaweedFS, a stray copy put the same way is read
by hudi-rs (12 rows become 14), so it falls back to listing storage there. The stray-copy
proof for hudi-rs is made on local tables (`test_bootstrap.py`).
"""

from __future__ import annotations

import posixpath
import uuid

import hudi
import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.file_group.metadata_listing import MetadataFileListing, load_metadata_timeline, metadata_storage
from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.storage import Storage
from lakeward.core.timeline import Action

pytestmark = pytest.mark.s3


def _rows(table: pa.Table) -> list[tuple[str, str, int]]:
    return sorted(zip(table["id"].to_pylist(), table["part"].to_pylist(), table["val"].to_pylist()))


def test_s3_initialize_then_both_readers_list_through_it(s3_server, s3_table_uri):  # type: ignore[no-untyped-def]
    table = Table.create(
        s3_table_uri,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_version=9,
        storage_options=s3_server.options,
        options={"hoodie.metadata.enable": "false"},  # written without one: this test initialises it afterwards
    )
    table.insert(pa.table({"id": ["a", "b", "c"], "part": ["x", "y", "x"], "ts": [1, 1, 1], "val": [1, 2, 3]}))
    table.upsert(pa.table({"id": ["a", "d"], "part": ["x", "y"], "ts": [2, 2], "val": [10, 4]}))
    expected = [("a", "x", 10), ("b", "y", 2), ("c", "x", 3), ("d", "y", 4)]

    result = Table.open(s3_table_uri, storage_options=s3_server.options).initialize_metadata_table()
    assert result is not None and result.partitions == 2
    storage = Storage.for_uri(s3_table_uri, s3_server.options)
    assert not storage.exists(".hoodie/hoodie.properties.backup")
    on_storage = sorted(
        (e.path, e.size)
        for e in storage.list_dir("", recursive=True)
        if not e.is_dir and not e.path.startswith(".hoodie/") and not e.name.startswith(".hoodie_partition")
    )
    assert sorted((e.path, e.size) for e in MetadataFileListing(storage).file_entries()) == on_storage

    source = next(path for path, _ in on_storage if path.startswith("y/") and path.endswith(".parquet"))
    parsed = parse_base_file_name(posixpath.basename(source))
    assert parsed is not None
    stray = f"y/{uuid.uuid4()}-0_{parsed.write_token}_{parsed.instant_time}.parquet"
    theirs = hudi.HudiTableBuilder.from_base_uri(s3_table_uri).with_storage_options(s3_server.options).build()
    assert _rows(pa.Table.from_batches(theirs.read())) == expected
    storage.write_bytes(stray, storage.read_bytes(source))

    reopened = Table.open(s3_table_uri, storage_options=s3_server.options)
    assert FileSystemView.load(storage, reopened.timeline()).from_metadata_table
    assert _rows(reopened.read()) == expected


def test_s3_a_v6_writer_keeps_the_metadata_table_as_hudi_0x_does(s3_server, s3_table_uri):  # type: ignore[no-untyped-def]
    Table.create(
        s3_table_uri, record_key="id", partition_by="part", ordering_field="ts", storage_options=s3_server.options
    )
    options = {"hoodie.metadata.enable": "true", "hoodie.metadata.compact.max.delta.commits": 2}
    table = Table.open(s3_table_uri, options=options, storage_options=s3_server.options)
    expected: dict[str, tuple[str, int]] = {}
    for n in range(4):
        rows = {"id": [f"k{n}", "a"], "part": [f"p{n % 2}", "x"], "ts": [n, n], "val": [n, 10 + n]}
        table.upsert(pa.table(rows))
        expected |= {k: (p, v) for k, p, v in zip(rows["id"], rows["part"], rows["val"], strict=True)}
    storage = Storage.for_uri(s3_table_uri, s3_server.options)
    assert compare_files_partition(storage).ok
    assert load_metadata_timeline(metadata_storage(storage)).completed(Action.COMMIT)  # its compaction ran
    got = Table.open(s3_table_uri, storage_options=s3_server.options).read()
    assert _rows(got) == sorted((k, p, v) for k, (p, v) in expected.items())
