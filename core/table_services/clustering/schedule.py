"""Scheduling a clustering: which small file slices, grouped how (Hudi's size-based plan strategy)."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import replace

import pyarrow as pa

from lakeward.core.config.values import parse_fields
from lakeward.core.config.write import WriteConfig
from lakeward.core.context import HoldsTableContext
from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.integrity import verify_before_planning
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline
from lakeward.core.timeline.clustering_plan import (
    ClusteringGroup,
    ClusteringPlan,
    clustering_action,
    pending_clustering_file_groups,
    pending_clustering_plans,
    slice_operation,
)
from lakeward.core.timeline.transitions import create_requested

log = logging.getLogger(__name__)
MB = 1024 * 1024
#: The execution strategy of plans that rewrite each file group alone, into the same file
#: id (Hudi's name for it): used for BUCKET-index tables, whose file ids carry the bucket.
SINGLE_FILE_STRATEGY = "org.apache.hudi.client.clustering.run.strategy.SparkSingleFileSortExecutionStrategy"


def pending_clustering(storage: Storage, timeline: Timeline) -> list[str]:
    """Instant times of clusterings planned (requested or inflight) but not completed, oldest first."""
    return list(pending_clustering_plans(storage, timeline))


def _slice_bytes(s: FileSlice) -> int:
    return (s.base_file.size if s.base_file is not None else 0) + sum(f.size for f in s.log_files)


def _group(slices: list[FileSlice], wc: WriteConfig) -> ClusteringGroup:
    total = sum(_slice_bytes(s) for s in slices)
    logs = [f for s in slices for f in s.log_files]
    return ClusteringGroup(
        tuple(slice_operation(s) for s in slices),
        max(1, math.ceil(total / wc.clustering_target_file_max_bytes)),
        {
            "TOTAL_IO_READ_MB": float(total // MB),
            "TOTAL_IO_WRITE_MB": float(total // MB),
            "TOTAL_IO_MB": float(2 * (total // MB)),
            "TOTAL_LOG_FILE_SIZE": float(sum(f.size for f in logs)),
            "TOTAL_LOG_FILES": float(len(logs)),
        },
    )


def plan_groups(slices: list[FileSlice], wc: WriteConfig, sort_columns: tuple[str, ...] = ()) -> list[ClusteringGroup]:
    """Hudi's SparkSizeBasedClusteringPlanStrategy: per partition, the slices whose base file is
    below the small-file limit, largest first, packed into groups of at most
    `max.bytes.per.group` input bytes; each group writes ceil(size / target.file.max.bytes) files.
    A group of one slice is left out unless sort columns are set (rewriting it alone would
    change nothing). At most `max.num.groups` groups, partitions in order.
    """
    by_partition: dict[str, list[FileSlice]] = defaultdict(list)
    for s in slices:
        base_size = s.base_file.size if s.base_file is not None else 0
        if base_size < wc.clustering_small_file_limit:
            by_partition[s.partition_path].append(s)
    groups: list[ClusteringGroup] = []
    for partition in sorted(by_partition):
        current: list[FileSlice] = []
        size = 0
        chunks: list[list[FileSlice]] = []
        for s in sorted(by_partition[partition], key=lambda s: (-_slice_bytes(s), s.file_id)):
            if current and size + _slice_bytes(s) > wc.clustering_max_bytes_per_group:
                chunks.append(current)
                current, size = [], 0
            current.append(s)
            size += _slice_bytes(s)
        if current:
            chunks.append(current)
        groups.extend(_group(c, wc) for c in chunks if len(c) > 1 or sort_columns)
    return groups[: wc.clustering_max_num_groups]


def plan_bucket_groups(
    slices: list[FileSlice], wc: WriteConfig, sort_columns: tuple[str, ...]
) -> list[ClusteringGroup]:
    """BUCKET-index tables: one group per small file slice, written back into its own file group.

    A key's file group is fixed by its bucket (the file id starts with the bucket number);
    merging buckets into a new file group would make the next write start new bucket groups
    and store every key twice. So, as Hudi's single-file sort strategies, each bucket's
    slice is rewritten alone into one output that keeps its file id. Rewriting one slice
    changes nothing without sort columns: then there is nothing to plan.
    """
    if not sort_columns:
        return []
    small = [s for s in slices if (s.base_file.size if s.base_file is not None else 0) < wc.clustering_small_file_limit]
    ordered = sorted(small, key=lambda s: (s.partition_path, s.file_id))
    return [replace(_group([s], wc), num_output_file_groups=1) for s in ordered][: wc.clustering_max_num_groups]


def schedule_clustering(table: HoldsTableContext) -> str | None:
    """Write a clustering plan and return its instant time; None when nothing qualifies.

    Under the table lock. While a write is pending no plan is written (it may be writing to
    the slices a plan would take); file groups under a pending compaction or another pending
    clustering are left out.
    """
    ctx = table.table_context
    storage, wc = ctx.storage, ctx.write_config
    sort_columns = parse_fields(wc.clustering_sort_columns)
    with ctx.lock:
        ctx.check_version("schedule a clustering")
        timeline = ctx.timeline()
        clustering = pending_clustering_file_groups(storage, timeline)
        planned = set(clustering.values())
        in_flight = [i.time for i in timeline.pending_writes() if i.time not in planned]
        if in_flight:
            log.info("not scheduling a clustering: write(s) %s pending", in_flight)
            return None
        view = FileSystemView.load(storage, timeline)
        free = view.unplanned_file_slices(clustering)
        if sort_columns:
            schema = ctx.schema(timeline)
            missing = [c for c in sort_columns if schema is not None and c not in schema.names]
            if missing:
                raise ConfigError(
                    f"hoodie.clustering.plan.strategy.sort.columns names {missing}, which the table does not have"
                )
            nested = [c for c in sort_columns if schema is not None and pa.types.is_nested(schema.field(c).type)]
            if nested:
                # every run of such a plan would fail (Arrow sorts no list, struct or map)
                raise ConfigError(
                    f"hoodie.clustering.plan.strategy.sort.columns names {nested}: columns of nested types "
                    f"({', '.join(str(schema.field(c).type) for c in nested)}) cannot be sorted by"
                )
        bucketed = wc.index_type == "BUCKET"
        groups = plan_bucket_groups(free, wc, sort_columns) if bucketed else plan_groups(free, wc, sort_columns)
        if not groups:
            if bucketed and not sort_columns:
                log.info(
                    "not scheduling a clustering: on a BUCKET-index table each bucket keeps its own file group,"
                    " so a clustering only sorts buckets in place; set hoodie.clustering.plan.strategy.sort.columns"
                )
            else:
                log.info("nothing to cluster: no partition has small file slices to group")
            return None
        plan = (
            ClusteringPlan(tuple(groups), sort_columns, SINGLE_FILE_STRATEGY)
            if bucketed
            else ClusteringPlan(tuple(groups), sort_columns)
        )
        verify_before_planning(storage, timeline, view, plan.file_slices())  # no rewrite without a lost file's rows
        instant_time = ctx.new_instant_time(timeline)
        create_requested(storage, instant_time, clustering_action(ctx.layout), plan.to_bytes(storage), ctx.layout)
        log.info(
            "scheduled clustering %s: %d group(s), %d file slice(s)",
            instant_time,
            len(groups),
            sum(len(g.slices) for g in groups),
        )
        return instant_time
