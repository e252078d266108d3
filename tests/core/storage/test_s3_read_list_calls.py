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
