"""The write client: one call, one instant, following the commit protocol.

validate -> (lock) roll back failed writes, create the requested instant -> tag records
with the index -> assign them to file groups -> inflight -> write file groups on the
engine (markers first) -> (lock) check for conflicting commits, complete the instant.
Any failure before completion rolls the instant back, so the table stays exactly as it
was; a crash leaves a pending instant that the next writer rolls back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.config.table import DEFAULT_PAYLOAD, TableConfig, TableType
from lakeward.core.config.write import WriteConfig, parse_write_config
from lakeward.core.engine import Engine, LocalEngine
from lakeward.core.exceptions import ConcurrentWriteError, ConfigError, SchemaError
from lakeward.core.file_group.base_file import BloomSettings
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.index import bloom as bloom_index
from lakeward.core.index import bucket as bucket_index
from lakeward.core.index import simple as simple_index
from lakeward.core.keygen import partition_paths, record_keys
from lakeward.core.locks import LOCK_OPTION_KEYS, LockProvider, lock_provider_for
from lakeward.core.merge import PARTITION_PATH, RECORD_KEY, deduplicate
from lakeward.core.schema import META_COLUMNS, avro_schema_json, evolve_schema
from lakeward.core.storage import Storage
from lakeward.core.table_schema import resolve_table_schema
from lakeward.core.table_services.rollback import (
    failed_writes,
    pending_rollbacks,
    resume_rollback,
    rollback_pending_instant,
)
from lakeward.core.timeline import (
    Action,
    CommitMetadata,
    Instant,
    Timeline,
    WriteStat,
    avro_plans,
    new_instant_time,
)
from lakeward.core.timeline.transitions import (
    complete,
    create_requested,
    read_commit_metadata,
    transition_to_inflight,
)
from lakeward.core.write import active
from lakeward.core.write.handles import FileGroupWrite, WriteContext, write_file_group
from lakeward.core.write.markers import delete_markers
from lakeward.core.write.operation import WriteOperation
from lakeward.core.write.partitioner import LOCATION, Bucket, SizingPolicy, assign_inserts, merge_buckets, split_by

log = logging.getLogger(__name__)
IS_DELETED = "_hoodie_is_deleted"


@dataclass(frozen=True)
class WriteResult:
    """What one write did: its instant and counts."""

    instant_time: str
    operation: WriteOperation
    num_inserts: int
    num_updates: int
    num_deletes: int
    files_written: tuple[str, ...]
    replaced_file_groups: int = 0

    def __str__(self) -> str:
        return self.instant_time


def to_arrow(data: Any) -> pa.Table:
    """Accept a pyarrow Table or RecordBatch, a pandas DataFrame, or a list of dicts."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, list):
        return pa.Table.from_pylist(data)
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    raise TypeError(f"cannot write data of type {type(data).__name__}; pass a pyarrow Table")


def _column_or_none(table: pa.Table | None, name: str | None) -> pa.Array | None:
    if table is None or name is None or name not in table.column_names:
        return None
    return table.column(name).combine_chunks()


class WriteClient:
    """Writes batches into one table. Not shared between threads: use one per writer."""

    def __init__(
        self,
        storage: Storage,
        config: TableConfig,
        options: Mapping[str, Any] | None = None,
        engine: Engine | None = None,
        lock: LockProvider | None = None,
    ):
        if config.table_type is TableType.MERGE_ON_READ:
            raise ConfigError("hoodie.table.type=MERGE_ON_READ: lakeward writes COPY_ON_WRITE tables only, for now")
        self.storage = storage
        self.config = config
        self.options = dict(options or {})
        self.write_config: WriteConfig = parse_write_config(self.options, extra_known=LOCK_OPTION_KEYS)
        self.engine = engine or LocalEngine(self.write_config.parallelism)
        self.lock = lock or lock_provider_for(storage.uri, config.name, self.options)

    # -- public ---------------------------------------------------------------------------
    def write(
        self,
        data: Any,
        operation: WriteOperation,
        partitions: Sequence[str] | None = None,
    ) -> WriteResult:
        """Run one write operation as one instant."""
        started = time.monotonic()
        timeline = Timeline.load(self.storage)
        if operation is WriteOperation.DELETE_PARTITION:
            records, schema = self._empty_records(), resolve_table_schema(self.storage, timeline, self.config)
            if schema is None:
                raise SchemaError("the table has no data yet; there is no partition to delete")
            existing = FileSystemView.load(self.storage, timeline).partitions()
            unknown = sorted(set(partitions or []) - set(existing))
            if unknown:
                raise SchemaError(f"no such partition(s): {unknown}; the table has {existing}")
        else:
            records, schema = self._prepare(to_arrow(data), operation, timeline)
        instant = self._start(timeline, operation)
        try:
            result = self._execute(instant, operation, records, schema, timeline, partitions)
        except BaseException:
            log.exception("write %s failed; rolling it back", instant)
            self._rollback_own(instant)
            raise
        finally:
            active.unregister(self.storage.uri, instant.time)
        log.info(
            "%s %s: %d inserted, %d updated, %d deleted, %d file(s) in %.2fs",
            operation.value,
            result.instant_time,
            result.num_inserts,
            result.num_updates,
            result.num_deletes,
            len(result.files_written),
            time.monotonic() - started,
        )
        return result

    # -- preparation (no instant exists yet: errors leave the table untouched) ------------
    def _empty_records(self) -> pa.Table:
        return pa.table({RECORD_KEY: pa.array([], pa.string()), PARTITION_PATH: pa.array([], pa.string())})

    def _prepare(self, batch: pa.Table, operation: WriteOperation, timeline: Timeline) -> tuple[pa.Table, pa.Schema]:
        batch = batch.drop_columns([c for c in META_COLUMNS if c in batch.column_names])
        table_schema = resolve_table_schema(self.storage, timeline, self.config)
        if operation is WriteOperation.DELETE:
            schema = table_schema or batch.schema
        else:
            schema = evolve_schema(table_schema, batch.schema) if table_schema is not None else batch.schema
            for field in self.config.partition_fields:
                if field not in batch.column_names and self.config.is_partitioned:
                    raise SchemaError(f"the batch has no column {field!r}, which the table is partitioned by")
        if self.config.precombine_field and operation is not WriteOperation.DELETE:
            if self.config.precombine_field not in batch.column_names:
                raise SchemaError(
                    f"the batch has no column {self.config.precombine_field!r}, the table's ordering "
                    "(hoodie.table.precombine.field) field"
                )
        keys = record_keys(batch, self.config)
        parts = partition_paths(batch, self.config)
        records = batch.append_column(RECORD_KEY, keys).append_column(PARTITION_PATH, parts)
        combine = {
            WriteOperation.UPSERT: self.write_config.combine_before_upsert,
            WriteOperation.DELETE: self.write_config.combine_before_delete,
        }.get(operation, self.write_config.combine_before_insert)
        if combine:
            ordering = self.config.precombine_field if operation is not WriteOperation.DELETE else None
            records = deduplicate(records, ordering)
        return records, schema

    def _start(self, timeline: Timeline, operation: WriteOperation) -> Instant:
        """Under the table lock: roll back failed writes, then take a new instant time."""
        with self.lock:
            current = Timeline.load(self.storage)
            running = active.active_instants(self.storage.uri)
            for interrupted in pending_rollbacks(current):
                resume_rollback(self.storage, interrupted)
                current = Timeline.load(self.storage)
            for failed in failed_writes(current, exclude=running):
                rollback_pending_instant(
                    self.storage, failed, new_instant_time(current.latest_time(), self.config.timeline_timezone)
                )
                current = Timeline.load(self.storage)
            instant_time = new_instant_time(current.latest_time(), self.config.timeline_timezone)
            content = b""
            if operation.replaces:
                content = avro_plans.serialize(
                    avro_plans.REQUESTED_REPLACE_METADATA,
                    {"operationType": operation.value, "clusteringPlan": None, "extraMetadata": None, "version": 1},
                )
            requested = create_requested(self.storage, instant_time, operation.action, content)
            active.register(self.storage.uri, instant_time)
            return requested

    # -- execution -------------------------------------------------------------------------
    def _execute(
        self,
        requested: Instant,
        operation: WriteOperation,
        records: pa.Table,
        schema: pa.Schema,
        start_timeline: Timeline,
        partitions: Sequence[str] | None,
    ) -> WriteResult:
        timeline = Timeline.load(self.storage)
        view = FileSystemView.load(self.storage, timeline)
        deletes_by_group: dict[tuple[str, str], pa.Table] = {}
        replaced: dict[str, list[str]] = {}

        if IS_DELETED in records.column_names and operation is WriteOperation.UPSERT:
            flagged = pc.fill_null(records.column(IS_DELETED), False)
            deleted_rows = records.filter(flagged)
            records = records.filter(pc.invert(flagged))
            deletes_by_group = self._locate_deletes(deleted_rows, view, with_ordering=True)

        if operation is WriteOperation.DELETE:
            deletes_by_group = self._locate_deletes(records, view)
            buckets: list[Bucket] = []
        elif operation is WriteOperation.DELETE_PARTITION:
            targets = set(partitions or [])
            unknown = targets - set(view.partitions())
            if unknown:
                raise SchemaError(f"no such partition(s): {sorted(unknown)}; the table has {view.partitions()}")
            replaced = self._live_groups(view, lambda p: p in targets)
            buckets = []
        elif operation.replaces:
            batch_partitions = set(pc.unique(records.column(PARTITION_PATH)).to_pylist())
            replaced = self._live_groups(
                view,
                None if operation is WriteOperation.INSERT_OVERWRITE_TABLE else (lambda p: p in batch_partitions),
            )
            buckets = self._assign(records, view, tag=False, small_files=False)
        else:
            tag = operation is WriteOperation.UPSERT
            small = operation is not WriteOperation.BULK_INSERT
            buckets = self._assign(records, view, tag=tag, small_files=small)

        slices = {(s.partition_path, s.file_id): s for s in view.latest_file_slices()}
        targeted = {(b.partition_path, b.file_id) for b in buckets}
        for key in deletes_by_group.keys() - targeted:
            buckets.append(Bucket(key[0], key[1], slices.get(key), records.schema.empty_table()))
        tasks = [
            FileGroupWrite(
                partition_path=b.partition_path,
                file_id=b.file_id,
                task_id=i,
                base_file=b.base.base_file if b.base is not None else None,
                incoming=b.records,
                delete_keys=_column_or_none(deletes_by_group.get((b.partition_path, b.file_id)), RECORD_KEY),
                delete_orderings=_column_or_none(
                    deletes_by_group.get((b.partition_path, b.file_id)), self.config.precombine_field
                ),
                match_keys=operation is not WriteOperation.INSERT,
            )
            for i, b in enumerate(buckets)
        ]
        inflight = transition_to_inflight(self.storage, requested, self._workload(operation, tasks).to_bytes())
        ctx = self._context(requested.time, schema)
        stats: list[WriteStat] = self.engine.map(lambda t: write_file_group(ctx, t), tasks, "write file groups")

        metadata = CommitMetadata(
            operationType=operation.value,
            extraMetadata={"schema": avro_schema_json(schema, self.config.name)},
            partitionToReplaceFileIds=replaced if operation.replaces else None,
        )
        for stat in stats:
            metadata.partitionToWriteStats.setdefault(stat.partitionPath, []).append(stat)
        touched = {(t.partition_path, t.file_id) for t in tasks if t.base_file is not None}
        touched |= {(p, f) for p, ids in replaced.items() for f in ids}
        with self.lock:
            self._check_conflicts(timeline, touched, requested.time)
            complete(self.storage, inflight, metadata.to_bytes())
        delete_markers(self.storage, requested.time)
        return WriteResult(
            instant_time=requested.time,
            operation=operation,
            num_inserts=sum(s.numInserts for s in stats),
            num_updates=sum(s.numUpdateWrites for s in stats),
            num_deletes=sum(s.numDeletes for s in stats),
            files_written=tuple(s.path for s in stats),
            replaced_file_groups=sum(len(v) for v in replaced.values()),
        )

    def _context(self, instant_time: str, schema: pa.Schema) -> WriteContext:
        wc = self.write_config
        return WriteContext(
            storage_uri=self.storage.uri,
            storage_options=tuple(sorted(self.storage.options.items())),
            instant_time=instant_time,
            data_schema=schema,
            avro_schema_with_meta=avro_schema_json(schema, self.config.name, with_meta=True),
            bloom=BloomSettings(wc.bloom_num_entries, wc.bloom_fpp, wc.bloom_max_entries, wc.bloom_filter_type),
            compression=wc.compression,
            ordering_field=self.config.precombine_field,
            event_time_ordering=self.config.payload_class == DEFAULT_PAYLOAD,
        )

    def _workload(self, operation: WriteOperation, tasks: Sequence[FileGroupWrite]) -> CommitMetadata:
        """The inflight file's workload profile: one stat per file group to be written."""
        meta = CommitMetadata(operationType=operation.value)
        for task in tasks:
            stat = WriteStat(
                fileId=task.file_id if task.base_file else "",
                path="",
                prevCommit=task.base_file.instant_time if task.base_file else "null",
                numInserts=task.incoming.num_rows if task.incoming is not None else 0,
                partitionPath=task.partition_path,
            )
            meta.partitionToWriteStats.setdefault(task.partition_path, []).append(stat)
        return meta

    # -- tagging and assignment -----------------------------------------------------------
    def _slices_by_partition(self, view: FileSystemView) -> dict[str, list[FileSlice]]:
        out: dict[str, list[FileSlice]] = {}
        for s in view.latest_file_slices():
            out.setdefault(s.partition_path, []).append(s)
        return out

    def _locate(self, slices: Sequence[FileSlice], keys: pa.Array) -> pa.Array:
        wc = self.write_config
        if wc.index_type == "SIMPLE":
            return simple_index.locate(self.storage, self.engine, slices, keys)
        return bloom_index.locate(self.storage, self.engine, slices, keys, wc.bloom_prune_by_ranges)

    def _bucket_ids(self, records: pa.Table) -> np.ndarray:
        fields = (
            [f.strip() for f in self.write_config.bucket_hash_field.split(",")]
            if self.write_config.bucket_hash_field
            else list(self.config.record_key_fields)
        )
        for name in fields:
            if name not in records.column_names:
                raise SchemaError(f"hoodie.bucket.index.hash.field names {name!r}, which the batch lacks")
        columns = [pc.cast(records.column(f), pa.string()).to_pylist() for f in fields]
        return bucket_index.bucket_ids(list(zip(*columns)), self.write_config.bucket_num_buckets)

    def _assign(self, records: pa.Table, view: FileSystemView, tag: bool, small_files: bool) -> list[Bucket]:
        by_partition = self._slices_by_partition(view)
        all_slices = {(s.partition_path, s.file_id): s for ss in by_partition.values() for s in ss}
        updates: dict[tuple[str, str], pa.Table] = {}
        inserts: list[Bucket] = []
        policy = SizingPolicy(
            self.write_config.max_file_size,
            self.write_config.small_file_limit,
            self._avg_record_size(view.timeline, records),
        )
        for partition, rows in split_by(records, PARTITION_PATH).items():
            partition = partition or ""
            slices = by_partition.get(partition, [])
            if self.write_config.index_type == "BUCKET":
                ids, _new = bucket_index.locate(slices, self._bucket_ids(rows))
                for file_id, group in split_by(rows.append_column(LOCATION, ids), LOCATION).items():
                    assert file_id is not None
                    updates[(partition, file_id)] = group.drop_columns([LOCATION])
                continue
            if tag and slices:
                located = rows.append_column(LOCATION, self._locate(slices, rows.column(RECORD_KEY).combine_chunks()))
                groups = split_by(located, LOCATION)
                for file_id, group in groups.items():
                    if file_id is not None:
                        updates[(partition, file_id)] = group.drop_columns([LOCATION])
                rows = groups.get(None, rows.schema.empty_table().append_column(LOCATION, pa.array([], pa.string())))
                rows = rows.drop_columns([LOCATION])
            if rows.num_rows:
                inserts.extend(assign_inserts(partition, rows, slices, policy, small_files))
        return merge_buckets(inserts, updates, all_slices)

    def _locate_deletes(
        self, rows: pa.Table, view: FileSystemView, with_ordering: bool = False
    ) -> dict[tuple[str, str], pa.Table]:
        """Per file group, the keys to delete (and, for delete markers, their ordering values)."""
        by_partition = self._slices_by_partition(view)
        ordering = self.config.precombine_field if with_ordering else None
        found: dict[tuple[str, str], pa.Table] = {}
        for partition, group in split_by(rows, PARTITION_PATH).items():
            slices = by_partition.get(partition or "", [])
            if not slices:
                continue
            keys = group.column(RECORD_KEY).combine_chunks()
            if self.write_config.index_type == "BUCKET":
                located, new_ids = bucket_index.locate(slices, self._bucket_ids(group))
                if new_ids:  # buckets without a file group hold none of these keys
                    located = pc.if_else(pc.is_in(located, value_set=pa.array(sorted(new_ids))), None, located)
            else:
                located = self._locate(slices, keys)
            columns = {RECORD_KEY: keys, LOCATION: located}
            if ordering and ordering in group.column_names:
                columns[ordering] = group.column(ordering).combine_chunks()
            for file_id, hits in split_by(pa.table(columns), LOCATION).items():
                if file_id is not None:
                    found[(partition or "", file_id)] = hits.drop_columns([LOCATION])
        return found

    @staticmethod
    def _live_groups(view: FileSystemView, partition_filter: Any) -> dict[str, list[str]]:
        replaced: dict[str, list[str]] = {}
        for s in view.latest_file_slices(partition_filter=partition_filter):
            replaced.setdefault(s.partition_path, []).append(s.file_id)
        return replaced

    def _avg_record_size(self, timeline: Timeline, records: pa.Table) -> int:
        """Bytes per record: configured, else measured by recent commits, else the batch's Arrow size.

        The Arrow size overstates Parquet's (which compresses), so files err on the small side.
        """
        if self.write_config.record_size_estimate is not None:
            return self.write_config.record_size_estimate
        # As Hudi: only commits that wrote more than the small-file limit are representative
        # (a tiny commit's size is mostly its fixed footer: bloom filter, schema).
        threshold = max(1, self.write_config.small_file_limit)
        for instant in reversed(timeline.completed_writes()[-5:]):
            stats = read_commit_metadata(self.storage, instant).write_stats()
            count = sum(s.numWrites for s in stats)
            written = sum(s.totalWriteBytes for s in stats)
            if count > 0 and written > threshold:
                return max(1, written // count)
        per_row = records.nbytes // max(1, records.num_rows)
        return max(16, per_row)

    # -- concurrency and failure ----------------------------------------------------------
    def _check_conflicts(self, seen: Timeline, touched: set[tuple[str, str]], instant_time: str) -> None:
        """Optimistic concurrency: fail if a write completed meanwhile touched our file groups."""
        now = Timeline.load(self.storage)
        known = seen.completed_write_times()
        for instant in now.completed_writes():
            if instant.time in known or instant.time == instant_time:
                continue
            meta = read_commit_metadata(self.storage, instant)
            theirs = {(s.partitionPath or p, s.fileId) for p, ss in meta.partitionToWriteStats.items() for s in ss}
            theirs |= {(p, f) for p, ids in (meta.partitionToReplaceFileIds or {}).items() for f in ids}
            clash = touched & theirs
            if clash:
                partition, file_id = sorted(clash)[0]
                raise ConcurrentWriteError(
                    f"instant {instant_time} conflicts with {instant.time}, which completed first and "
                    f"also wrote file group {file_id} in partition {partition!r} "
                    f"({len(clash)} file group(s) in common); retry the write"
                )

    def _rollback_own(self, instant: Instant) -> None:
        try:
            with self.lock:
                timeline = Timeline.load(self.storage)
                state = timeline.state_of(instant.time, instant.action)
                if state is None or state.rank >= 2:
                    return
                pending = next(i for i in timeline.pending() if i.time == instant.time)
                rollback_pending_instant(
                    self.storage, pending, new_instant_time(timeline.latest_time(), self.config.timeline_timezone)
                )
        except Exception:
            log.exception("could not roll back %s; the next write will", instant)


__all__ = ["Action", "WriteClient", "WriteOperation", "WriteResult", "to_arrow"]
