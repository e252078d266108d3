"""List requests of a snapshot read on a real S3 server (SeaweedFS), counted by a forwarding
proxy (issue 17: O(1) list calls with the metadata table).

With the metadata table a read lists four folders under `.hoodie/` (the timeline, its history,
the metadata table's timeline and its `files` partition) whatever the number of partitions;
without it the read lists the whole table, so what the LIST answers carry grows with the
partitions (one request per 1,000 keys).
"""

from __future__ import annotations

import posixpath
import uuid

import pyarrow as pa
import pytest

from lakeward import Table
from tests.support.s3_requests import CountingS3Proxy
from tests.support.seaweedfs import S3Server

pytestmark = pytest.mark.s3


def _read_lists(
    server: S3Server, proxy: CountingS3Proxy, partitions: int, metadata_table: bool
) -> tuple[int, int, list[str]]:
    """(LIST requests, keys listed, prefixes listed relative to the table) of one snapshot read."""
    prefix = uuid.uuid4().hex
    uri = server.uri(prefix)
    layout = {"record_key": "id", "partition_by": "part", "ordering_field": "ts", "table_version": 9}
    off = None if metadata_table else {"hoodie.metadata.enable": "false"}  # the read of a table without one
    table = Table.create(uri, **layout, storage_options=server.options, options=off)
    n = partitions * 3
    ids = [f"k{i}" for i in range(n)]
    table.insert(
        pa.table({"id": ids, "part": [f"p{i % partitions}" for i in range(n)], "ts": [1] * n, "val": list(range(n))})
    )
    if metadata_table:
        table.initialize_metadata_table()
    proxy.reset()
    read = Table.open(uri, storage_options=proxy.options).read()
    assert sorted(read.column("id").to_pylist()) == sorted(ids)
    return proxy.lists, proxy.listed_keys, [posixpath.relpath(p, prefix) + "/" for p in proxy.list_prefixes]


def test_s3_read_list_requests_with_metadata_table_do_not_grow_with_partitions(s3_server):  # type: ignore[no-untyped-def]
    with CountingS3Proxy(s3_server) as proxy:
        few = _read_lists(s3_server, proxy, 2, metadata_table=True)
        many = _read_lists(s3_server, proxy, 24, metadata_table=True)
        few_plain = _read_lists(s3_server, proxy, 2, metadata_table=False)
        many_plain = _read_lists(s3_server, proxy, 24, metadata_table=False)
    assert few[:2] == many[:2]
    assert many[0] == 4
    assert sorted(many[2]) == sorted(
        [
            ".hoodie/timeline/",
            ".hoodie/timeline/history/",
            ".hoodie/metadata/.hoodie/timeline/",
            ".hoodie/metadata/files/",
        ]
    )
    # without the metadata table the read lists every partition's objects
    assert many_plain[1] >= few_plain[1] + 2 * 22


def test_s3_timeline_load_reads_the_archived_history_once(s3_server):  # type: ignore[no-untyped-def]
    """A table with a long archived history (versions 8+: `.hoodie/timeline/history/`) loads its
    timeline on every read, write and daemon cycle. The history's data files never change once a
    manifest lists them, so after the first load only `_version_` and the manifest are read."""
    prefix = uuid.uuid4().hex
    uri = s3_server.uri(prefix)
    options = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.metadata.enable": "false"}
    table = Table.create(
        uri,
        record_key="id",
        ordering_field="ts",
        table_version=9,
        storage_options=s3_server.options,
        options=options,
    )
    for i in range(8):
        table.upsert(pa.table({"id": [f"k{i}"], "ts": [i], "val": [i]}))
        table.archive()
    with CountingS3Proxy(s3_server) as proxy:
        first = Table.open(uri, storage_options=proxy.options).timeline()
        archived = [i.time for i in first.completed() if i.is_archived]
        history_files = {i.archive_file for i in first.completed() if i.is_archived}
        assert len(archived) >= 4 and len(history_files) >= 2
        proxy.reset()
        again = Table.open(uri, storage_options=proxy.options).timeline()
        read = [key.removeprefix(f"{prefix}/") for key in proxy.object_gets]
    assert [i.time for i in again.completed() if i.is_archived] == archived
    from_history = sorted(key for key in read if key.startswith(".hoodie/timeline/history/"))
    assert not [key for key in from_history if key.endswith(".parquet")], from_history
    assert len(from_history) == 2, from_history  # `_version_` and the manifest it names


def test_the_counting_proxy_forwards_writes(s3_server):  # type: ignore[no-untyped-def]
    """pyarrow sends object bodies chunked (`Transfer-Encoding: chunked`, `Expect: 100-continue`):
    the proxy read bodies by Content-Length alone, so every write through it stalled until the
    client gave up (found by an exploration). A commit through the proxy is counted and lands."""
    uri = s3_server.uri(uuid.uuid4().hex)
    with CountingS3Proxy(s3_server) as proxy:
        table = Table.create(uri, record_key="id", ordering_field="ts", storage_options=proxy.options)
        table.upsert(pa.table({"id": ["a", "b"], "ts": [1, 1], "val": [1, 2]}))
        assert proxy.counts["PUT object"] > 0
    assert Table.open(uri, storage_options=s3_server.options).read(columns=["id"]).num_rows == 2
