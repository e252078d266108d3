"""Executing a compaction plan: one task per file slice writes the slice's merged rows as a new base file."""

from __future__ import annotations

import json
import logging
import posixpath
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakeward.core.cdc.extract import PERSISTED_KEY, persisted_changes, persisted_instants
from lakeward.core.cdc.persist import persist_slice_changes
from lakeward.core.engine import Engine
from lakeward.core.exceptions import InstantExistsError, InstantNotFoundError, SchemaError
from lakeward.core.file_group.base_file import write_base_file
from lakeward.core.file_group.naming import base_file_name, write_token
from lakeward.core.file_group.partition_metadata import ensure_partition_metadata
from lakeward.core.file_group.reader import MergeSettings, VisibleInstants, read_merged_file_slice
from lakeward.core.index.secondary.api import build_indexes_of_written_files
from lakeward.core.schema import avro_schema_json
from lakeward.core.table_schema import resolve_table_schema
from lakeward.core.timeline import Action, CommitMetadata, Instant, State, Timeline, WriteStat
from lakeward.core.timeline.compaction_plan import CompactionOperation, read_compaction_plan
from lakeward.core.timeline.transitions import complete, transition_to_inflight
from lakeward.core.write.handles import CREATE, WriteContext, carried_over
from lakeward.core.write.markers import create_marker, delete_markers, reconcile_markers

if TYPE_CHECKING:
    from lakeward.core.write.client import WriteClient

log = logging.getLogger(__name__)
COMPACT = "COMPACT"


@dataclass(frozen=True)
class CompactionResult:
    instant_time: str
    file_slices: int
    records_written: int
    files_written: tuple[str, ...]

    def __str__(self) -> str:
        return self.instant_time


def compact_file_slice(
    ctx: WriteContext,
    task_id: int,
    operation: CompactionOperation,
    instants: VisibleInstants,
    settings: MergeSettings,
    attempt: int = 0,
    cdc_persisted: frozenset[str] = frozenset(),
    cdc_since: str | None = None,
) -> WriteStat:
    """Write the merged rows of one planned slice as the file group's base file of the compaction instant.

    Records keep their commit times and sequence numbers (as Hudi preserves them), so
    incremental reads after the compaction see the same commit times as before it.

    With CDC on, the changes of the slice's delta commits are persisted too (a `.cdc` file
    of the new slice), except those already persisted (`cdc_persisted`: delta commits of
    this file group) or from before CDC was switched on (`cdc_since`).
    """
    started = time.monotonic()
    storage = ctx.storage
    file_slice = operation.file_slice()
    merged = read_merged_file_slice(storage, file_slice, ctx.full_schema, instants, settings)
    name = base_file_name(operation.file_id, write_token(task_id, ctx.stage_id, attempt), ctx.instant_time)
    path = posixpath.join(operation.partition_path, name) if operation.partition_path else name
    create_marker(storage, ctx.instant_time, operation.partition_path, name, CREATE)
    ensure_partition_metadata(storage, operation.partition_path, ctx.instant_time)
    rows = carried_over(ctx, merged, name)
    size = write_base_file(storage, path, rows, ctx.avro_schema_with_meta, ctx.bloom, ctx.compression)
    log_sizes = sum(storage.size(f.path) for f in file_slice.log_files)
    cdc_stats = None
    if ctx.cdc_mode is not None and file_slice.log_files:
        persisted = persist_slice_changes(
            storage,
            file_slice,
            instants,
            ctx.full_schema,
            settings,
            ctx.cdc_mode,
            ctx.avro_schema_with_meta,
            keep=lambda t: t not in cdc_persisted and (cdc_since is None or t > cdc_since),
            base_instant_time=ctx.instant_time,
            write_token=write_token(task_id, ctx.stage_id, attempt),
            before_create=lambda cdc_name: create_marker(
                storage, ctx.instant_time, operation.partition_path, cdc_name, CREATE
            ),
        )
        if persisted is not None:
            cdc_stats = {persisted[0]: persisted[1]}
    return WriteStat(
        fileId=operation.file_id,
        path=path,
        cdcStats=cdc_stats,
        prevCommit=operation.base_instant_time,
        numWrites=rows.num_rows,
        numUpdateWrites=rows.num_rows,
        totalWriteBytes=size,
        partitionPath=operation.partition_path,
        totalLogFilesCompacted=len(file_slice.log_files),
        totalLogSizeCompacted=log_sizes,
        totalUpdatedRecordsCompacted=rows.num_rows,
        fileSizeInBytes=size,
        runtimeStats={"totalScanTime": 0, "totalUpsertTime": int((time.monotonic() - started) * 1000)},
    )


def run_compaction(client: WriteClient, instant_time: str, engine: Engine | None = None) -> CompactionResult:
    """Execute a pending compaction plan (again, if an earlier run died) and complete it as a commit."""
    storage = client.storage
    timeline = Timeline.load(storage)
    state = timeline.state_of(instant_time, Action.COMPACTION)
    if state is State.COMPLETED and timeline.was_compaction(instant_time):
        raise InstantExistsError(f"compaction {instant_time} is already completed")
    if state is None or not timeline.was_compaction(instant_time):
        pending = [i.time for i in timeline.pending() if i.action is Action.COMPACTION]
        raise InstantNotFoundError(f"no compaction plan {instant_time}; pending compactions: {sorted(set(pending))}")
    plan = read_compaction_plan(storage, instant_time)
    requested = Instant(instant_time, Action.COMPACTION, State.REQUESTED)
    inflight = requested.with_state(State.INFLIGHT)
    if state is State.REQUESTED:
        transition_to_inflight(storage, requested)
    else:
        log.info("compaction %s was started before: running its plan again", instant_time)
    schema = resolve_table_schema(storage, timeline, client.config)
    if schema is None:
        raise SchemaError("the table has no schema: nothing was ever written")
    ctx = client.context(instant_time, schema)
    visible = VisibleInstants.from_timeline(timeline, instant_time)
    settings = MergeSettings.from_config(client.config)
    runner = engine or client.engine
    persisted: dict[tuple[str, str], set[str]] = {}
    if ctx.cdc_mode is not None:
        for partition, file_id, delta in persisted_changes(storage, timeline):
            persisted.setdefault((partition, file_id), set()).add(delta)
    since = client.config.cdc_since
    started = time.monotonic()
    stats: list[WriteStat] = runner.map(
        lambda item: compact_file_slice(
            ctx,
            item[0],
            item[1],
            visible,
            settings,
            cdc_persisted=frozenset(persisted.get((item[1].partition_path, item[1].file_id), ())),
            cdc_since=since,
        ),
        list(enumerate(plan.operations)),
        f"compact {instant_time}",
    )
    reconcile_markers(storage, instant_time, [f for s in stats for f in s.files()])
    build_indexes_of_written_files(storage, instant_time, [s.path for s in stats], runner)  # secondary indexes
    metadata = CommitMetadata(
        operationType=COMPACT,
        compacted=True,
        extraMetadata={"schema": avro_schema_json(schema, client.config.name)},
    )
    cdc_files = persisted_instants(storage, stats)
    if cdc_files:
        metadata.extraMetadata[PERSISTED_KEY] = json.dumps(cdc_files, sort_keys=True)
    for stat in stats:
        metadata.partitionToWriteStats.setdefault(stat.partitionPath, []).append(stat)
    client.check_completion(instant_time)
    complete(storage, inflight, metadata.to_bytes())
    delete_markers(storage, instant_time)
    log.info(
        "compaction %s: %d slice(s), %d record(s) in %.2fs",
        instant_time,
        len(stats),
        sum(s.numWrites for s in stats),
        time.monotonic() - started,
    )
    return CompactionResult(instant_time, len(stats), sum(s.numWrites for s in stats), tuple(s.path for s in stats))
