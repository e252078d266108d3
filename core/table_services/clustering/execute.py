"""Executing a clustering plan: one task per group rewrites its slices' rows into new file groups."""

from __future__ import annotations

import logging
import posixpath
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeward.core.engine import Engine
from lakeward.core.exceptions import CorruptTableError, InstantExistsError, InstantNotFoundError, SchemaError
from lakeward.core.file_group.base_file import write_base_file
from lakeward.core.file_group.naming import base_file_name, write_token
from lakeward.core.file_group.partition_metadata import ensure_partition_metadata
from lakeward.core.file_group.reader import MergeSettings, VisibleInstants, read_merged_file_slice
from lakeward.core.index.secondary.api import build_indexes_of_written_files
from lakeward.core.schema import avro_schema_json
from lakeward.core.table_schema import resolve_table_schema
from lakeward.core.table_services.clustering.schedule import SINGLE_FILE_STRATEGY
from lakeward.core.timeline import Action, CommitMetadata, Instant, State, Timeline, WriteStat
from lakeward.core.timeline.clustering_plan import (
    CLUSTER,
    ClusteringGroup,
    clustering_plan_of,
    pending_clustering_plans,
)
from lakeward.core.timeline.transitions import complete, transition_to_inflight
from lakeward.core.write.handles import CREATE, WriteContext, carried_over
from lakeward.core.write.markers import create_marker, delete_markers, reconcile_markers

if TYPE_CHECKING:
    from lakeward.core.write.client import WriteClient

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
        size = write_base_file(storage, path, chunk, ctx.avro_schema_with_meta, ctx.bloom, ctx.compression)
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


def run_clustering(client: WriteClient, instant_time: str, engine: Engine | None = None) -> ClusteringResult:
    """Execute a pending clustering plan (again, if an earlier run died) and complete its replacecommit."""
    storage = client.storage
    timeline = Timeline.load(storage)
    state = timeline.state_of(instant_time, Action.REPLACE_COMMIT)
    plan = clustering_plan_of(storage, instant_time) if state is not None else None
    if state is State.COMPLETED and plan is not None:
        raise InstantExistsError(f"clustering {instant_time} is already completed")
    if state is None or plan is None:
        pending = list(pending_clustering_plans(storage, timeline))
        raise InstantNotFoundError(f"no clustering plan {instant_time}; pending clusterings: {pending}")
    requested = Instant(instant_time, Action.REPLACE_COMMIT, State.REQUESTED)
    inflight = requested.with_state(State.INFLIGHT)
    if state is State.REQUESTED:
        transition_to_inflight(storage, requested)
    else:
        log.info("clustering %s was started before: running its plan again", instant_time)
    schema = resolve_table_schema(storage, timeline, client.config)
    if schema is None:
        raise SchemaError("the table has no schema: nothing was ever written")
    ctx = client.context(instant_time, schema)
    visible = VisibleInstants.from_timeline(timeline, instant_time)
    settings = MergeSettings.from_config(client.config)
    sort_columns = plan.sort_columns
    keep_file_ids = plan.strategy == SINGLE_FILE_STRATEGY
    runner = engine or client.engine
    started = time.monotonic()
    per_group: list[list[WriteStat]] = runner.map(
        lambda item: cluster_group(ctx, item[0], item[1], visible, settings, sort_columns, keep_file_id=keep_file_ids),
        list(enumerate(plan.groups)),
        f"cluster {instant_time}",
    )
    stats = [s for group in per_group for s in group]
    reconcile_markers(storage, instant_time, [s.path for s in stats])
    build_indexes_of_written_files(storage, instant_time, [s.path for s in stats], runner)  # secondary indexes
    metadata = CommitMetadata(
        operationType=CLUSTER,
        extraMetadata={"schema": avro_schema_json(schema, client.config.name)},
        partitionToReplaceFileIds=_replaced(plan.replaced(), stats),
    )
    for stat in stats:
        metadata.partitionToWriteStats.setdefault(stat.partitionPath, []).append(stat)
    client.check_completion(instant_time)
    with client.lock:
        complete(storage, inflight, metadata.to_bytes())
    delete_markers(storage, instant_time)
    records = sum(s.numWrites for s in stats)
    log.info(
        "clustering %s: %d group(s) -> %d file(s), %d record(s) in %.2fs",
        instant_time,
        len(plan.groups),
        len(stats),
        records,
        time.monotonic() - started,
    )
    return ClusteringResult(
        instant_time, len(plan.groups), len(plan.file_groups()), records, tuple(s.path for s in stats)
    )
