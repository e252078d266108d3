"""The Spark data plane of a write: the records stay on the executors from start to commit.

Stages: keys and partition paths (mapInArrow over the batch, the same key generators as
the local engine) -> de-duplication per key (repartition by key, `deduplicate` per
partition) -> tagging (a join with the record keys of the candidate base files, read by
Python tasks, or the bucket of each key, or with RECORD_INDEX a lookup of the batch's keys
on the driver, `spark_record_index`) -> assignment of inserts to small files and new
file groups (planned on the driver from counts only, applied by key hash) -> one
`write_file_group` call per file group (groupBy + applyInArrow). Only counts per file
group and the write stats come back to the driver.

A retried or speculative task attempt writes its file under a new write token; the
driver commits the files whose stats it received and deletes the others through their
markers (`reconcile_markers`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.config.table import TableConfig
from lakeward.core.engine.spark import SparkEngine, is_spark_task_error, unwrap_task_error
from lakeward.core.file_group.base_file import read_footer_keys
from lakeward.core.file_group.file_group import BaseFile, FileSlice
from lakeward.core.file_group.reader import MergeSettings
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.index import bucket as bucket_index
from lakeward.core.index.base import read_key_states
from lakeward.core.index.bloom import admitted_keys
from lakeward.core.keygen import partition_paths, record_keys
from lakeward.core.merge import PARTITION_PATH, RECORD_KEY, deduplicate
from lakeward.core.metadata_table.record_index_writer import keeps_record_index
from lakeward.core.read.spark import arrow_schema, native_scan_reaches, spark_path
from lakeward.core.schema import META_COLUMNS, cast_columns
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline, WriteStat
from lakeward.core.write.handles import FileGroupWrite, WriteContext, write_file_group
from lakeward.core.write.operation import WriteOperation
from lakeward.core.write.partitioner import LOCATION, InsertTarget, plan_inserts
from lakeward.core.write.plan import Prepared, WorkloadEntry, WritePlan
from lakeward.core.write.plane.local import FLAGGED_ROWS_DELETE, IS_DELETED, to_arrow
from lakeward.core.write.plane.spark_record_index import IS_NEW, RecordIndexTagging
from lakeward.core.write.plane.spark_tasks import MAX_EXACT_SLOTS, parse_byte_size, partition_slots
from lakeward.core.write.validation import check_batch_rows

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator
    from pyspark.sql import Column, DataFrame, GroupedData

    from lakeward.core.write.client import WriteClient

log = logging.getLogger(__name__)
IS_DELETE = "__lakeward_is_delete"
KEY_HASH = "__lakeward_key_hash"
BUCKET = "__lakeward_bucket"
TASK = "__lakeward_task"
_HELPER_COLUMNS = (LOCATION, IS_DELETE, KEY_HASH, BUCKET, TASK, IS_NEW)


def _spark_errors(fn: Callable[[], Any]) -> Any:
    """Run a Spark action; a lakeward error raised in a task surfaces as itself."""
    try:
        return fn()
    except Exception as exc:
        if is_spark_task_error(exc):
            unwrapped = unwrap_task_error(exc)
            if unwrapped is not exc:
                raise unwrapped from None
        raise


def utc_timestamps(table: pa.Table) -> pa.Table:
    """The table with its time-zone-aware timestamp columns in UTC (the same instants).

    Spark hands TIMESTAMP columns to Python in the session's time zone; keys, partition
    paths and buckets computed from them must not depend on that setting.
    """
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type) and f.type.tz is not None and f.type.tz != "UTC":
            table = table.set_column(i, f.name, pc.cast(table.column(i), pa.timestamp(f.type.unit, "UTC")))
    return table


#: Spark schema of the (partition, key, file id, deleted) rows of the key scans (`_key_batch`).
KEY_SCHEMA = f"__lw_partition string, __lw_key string, {LOCATION} string, __lw_dead boolean"
#: Column of the key scans: the slice holds the key only deleted (`index.base.read_key_states`).
DEAD = "__lw_dead"


def _slice_key_batch(
    storage: Storage,
    file_slice: FileSlice,
    committed: CommittedInstants,
    virtual_keys: TableConfig | None = None,
    merge: MergeSettings | None = None,
) -> pa.RecordBatch:
    """(partition, key, file id, deleted) of every distinct key a slice holds: base file and committed log blocks.

    Runs in a Spark task; the keys come from the same per-slice function as the local
    engine's index (`read_key_states`), so both engines agree on which group holds a key
    (`virtual_keys`: the config of a table without meta fields, whose keys are computed).
    """
    held, deleted = read_key_states(storage, file_slice, committed, virtual_keys=virtual_keys, merge=merge)
    return _key_batch(file_slice, pc.unique(held), deleted)


def _key_batch(file_slice: FileSlice, keys: pa.Array, deleted: pa.Array) -> pa.RecordBatch:
    """(partition, key, file id, deleted) rows of `keys`, held by `file_slice`; `deleted`: those
    of its keys whose last event in its logs is a delete (a location a live one wins over)."""
    n = len(keys)
    dead = pc.is_in(keys, value_set=deleted) if len(deleted) else pa.array(np.zeros(n, dtype=bool))
    return pa.RecordBatch.from_arrays(
        [
            pa.array([file_slice.partition_path] * n, pa.string()),
            keys,
            pa.array([file_slice.file_id] * n, pa.string()),
            dead,
        ],
        names=["__lw_partition", "__lw_key", LOCATION, DEAD],
    )


def _matched_slice_keys(
    storage: Storage,
    file_slice: FileSlice,
    wanted: pa.Array,
    committed: CommittedInstants,
    prune_by_ranges: bool,
    merge: MergeSettings | None = None,
) -> pa.RecordBatch | None:
    """(partition, key, file id) of the keys of `wanted` (the batch's keys of the slice's partition) that
    the slice holds; None when its base file's key range and bloom filter admit none of them (the file
    is then not read). A slice with logs is always read: a key can live only in a log, which no filter
    covers. Admitted keys are checked against the slice's real keys (`read_key_states`, as the local
    engine's index), so a bloom filter's false positive is never tagged.

    Runs in the Spark plane's key-scan tasks (BLOOM, `_tag_by_bloom`)."""
    candidates = wanted
    if not file_slice.log_files and file_slice.base_file is not None:
        candidates = admitted_keys(storage, file_slice, wanted, prune_by_ranges)
        if not len(candidates):
            return None
    stored, deleted = read_key_states(storage, file_slice, committed, merge=merge, among=candidates)
    return _key_batch(file_slice, pc.unique(candidates.filter(pc.is_in(candidates, value_set=stored))), deleted)


def _base_key_range(storage: Storage, file_slice: FileSlice) -> tuple[str, str] | None:
    """The footer's key range of the slice's base file, for a slice without logs whose footer records
    one; None: every key of the partition goes to the slice's task (a log can hold any key)."""
    if file_slice.log_files or file_slice.base_file is None:
        return None
    footer = read_footer_keys(storage, file_slice.base_file.path)
    if footer.min_key is None or footer.max_key is None:
        return None
    return footer.min_key, footer.max_key


@dataclass
class BloomScan:
    """What the BLOOM key scan (`SparkDataPlane._tag_by_bloom`) read: a Spark accumulator the tasks add
    to for each base file (of a slice without logs) whose keys they read, reported after the scan ran.
    A retried task adds again: a figure for the log, never for a decision."""

    reads: Accumulator[int]
    slices: list[FileSlice]
    #: (slice, batch key) pairs the join gave the tasks: keys inside the base files' key ranges.
    checked: Accumulator[int]

    def report(self) -> None:
        base_only = sum(1 for s in self.slices if not s.log_files and s.base_file is not None)
        log.info(
            "spark write: BLOOM key scan read the keys of %d of %d base file(s) without logs (the others' key "
            "range and bloom filter admit no key of the batch) and of %d slice(s) with logs; %d (slice, key) "
            "pair(s) checked",
            self.reads.value,
            base_only,
            len(self.slices) - base_only,
            self.checked.value,
        )


def _whole_partition(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    collected = list(batches)
    return pa.Table.from_batches(collected) if collected else None


@dataclass
class SparkRecords:
    """The keyed, de-duplicated batch (persisted on the executors) and its row count per partition."""

    frame: DataFrame
    partitions: dict[str, int]
    #: Bytes of the batch's record keys and partition paths: whether its keys can be broadcast.
    key_bytes: int = 0
    #: Per partition path, the batch's smallest and largest record key: a stored key outside them
    #: cannot match (the tagging scan of a large batch skips what the Parquet statistics rule out).
    key_ranges: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class PartitionStats:
    """Rows of one partition of a batch, its distinct record keys (when counted) and their bytes."""

    rows: int
    distinct_keys: int
    key_bytes: int
    min_key: str | None = None
    max_key: str | None = None


def _batch_stats(records: DataFrame, distinct_keys: bool) -> dict[str, PartitionStats]:
    """Per partition path: rows, distinct keys (else rows), key bytes and key range, in one Spark job.

    Counting distinct keys here lets a batch without duplicates skip the de-duplication
    shuffle: a shuffle of the keys alone, in the JVM, instead of every record through Python.
    """
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import functions as F

    aggregates = [
        F.count(F.lit(1)),
        F.countDistinct(RECORD_KEY) if distinct_keys else F.count(F.lit(1)),
        F.sum(F.length(RECORD_KEY) + F.coalesce(F.length(PARTITION_PATH), F.lit(0))),
        F.min(RECORD_KEY),
        F.max(RECORD_KEY),
    ]
    rows = _spark_errors(lambda: records.groupBy(PARTITION_PATH).agg(*aggregates).collect())
    return {r[0] or "": PartitionStats(int(r[1]), int(r[2]), int(r[3] or 0), r[4], r[5]) for r in rows}


class SparkDataPlane:
    def __init__(self, client: WriteClient, engine: Any):
        assert isinstance(engine, SparkEngine)
        self.client = client
        self.engine: SparkEngine = engine
        self.spark = engine.spark
        self.config = client.config
        self.write_config = client.write_config
        self.storage = client.storage

    # -- prepare ------------------------------------------------------------------------------
    def prepare(
        self, data: Any, operation: WriteOperation, timeline: Timeline, partitions: Sequence[str] | None
    ) -> Prepared:
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark import StorageLevel
        from pyspark.sql.types import StringType, StructField, StructType

        if operation is WriteOperation.DELETE_PARTITION:
            schema = self.client.partitions_to_delete_schema(timeline, partitions)
            return Prepared(schema, None)
        if hasattr(data, "sparkSession"):
            df = data
        else:
            batch = to_arrow(data)
            batch = batch.drop_columns([c for c in META_COLUMNS if c in batch.column_names])
            # as on the local plane: a value the table's types cannot hold is refused here, before any
            # instant (Spark's createDataFrame would truncate nanoseconds to microseconds silently)
            batch = cast_columns(batch, self.client.write_schema(batch.schema, operation, timeline))
            df = self.spark.createDataFrame(batch)
        df = df.drop(*[c for c in META_COLUMNS if c in df.columns])
        schema = self.client.write_schema(arrow_schema(df.schema), operation, timeline)

        config = self.config

        def add_keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                table = pa.Table.from_batches([batch])
                # keys rendered from the table's types (a delete's 1.0 is the int64 key 1), and a value
                # those types cannot hold refused in this job, before any instant; the rows keep Spark's types
                utc = utc_timestamps(cast_columns(table, schema))
                check_batch_rows(utc, config, operation, whole_batch=False)
                table = table.append_column(RECORD_KEY, pc.cast(record_keys(utc, config, schema), pa.string()))
                table = table.append_column(PARTITION_PATH, pc.cast(partition_paths(utc, config, schema), pa.string()))
                yield from table.to_batches()

        # StructType.add mutates: build a new schema, never touch df.schema.
        keyed_schema = StructType(
            [*df.schema.fields, StructField(RECORD_KEY, StringType(), False), StructField(PARTITION_PATH, StringType())]
        )
        keyed = df.mapInArrow(add_keys, keyed_schema).persist(StorageLevel.MEMORY_AND_DISK)
        # Materialise now: bad keys fail here, before any instant exists. The same job counts
        # the records per partition and tells whether the batch holds a key twice.
        started = time.monotonic()
        combine = self.client.combines(operation)
        try:
            stats = _batch_stats(keyed, distinct_keys=combine)
        except BaseException:
            keyed.unpersist()
            raise
        records = keyed
        by_key_only = self.client.global_index  # a key named in two partitions is one record
        duplicates = combine and any(s.distinct_keys != s.rows for s in stats.values())
        if combine and by_key_only and not duplicates and len(stats) > 1:
            total = sum(s.rows for s in stats.values())
            duplicates = _spark_errors(lambda: keyed.select(RECORD_KEY).distinct().count()) != total
        if duplicates:
            # Duplicates: de-duplicate per key (one shuffle), as `hoodie.combine.before.*` asks.
            ordering = config.precombine_field if operation is not WriteOperation.DELETE else None

            def dedup(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                table = _whole_partition(batches)
                if table is not None:
                    yield from deduplicate(table, ordering, by_key_only).to_batches()

            by = [RECORD_KEY] if by_key_only else [PARTITION_PATH, RECORD_KEY]
            records = keyed.repartition(*by).mapInArrow(dedup, keyed_schema)
            records = records.persist(StorageLevel.MEMORY_AND_DISK)
            stats = _batch_stats(records, distinct_keys=False)
            keyed.unpersist()
        partitions_in_batch = {p: s.rows for p, s in stats.items()}
        log.info(
            "spark write: %d record(s) in %d partition(s) keyed%s in %.2fs",
            sum(partitions_in_batch.values()),
            len(partitions_in_batch),
            " and de-duplicated" if records is not keyed else "",
            time.monotonic() - started,
        )
        key_bytes = sum(s.key_bytes for s in stats.values())
        # Every partition's key range, or none: a partition left out would have its stored keys filtered away.
        ranges = {
            p: (s.min_key, s.max_key) for p, s in stats.items() if s.min_key is not None and s.max_key is not None
        }
        batch = SparkRecords(records, partitions_in_batch, key_bytes, ranges if len(ranges) == len(stats) else {})
        return Prepared(schema, batch, release=records.unpersist)

    # -- plan ---------------------------------------------------------------------------------
    def plan(
        self, prepared: Prepared, operation: WriteOperation, view: FileSystemView, partitions: Sequence[str] | None
    ) -> WritePlan:
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        slices = {(s.partition_path, s.file_id): s for s in view.latest_file_slices()}
        if operation is WriteOperation.DELETE_PARTITION:
            self.client.check_partitions_exist(view, partitions)
            dropped = set(partitions or [])
            return WritePlan([], lambda ctx: [], set(), self.client.live_groups(view, lambda p: p in dropped))

        records: DataFrame = prepared.records.frame
        batch_partitions = set(prepared.records.partitions)
        replaced: dict[str, list[str]] = {}
        if operation.replaces:
            replaced = self.client.live_groups(
                view,
                None if operation is WriteOperation.INSERT_OVERWRITE_TABLE else (lambda p: p in batch_partitions),
            )

        if operation is WriteOperation.DELETE:
            records = records.withColumn(IS_DELETE, F.lit(True))
        elif operation in FLAGGED_ROWS_DELETE and IS_DELETED in records.columns:
            # an untagged flagged row (insert operations look nothing up) is dropped (`_route_inserts`)
            records = records.withColumn(IS_DELETE, F.coalesce(F.col(IS_DELETED), F.lit(False)))
        else:
            records = records.withColumn(IS_DELETE, F.lit(False))

        tag = operation in (WriteOperation.UPSERT, WriteOperation.DELETE)
        bloom_scan: BloomScan | None = None
        candidates = [s for key, s in slices.items() if key[0] in batch_partitions]
        by_record_index = self._record_index_tagging(records, candidates) if tag else None
        if self.write_config.index_type == "BUCKET":
            # A replace writes new file groups, but still one per bucket (ids prefixed by the
            # bucket number), so that later writes find the keys in their buckets.
            tagged = self._tag_by_bucket(records, [] if operation.replaces else candidates)
        elif by_record_index is not None:
            tagged = by_record_index.tag(records, self._can_broadcast_keys(prepared.records))
        elif tag and candidates:
            broadcast = self._can_broadcast_keys(prepared.records)
            committed = CommittedInstants.of(view.timeline)
            if broadcast and self.write_config.index_type == "BLOOM" and self.config.populate_meta_fields:
                tagged, bloom_scan = self._tag_by_bloom(records, candidates, committed)
            else:
                tagged = self._tag_by_join(records, candidates, committed, broadcast, prepared.records.key_ranges)
        else:
            tagged = records.withColumn(LOCATION, F.lit(None).cast("string"))
        if self.write_config.index_type == "BUCKET" or (tag and candidates) or by_record_index is not None:
            tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)  # a join: do it once for counts and writes

        started = time.monotonic()
        counts = _spark_errors(
            lambda: tagged.groupBy(PARTITION_PATH, LOCATION, IS_DELETE).count().collect()  # one row per file group
        )
        if tagged.is_cached:
            records.unpersist()  # the tagged copy holds everything from here on
        log.info(
            "spark write: tagged against %d file slice(s) into %d group(s) in %.2fs",
            len(candidates),
            len(counts),
            time.monotonic() - started,
        )
        if bloom_scan is not None:
            bloom_scan.report()
        located: dict[tuple[str, str], int] = {}
        new_rows: dict[str, int] = {}
        for row in counts:
            partition, location, is_delete, n = row[0] or "", row[1], bool(row[2]), int(row[3])
            if location is not None:
                located[(partition, location)] = located.get((partition, location), 0) + (0 if is_delete else n)
            elif not is_delete:
                new_rows[partition] = new_rows.get(partition, 0) + n

        policy = self.client.sizing_policy(view.timeline, self._bytes_per_row(prepared.schema))
        small_files = operation not in (WriteOperation.BULK_INSERT,) and not operation.replaces
        by_partition: dict[str, list[FileSlice]] = {}
        for s in slices.values():
            by_partition.setdefault(s.partition_path, []).append(s)
        targets_by_partition: dict[str, list[InsertTarget]] = {
            p: plan_inserts(p, n, by_partition.get(p, []) if not operation.replaces else [], policy, small_files)
            for p, n in new_rows.items()
        }
        routed = self._route_inserts(tagged, targets_by_partition)

        bases: dict[tuple[str, str], BaseFile] = {}
        #: Merge-on-read: existing file groups whose updates and deletes go to their log.
        appends: dict[tuple[str, str], FileSlice] = {}
        workload: list[WorkloadEntry] = []
        touched: set[tuple[str, str]] = set()
        planned: dict[tuple[str, str], int] = dict(located)
        #: Existing file groups that receive inserts as small files: rewritten, never appended to.
        rewrites: set[tuple[str, str]] = set()
        for p, targets in targets_by_partition.items():
            for t in targets:
                planned[(p, t.file_id)] = planned.get((p, t.file_id), 0) + t.count
                if t.base is not None:
                    rewrites.add((p, t.file_id))
        for key, n in planned.items():
            existing = slices.get(key) if not operation.replaces else None
            base_instant = None
            if existing is not None and self.client.merge_on_read and key not in rewrites:
                appends[key] = view.slice_for_append(existing)  # under a pending compaction: its new slice
                touched.add(key)
                base_instant = appends[key].base_instant_time
            elif existing is not None and existing.base_file is not None:
                bases[key] = existing.base_file
                touched.add(key)
                base_instant = existing.base_file.instant_time
            workload.append(WorkloadEntry(key[0], key[1], base_instant, n))

        # Largest first: tasks start in partition order, so the longest writes start earliest.
        groups = sorted(planned, key=lambda k: (bases[k].size if k in bases else 0, planned[k]), reverse=True)

        # Delete markers of an upsert keep their ordering values: a newer stored record may survive
        # them, so which keys are gone is known only from the files written (as on the local engine).
        exact = by_record_index is not None and not (
            operation is WriteOperation.UPSERT
            and by_record_index.located_deletes
            and self.config.precombine_field in records.columns
        )

        def run(ctx: WriteContext) -> list[WriteStat]:
            stats = self._write_groups(routed, ctx, bases, appends, operation, groups)
            if exact and by_record_index is not None:
                _spark_errors(lambda: by_record_index.collect_inserted(routed))  # before the lock is taken
            return stats

        index_change = by_record_index.change if exact and by_record_index is not None else None
        plan = WritePlan(workload, run, touched, replaced, index_change)
        previous_release = prepared.release

        def release() -> None:
            if tagged.is_cached:
                tagged.unpersist()
            previous_release()

        prepared.release = release
        return plan

    def _record_index_tagging(self, records: DataFrame, candidates: Sequence[FileSlice]) -> RecordIndexTagging | None:
        """The RECORD_INDEX lookup of the batch's keys (`spark_record_index`), or None: another index,
        virtual keys (computed from the key fields by the join, as the local engine's SIMPLE lookup),
        or a table whose metadata table does not keep `record_index` yet (the join, with a warning)."""
        if self.write_config.index_type != "RECORD_INDEX" or not self.config.populate_meta_fields:
            return None
        if not keeps_record_index(self.storage):
            log.warning(
                "hoodie.index.type=RECORD_INDEX but %s keeps no record_index partition: tagged by a join "
                "with the stored keys",
                self.storage.uri,
            )
            return None
        started = time.monotonic()
        keys = _spark_errors(lambda: records.select(PARTITION_PATH, RECORD_KEY, IS_DELETE).toArrow())
        tagging = RecordIndexTagging(self.storage, keys, candidates, IS_DELETE)
        log.info(
            "spark write: %d key(s) looked up in the record index on the driver, %d found, in %.2fs",
            keys.num_rows,
            0 if tagging.found is None else tagging.found.num_rows,
            time.monotonic() - started,
        )
        return tagging

    def _can_broadcast_keys(self, records: SparkRecords) -> bool:
        """Whether the batch's keys are small enough to broadcast to the scan of the table's keys
        (Spark's `spark.sql.autoBroadcastJoinThreshold`; 16 bytes of overhead per row)."""
        threshold = parse_byte_size(self.spark.conf.get("spark.sql.autoBroadcastJoinThreshold", None), 10 << 20)
        return threshold >= 0 and records.key_bytes + 16 * sum(records.partitions.values()) <= threshold

    def _bytes_per_row(self, schema: pa.Schema) -> int:
        """A batch-size-free estimate of a row's size, for sizing new files of a first write."""
        fixed = sum((f.type.bit_width // 8) if pa.types.is_primitive(f.type) else 32 for f in schema)
        return max(16, fixed)

    # -- tagging -------------------------------------------------------------------------------
    def _tag_by_join(
        self,
        records: DataFrame,
        candidates: Sequence[FileSlice],
        committed: CommittedInstants,
        broadcast: bool,
        key_ranges: Mapping[str, tuple[str, str]] | None = None,
    ) -> DataFrame:
        """LOCATION = file id of the slice that holds the key: a join with the keys of the candidate slices.

        A slice holds the keys of its base file and of its committed log blocks (data and
        delete), as on the local engine (`index.base.read_key_states`): on merge-on-read a key can
        live only in a log, and reading base files alone would insert it a second time.
        Base files of slices without logs are read by Spark's native Parquet scan of the
        `_hoodie_record_key` and `_hoodie_partition_path` columns (the file id from the
        file's name) where Spark can open them (`native_scan_reaches`); slices with logs,
        and the others, by Python tasks, one per slice, that run the same per-slice key
        function as the local engine.

        With `broadcast` (a batch whose keys fit a broadcast), the batch's keys go to every
        task of the key scan, which keeps only the stored keys the batch holds: the table's
        keys are never shuffled or sorted. Otherwise both sides are shuffled by key, and the
        native scan keeps only stored keys inside the batch's key range of their partition
        (`key_ranges`; a filter Spark pushes into the Parquet reader, whose column statistics
        skip the row groups, and so the files, of other key ranges: clustered keys read little).
        """
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark.sql import functions as F

        #: (partition, key, file name) of base files; (partition, key, file id, deleted) of slices with logs.
        named: DataFrame | None = None
        located: DataFrame | None = None
        # Without meta fields the stored `_hoodie_record_key` is null: every slice's keys are
        # computed from the key fields by the per-slice key function.
        virtual = self.config.virtual_keys
        # Spark's Parquet scan reads the keys of base-only slices where it can open their files
        native = virtual is None and native_scan_reaches(self.spark, self.storage)
        base_only = [s.base_file for s in candidates if s.base_file is not None and not s.log_files and native]
        paths = [spark_path(self.storage, base.path) for base in base_only]
        if paths:
            named = (
                self.spark.read.schema("_hoodie_record_key string, _hoodie_partition_path string")
                .parquet(*paths)
                .select(
                    F.col("_hoodie_partition_path").alias("__lw_partition"),
                    F.col("_hoodie_record_key").alias("__lw_key"),
                    F.col("_metadata.file_name").alias("__lw_file"),
                )
            )
            if not broadcast and key_ranges:
                named = named.where(_inside_key_ranges(key_ranges))
        with_logs = [s for s in candidates if s.log_files or not native]
        if with_logs:
            storage = self.storage
            merge = MergeSettings.from_config(self.config)

            def slice_keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                for batch in batches:
                    for index in batch.column(0).to_pylist():
                        yield _slice_key_batch(storage, with_logs[index], committed, virtual, merge)

            slices = self.spark.range(len(with_logs), numPartitions=len(with_logs))
            located = slices.mapInArrow(slice_keys, KEY_SCHEMA)
        if named is None and located is None:
            return records.withColumn(LOCATION, F.lit(None).cast("string"))
        if broadcast:
            return _tag_by_broadcast(records, named, located)
        # One row per group holding the key (`_locations_per_key`; a key stored twice in one group
        # would repeat the incoming row): the aggregate's shuffle by (partition, key) is the one the join needs.
        keys = _locations_per_key(_union_of_keys(named, located))
        condition = (records[PARTITION_PATH] == keys["__lw_partition"]) & (records[RECORD_KEY] == keys["__lw_key"])
        return records.join(keys, condition, "left").drop("__lw_partition", "__lw_key")

    def _tag_by_bloom(
        self, records: DataFrame, candidates: Sequence[FileSlice], committed: CommittedInstants
    ) -> tuple[DataFrame, BloomScan]:
        """BLOOM, for a batch whose keys fit a broadcast: LOCATION = file id of the slice that holds the key,
        each base file pruned by its key range and bloom filter in the key-scan task that would read it.

        The batch's keys are broadcast (as `_tag_by_broadcast`) to a scan with a row per candidate
        slice. With `hoodie.bloom.index.prune.by.ranges` the scan first reads each base file's key
        range from its footer (slices without logs), and the join gives each slice's task only the
        batch keys of its partition inside that range (compared in the JVM: a partition of many
        file groups no longer sends every key to every task). The task checks them against the
        footer (`index.bloom.admitted_keys`, the local engine's pruning) and reads the file's keys
        only if some key passes, emitting only the keys the slice really holds
        (`_matched_slice_keys`). Slices with logs get every key of their partition and are always
        read. Nothing is collected to the driver and the jobs are those of the broadcast join: the
        broadcast, the scan with the locations of each key (ranges, join and key checks in one stage),
        and the broadcast of the locations. The filters are the footers' (read for the key ranges
        anyway): `hoodie.bloom.index.use.metadata` is not consulted here, as a metadata table
        lookup in each task would read its timeline and a whole `bloom_filters` HFile per task;
        the filters are the same bytes.
        """
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark.sql import functions as F

        storage = self.storage
        prune_by_ranges = self.write_config.bloom_prune_by_ranges
        merge = MergeSettings.from_config(self.config)
        slices = list(candidates)
        context = self.spark.sparkContext
        scan = BloomScan(context.accumulator(0), slices, context.accumulator(0))
        reads, checked = scan.reads, scan.checked

        def slice_keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            # The join streams the slices in order: the rows of a slice come one after the other.
            current = -1
            chunks: list[pa.Array] = []

            def flush() -> Iterator[pa.RecordBatch]:
                file_slice = slices[current]
                wanted = pc.unique(pa.concat_arrays(chunks))
                found = _matched_slice_keys(storage, file_slice, wanted, committed, prune_by_ranges, merge)
                if found is None:
                    return
                if not file_slice.log_files and file_slice.base_file is not None:
                    reads.add(1)
                if found.num_rows:
                    yield found

            for batch in batches:
                checked.add(batch.num_rows)
                ids = batch.column(0).to_numpy(zero_copy_only=False)
                keys = batch.column(1)
                bounds = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), len(ids)]
                for start, end in zip(bounds, bounds[1:]):
                    if int(ids[start]) != current and chunks:
                        yield from flush()
                        chunks = []
                    current = int(ids[start])
                    chunks.append(keys.slice(start, end - start))
            if chunks:
                yield from flush()

        def key_ranges(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                ranges = [_base_key_range(storage, slices[i]) for i in batch.column(0).to_pylist()]
                lows = pa.array([r[0] if r else None for r in ranges], pa.string())
                highs = pa.array([r[1] if r else None for r in ranges], pa.string())
                names = [*batch.schema.names, "__lw_lo", "__lw_hi"]
                yield pa.RecordBatch.from_arrays([*batch.columns, lows, highs], names)

        partitions = F.array(*[F.lit(s.partition_path) for s in slices])
        tasks = min(len(slices), max(1, 2 * context.defaultParallelism))
        rows = self.spark.range(len(slices), numPartitions=tasks)
        rows = rows.select(F.col("id"), F.element_at(partitions, (F.col("id") + 1).cast("int")).alias("__lw_sp"))
        wanted = F.broadcast(records.select(F.col(PARTITION_PATH).alias("__lw_bp"), F.col(RECORD_KEY).alias("__lw_bk")))
        if prune_by_ranges:
            rows = rows.mapInArrow(key_ranges, "id long, __lw_sp string, __lw_lo string, __lw_hi string")
        condition = rows["__lw_sp"] == wanted["__lw_bp"]
        if prune_by_ranges:
            in_range = (wanted["__lw_bk"] >= rows["__lw_lo"]) & (wanted["__lw_bk"] <= rows["__lw_hi"])
            condition = condition & (rows["__lw_lo"].isNull() | in_range)
        pairs = rows.join(wanted, condition, "inner").select("id", "__lw_bk")
        found = _locations_per_key(pairs.mapInArrow(slice_keys, KEY_SCHEMA))
        return _join_locations(records, found), scan

    def _tag_by_bucket(self, records: DataFrame, candidates: Sequence[FileSlice]) -> DataFrame:
        """LOCATION = the file group of each key's bucket; keys of new buckets get new file groups."""
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, StructField, StructType

        fields = self.client.bucket_hash_fields(records.columns)
        num_buckets = self.write_config.bucket_num_buckets
        complex_key = self.client.complex_key

        def add_bucket(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                table = pa.Table.from_batches([batch])
                ids = bucket_index.bucket_ids_of(table.column(RECORD_KEY), fields, num_buckets, complex_key)
                yield from table.append_column(BUCKET, pa.array(ids, pa.int64())).to_batches()

        with_bucket = records.mapInArrow(
            add_bucket, StructType([*records.schema.fields, StructField(BUCKET, LongType(), False)])
        )
        pairs = _spark_errors(lambda: with_bucket.select(PARTITION_PATH, BUCKET).distinct().collect())
        by_partition: dict[str, list[FileSlice]] = {}
        for s in candidates:
            by_partition.setdefault(s.partition_path, []).append(s)
        mapping = []
        for partition in sorted({r[0] or "" for r in pairs}):
            buckets = np.array(sorted(int(r[1]) for r in pairs if (r[0] or "") == partition), dtype=np.int64)
            ids, new_ids = bucket_index.locate(by_partition.get(partition, []), buckets, num_buckets)
            for bucket, file_id in zip(buckets.tolist(), ids.to_pylist()):
                mapping.append((partition, int(bucket), file_id, file_id in new_ids))
        lookup = self.spark.createDataFrame(
            mapping, "__lw_partition string, __lw_bucket long, __lw_file string, __lw_new boolean"
        )
        joined = with_bucket.join(
            F.broadcast(lookup),
            (with_bucket[PARTITION_PATH] == lookup["__lw_partition"]) & (with_bucket[BUCKET] == lookup["__lw_bucket"]),
            "left",
        )
        # A delete of a key whose bucket has no file group yet deletes nothing.
        location = F.when(F.col(IS_DELETE) & F.col("__lw_new"), F.lit(None)).otherwise(F.col("__lw_file"))
        return joined.withColumn(LOCATION, location).drop(
            "__lw_partition", "__lw_bucket", "__lw_file", "__lw_new", BUCKET
        )

    # -- assignment and writing -------------------------------------------------------------
    def _route_inserts(self, tagged: DataFrame, targets: dict[str, list[InsertTarget]]) -> DataFrame:
        """Give every new record a file group, spread by key hash in proportion to the planned counts."""
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark.sql import functions as F

        ranges = {
            p: ([t.file_id for t in ts], np.cumsum([t.count for t in ts], dtype=np.int64)) for p, ts in targets.items()
        }
        # Deletes of keys the table does not hold delete nothing.
        kept = tagged.filter(~(F.col(IS_DELETE) & F.col(LOCATION).isNull()))
        if not ranges:
            return kept
        hashed = kept.withColumn(KEY_HASH, F.xxhash64(F.col(RECORD_KEY)))

        def assign(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                table = pa.Table.from_batches([batch])
                location = table.column(LOCATION).to_pylist()
                parts = table.column(PARTITION_PATH).to_numpy(zero_copy_only=False)
                hashes = table.column(KEY_HASH).to_numpy(zero_copy_only=False)
                missing = np.flatnonzero(pc.is_null(table.column(LOCATION)).to_numpy(zero_copy_only=False))
                for partition in np.unique(parts[missing]) if len(missing) else []:
                    rows = missing[parts[missing] == partition]
                    ids, bounds = ranges[partition or ""]
                    positions = np.mod(hashes[rows], bounds[-1])
                    chosen = np.searchsorted(bounds, positions, side="right")
                    for row, index in zip(rows.tolist(), chosen.tolist()):
                        location[row] = ids[index]
                index = table.schema.get_field_index(LOCATION)
                table = table.set_column(index, LOCATION, pa.array(location, pa.string()))
                yield from table.drop_columns([KEY_HASH]).to_batches()

        return hashed.mapInArrow(assign, kept.schema)

    def _write_groups(
        self,
        routed: DataFrame,
        ctx: WriteContext,
        bases: dict[tuple[str, str], BaseFile],
        appends: dict[tuple[str, str], FileSlice],
        operation: WriteOperation,
        groups: Sequence[tuple[str, str]],
    ) -> list[WriteStat]:
        """One task per file group of `groups` (in that order), each writing its group's files."""
        if not groups:
            return []
        match_keys = operation is not WriteOperation.INSERT
        ordering = self.config.precombine_field
        hook = self.engine.after_file_group
        data_columns = [c for c in routed.columns if c not in _HELPER_COLUMNS]

        def write_group(table: pa.Table) -> pa.Table:
            # lazy: PySpark is optional (lakeward[spark]) and slow to import
            from pyspark import TaskContext

            context = TaskContext.get()
            task_id, attempt, stage = (
                (context.partitionId(), context.attemptNumber(), context.stageId()) if context else (0, 0, 0)
            )
            partition = table.column(PARTITION_PATH)[0].as_py() or ""
            file_id = table.column(LOCATION)[0].as_py()
            flags = pc.fill_null(table.column(IS_DELETE), False)
            incoming = table.filter(pc.invert(flags)).select(data_columns)
            deletes = table.filter(flags)
            task = FileGroupWrite(
                partition_path=partition,
                file_id=file_id,
                task_id=task_id,
                base_file=bases.get((partition, file_id)),
                incoming=incoming,
                delete_keys=deletes.column(RECORD_KEY).combine_chunks() if deletes.num_rows else None,
                delete_orderings=(
                    deletes.column(ordering).combine_chunks()
                    if deletes.num_rows and operation is not WriteOperation.DELETE and ordering in deletes.column_names
                    else None
                ),
                attempt=attempt,
                match_keys=match_keys,
                append_to=appends.get((partition, file_id)),
            )
            stat = write_file_group(dataclasses.replace(ctx, stage_id=stage), task)
            if hook is not None:
                hook(stat)
            return pa.table({"stat": [json.dumps(stat.to_json_dict())]})

        description = f"lakeward: write {ctx.instant_time}"
        self.spark.sparkContext.setJobDescription(description)
        started = time.monotonic()
        try:
            by_group = _one_partition_per_group(routed, groups)
            rows = _spark_errors(lambda: by_group.applyInArrow(write_group, "stat string").collect())
            log.info("spark write: %d file group(s) written in %.2fs", len(rows), time.monotonic() - started)
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
        return [WriteStat.from_json_dict(json.loads(r[0])) for r in rows]


#: Above this many partitions in a batch, the key-range filter of the tagging scan is the batch's
#: overall key range (one comparison pair) instead of one per partition.
MAX_RANGE_FILTER_PARTITIONS = 64


def _inside_key_ranges(key_ranges: Mapping[str, tuple[str, str]]) -> Column:
    """A filter on the scanned (`__lw_partition`, `__lw_key`) rows: the key lies inside the batch's key
    range of its partition. Every stored key that matches a batch key passes (it equals one), so the
    filter loses nothing; Spark pushes its comparisons into the Parquet reader."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import functions as F

    key = F.col("__lw_key")
    if len(key_ranges) > MAX_RANGE_FILTER_PARTITIONS:
        low = min(lo for lo, _ in key_ranges.values())
        high = max(hi for _, hi in key_ranges.values())
        return (key >= F.lit(low)) & (key <= F.lit(high))
    partition = F.col("__lw_partition")
    conditions = [
        (partition == F.lit(p)) & (key >= F.lit(lo)) & (key <= F.lit(hi)) for p, (lo, hi) in key_ranges.items()
    ]
    combined = conditions[0]
    for condition in conditions[1:]:
        combined = combined | condition
    return combined


def _union_of_keys(named: DataFrame | None, located: DataFrame | None) -> DataFrame:
    """(partition, key, file id, deleted) of the stored keys: the file id of a base file's keys from its
    name (a base file of a slice without logs holds its keys live)."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import functions as F

    frames = [] if located is None else [located]
    if named is not None:
        file_id = F.regexp_extract(F.col("__lw_file"), r"^([^_]+)_", 1).alias(LOCATION)
        frames.insert(0, named.select("__lw_partition", "__lw_key", file_id, F.lit(False).alias(DEAD)))
    return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])


def _locations_per_key(found: DataFrame) -> DataFrame:
    """(partition, key, file id): a row per group of `found` where the key is live (an `insert` or
    `bulk_insert`, which look nothing up, can store a key again in another group: Hudi's indexes tag
    every location, so an upsert or delete changes every copy), or one row with a group that holds
    it only deleted if none holds it live (an `insert` can re-add a key deleted in one group's log
    to another), as the local index decides (`index.base.assign_confirmed`)."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import functions as F

    grouped = found.groupBy("__lw_partition", "__lw_key").agg(
        F.collect_set(F.when(~F.col(DEAD), F.col(LOCATION))).alias("__lw_live"),
        F.min_by(LOCATION, DEAD).alias("__lw_any"),
    )
    live_or_any = F.when(F.size("__lw_live") > 0, F.col("__lw_live")).otherwise(F.array(F.col("__lw_any")))
    return grouped.select("__lw_partition", "__lw_key", F.explode(live_or_any).alias(LOCATION))


def _tag_by_broadcast(records: DataFrame, named: DataFrame | None, located: DataFrame | None) -> DataFrame:
    """The tagging join of a small batch: the batch's keys are broadcast to the scan of the stored
    keys, which keeps only those (the table's keys are never shuffled or sorted; file ids are taken
    from the names of the few rows kept); the groups holding each key (`_locations_per_key`),
    joined back to the records as a broadcast."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import functions as F

    wanted = F.broadcast(records.select(F.col(PARTITION_PATH).alias("__lw_bp"), F.col(RECORD_KEY).alias("__lw_bk")))

    def kept(frame: DataFrame | None) -> DataFrame | None:
        if frame is None:
            return None
        condition = (frame["__lw_partition"] == wanted["__lw_bp"]) & (frame["__lw_key"] == wanted["__lw_bk"])
        return frame.join(wanted, condition, "left_semi")

    found = _locations_per_key(_union_of_keys(kept(named), kept(located)))
    return _join_locations(records, found)


def _join_locations(records: DataFrame, found: DataFrame) -> DataFrame:
    """LOCATION of each record from `found` (partition, key, file id; a record held in several groups
    is repeated, one row per group), a broadcast."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import functions as F

    condition = (records[PARTITION_PATH] == found["__lw_partition"]) & (records[RECORD_KEY] == found["__lw_key"])
    return records.join(F.broadcast(found), condition, "left").drop("__lw_partition", "__lw_key")


def _one_partition_per_group(routed: DataFrame, groups: Sequence[tuple[str, str]]) -> GroupedData:
    """`routed` grouped by file group, each group in a shuffle partition of its own (see `spark_tasks`).

    The task column maps (partition, file id) to the group's slot; grouping by it together
    with the file group keeps the groups apart even if a row missed the map.
    """
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import functions as F

    if len(groups) > MAX_EXACT_SLOTS:
        return routed.groupBy(PARTITION_PATH, LOCATION)
    slots = partition_slots(len(groups))
    entries = [F.lit(x) for (p, f), slot in zip(groups, slots) for x in (f"{p}\x00{f}", slot)]
    name = F.concat(F.coalesce(F.col(PARTITION_PATH), F.lit("")), F.lit("\x00"), F.col(LOCATION))
    with_task = routed.withColumn(TASK, F.create_map(*entries)[name].cast("int"))
    return with_task.repartition(len(groups), TASK).groupBy(TASK, PARTITION_PATH, LOCATION)


__all__ = ["SparkDataPlane", "SparkRecords", "utc_timestamps"]
