"""The Spark engine on a table on S3 (a real SeaweedFS server) in a session without hadoop-aws:
Spark's own Parquet scan cannot open `s3a://` files there, so the base files it would scan are
read by lakeward's Python tasks with the table's storage options, for reads and for the key
lookups of upserts, instead of failing with Java's ClassNotFoundException."""

from __future__ import annotations

import hudi
import pyarrow as pa
import pytest
from pyspark.sql.readwriter import DataFrameReader

import lakeward.spark
from lakeward.core.engine.spark import SparkEngine
from lakeward.core.exceptions import ConfigError
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


def _spark_rows(df) -> list[tuple]:  # type: ignore[no-untyped-def]
    return _rows(df.toArrow())


def _registered_source_load(spark, uri: str, options: dict[str, str]):  # type: ignore[no-untyped-def]
    """A read through the registered Python data source alone (no driver hook: e.g. Spark Connect)."""
    return DataFrameReader.load.__wrapped__(spark.read.format("lakeward").options(**options), uri)  # type: ignore[attr-defined]


def _write(spark, uri: str, rows: pa.Table, mode: str, options: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    writer = spark.createDataFrame(rows.to_pandas()).write.format("lakeward").mode(mode)
    writer.options(**WRITE_OPTIONS, **options).save(uri)


WRITE_OPTIONS = {
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.partitionpath.field": "city",
    "hoodie.datasource.write.table.type": "MERGE_ON_READ",
    "hoodie.table.cdc.enabled": "true",
}
CDC_READ = {"hoodie.datasource.query.type": "incremental", "hoodie.datasource.read.begin.instanttime": "earliest"}
CDC_READ["hoodie.datasource.query.incremental.format"] = "cdc"


def test_format_lakeward_takes_s3_settings_as_options(spark, s3_server, s3_table_uri, monkeypatch):
    """`.option("aws_endpoint_url", ...)` and the other `aws_*` options reach the table on S3, for
    writes, snapshot and CDC reads, through the driver hook and through the Python data source."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(name, raising=False)
    lakeward.spark.register(spark)
    first = pa.table({"id": [1, 2, 3], "city": ["sf", "sf", "ny"], "v": ["a", "b", "c"]})
    _write(spark, s3_table_uri, first, "overwrite", s3_server.options)
    _write(
        spark,
        s3_table_uri,
        pa.table({"id": [2, 4], "city": ["sf", "la"], "v": ["b2", "d"]}),
        "append",
        s3_server.options,
    )
    expected = [(1, "sf", "a"), (2, "sf", "b2"), (3, "ny", "c"), (4, "la", "d")]
    assert _spark_rows(spark.read.format("lakeward").options(**s3_server.options).load(s3_table_uri)) == expected
    assert _spark_rows(_registered_source_load(spark, s3_table_uri, s3_server.options)) == expected
    assert _hudi_rows(s3_table_uri, s3_server.options) == expected

    changes = Table.open(s3_table_uri, storage_options=s3_server.options).read_changes("earliest")
    assert changes.num_rows == 5  # 4 inserts and 1 update
    hooked = spark.read.format("lakeward").options(**CDC_READ, **s3_server.options).load(s3_table_uri)
    registered = _registered_source_load(spark, s3_table_uri, {**CDC_READ, **s3_server.options})
    for df in (hooked, registered):
        assert sorted(df.toArrow().column("op").to_pylist()) == sorted(changes.column("op").to_pylist())

    with pytest.raises(ConfigError, match="aws_endpoint"):  # a misspelt S3 option is named
        spark.read.format("lakeward").option("aws_endpoint", "http://x").load(s3_table_uri)


def test_format_lakeward_takes_the_sessions_fs_s3a_settings(spark, s3_server, s3_table_uri, monkeypatch):
    """S3 configured once, as Spark's own s3a scan takes it (`spark.hadoop.fs.s3a.*`), is enough."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(name, raising=False)
    lakeward.spark.register(spark)
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    settings = {
        "fs.s3a.endpoint": s3_server.endpoint_url.removeprefix("http://"),  # s3a's bare host form
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": s3_server.access_key,
        "fs.s3a.secret.key": s3_server.secret_key,
        "fs.s3a.endpoint.region": "us-east-1",
    }
    before = {name: hadoop.get(name) for name in settings}
    for name, value in settings.items():
        hadoop.set(name, value)
    try:
        rows = pa.table({"id": [1, 2], "city": ["sf", "ny"], "v": ["a", "b"]})
        _write(spark, s3_table_uri, rows, "overwrite", {})
        read = spark.read.format("lakeward").load(s3_table_uri)
        assert _spark_rows(read) == [(1, "sf", "a"), (2, "ny", "b")]
        assert _hudi_rows(s3_table_uri, s3_server.options) == [(1, "sf", "a"), (2, "ny", "b")]
    finally:
        for name, value in before.items():
            if value is None:
                hadoop.unset(name)
            else:
                hadoop.set(name, value)
