"""The Spark engine on a table on S3 (a real SeaweedFS server) in a session without hadoop-aws:
Spark's own Parquet scan cannot open `s3a://` files there, so the base files it would scan are
read by lakeward's Python tasks with the table's storage options, for reads and for the key
lookups of upserts, instead of failing with Java's ClassNotFoundException."""

from __future__ import annotations

import hudi
import pyarrow as pa
import pytest

from lakeward.core.engine.spark import SparkEngine
from lakeward.core.read.spark import native_scan_reaches
from lakeward.core.storage import Storage
from lakeward.core.table import Table

pytestmark = [pytest.mark.s3, pytest.mark.spark]


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((r["id"], r["city"], r["v"]) for r in table.select(["id", "city", "v"]).to_pylist())


def _hudi_rows(uri: str, options: dict[str, str]) -> list[tuple]:
    built = hudi.HudiTableBuilder.from_base_uri(uri).with_storage_options(options).build()
    return _rows(pa.Table.from_batches(built.read(hudi.HudiReadOptions())))


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_spark_engine_reads_and_upserts_a_table_on_s3_without_hadoop_aws(spark, s3_server, s3_table_uri, table_type):
    assert not native_scan_reaches(spark, Storage.for_uri(s3_table_uri, s3_server.options))
    table = Table.create(
        s3_table_uri,
        record_key="id",
        partition_by="city",
        table_type=table_type,
        storage_options=s3_server.options,
        # SIMPLE looks keys up by a join with the stored keys of every base file
        options={"hoodie.index.type": "SIMPLE"},
        engine=SparkEngine(spark),
    )
    batch = pa.table({"id": [1, 2, 3, 4], "city": ["sf", "sf", "ny", "ny"], "v": ["a", "b", "c", "d"]})
    table.bulk_insert(spark.createDataFrame(batch.to_pandas()))
    update = pa.table({"id": [2, 3, 5], "city": ["sf", "ny", "la"], "v": ["b2", "c2", "e"]})
    table.upsert(spark.createDataFrame(update.to_pandas()))
    expected = [(1, "sf", "a"), (2, "sf", "b2"), (3, "ny", "c2"), (4, "ny", "d"), (5, "la", "e")]
    read = table.read(engine="spark")
    assert _rows(pa.Table.from_pylist([r.asDict() for r in read.collect()])) == expected
    assert _rows(table.read(engine="local")) == expected
    assert _hudi_rows(s3_table_uri, s3_server.options) == expected
