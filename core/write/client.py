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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lakeward.core.config.table import DEFAULT_PAYLOAD, TableConfig, TableType
from lakeward.core.config.write import WriteConfig, parse_write_config
from lakeward.core.engine import Engine, LocalEngine, resolve_engine
from lakeward.core.exceptions import ConcurrentWriteError, SchemaError
from lakeward.core.file_group.base_file import BloomSettings
from lakeward.core.file_group.integrity import verify_before_write
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.locks import LOCK_OPTION_KEYS, LockProvider, lock_provider_for
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
from lakeward.core.timeline.clustering_plan import pending_clustering_file_groups
from lakeward.core.timeline.transitions import (
    complete,
    create_requested,
    read_commit_metadata,
    transition_to_inflight,
)
from lakeward.core.write import active
from lakeward.core.write.handles import WriteContext
from lakeward.core.write.heartbeat import Heartbeat, delete_heartbeat, is_heartbeat_expired, last_heartbeat_ms
from lakeward.core.write.local_plane import LocalDataPlane, to_arrow
from lakeward.core.write.markers import delete_markers, list_markers, reconcile_markers
from lakeward.core.write.operation import WriteOperation
from lakeward.core.write.partitioner import SizingPolicy
from lakeward.core.write.plan import DataPlane, Prepared, WorkloadEntry
from lakeward.core.write.validation import check_batch_schema, check_partition_path_options

log = logging.getLogger(__name__)


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


class WriteClient:
    """Writes batches into one table. Not shared between threads: use one per writer."""

    def __init__(
        self,
        storage: Storage,
        config: TableConfig,
        options: Mapping[str, Any] | None = None,
        engine: Engine | str | None = None,
        lock: LockProvider | None = None,
    ):
        self.storage = storage
        self.config = config
        self.options = dict(options or {})
        self.write_config: WriteConfig = parse_write_config(self.options, extra_known=LOCK_OPTION_KEYS)
        self.engine = resolve_engine(engine, default=LocalEngine(self.write_config.parallelism))
        self.lock = lock or lock_provider_for(storage.uri, config.name, self.options)
        #: Heartbeats of this client's in-flight instants (LAZY failed-writes policy only, as Hudi).
        self._heartbeats: dict[str, Heartbeat] = {}
        #: Called with a table service's instant time right before it completes; raising stops the
        #: completion (the instant stays inflight). The daemon's fencing: its claim must still hold.
        self.completion_check: Callable[[str], None] | None = None

    def check_completion(self, instant_time: str) -> None:
        """Run the completion check (if any) for a table service about to complete `instant_time`."""
        if self.completion_check is not None:
            self.completion_check(instant_time)

    # -- public ---------------------------------------------------------------------------
    def write(
        self,
        data: Any,
        operation: WriteOperation,
        partitions: Sequence[str] | None = None,
        engine: Engine | str | None = None,
    ) -> WriteResult:
        """Run one write operation as one instant, on the given engine (else the client's)."""
        started = time.monotonic()
        chosen = resolve_engine(engine, data, default=self.engine)
        plane = self._data_plane(chosen)
        timeline = Timeline.load(self.storage)
        verify_before_write(self.storage, timeline)  # never build on missing or cut-short files
        prepared = plane.prepare(data, operation, timeline, partitions)
        try:
            instant = self._start(timeline, operation)
            try:
                result = self._execute(plane, prepared, instant, operation, partitions)
            except BaseException:
                log.exception("write %s failed; rolling it back", instant)
                self._rollback_own(instant)
                raise
            finally:
                self._stop_heartbeat(instant.time)
                active.unregister(self.storage.uri, instant.time)
        finally:
            prepared.release()
        log.info(
            "%s %s on %s: %d inserted, %d updated, %d deleted, %d file(s) in %.2fs",
            operation.value,
            result.instant_time,
            chosen.name,
            result.num_inserts,
            result.num_updates,
            result.num_deletes,
            len(result.files_written),
            time.monotonic() - started,
        )
        return result

    def _data_plane(self, engine: Engine) -> DataPlane:
        if engine.name == "spark":
            from lakeward.core.engine.spark.write import SparkDataPlane

            return SparkDataPlane(self, engine)
        return LocalDataPlane(self, engine)

    # -- shared by the data planes ----------------------------------------------------------
    @property
    def merge_on_read(self) -> bool:
        return self.config.table_type is TableType.MERGE_ON_READ

    def action_of(self, operation: WriteOperation) -> Action:
        """The timeline action of a write: a merge-on-read write is a deltacommit (replaces stay replacecommits)."""
        if self.merge_on_read and not operation.replaces:
            return Action.DELTA_COMMIT
        return operation.action

    def write_schema(self, batch_schema: pa.Schema, operation: WriteOperation, timeline: Timeline) -> pa.Schema:
        """The data schema this write commits (evolved additively), after checking the batch's columns."""
        check_partition_path_options(self.options, self.config)
        check_batch_schema(batch_schema, operation)
        names = [n for n in batch_schema.names if n not in META_COLUMNS]
        batch_schema = pa.schema([batch_schema.field(n) for n in names])
        table_schema = resolve_table_schema(self.storage, timeline, self.config)
        if operation is WriteOperation.DELETE:
            return table_schema or batch_schema
        schema = evolve_schema(table_schema, batch_schema) if table_schema is not None else batch_schema
        if self.config.is_partitioned:
            for field in self.config.partition_fields:
                if field not in names:
                    raise SchemaError(f"the batch has no column {field!r}, which the table is partitioned by")
        if self.config.precombine_field and self.config.precombine_field not in names:
            raise SchemaError(
                f"the batch has no column {self.config.precombine_field!r}, the table's ordering "
                "(hoodie.table.precombine.field) field"
            )
        return schema

    def combines(self, operation: WriteOperation) -> bool:
        """Whether the batch is de-duplicated by key before this operation."""
        return {
            WriteOperation.UPSERT: self.write_config.combine_before_upsert,
            WriteOperation.DELETE: self.write_config.combine_before_delete,
        }.get(operation, self.write_config.combine_before_insert)

    def sizing_policy(self, timeline: Timeline, batch_bytes_per_row: int) -> SizingPolicy:
        return SizingPolicy(
            self.write_config.max_file_size,
            self.write_config.small_file_limit,
            self._avg_record_size(timeline, batch_bytes_per_row),
            frozenset(pending_clustering_file_groups(self.storage, timeline)),
        )

    def bucket_hash_fields(self, columns: Sequence[str]) -> list[str]:
        """The BUCKET index's hash fields, checked against the batch's columns."""
        fields = (
            [f.strip() for f in self.write_config.bucket_hash_field.split(",")]
            if self.write_config.bucket_hash_field
            else list(self.config.record_key_fields)
        )
        for name in fields:
            if name not in columns:
                raise SchemaError(f"hoodie.bucket.index.hash.field names {name!r}, which the batch lacks")
        return fields

    def check_partitions_exist(self, view: FileSystemView, partitions: Sequence[str] | None) -> None:
        unknown = sorted(set(partitions or []) - set(view.partitions()))
        if unknown:
            raise SchemaError(f"no such partition(s): {unknown}; the table has {view.partitions()}")

    @staticmethod
    def live_groups(view: FileSystemView, partition_filter: Any) -> dict[str, list[str]]:
        replaced: dict[str, list[str]] = {}
        for s in view.latest_file_slices(partition_filter=partition_filter):
            replaced.setdefault(s.partition_path, []).append(s.file_id)
        return replaced

    # -- preparation (no instant exists yet: errors leave the table untouched) ------------
    def roll_back_failed_writes(self) -> Timeline:
        """Finish interrupted rollbacks and roll back failed writes; call under the table lock.

        Writes running in this process are not failed. With the EAGER policy every other
        pending write is failed; with LAZY (`hoodie.cleaner.policy.failed.writes=LAZY`, forced by
        `hoodie.write.concurrency.mode=optimistic_concurrency_control`) only those whose
        heartbeat expired. Returns the timeline afterwards.
        """
        return self._roll_back_writes(self._is_failed)[0]

    def roll_back_abandoned_writes(self) -> list[str]:
        """Finish interrupted rollbacks; roll back pending writes whose writer is certainly gone.

        Certainly gone: the write has a heartbeat file (its writer runs the LAZY policy) that
        has not been refreshed for `hoodie.client.heartbeat.tolerable.misses` intervals. A write
        without a heartbeat file is never touched: its writer may be an EAGER writer still
        running. Takes the table lock; returns the instants rolled back.
        """
        wc = self.write_config

        def abandoned(pending: Instant) -> bool:
            return last_heartbeat_ms(self.storage, pending.time) is not None and is_heartbeat_expired(
                self.storage, pending.time, wc.heartbeat_interval_ms, wc.heartbeat_tolerable_misses
            )

        with self.lock:
            return self._roll_back_writes(abandoned)[1]

    def _roll_back_writes(self, is_failed: Callable[[Instant], bool]) -> tuple[Timeline, list[str]]:
        current = Timeline.load(self.storage)
        running = active.active_instants(self.storage.uri)
        for interrupted in pending_rollbacks(current):
            resume_rollback(self.storage, interrupted)
            current = Timeline.load(self.storage)
        done: list[str] = []
        for failed in failed_writes(current, exclude=running, storage=self.storage):
            if not is_failed(failed):
                continue
            rollback_pending_instant(
                self.storage, failed, new_instant_time(current.latest_time(), self.config.timeline_timezone)
            )
            delete_heartbeat(self.storage, failed.time)
            done.append(failed.time)
            current = Timeline.load(self.storage)
        return current, done

    def _is_failed(self, pending: Instant) -> bool:
        """EAGER: every pending write of another process has failed; LAZY: only one whose heartbeat expired."""
        wc = self.write_config
        if not wc.lazy_failed_writes:
            return True
        return is_heartbeat_expired(self.storage, pending.time, wc.heartbeat_interval_ms, wc.heartbeat_tolerable_misses)

    def _start(self, timeline: Timeline, operation: WriteOperation) -> Instant:
        """Under the table lock: roll back failed writes, then take a new instant time."""
        with self.lock:
            current = self.roll_back_failed_writes()
            instant_time = new_instant_time(current.latest_time(), self.config.timeline_timezone)
            content = b""
            if operation.replaces:
                content = avro_plans.serialize(
                    avro_plans.REQUESTED_REPLACE_METADATA,
                    {"operationType": operation.value, "clusteringPlan": None, "extraMetadata": None, "version": 1},
                )
            requested = create_requested(self.storage, instant_time, self.action_of(operation), content)
            active.register(self.storage.uri, instant_time)
            if self.write_config.lazy_failed_writes:
                self._start_heartbeat(instant_time)
            return requested

    def _start_heartbeat(self, instant_time: str) -> None:
        try:
            heartbeat = Heartbeat(self.storage, instant_time, self.write_config.heartbeat_interval_ms)
            self._heartbeats[instant_time] = heartbeat.start()
        except BaseException:
            active.unregister(self.storage.uri, instant_time)
            raise

    def _stop_heartbeat(self, instant_time: str) -> None:
        heartbeat = self._heartbeats.pop(instant_time, None)
        if heartbeat is not None:
            heartbeat.stop()

    # -- execution -------------------------------------------------------------------------
    def _execute(
        self,
        plane: DataPlane,
        prepared: Prepared,
        requested: Instant,
        operation: WriteOperation,
        partitions: Sequence[str] | None,
    ) -> WriteResult:
        timeline = Timeline.load(self.storage)
        view = FileSystemView.load(self.storage, timeline)
        plan = plane.plan(prepared, operation, view, partitions)
        self._reject_updates_under_clustering(
            timeline, set(plan.touched) | {(p, f) for p, ids in plan.replaced.items() for f in ids}, requested.time
        )
        inflight = transition_to_inflight(self.storage, requested, self._workload(operation, plan.workload).to_bytes())
        # A log append with nothing to write leaves a stat without a file: not part of the commit.
        stats = [s for s in plan.run(self.context(requested.time, prepared.schema)) if s.path]
        reconcile_markers(self.storage, requested.time, [f for s in stats for f in s.files()])
        written = self._files_written(requested.time, stats)

        metadata = CommitMetadata(
            operationType=operation.value,
            extraMetadata={"schema": avro_schema_json(prepared.schema, self.config.name)},
            partitionToReplaceFileIds=plan.replaced if operation.replaces else None,
        )
        for stat in stats:
            metadata.partitionToWriteStats.setdefault(stat.partitionPath, []).append(stat)
        touched = set(plan.touched) | {(p, f) for p, ids in plan.replaced.items() for f in ids}
        with self.lock:
            self._check_conflicts(timeline, touched, requested.time)
            self.lock.ensure_held()  # a ZooKeeper session that expired meanwhile: do not complete
            complete(self.storage, inflight, metadata.to_bytes())
        delete_markers(self.storage, requested.time)
        return WriteResult(
            instant_time=requested.time,
            operation=operation,
            num_inserts=sum(s.numInserts for s in stats),
            num_updates=sum(s.numUpdateWrites for s in stats),
            num_deletes=sum(s.numDeletes for s in stats),
            files_written=written,
            replaced_file_groups=sum(len(v) for v in plan.replaced.values()),
        )

    def _files_written(self, instant_time: str, stats: Sequence[WriteStat]) -> tuple[str, ...]:
        """Every data file the commit holds. A log append that rolled over to several log files
        names only the last in `path`; the others are among its `logFiles` and have markers."""
        if not any(s.is_delta and len(s.logFiles or ()) > 1 for s in stats):
            return tuple(s.path for s in stats)
        marked = {m.data_path for m in list_markers(self.storage, instant_time)}
        return tuple(f for s in stats for f in s.files() if f == s.path or f in marked)

    def context(self, instant_time: str, schema: pa.Schema) -> WriteContext:
        """What the per-file-group tasks of an instant need (picklable)."""
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
            merge_on_read=self.merge_on_read,
            log_block_format=wc.log_block_format,
            log_max_size=wc.log_max_size,
            cdc_mode=self.config.cdc_mode if self.config.cdc_enabled else None,
        )

    def _workload(self, operation: WriteOperation, entries: Sequence[WorkloadEntry]) -> CommitMetadata:
        """The inflight file's workload profile: one stat per file group to be written."""
        meta = CommitMetadata(operationType=operation.value)
        for entry in entries:
            stat = WriteStat(
                fileId=entry.file_id if entry.base_instant_time else "",
                path="",
                prevCommit=entry.base_instant_time or "null",
                numInserts=entry.num_records,
                partitionPath=entry.partition_path,
            )
            meta.partitionToWriteStats.setdefault(entry.partition_path, []).append(stat)
        return meta

    def _avg_record_size(self, timeline: Timeline, batch_bytes_per_row: int) -> int:
        """Bytes per record: configured, else measured by recent commits, else the batch's Arrow size.

        The Arrow size overstates Parquet's (which compresses), so files err on the small side.
        """
        if self.write_config.record_size_estimate is not None:
            return self.write_config.record_size_estimate
        # As Hudi: only commits that wrote more than the small-file limit are representative
        # (a tiny commit's size is mostly its fixed footer: bloom filter, schema).
        threshold = max(1, self.write_config.small_file_limit)
        for instant in reversed(timeline.completed_writes()[-5:]):
            # Base files only: log appends hold Avro (or Parquet) blocks of a few records each.
            stats = [s for s in read_commit_metadata(self.storage, instant).write_stats() if not s.is_delta]
            count = sum(s.numWrites for s in stats)
            written = sum(s.totalWriteBytes for s in stats)
            if count > 0 and written > threshold:
                return max(1, written // count)
        return max(16, batch_bytes_per_row)

    # -- concurrency and failure ----------------------------------------------------------
    def _check_conflicts(self, seen: Timeline, touched: set[tuple[str, str]], instant_time: str) -> None:
        """Optimistic concurrency: fail if a write completed meanwhile touched our file groups.

        Also fail when this instant is no longer pending: another process took it for a
        failed write and rolled it back (EAGER cleaning cannot tell a slow writer from a dead one).
        """
        now = Timeline.load(self.storage)
        if not any(i.time == instant_time and not i.is_completed for i in now.pending()):
            raise ConcurrentWriteError(
                f"instant {instant_time} was rolled back by another writer while it ran (it looked failed); "
                "its files are gone: retry the write"
            )
        known = seen.completed_write_times()
        for instant in now.completed_writes():
            if instant.time in known or instant.time == instant_time:
                continue
            if now.was_compaction(instant.time):
                # A compaction rewrites a slice that writers no longer append to: new logs
                # after its plan go to the slice based on the compaction instant.
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

    def _reject_updates_under_clustering(
        self, timeline: Timeline, touched: set[tuple[str, str]], instant_time: str
    ) -> None:
        """`hoodie.clustering.updates.strategy` = SparkRejectUpdateStrategy (Hudi's default): a write
        that would change a file group a pending clustering will replace fails before writing anything
        (inserts into new file groups are fine; small-file filling skips such groups)."""
        if not touched:
            return
        pending = pending_clustering_file_groups(self.storage, timeline)
        clash = sorted(k for k in touched if k in pending)
        if clash:
            partition, file_id = clash[0]
            raise ConcurrentWriteError(
                f"instant {instant_time} would update file group {file_id} in partition {partition!r}, which the "
                f"pending clustering {pending[(partition, file_id)]} will replace ({len(clash)} file group(s) "
                "affected); hoodie.clustering.updates.strategy=SparkRejectUpdateStrategy rejects such updates: "
                "run the clustering first (Table.run_clustering), then retry the write"
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
