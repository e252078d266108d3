"""Executing a clustering plan: one task per group rewrites its slices' rows into new file groups."""

from __future__ import annotations

import logging
import posixpath
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa

from lakeward.core.context import HoldsTableContext
from lakeward.core.engine import Engine
from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.base_file import write_base_file
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.naming import base_file_name, write_token
from lakeward.core.file_group.partition_metadata import ensure_partition_metadata
from lakeward.core.file_group.reader import MergeSettings, VisibleInstants, read_merged_file_slice
from lakeward.core.index.secondary.api import build_indexes_of_written_files
from lakeward.core.schema import avro_schema_json
from lakeward.core.storage import Storage
from lakeward.core.table_services.clustering.schedule import (
    SINGLE_FILE_STRATEGY,
    pending_clustering,
    schedule_clustering,
)
from lakeward.core.table_services.service import Completion, PlannedService, PlanRun, ServiceReport, bytes_of
from lakeward.core.timeline import Action, CommitMetadata, State, Timeline, WriteStat
from lakeward.core.timeline.clustering_plan import (
    CLUSTER,
    ClusteringGroup,
    ClusteringPlan,
    clustering_action,
    clustering_plan_of,
)
from lakeward.core.write.handles import CREATE, WriteContext, carried_over
from lakeward.core.write.markers import create_marker, delete_markers_of_completed, reconcile_markers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusteringResult:
    instant_time: str
    groups: int
    file_groups_replaced: int
    records_written: int
    files_written: tuple[str, ...]

    def __str__(self) -> str:
        return self.instant_time


def output_file_id(instant_time: str, group_index: int, output_index: int) -> str:
    """The file id of a group's n-th output: fixed by the plan, so a re-run rewrites the same files."""
    return f"{uuid.uuid5(uuid.NAMESPACE_URL, f'lakeward-clustering/{instant_time}/{group_index}/{output_index}')}-0"


def cluster_group(
    ctx: WriteContext,
    group_index: int,
    group: ClusteringGroup,
    instants: VisibleInstants,
    settings: MergeSettings,
    sort_columns: tuple[str, ...] = (),
    attempt: int = 0,
    keep_file_id: bool = False,
) -> list[WriteStat]:
    """Write the merged rows of one group's slices as `numOutputFileGroups` new base files (sorted when asked).

    Records keep their commit times and sequence numbers (Hudi's preserveHoodieMetadata).
    `keep_file_id` (single-file plans, BUCKET-index tables): the group's one slice is
    rewritten as a new base file of its own file group, so its keys stay in their bucket.
    """
    started = time.monotonic()
    storage = ctx.storage
    partition = group.partition_path
    parts = [
        read_merged_file_slice(storage, op.file_slice(), ctx.full_schema, instants, settings) for op in group.slices
    ]
    rows = pa.concat_tables(parts) if parts else ctx.full_schema.empty_table()
    if sort_columns and rows.num_rows:
        rows = rows.sort_by([(c, "ascending") for c in sort_columns])
    outputs = min(max(1, group.num_output_file_groups), rows.num_rows)
    if keep_file_id and (len(group.slices) != 1 or outputs > 1):
        raise CorruptTableError(
            f"clustering {ctx.instant_time}: a single-file plan group must have one slice and one output,"
            f" not {len(group.slices)} slice(s) and {group.num_output_file_groups} output(s)"
        )
    stats: list[WriteStat] = []
    token = write_token(group_index, ctx.stage_id, attempt)
    for j in range(outputs):
        lo, hi = rows.num_rows * j // outputs, rows.num_rows * (j + 1) // outputs
        file_id = group.slices[0].file_id if keep_file_id else output_file_id(ctx.instant_time, group_index, j)
        name = base_file_name(file_id, token, ctx.instant_time)
        path = posixpath.join(partition, name) if partition else name
        create_marker(storage, ctx.instant_time, partition, name, CREATE)
        ensure_partition_metadata(storage, partition, ctx.instant_time)
        chunk = carried_over(ctx, rows.slice(lo, hi - lo), name)
        size = write_base_file(storage, path, chunk, ctx.avro_schema_with_meta, ctx.footer_bloom, ctx.compression)
        stats.append(
            WriteStat(
                fileId=file_id,
                path=path,
                numWrites=chunk.num_rows,
                numInserts=chunk.num_rows,
                totalWriteBytes=size,
                partitionPath=partition,
                fileSizeInBytes=size,
                runtimeStats={
                    "totalScanTime": 0,
                    "totalUpsertTime": 0,
                    "totalCreateTime": int((time.monotonic() - started) * 1000),
                },
            )
        )
    return stats


def _replaced(planned: dict[str, list[str]], stats: list[WriteStat]) -> dict[str, list[str]]:
    """The planned file groups minus those the clustering wrote into (as Hudi: those live on, with a new slice)."""
    written = {(s.partitionPath, s.fileId) for s in stats}
    out = {p: [f for f in ids if (p, f) not in written] for p, ids in planned.items()}
    return {p: ids for p, ids in out.items() if ids}


class ClusteringService(PlannedService[ClusteringPlan, ClusteringResult]):
    """Clustering as a table service: schedule a plan, then rewrite each group's slices into new file groups."""

    action = "clustering"
    noun, plural = "clustering", "clusterings"
    timeline_action = Action.REPLACE_COMMIT
    needs_schema = True

    @classmethod
    def pending_of(cls, storage: Storage, timeline: Timeline) -> list[str]:
        return pending_clustering(storage, timeline)

    def schedule(self, *, force: bool = False) -> str | None:
        """`force` changes nothing: a clustering has no due-policy, only small file slices or none."""
        return schedule_clustering(self.ctx)

    def state_of(self, timeline: Timeline, instant_time: str) -> State | None:
        # A replacecommit without a clustering plan (insert_overwrite) is no clustering plan.
        state = super().state_of(timeline, instant_time)
        return (
            state if state is not None and clustering_plan_of(self.ctx.storage, instant_time, self.ctx.layout) else None
        )

    def plan_action(self) -> Action:
        """`replacecommit` on table version 6, `clustering` on 8+ (it completes as a replacecommit)."""
        return clustering_action(self.ctx.layout)

    def load_plan(self, instant_time: str) -> ClusteringPlan:
        plan = clustering_plan_of(self.ctx.storage, instant_time, self.ctx.layout)
        assert plan is not None  # state_of found it
        return plan

    def planned_slices(self, plan: ClusteringPlan) -> list[FileSlice]:
        return plan.file_slices()

    def run(self, run: PlanRun[ClusteringPlan]) -> Completion[ClusteringResult]:
        storage, instant_time, plan = run.storage, run.instant_time, run.plan
        assert run.schema is not None  # needs_schema
        ctx = WriteContext.of(self.ctx, instant_time, run.schema)
        visible = VisibleInstants.from_timeline(run.timeline, instant_time)
        settings = MergeSettings.from_config(self.ctx.config)
        sort_columns = plan.sort_columns
        keep_file_ids = plan.strategy == SINGLE_FILE_STRATEGY
        per_group: list[list[WriteStat]] = run.engine.map(
            lambda item: cluster_group(
                ctx, item[0], item[1], visible, settings, sort_columns, keep_file_id=keep_file_ids
            ),
            list(enumerate(plan.groups)),
            f"cluster {instant_time}",
        )
        stats = [s for group in per_group for s in group]
        reconcile_markers(storage, instant_time, [s.path for s in stats])
        build_indexes_of_written_files(storage, instant_time, [s.path for s in stats], run.engine)  # secondary indexes
        metadata = CommitMetadata(
            operationType=CLUSTER,
            extraMetadata={"schema": avro_schema_json(run.schema, self.ctx.config.name)},
            partitionToReplaceFileIds=_replaced(plan.replaced(), stats),
        )
        for stat in stats:
            metadata.partitionToWriteStats.setdefault(stat.partitionPath, []).append(stat)
        records = sum(s.numWrites for s in stats)
        result = ClusteringResult(
            instant_time, len(plan.groups), len(plan.file_groups()), records, tuple(s.path for s in stats)
        )
        return Completion(
            metadata.to_bytes(run.ctx.config.version.metadata_encoding),
            result,
            after=lambda: self._finished(run, result),
        )

    def _finished(self, run: PlanRun[ClusteringPlan], result: ClusteringResult) -> None:
        """Once completed: remove what only the run needed, and log it."""
        delete_markers_of_completed(run.storage, run.instant_time)
        log.info(
            "clustering %s: %d group(s) -> %d file(s), %d record(s) in %.2fs",
            run.instant_time,
            result.groups,
            len(result.files_written),
            result.records_written,
            time.monotonic() - run.started,
        )

    def report(self, result: ClusteringResult) -> ServiceReport:
        return ServiceReport(
            result.instant_time,
            records=result.records_written,
            bytes_written=bytes_of(self.ctx.storage, result.files_written),
            detail=f"{result.groups} group(s), {result.file_groups_replaced} file group(s) replaced",
        )


def run_clustering(table: HoldsTableContext, instant_time: str, engine: Engine | None = None) -> ClusteringResult:
    """Execute a pending clustering plan (again, if an earlier run died) and complete its replacecommit."""
    ctx = table.table_context
    return ClusteringService(ctx).execute(instant_time, engine=engine)
