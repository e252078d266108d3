"""Secondary indexes on Spark: index builds as Spark tasks, and the `lakeward` data source pushing
Spark's filters down to the indexes.

To see that a read really went through an index (the reader runs in Python workers), one
index file is replaced by one built from different values: a read through the index then
misses the rows that file leaves out, while a scan does not. Spark's result equals
`Table.read(filters=...)` through the same index; with `hoodie.enable.data.skipping=false`
it equals the scan.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakeward.core.index.secondary.bitmap import build_bitmap_index
from lakeward.core.index.secondary.storage import list_index_files
from lakeward.core.table import Table

pytestmark = pytest.mark.spark


def _rows(ids: range) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "p": ["a" if i % 3 else "b" for i in ids],
            "k": pa.array([i % 10 for i in ids], pa.int64()),
            "s": [f"word{i % 7} Buying" for i in ids],
        }
    )


def _ids(table: Any) -> list[int]:
    if isinstance(table, pa.Table):
        return sorted(table.column("id").to_pylist())
    return sorted(r["id"] for r in table.select("id").collect())


def test_spark_builds_indexes_and_the_data_source_pushes_filters_to_them(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql import functions as F

    import lakeward.spark
    from lakeward.spark import SparkEngine

    lakeward.spark.register(spark)
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="p", options={"hoodie.parquet.small.file.limit": "0"})
    table.bulk_insert(_rows(range(0, 200)))
    table.create_index("by_k", "k")
    table.create_index("words", "s", "text")
    instant = table.schedule_index_build()
    assert instant is not None
    result = table.run_index_build(instant, engine=SparkEngine(spark))
    assert result.base_files == 2 and len(result.files_written) == 4
    assert table.index_status().missing() == []

    truth = _ids(table.read(filters=[("k", "=", 3)], engine="local"))
    assert len(truth) == 20
    spark_df = spark.read.format("lakeward").load(path).filter(F.col("k") == 3)
    assert _ids(spark_df) == truth
    assert _ids(spark.read.format("lakeward").load(path).filter(F.col("s").startswith("word3"))) == _ids(
        table.read(filters=[("s", "like", "word3%")])
    )

    # Make one index file lie: built from k + 1, so it leaves out this file's rows with k = 3.
    victim = next(f for f in list_index_files(table.storage) if f.index_name == "by_k")
    base = next(s.base_file for s in table.file_slices() if s.base_file and s.file_id == victim.file_id)
    assert base is not None
    original = pa.parquet.read_table(table.storage.full_path(base.path), columns=["k"])
    shifted = pa.table({"k": pc.add(original.column("k"), 1)})
    table.storage.write_bytes(
        victim.path, build_bitmap_index(shifted, [original.num_rows], table.indexes()[0].id, "by_k", base.name)
    )
    through_index = _ids(table.read(filters=[("k", "=", 3)]))
    assert through_index and set(through_index) < set(truth)
    assert _ids(spark.read.format("lakeward").load(path).filter(F.col("k") == 3)) == through_index
    off = spark.read.format("lakeward").option("hoodie.enable.data.skipping", "false").load(path)
    assert _ids(off.filter(F.col("k") == 3)) == truth

    # lakeward's extra filter operators on the Spark engine (Table.read with engine="spark").
    extra = [("s", "match", "WORD3 buying"), ("k", "is not null", None), ("s", "like", "word3%")]
    assert _ids(table.read(filters=extra, engine=SparkEngine(spark))) == _ids(table.read(filters=extra))
