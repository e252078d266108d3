"""Data skipping on the Spark engine (issue 17): filtered reads drop the file slices the metadata
table's `column_stats` / `partition_stats` rule out, through `Table.read(filters=...)` on the Spark
engine and through `spark.read.format("lakeward")` (Spark pushes its filters to the data source).
The rows are those of an unpruned read; fewer slices are read, and a log line names the dropped ones.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from lakeward import Table
from lakeward.core.engine.spark import SparkEngine
from lakeward.core.spark.slices import plan_read
from tests.support.keyed_rows import Model, batch, part_of
from tests.support.metadata_tables import table_with_metadata

pytestmark = pytest.mark.spark


def _rows(df: Any) -> list[tuple[str, int]]:
    return sorted((r["id"], r["val"]) for r in df.select("id", "val").collect())


def test_spark_reads_skip_slices_by_column_and_partition_stats(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    from pyspark.sql import functions as F

    import lakeward.spark

    lakeward.spark.register(spark)
    path = str(tmp_path / "t")
    first: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(9)}
    table_with_metadata(path, 9, "MERGE_ON_READ", batch(first))
    options = {"hoodie.metadata.index.column.stats.enable": "true", "hoodie.parquet.small.file.limit": "0"}
    table = Table.open(path, options=options)
    second: Model = {f"k{i}": (part_of(f"k{i}"), 1, 100 + i) for i in range(9, 18)}
    table.insert(batch(second))  # new file groups (no small files), values 109..117
    table.upsert(batch({"k10": (part_of("k10"), 2, 500)}))  # a log file: a merged slice
    expected = [(k, v) for k, (_, _, v) in sorted((first | second | {"k10": ("", 2, 500)}).items()) if v >= 100]

    filters = [("val", ">=", 100)]
    spark_table = Table.open(path, engine=SparkEngine(spark))
    with caplog.at_level(logging.INFO, logger="lakeward.core.read.scan"):
        pruned = spark_table.read(filters=filters)
        assert _rows(pruned) == expected
    assert "data skipping pruned 3 file slice(s)" in caplog.text  # the first insert's groups, one per partition
    unpruned = spark_table.scan(filters=filters, use_index=False).to_spark(spark)
    assert _rows(unpruned) == expected

    # format lakeward: Spark's filter reaches the data source (planned in a Python worker), which
    # reads one Spark partition per kept slice
    df = spark.read.format("lakeward").load(path).filter(F.col("val") >= 100)
    assert _rows(df) == expected
    assert df.rdd.getNumPartitions() == 3
    with caplog.at_level(logging.INFO, logger="lakeward.core.spark.slices"):
        plan = plan_read(path, "snapshot", pushed=filters)
    assert "data skipping pruned 3 of 6 file slice(s)" in caplog.text
    assert len(plan.slices) == 3 and len(plan.pruned) == 3
    assert {p.pruner for p in plan.pruned} == {"column stats"}
    everything = spark.read.format("lakeward").option("hoodie.enable.data.skipping", "false").load(path)
    assert _rows(everything.filter(F.col("val") >= 100)) == expected
    assert len(plan_read(path, "snapshot").slices) == 6

    # partition_stats rule out a whole partition
    only_p0 = [("val", ">=", 100), ("part", "=", "p0")]
    assert _rows(spark_table.read(filters=only_p0)) == [(k, v) for k, v in expected if part_of(k) == "p0"]
    far = plan_read(path, "snapshot", pushed=[("val", ">", 10_000)])
    assert far.slices == [] and {p.pruner for p in far.pruned} == {"partition stats"}
    assert spark.read.format("lakeward").load(path).filter(F.col("val") > 10_000).count() == 0
