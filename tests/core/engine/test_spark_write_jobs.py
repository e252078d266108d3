"""The Spark engine's fixed cost of a write: how many Spark jobs and tasks an upsert starts.

A small upsert into a table is dominated by job scheduling and Python task start-up, not by
its records (issue 19, target 8). These tests bound the jobs of an upsert of a small batch
of distinct keys, check that every file group is written by a task of its own, and that
the shortcuts (no de-duplication shuffle for a batch without duplicates, the broadcast of
the batch's keys to the key scan) leave the table exactly as the local engine writes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.table import Table
from lakeward.core.write.plane.spark_tasks import parse_byte_size, partition_slots, spark_hash_int
from tests.support.spark import spark_jobs
from tests.support.write_model import arrow_rows

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.string())])
#: Several file groups per partition (~30 records per base file).
SMALL_FILES = {
    "hoodie.parquet.max.file.size": "3000",
    "hoodie.parquet.small.file.limit": "0",
    "hoodie.copyonwrite.record.size.estimate": "100",
}
#: Jobs of an upsert of a small batch of distinct keys, each adaptive query stage and each cache
#: counting as one: keys, counts and distinct keys (4); the broadcast of the batch's keys, the key
#: scan and one location per key (3); the tagged records cached and counted per file group (3);
#: routing and the file-group writes (2). A regression guard: it was 11 before the broadcast
#: tagging, which costs one more (cheap) job and no shuffle of the table's keys.
MAX_UPSERT_JOBS = 12


def batch(ids: range | list[int], ts: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "part": "ab"[i % 2], "ts": ts, "v": f"{i}@{ts}"} for i in ids], schema=SCHEMA
    )


def table_rows(path: str) -> list[dict[str, Any]]:
    data = Table.open(path).read(columns=SCHEMA.names)
    return sorted(arrow_rows(data), key=lambda r: r["id"])


@pytest.fixture
def loaded(tmp_path: Path) -> tuple[str, str]:
    """The same table twice (to be written by Spark and by the local engine): 200 rows, 2 partitions."""
    paths = str(tmp_path / "spark"), str(tmp_path / "local")
    for path in paths:
        table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=SMALL_FILES)
        table.bulk_insert(batch(range(200), 1))
    return paths


def test_small_unique_upsert_runs_few_jobs_and_matches_the_local_engine(spark, loaded: tuple[str, str]) -> None:
    on_spark, local = loaded
    incoming = batch([*range(0, 200, 7), *range(200, 220)], 2)  # updates in most file groups, and inserts
    result, jobs = spark_jobs(
        spark, "lakeward-small-upsert", lambda: Table.open(on_spark).upsert(spark.createDataFrame(incoming))
    )
    expected = Table.open(local).upsert(incoming)
    assert (result.num_updates, result.num_inserts) == (expected.num_updates, expected.num_inserts) == (29, 20)
    assert table_rows(on_spark) == table_rows(local)
    assert len(jobs) <= MAX_UPSERT_JOBS, f"{len(jobs)} Spark jobs for a 49-row upsert"


def test_every_file_group_is_written_by_a_task_of_its_own(spark, loaded: tuple[str, str]) -> None:
    """A small batch into many file groups: not coalesced into one task that writes them in turn."""
    on_spark, _ = loaded
    incoming = batch(range(0, 200, 5), 3)  # 40 updates spread over the file groups
    tracker = spark.sparkContext.statusTracker()
    result, jobs = spark_jobs(
        spark, "lakeward-write-tasks", lambda: Table.open(on_spark).upsert(spark.createDataFrame(incoming))
    )
    groups = len(result.files_written)
    assert groups > 4
    tasks = {
        stage.numTasks
        for job in (tracker.getJobInfo(j) for j in jobs)
        if job is not None
        for stage in (tracker.getStageInfo(s) for s in job.stageIds)
        if stage is not None
    }
    assert groups in tasks, f"{groups} file groups written, stages had {sorted(tasks)} tasks"


def test_partition_slots_place_each_value_in_its_own_partition(spark) -> None:
    """`partition_slots(n)` values land in partitions 0..n-1 of `repartition(n, col)`: Spark's hash, reproduced."""
    from pyspark.sql import functions as F

    values = list(range(-50, 50)) + [2**31 - 1, -(2**31)]
    rows = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h")).collect()
    assert {r["v"]: r["h"] for r in rows} == {v: spark_hash_int(v) for v in values}
    for n in (1, 3, 8, 13):
        slots = partition_slots(n)
        placed = (
            spark.createDataFrame([(v,) for v in slots], "v int")
            .repartition(n, "v")
            .select("v", F.spark_partition_id().alias("p"))
            .collect()
        )
        assert {r["v"]: r["p"] for r in placed} == {v: i for i, v in enumerate(slots)}


@pytest.mark.parametrize("threshold", ["-1", "10MB"])
def test_duplicates_and_keys_stored_twice_without_and_with_broadcast(spark, tmp_path: Path, threshold: str) -> None:
    """A batch with duplicates is still de-duplicated; a key stored twice is updated once, whether the
    batch's keys are broadcast to the key scan or both sides are shuffled."""
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", threshold)
    try:
        paths = str(tmp_path / "spark"), str(tmp_path / "local")
        for path in paths:
            table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts")
            table.insert(batch(range(10), 1))
            table.insert(batch([1, 2], 2))  # keys 1 and 2 stored twice
        incoming = pa.concat_tables([batch([1, 3, 20], 5), batch([3], 9), batch([3, 21], 4)])
        result = Table.open(paths[0]).upsert(spark.createDataFrame(incoming).repartition(3))
        expected = Table.open(paths[1]).upsert(incoming)
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert (result.num_inserts, result.num_updates) == (expected.num_inserts, expected.num_updates)
    assert table_rows(paths[0]) == table_rows(paths[1])
    assert {r["id"]: r["v"] for r in table_rows(paths[0])}[3] == "3@9"


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("partition_by", ["part", None])
def test_a_batch_too_big_to_broadcast_finds_every_stored_key_inside_its_key_ranges(
    spark, tmp_path: Path, partition_by: str | None, table_type: str
) -> None:
    """Without a broadcast, the scan of the stored keys keeps only those inside the batch's key range of
    their partition: every stored key of the batch is still found (updated, never inserted twice), on
    files whose key ranges the batch covers partly, wholly or not at all, partitioned or not."""
    options = {"hoodie.parquet.small.file.limit": "0"}  # one file group per insert: three key ranges
    paths = str(tmp_path / "spark"), str(tmp_path / "local")
    for path in paths:
        Table.create(path, record_key="id", partition_by=partition_by, ordering_field="ts", table_type=table_type)
        for start in (100, 200, 300):
            Table.open(path, options=options).insert(batch(range(start, start + 50), 1))
    # keys are strings: "5" and "999" sort after "349", "1000" between "100" and "149"
    steps = [batch([150, 151, 149, 999, 100], 2), batch([300, 349, 250, 1000, 5], 3), batch([151, 152, 349], 4)]
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        for n, step in enumerate(steps):
            result = Table.open(paths[0], options=options).upsert(spark.createDataFrame(step).repartition(2))
            expected = Table.open(paths[1], options=options).upsert(step)
            assert (result.num_inserts, result.num_updates) == (expected.num_inserts, expected.num_updates), n
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert table_rows(paths[0]) == table_rows(paths[1])
    assert len(table_rows(paths[0])) == 150 + 7  # 150, 151, 999, 250, 1000, 5 and 152 were new


def test_parse_byte_size() -> None:
    assert parse_byte_size("10485760b", 0) == 10 << 20
    assert parse_byte_size("10MB", 0) == 10 << 20
    assert parse_byte_size("-1", 0) == -1
    assert parse_byte_size("1g", 0) == 1 << 30
    assert parse_byte_size(None, 7) == parse_byte_size("lots", 7) == 7
