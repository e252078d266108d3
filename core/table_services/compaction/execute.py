"""Executing a compaction plan: one task per file slice writes the slice's merged rows as a new base file."""

from __future__ import annotations

import json
import logging
import posixpath
import time
from dataclasses import dataclass

from lakeward.core.cdc.extract import PERSISTED_KEY, persisted_changes, persisted_instants
from lakeward.core.cdc.persist import persist_slice_changes
from lakeward.core.config.table import TableConfig, TableType
from lakeward.core.context import HoldsTableContext
from lakeward.core.engine import Engine
from lakeward.core.file_group.base_file import extendable_bloom, read_base_file_and_footer, write_base_file
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.naming import base_file_name, write_token
from lakeward.core.file_group.partition_metadata import ensure_partition_metadata
from lakeward.core.file_group.reader import (
    MergeSettings,
    SliceContents,
    VisibleInstants,
    merge_slice,
    visible_log_blocks,
)
from lakeward.core.index.secondary.api import build_indexes_of_written_files
from lakeward.core.schema import avro_schema_json
from lakeward.core.storage import Storage
from lakeward.core.table_services.compaction.schedule import pending_compactions, schedule_compaction
from lakeward.core.table_services.service import Completion, PlannedService, PlanRun, ServiceReport, bytes_of
from lakeward.core.timeline import Action, CommitMetadata, State, Timeline, WriteStat
from lakeward.core.timeline.compaction_plan import CompactionOperation, CompactionPlan, read_compaction_plan
from lakeward.core.timeline.metadata import COMPACT
from lakeward.core.write.handles import CREATE, WriteContext, carried_over
from lakeward.core.write.markers import create_marker, delete_markers_of_completed, reconcile_markers

log = logging.getLogger(__name__)


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
    # Every file of the slice is read once: the merge and the CDC fold share the decoded rows.
    footer = None
    if file_slice.base_file is not None:
        base, footer = read_base_file_and_footer(storage, file_slice.base_file.path)
    else:
        base = None
    contents = SliceContents(base, visible_log_blocks(storage, file_slice.log_files, instants))
    merged = merge_slice(contents.base, contents.blocks, ctx.full_schema, settings)
    name = base_file_name(operation.file_id, write_token(task_id, ctx.stage_id, attempt), ctx.instant_time)
    path = posixpath.join(operation.partition_path, name) if operation.partition_path else name
    create_marker(storage, ctx.instant_time, operation.partition_path, name, CREATE)
    ensure_partition_metadata(storage, operation.partition_path, ctx.instant_time)
    rows = carried_over(ctx, merged.rows, name)
    bloom = ctx.footer_bloom
    previous = extendable_bloom(footer, bloom) if footer is not None and bloom is not None else None
    extend = (previous, merged.new_keys) if previous is not None else None
    size = write_base_file(storage, path, rows, ctx.avro_schema_with_meta, bloom, ctx.compression, extend)
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
            contents=contents,
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


class CompactionService(PlannedService[CompactionPlan, CompactionResult]):
    """Compaction as a table service: schedule a plan, then fold each planned slice into a new base file."""

    action = "compaction"
    noun, plural = "compaction", "compactions"
    timeline_action = Action.COMPACTION
    needs_schema = True

    @classmethod
    def pending_of(cls, storage: Storage, timeline: Timeline) -> list[str]:
        return pending_compactions(timeline)

    @classmethod
    def unavailable_reason(cls, storage: Storage, config: TableConfig) -> str | None:
        if config.table_type is TableType.MERGE_ON_READ:
            return None
        return f"compaction applies to MERGE_ON_READ tables; {config.name} is {config.table_type.value}"

    def schedule(self, *, force: bool = False) -> str | None:
        return schedule_compaction(self.ctx, force=force)

    def state_of(self, timeline: Timeline, instant_time: str) -> State | None:
        # A completed `commit` at the same time that was no compaction is no compaction plan.
        return super().state_of(timeline, instant_time) if timeline.was_compaction(instant_time) else None

    def load_plan(self, instant_time: str) -> CompactionPlan:
        return read_compaction_plan(self.ctx.storage, instant_time, self.ctx.layout)

    def planned_slices(self, plan: CompactionPlan) -> list[FileSlice]:
        return [op.file_slice() for op in plan.operations]

    def run(self, run: PlanRun[CompactionPlan]) -> Completion[CompactionResult]:
        storage, config, instant_time = run.storage, self.ctx.config, run.instant_time
        assert run.schema is not None  # needs_schema
        ctx = WriteContext.of(self.ctx, instant_time, run.schema)
        visible = VisibleInstants.from_timeline(run.timeline, instant_time)
        settings = MergeSettings.from_config(config)
        persisted: dict[tuple[str, str], set[str]] = {}
        if ctx.cdc_mode is not None:
            for partition, file_id, delta in persisted_changes(storage, run.timeline):
                persisted.setdefault((partition, file_id), set()).add(delta)
        since = config.cdc_since
        stats: list[WriteStat] = run.engine.map(
            lambda item: compact_file_slice(
                ctx,
                item[0],
                item[1],
                visible,
                settings,
                cdc_persisted=frozenset(persisted.get((item[1].partition_path, item[1].file_id), ())),
                cdc_since=since,
            ),
            list(enumerate(run.plan.operations)),
            f"compact {instant_time}",
        )
        reconcile_markers(storage, instant_time, [f for s in stats for f in s.files()])
        build_indexes_of_written_files(storage, instant_time, [s.path for s in stats], run.engine)  # secondary indexes
        metadata = CommitMetadata(
            operationType=COMPACT,
            compacted=True,
            extraMetadata={"schema": avro_schema_json(run.schema, config.name)},
        )
        cdc_files = persisted_instants(storage, stats)
        if cdc_files:
            metadata.extraMetadata[PERSISTED_KEY] = json.dumps(cdc_files, sort_keys=True)
        for stat in stats:
            metadata.partitionToWriteStats.setdefault(stat.partitionPath, []).append(stat)
        records = sum(s.numWrites for s in stats)
        result = CompactionResult(instant_time, len(stats), records, tuple(s.path for s in stats))
        return Completion(
            metadata.to_bytes(run.ctx.config.version.metadata_encoding),
            result,
            after=lambda: self._finished(run, result),
        )

    def _finished(self, run: PlanRun[CompactionPlan], result: CompactionResult) -> None:
        """Once completed: remove what only the run needed, and log it."""
        delete_markers_of_completed(run.storage, run.instant_time)
        log.info(
            "compaction %s: %d slice(s), %d record(s) in %.2fs",
            run.instant_time,
            result.file_slices,
            result.records_written,
            time.monotonic() - run.started,
        )

    def report(self, result: CompactionResult) -> ServiceReport:
        return ServiceReport(
            result.instant_time,
            records=result.records_written,
            bytes_written=bytes_of(self.ctx.storage, result.files_written),
            detail=f"{result.file_slices} file slice(s) compacted",
        )


def run_compaction(table: HoldsTableContext, instant_time: str, engine: Engine | None = None) -> CompactionResult:
    """Execute a pending compaction plan (again, if an earlier run died) and complete it as a commit."""
    ctx = table.table_context
    return CompactionService(ctx).execute(instant_time, engine=engine)
