"""The write client: one call, one instant, following the commit protocol.

validate -> (lock) roll back failed writes, create the requested instant -> tag records
with the index -> assign them to file groups -> inflight -> write file groups on the
engine (markers first) -> (lock) check for conflicting commits, complete the instant.
Any failure before completion rolls the instant back, so the table stays exactly as it
was; a crash leaves a pending instant that the next writer rolls back.

Several writers: every write keeps a heartbeat (naming its process) from before its
instant is visible until after it completed, so a pending write with a live heartbeat is
never taken for a failed one. With the in-process lock (the default), which does not
exclude other processes, a write of another live process on the table is refused
(SharedLockRequiredError, before anything is written, and again right before completing).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.config.table import COMPLEX_KEYGEN_ENCODING_KEY, TableConfig
from lakeward.core.config.write import WriteConfig
from lakeward.core.context import Recovery, TableContext
from lakeward.core.engine import Engine, resolve_engine
from lakeward.core.engine.spark import session_lost
from lakeward.core.exceptions import (
    ConcurrentWriteError,
    ConfigError,
    CorruptTableError,
    InstantExistsError,
    LakewardError,
    MissingFileError,
    RollbackAbortedError,
    SchemaError,
    SharedLockRequiredError,
)
from lakeward.core.file_group.integrity import verify_before_write
from lakeward.core.file_group.metadata_listing import load_metadata_timeline, metadata_storage
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.index.bucket import bucket_of_file_id, hash_values
from lakeward.core.keygen import (
    DEFAULT_PARTITION,
    EMPTY_KEY_PART,
    NULL_KEY_PART,
    is_complex_key,
    partition_filter_values,
)
from lakeward.core.locks import InProcessLockProvider, LockProvider
from lakeward.core.merge import RECORD_KEY
from lakeward.core.metadata_table.services import run_metadata_table_services
from lakeward.core.metadata_table.writer import apply_commit
from lakeward.core.schema import (
    META_COLUMNS,
    arrow_schema_from_avro,
    avro_schema_json,
    evolve_schema,
    java_float_text,
    merge_committed,
)
from lakeward.core.storage import Storage, read_cache
from lakeward.core.table_schema import resolve_table_schema
from lakeward.core.table_services.rollback import (
    failed_writes,
    pending_rollbacks,
    resume_rollback,
    rollback_pending_instant,
    rollback_target,
)
from lakeward.core.table_services.savepoint import pending_restores, resume_restore
from lakeward.core.table_version import TimelineLayout
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
    delete_pending_files,
    read_commit_metadata,
    transition_to_inflight,
)
from lakeward.core.write import active
from lakeward.core.write.handles import WriteContext
from lakeward.core.write.heartbeat import (
    Heartbeat,
    HeartbeatInfo,
    delete_heartbeat,
    is_heartbeat_expired,
    read_heartbeat,
)
from lakeward.core.write.markers import delete_markers, delete_markers_of_completed, list_markers, reconcile_markers
from lakeward.core.write.operation import WriteOperation
from lakeward.core.write.partitioner import SizingPolicy
from lakeward.core.write.plan import DataPlane, Prepared, WorkloadEntry
from lakeward.core.write.plane.local import LocalDataPlane, to_arrow
from lakeward.core.write.plane.spark import SparkDataPlane
from lakeward.core.write.validation import check_batch_schema

log = logging.getLogger(__name__)

#: How many of the latest commits `_refuse_other_complex_key_encoding` looks through for a stored key.
_ENCODING_SAMPLE_COMMITS = 20

#: What a writer refused for racing another process under the in-process lock is told to do.
SHARED_LOCK_ADVICE = (
    "Give every writer of the table a shared lock: hoodie.write.lock.provider="
    "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider with hoodie.write.lock.zookeeper.url "
    "and hoodie.write.lock.zookeeper.base_path, and hoodie.write.concurrency.mode=optimistic_concurrency_control."
)


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
        #: What the table services of this table receive (storage, config, write config, lock,
        #: engine, fencing hook); this client adds the commit protocol of writes on top.
        self.table_context = TableContext.build(storage, config, options, engine, lock)
        self.table_context.recovery = self
        #: Heartbeats of this client's in-flight instants (both failed-writes policies).
        self._heartbeats: dict[str, Heartbeat] = {}

    # -- the table context, as attributes of the client ------------------------------------
    @property
    def storage(self) -> Storage:
        return self.table_context.storage

    @property
    def config(self) -> TableConfig:
        return self.table_context.config

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.table_context.options)

    @property
    def write_config(self) -> WriteConfig:
        return self.table_context.write_config

    @property
    def lock(self) -> LockProvider:
        return self.table_context.lock

    @property
    def engine(self) -> Engine:
        return self.table_context.engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        self.table_context.engine = engine

    @property
    def layout(self) -> TimelineLayout:
        """The table version's timeline layout (where instants live, completion times in names)."""
        return self.table_context.layout

    @property
    def completion_check(self) -> Callable[[str], None] | None:
        """The context's fencing hook: called with a table service's instant time right before it completes."""
        return self.table_context.completion_check

    @completion_check.setter
    def completion_check(self, check: Callable[[str], None] | None) -> None:
        self.table_context.completion_check = check

    @property
    def completion_scope(self) -> Callable[[str], AbstractContextManager[None]] | None:
        """The context's completion scope: entered once a table service's completion is underway."""
        return self.table_context.completion_scope

    @completion_scope.setter
    def completion_scope(self, scope: Callable[[str], AbstractContextManager[None]] | None) -> None:
        self.table_context.completion_scope = scope

    def check_completion(self, instant_time: str) -> None:
        """Run the completion check (if any) for a table service about to complete `instant_time`."""
        self.table_context.check_completion(instant_time)

    # -- public ---------------------------------------------------------------------------
    def write(
        self,
        data: Any,
        operation: WriteOperation,
        partitions: Sequence[str] | None = None,
        engine: Engine | str | None = None,
    ) -> WriteResult:
        """Run one write operation as one instant, on the given engine (else the client's).

        Its reads of `hoodie.properties` and of the timelines are served once per operation
        (`read_cache`; taking the table lock reads them afresh).
        """
        try:
            with read_cache.cached_reads():
                return self._write(data, operation, partitions, engine)
        except Exception as exc:
            lost = session_lost(exc)  # py4j's raw socket errors, often from a cleanup hiding the first one
            if lost is not None:
                raise lost from exc
            raise

    def _write(
        self, data: Any, operation: WriteOperation, partitions: Sequence[str] | None, engine: Engine | str | None
    ) -> WriteResult:
        started = time.monotonic()
        chosen = resolve_engine(engine, data, default=self.engine)
        plane = self._data_plane(chosen)
        timeline = self._verified_timeline()  # never build on missing or cut-short files
        if pending_restores(timeline):  # before the batch is checked against columns the restore removes
            self.finish_interrupted_restores()
            timeline = self._verified_timeline()
        try:
            prepared = plane.prepare(data, operation, timeline, partitions)
        except (MissingFileError, FileNotFoundError) as exc:  # tagging read a file another instant removed
            vanished = self._vanished_file_conflict(exc, timeline, None)
            if vanished is not None:
                raise vanished from exc
            raise
        try:
            instant, at_start = self._start(timeline, operation)
            still_pending = False
            try:
                result = self._execute(plane, prepared, instant, operation, partitions, at_start)
            except BaseException as exc:
                log.exception("write %s failed; rolling it back", instant)
                vanished = self._vanished_file_conflict(exc, timeline, instant.time)  # the listing's
                still_pending = not self._rollback_own(instant)
                if vanished is not None:
                    raise vanished from exc
                raise
            finally:
                # A write left pending keeps its heartbeat file: once expired it marks the write as failed,
                # for the next writer or `repair` to roll back (a write without one is never touched).
                self._stop_heartbeat(instant.time, keep_file=still_pending)
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

    def _verified_timeline(self) -> Timeline:
        """The timeline, once the files of its completed instants are checked (`verify_before_write`).

        Listed without the lock: a service of another thread or process may complete, clean or
        archive meanwhile, and the check then reads a plan or a file that is gone since. A failed
        check is taken again on a fresh listing when the timeline moved; only a table that fails
        it as it stands is refused."""
        timeline = Timeline.load(self.storage, self.layout)
        try:
            verify_before_write(self.storage, timeline)
        except (FileNotFoundError, CorruptTableError) as exc:
            read_cache.forget()
            fresh = Timeline.load(self.storage, self.layout)
            if fresh.files == timeline.files:
                raise
            log.warning(
                "the timeline of %s changed while it was checked (%s); checking it again", self.storage.uri, exc
            )
            verify_before_write(self.storage, fresh)
            return fresh
        return timeline

    def _data_plane(self, engine: Engine) -> DataPlane:
        if engine.name == "spark":
            return SparkDataPlane(self, engine)
        return LocalDataPlane(self, engine)

    # -- shared by the data planes ----------------------------------------------------------
    @property
    def merge_on_read(self) -> bool:
        return self.table_context.merge_on_read

    def _refuse_former_key_renderings(self, timeline: Timeline, table_schema: pa.Schema) -> None:
        """ConfigError when the table's timestamp or floating-point key or partition fields were rendered
        the way lakeward did before it rendered them as Hudi does (timestamps as text, not the stored
        number of their unit; floats as `1`, not Java's `1.0`): keys written now would not match them (a
        second copy of each record). Checked on the latest commit's partitions and one stored key."""

        def kind(name: str) -> str | None:
            if name not in table_schema.names:
                return None
            typ = table_schema.field(name).type
            return "timestamp" if pa.types.is_timestamp(typ) else "float" if pa.types.is_floating(typ) else None

        def rendered_now(name: str, text: str) -> bool:
            if text in ("", DEFAULT_PARTITION, NULL_KEY_PART, EMPTY_KEY_PART):
                return True
            if kind(name) == "timestamp":
                return _is_count(text)
            try:
                value = float(text)
            except ValueError:
                return False
            return java_float_text(value, not pa.types.is_float64(table_schema.field(name).type)) == text

        keys = [f for f in self.config.record_key_fields if kind(f)]
        by_timestamp_keygen = self.config.key_generator.name == "TIMESTAMP"
        parts = [] if by_timestamp_keygen else [f for f in self.config.partition_fields if kind(f)]
        latest = timeline.latest_completed_write()
        if latest is None or not (keys or parts):
            return
        meta = read_commit_metadata(self.storage, latest)
        found: list[str] = []
        for partition in meta.partitionToWriteStats:
            values = partition_filter_values(partition, self.config)
            found += [f"partition {partition!r}" for f in parts if not rendered_now(f, values.get(f, ""))]
        key = self._one_stored_key(meta) if keys and not found else None
        if key is not None:
            texts = hash_values(key, keys, self.complex_key) if self.complex_key else [key]
            found += [f"record key {key!r}" for f, t in zip(keys, texts) if not rendered_now(f, t or "")]
        if found:
            raise ConfigError(
                f"the table at {self.storage.uri} holds timestamp or floating-point key or partition values "
                f"written as text the former way ({found[0]}): lakeward now renders them as Hudi does (a "
                "timestamp as the stored number of its unit, a float as Java prints it: 1.0, 1.0E20), and keys "
                "written now would not match them. Rewrite the table (read it and bulk_insert it into a new "
                "one) before writing to it"
            )

    def _one_stored_key(self, meta: CommitMetadata) -> str | None:
        """The first `_hoodie_record_key` of the first base file a commit wrote (None: no base file,
        or a table without meta fields), a sample of how the table's keys are stored."""
        stored = [s.path for s in meta.write_stats() if s.path and s.path.endswith(".parquet")]
        if not stored or not self.config.populate_meta_fields:
            return None
        with self.storage.open_input_file(stored[0]) as f:
            first = pq.ParquetFile(f).read_row_group(0, columns=[RECORD_KEY]).column(0)
        return str(first[0].as_py()) if len(first) else None

    def _refuse_other_complex_key_encoding(self, timeline: Timeline) -> None:
        """ConfigError when a single-field ComplexKeyGenerator table that records no key encoding
        stores its keys otherwise than this writer keys them (`id:k1` against `k1`, HUDI-7001):
        every record written would be a second copy. Checked on one stored key of the latest commit
        that wrote a base file (among the last few), unless `hoodie.write.complex.keygen.validation.enable=false`."""
        config = self.config
        single_complex = config.key_generator.name == "COMPLEX" and len(config.record_key_fields) == 1
        if (
            not single_complex
            or config.complex_key_encoding_recorded
            or not self.write_config.complex_keygen_validation
        ):
            return
        key = None
        for instant in reversed(timeline.completed_writes()[-_ENCODING_SAMPLE_COMMITS:]):
            key = self._one_stored_key(read_commit_metadata(self.storage, instant))
            if key is not None:
                break
        prefix = f"{config.record_key_fields[0]}:"
        if key is None or key.startswith(prefix) == self.complex_key:
            return
        stored, ours = ("VALUE_ONLY", "FIELD_PREFIXED") if self.complex_key else ("FIELD_PREFIXED", "VALUE_ONLY")
        raise ConfigError(
            f"the table at {self.storage.uri} uses ComplexKeyGenerator with the single record key field "
            f"{config.record_key_fields[0]!r} and stores its keys as {stored} (e.g. {key!r}), as Hudi 0.14.1 to "
            f"1.0.2 may have written them (HUDI-7001), but records no encoding: this write would key its "
            f"records as {ours} and store each one a second time. Record the table's encoding: add the line "
            f"{COMPLEX_KEYGEN_ENCODING_KEY}={stored} to its .hoodie/hoodie.properties (as Hudi's upgrade to "
            "version 9 does); or, if you are sure the keys are not affected, write with "
            "hoodie.write.complex.keygen.validation.enable=false"
        )

    def action_of(self, operation: WriteOperation) -> Action:
        """The timeline action of a write: a merge-on-read write is a deltacommit (replaces stay replacecommits)."""
        if self.merge_on_read and not operation.replaces:
            return Action.DELTA_COMMIT
        return operation.action

    def write_schema(self, batch_schema: pa.Schema, operation: WriteOperation, timeline: Timeline) -> pa.Schema:
        """The data schema this write commits (evolved additively), after checking the batch's columns."""
        check_batch_schema(batch_schema, operation)
        names = [n for n in batch_schema.names if n not in META_COLUMNS]
        batch_schema = pa.schema([batch_schema.field(n) for n in names])
        table_schema = resolve_table_schema(self.storage, timeline, self.config)
        if table_schema is not None:
            self._refuse_other_complex_key_encoding(timeline)
        if operation is WriteOperation.DELETE:
            return table_schema or batch_schema
        if table_schema is None:
            # The first write's files take the types every later write and reader derives from the
            # schema it commits (int8 -> int32, time zone-less timestamps -> UTC): else the first files'
            # types differed from all others', and a read's column types depended on which files it read.
            table_schema = arrow_schema_from_avro(avro_schema_json(batch_schema, self.config.name))
            fields = [table_schema.field(n).with_nullable(batch_schema.field(n).nullable) for n in names]
            schema = pa.schema(fields, batch_schema.metadata)
        else:
            self._refuse_former_key_renderings(timeline, table_schema)
            keys = (*self.config.record_key_fields, *self.config.partition_fields)
            schema = evolve_schema(table_schema, batch_schema, keys)
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

    @property
    def global_index(self) -> bool:
        """Whether the index places a key once in the whole table (RECORD_INDEX), not per partition:
        the batch is then de-duplicated by record key alone, as Hudi does for global indexes."""
        return self.write_config.index_type == "RECORD_INDEX"

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
        outside = [f for f in fields if f not in self.config.record_key_fields]
        if outside:
            raise ConfigError(
                f"hoodie.bucket.index.hash.field={self.write_config.bucket_hash_field!r} names {outside}, which "
                f"are not record key fields {list(self.config.record_key_fields)}: a key's bucket would change "
                "with those values and leave a second copy behind (Hudi refuses it too: the hash fields must be "
                "a subset of the record key)"
            )
        for name in fields:
            if name not in columns:
                raise SchemaError(f"hoodie.bucket.index.hash.field names {name!r}, which the batch lacks")
        return fields

    @property
    def complex_key(self) -> bool:
        """Whether record keys are in the `field:value,...` format (`keygen.is_complex_key`)."""
        return is_complex_key(self.config)

    def partitions_to_delete_schema(self, timeline: Timeline, partitions: Sequence[str] | None) -> pa.Schema:
        """The table's schema for a `delete_partition`, after checking the table has data and
        every partition to delete exists (SchemaError / ConfigError naming the problem)."""
        schema = self.write_schema(pa.schema([]), WriteOperation.DELETE, timeline)
        if not schema.names:
            raise SchemaError("the table has no data yet; there is no partition to delete")
        self.check_partitions_exist(FileSystemView.load(self.storage, timeline), partitions)
        return schema

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
    def roll_back_failed_writes(self, keep: str | None = None) -> Timeline:
        """Finish interrupted rollbacks and roll back failed writes; call under the table lock.

        Failed: a pending write whose writer is gone (see `_is_failed`); writes running in
        this process and writes with a live heartbeat are not. Under the in-process lock a
        write of another live process raises SharedLockRequiredError. `keep`: a pending
        write left as it is (the one an explicit rollback is about to undo itself). Returns
        the timeline afterwards.
        """
        return self._roll_back_writes(lambda pending: pending.time != keep and self._is_failed(pending))[0]

    def roll_back_abandoned_writes(self) -> Recovery:
        """Finish interrupted restores and rollbacks; roll back pending writes whose writer is certainly gone.

        Certainly gone: the write has a heartbeat file that has not been refreshed for
        `hoodie.client.heartbeat.tolerable.misses` intervals, or that names a process of this
        machine that no longer runs. A write without a heartbeat file is never touched: its
        writer may be an older or a Java Hudi EAGER writer still running. Takes the table
        lock; returns what it repaired.
        """

        def abandoned(pending: Instant) -> bool:
            beat = read_heartbeat(self.storage, pending.time)
            return beat is not None and self._writer_gone(beat)

        with self.lock:
            return self._roll_back_writes(abandoned)[1]

    def _roll_back_writes(self, is_failed: Callable[[Instant], bool]) -> tuple[Timeline, Recovery]:
        current, restores = self._finish_interrupted_restores(Timeline.load(self.storage, self.layout))
        done: list[str] = []
        running = active.active_instants(self.storage.uri)
        for interrupted in pending_rollbacks(current):
            target = rollback_target(self.storage, interrupted)
            beat = None if target in running else read_heartbeat(self.storage, target)
            if target in running or (beat is not None and not self._writer_gone(beat)):
                # Not interrupted: the target's writer is rolling its own write back right now.
                if beat is not None and not self.lock_spans_processes:
                    raise SharedLockRequiredError(self._unshared_lock_message(interrupted, beat))
                continue
            try:
                resume_rollback(self.storage, interrupted, timezone=self.config.timeline_timezone)
                done.append(target)
            except RollbackAbortedError:
                pass  # planned for a write that was alive and completed: the plan is dropped
            current = Timeline.load(self.storage, self.layout)
        for failed in failed_writes(current, exclude=running, storage=self.storage):
            if not is_failed(failed):
                continue
            try:
                tz = self.config.timeline_timezone
                with self._refused_if_raced(
                    f"another process rolled back failed write {failed.time} of table {self.storage.uri} at the "
                    "same moment and took the same rollback instant time",
                    "Nothing was written.",
                ):
                    rollback_pending_instant(self.storage, failed, new_instant_time(current.latest_time(), tz), tz)
            except RollbackAbortedError:
                continue  # it completed since the timeline was loaded: not a failed write
            delete_heartbeat(self.storage, failed.time)
            done.append(failed.time)
            current = Timeline.load(self.storage, self.layout)
        return current, Recovery(tuple(done), tuple(restores))

    def finish_interrupted_restores(self) -> list[str]:
        """Under the table lock, finish the restores that stopped midway (`_finish_interrupted_restores`);
        the restores finished. For table services and writes, before they plan on the table."""
        with self.lock:
            return self._finish_interrupted_restores(Timeline.load(self.storage, self.layout))[1]

    def _finish_interrupted_restores(self, current: Timeline) -> tuple[Timeline, list[str]]:
        """Finish a restore that stopped midway, from its plan, before anything else changes the table.

        A restore holds the table lock until it completes, so under the lock a pending one was
        interrupted. The table is then half-way back to the savepoint: a write on top of it would
        keep instants the operator asked to undo, and a later run of the restore would undo that write.
        Returns the timeline afterwards and the restores finished.
        """
        interrupted = pending_restores(current)
        for restore in interrupted:
            log.warning("restore %s of table %s was interrupted: finishing it first", restore.time, self.storage.uri)
            resume_restore(self.storage, restore, self.config.timeline_timezone, self.lock.confirmed)
        finished = [r.time for r in interrupted]
        return (Timeline.load(self.storage, self.layout) if interrupted else current), finished

    @property
    def lock_spans_processes(self) -> bool:
        """Whether the table lock excludes other processes (ZooKeeper) or only this one's threads."""
        return not isinstance(self.lock, InProcessLockProvider)

    @contextmanager
    def _refused_if_raced(self, race: str, outcome: str) -> Iterator[None]:
        """An InstantExistsError inside: another process took the same instant at the same moment. Under the
        in-process lock that is several processes writing unexcluded, refused with SharedLockRequiredError
        (`race`: what happened; `outcome`: what became of this write); under a shared lock it stays as it is."""
        try:
            yield
        except InstantExistsError as exc:
            if self.lock_spans_processes:
                raise
            raise SharedLockRequiredError(
                f"{race} ({exc}): several processes write the table under the in-process lock (the default "
                f"hoodie.write.lock.provider). {outcome} {SHARED_LOCK_ADVICE}"
            ) from None

    def _writer_gone(self, beat: HeartbeatInfo) -> bool:
        """Whether the writer of a heartbeat certainly stopped: no beat for `interval * tolerable misses`
        (as Hudi), or its process, on this machine, no longer runs (or is this one, which is not
        writing it: the caller excludes the instants this process writes)."""
        wc = self.write_config
        if beat.age_ms() > wc.heartbeat_interval_ms * wc.heartbeat_tolerable_misses:
            return True
        return beat.owner is not None and (beat.owner.is_this_process or beat.owner.is_gone)

    def _is_failed(self, pending: Instant) -> bool:
        """Whether a pending write (not one of this process) failed, so that it must be rolled back.

        Without a heartbeat file it failed (with both policies, as Hudi: a writer's heartbeat
        exists before its instant, and goes only after the instant completed, which the
        rollback checks again before deleting anything). With one, it failed when its writer
        is gone (`_writer_gone`). A write whose writer lives is left alone, and under the
        in-process lock it cannot be raced safely: SharedLockRequiredError.
        """
        beat = read_heartbeat(self.storage, pending.time)
        if beat is None or self._writer_gone(beat):
            return True
        if not self.lock_spans_processes:
            raise SharedLockRequiredError(self._unshared_lock_message(pending, beat))
        return False

    def _refuse_other_live_writes(self, instant_time: str) -> None:
        """Under the in-process lock, right before completing: no write of another live process may be
        pending. Two writers that started unseen by each other both find the other here (each one's
        instant exists before its check), so at most one of two racing writes completes."""
        if self.lock_spans_processes:
            return
        running = active.active_instants(self.storage.uri) | {instant_time}
        for pending in failed_writes(Timeline.load(self.storage, self.layout), exclude=running, storage=self.storage):
            beat = read_heartbeat(self.storage, pending.time)
            if beat is not None and not self._writer_gone(beat):
                raise SharedLockRequiredError(self._unshared_lock_message(pending, beat, instant_time))

    def _unshared_lock_message(self, other: Instant, beat: HeartbeatInfo, ours: str | None = None) -> str:
        wc = self.write_config
        who = beat.owner.describe() if beat.owner is not None else "a writer that does not record its process"
        return (
            f"table {self.storage.uri} is being written by another process: {other.action.value} {other.time} "
            f"is in flight ({who}, heartbeat refreshed {beat.age_ms() / 1000:.1f}s ago). "
            + (f"Write {ours} did not complete and was rolled back. " if ours else "Nothing was written. ")
            + "This writer uses the in-process lock (the default hoodie.write.lock.provider), which does not "
            f"exclude other processes, so writing on could lose that write or this one. {SHARED_LOCK_ADVICE} "
            "If that writer died, its write is rolled back once its process is gone (same machine) "
            "or its heartbeat is older than "
            f"{wc.heartbeat_interval_ms * wc.heartbeat_tolerable_misses} ms (hoodie.client.heartbeat.interval_in_ms "
            "x hoodie.client.heartbeat.tolerable.misses)."
        )

    def _start(self, timeline: Timeline, operation: WriteOperation) -> tuple[Instant, Timeline]:
        """Under the table lock: roll back failed writes, then take a new instant time; the instant, and
        the timeline it was taken on (what completed before it: every write completing later is a
        conflict candidate, as Hudi's conflict resolution counts instants completed since the start)."""
        with self.lock:
            self.table_context.check_version(f"{operation.value.lower()} into the table")
            current = self.roll_back_failed_writes()
            instant_time = new_instant_time(current.latest_time(), self.config.timeline_timezone)
            content = b""
            if operation.replaces:
                content = avro_plans.serialize(
                    avro_plans.REQUESTED_REPLACE_METADATA,
                    {"operationType": operation.value, "clusteringPlan": None, "extraMetadata": None, "version": 1},
                )
            active.register(self.storage.uri, instant_time)
            try:
                # As Hudi: the heartbeat exists before the instant is visible to other writers.
                heartbeat = Heartbeat(self.storage, instant_time, self.write_config.heartbeat_interval_ms)
                with self._refused_if_raced(
                    f"another process took instant time {instant_time} on table {self.storage.uri} at the same moment",
                    "Nothing was written.",
                ):
                    self._heartbeats[instant_time] = heartbeat.start()
                    # (the other process may have completed its write of this time meanwhile: no heartbeat left)
                    requested = create_requested(
                        self.storage, instant_time, self.action_of(operation), content, self.layout
                    )
                return requested, current
            except BaseException:
                self._stop_heartbeat(instant_time)  # only a heartbeat this client created
                active.unregister(self.storage.uri, instant_time)
                raise

    def _vanished_file_conflict(
        self, exc: BaseException, listed_with: Timeline, instant_time: str | None
    ) -> ConcurrentWriteError | None:
        """A ConcurrentWriteError for a data file that vanished while the write read it because another
        instant began or completed meanwhile (a rollback deleting a failed write's files, which on version 6
        carry no instant of their own in a log's name, or a clean); None for any other failure.
        `listed_with`: the timeline the write listed its files with (its own instant `instant_time` aside)."""
        if isinstance(exc, MissingFileError):  # a log file, named by the log reader
            gone: object = exc.path or exc
        elif isinstance(exc, FileNotFoundError):
            gone = exc.filename or exc
        else:
            return None
        # Instants that appeared or moved on since: a rollback deletes the files before it completes.
        # Loaded afresh: the operation's cached timeline (`read_cache`) is the one it listed with.
        read_cache.forget()
        known = {(i.time, i.action, i.state) for i in listed_with.instants}
        since = [
            i
            for i in Timeline.load(self.storage, self.layout).instants
            if (i.time, i.action, i.state) not in known and i.time != instant_time
        ]
        if not since:
            return None
        which = f"instant {instant_time}" if instant_time else "write (not started)"
        return ConcurrentWriteError(
            f"{which}: {gone} was removed while this write read it, by "
            f"{', '.join(str(i) for i in since[:3])}, which began or completed meanwhile (the rollback of a "
            "failed write, or a clean); nothing was written: retry the write"
        )

    def _stop_heartbeat(self, instant_time: str, keep_file: bool = False) -> None:
        heartbeat = self._heartbeats.pop(instant_time, None)
        if heartbeat is not None:
            heartbeat.stop(keep_file=keep_file)

    # -- execution -------------------------------------------------------------------------
    def _execute(
        self,
        plane: DataPlane,
        prepared: Prepared,
        requested: Instant,
        operation: WriteOperation,
        partitions: Sequence[str] | None,
        at_start: Timeline,
    ) -> WriteResult:
        timeline = Timeline.load(self.storage, self.layout)
        view = FileSystemView.load(self.storage, timeline)
        plan = plane.plan(prepared, operation, view, partitions)
        self._reject_updates_under_clustering(
            timeline, set(plan.touched) | {(p, f) for p, ids in plan.replaced.items() for f in ids}, requested.time
        )
        encoding = self.config.version.metadata_encoding
        inflight = transition_to_inflight(
            self.storage, requested, self._workload(operation, plan.workload).to_bytes(encoding)
        )
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
        touched |= {(s.partitionPath, s.fileId) for s in stats}  # new file groups too (BUCKET: their buckets)
        with self.lock:
            # Against what completed before this instant was taken, not before it planned: a later
            # instant that completed in between wrote a slice this one's (earlier) name would sort below.
            self._check_conflicts(at_start, touched, requested.time)
            schema = self._schema_to_commit(at_start, requested.time, prepared.schema)
            if schema is not prepared.schema:
                metadata.extraMetadata = {
                    **(metadata.extraMetadata or {}),
                    "schema": avro_schema_json(schema, self.config.name),
                }
            self.lock.ensure_held()  # a ZooKeeper session that expired meanwhile: do not complete
            # the metadata table first (Hudi's order)
            index_change = partial(plan.index_change, requested.time) if plan.index_change is not None else None
            with self._refused_if_raced(
                f"another process changed the metadata table of {self.storage.uri} at the same moment",
                f"Write {requested.time} did not complete and was rolled back.",
            ):
                apply_commit(self.storage, self.config.timeline_timezone, requested.time, metadata, index_change)
            complete(self.storage, inflight, metadata.to_bytes(encoding), self.config.timeline_timezone)
        delete_markers_of_completed(self.storage, requested.time)
        self._metadata_table_services()
        return WriteResult(
            instant_time=requested.time,
            operation=operation,
            num_inserts=sum(s.numInserts for s in stats),
            num_updates=sum(s.numUpdateWrites for s in stats),
            num_deletes=sum(s.numDeletes for s in stats),
            files_written=written,
            replaced_file_groups=sum(len(v) for v in plan.replaced.values()),
        )

    def _metadata_table_services(self) -> None:
        """After a commit, the metadata table's own compaction, clean and archival when due (Hudi runs them inline
        in the writer). The write has completed: a failure here is logged, and the next commit retries."""
        try:
            run_metadata_table_services(self.storage, self.lock, self.write_config, self.config.timeline_timezone)
        except (LakewardError, OSError) as exc:
            log.error(
                "metadata-table services of %s failed after a commit (retried after the next): %s",
                self.storage.uri,
                exc,
                exc_info=True,
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
        return WriteContext.of(self.table_context, instant_time, schema)

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
        self._refuse_other_live_writes(instant_time)
        wc = self.write_config
        if is_heartbeat_expired(self.storage, instant_time, wc.heartbeat_interval_ms, wc.heartbeat_tolerable_misses):
            # As Hudi: others may have taken this write for a failed one (its beats did not get through).
            raise ConcurrentWriteError(
                f"the heartbeat of instant {instant_time} expired while it ran (another writer may have rolled "
                "it back); retry the write"
            )
        now = Timeline.load(self.storage, self.layout)
        if not any(i.time == instant_time for i in now.pending()):
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
            buckets = self._bucket_clash(touched, theirs)
            if buckets:
                partition, bucket = buckets[0]
                raise ConcurrentWriteError(
                    f"instant {instant_time} conflicts with {instant.time}, which completed first and also "
                    f"wrote bucket {bucket} in partition {partition!r} ({len(buckets)} bucket(s) in common; "
                    "BUCKET index: one file group per bucket, and the same new key goes to the same bucket); "
                    "retry the write"
                )

    def _schema_to_commit(self, seen: Timeline, instant_time: str, ours: pa.Schema) -> pa.Schema:
        """The schema this write commits, given the writes that completed since it took the table's
        (`seen`). Readers take the table's schema from the latest completed write: when that is ours,
        it keeps the columns the others added (the union); when a later instant completed first, its
        schema stays the table's, so this write must add nothing it lacks. Either way, types that do
        not merge, or columns that would vanish, are a ConcurrentWriteError: retry the write."""
        now = Timeline.load(self.storage, self.layout)
        known = seen.completed_write_times()
        if all(i.time in known for i in now.completed_writes()):
            return ours  # nothing committed meanwhile: the schema the write took is the table's
        committed = resolve_table_schema(self.storage, now, self.config)
        if committed is None:
            return ours
        latest = now.completed_writes()[-1]
        ours_is_latest = latest.time < instant_time
        try:
            merged = merge_committed(committed, ours, allow_new=ours_is_latest)
        except SchemaError as exc:
            raise ConcurrentWriteError(
                f"instant {instant_time} conflicts with {latest.time}, which completed first with another table "
                f"schema ({exc}); retry the write"
            ) from None
        return merged if ours_is_latest and merged != ours else ours

    def _bucket_clash(self, ours: set[tuple[str, str]], theirs: set[tuple[str, str]]) -> list[tuple[str, int]]:
        """BUCKET index: the (partition, bucket) pairs both sides wrote, as Hudi's bucket-index conflict
        strategy compares them. Two writers that insert into a bucket with no file group yet each
        create one, with different file ids: only the bucket number shows that they collide."""
        if self.write_config.index_type != "BUCKET":
            return []

        def by_bucket(groups: set[tuple[str, str]]) -> set[tuple[str, int]]:
            out = set()
            for partition, file_id in groups:
                bucket = bucket_of_file_id(file_id)
                if bucket is not None:
                    out.add((partition, bucket))
            return out

        return sorted(by_bucket(ours) & by_bucket(theirs))

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

    def _wrote_nothing(self, instant: Instant) -> bool:
        """Whether the failed write `instant` left no file behind: no marker (every data, log and CDC
        file has one before it is created) and no instant of that time on the metadata table."""
        if list_markers(self.storage, instant.time):
            return False
        mdt = load_metadata_timeline(metadata_storage(self.storage), self.layout)
        return all(i.time != instant.time for i in mdt.instants)

    def _rollback_own(self, instant: Instant) -> bool:
        """Roll back this client's failed write; False when that failed too (the write stays pending)."""
        try:
            with self.lock:
                timeline = Timeline.load(self.storage, self.layout)
                state = timeline.state_of(instant.time, instant.action)
                if state is None or state.rank >= 2:
                    return True
                pending = next(i for i in timeline.pending() if i.time == instant.time)
                if self._wrote_nothing(pending):
                    # Refused before any file (bad input, a refused key move): the table stays exactly
                    # as it was, without a rollback instant for a write that left nothing to undo.
                    delete_pending_files(self.storage, pending.time, pending.action, self.layout)
                    delete_markers(self.storage, pending.time)
                    log.info("write %s wrote no file: its pending instant is removed", pending)
                    return True
                self._roll_back_at_a_free_time(pending, timeline)
                return True
        except Exception:
            log.exception(
                "could not roll back %s; the next writer or repair will, once its heartbeat has expired", instant
            )
            return False

    def _roll_back_at_a_free_time(self, pending: Instant, timeline: Timeline, attempts: int = 5) -> None:
        """Roll back this client's own pending write. Under the in-process lock another process may take
        the same rollback instant time at the same moment (two writers refused together each roll their
        write back at once): the rollback then wrote nothing, and is taken again at a later time."""
        tz = self.config.timeline_timezone
        for attempt in range(attempts):
            try:
                rollback_pending_instant(self.storage, pending, new_instant_time(timeline.latest_time(), tz), tz)
                return
            except InstantExistsError:
                if self.lock_spans_processes or attempt == attempts - 1:
                    raise
                timeline = Timeline.load(self.storage, self.layout)


def _is_count(text: str) -> bool:
    """Whether a timestamp's key text is a number (Hudi's rendering)."""
    return text.lstrip("-").isdigit()


__all__ = ["Action", "WriteClient", "WriteOperation", "WriteResult", "to_arrow"]
