"""Clustering plans: `HoodieRequestedReplaceMetadata` with operationType CLUSTER in `<t>.replacecommit.requested`
(table version 6) or `<t>.clustering.requested` (versions 8+: clustering's own pending action,
completing as `<t>_<c>.replacecommit`, as Hudi 1.x writes it).

A clustering plan lists input groups of file slices (base file and log files, by path);
each group is rewritten into `numOutputFileGroups` new file groups and the replacecommit
`<t>` replaces the input groups. Hudi writes full paths in `HoodieSliceInfo`; names
relative to the partition are read too. A pending replacecommit whose requested file
decodes to operationType `CLUSTER` (any case) with a clustering plan is a pending
clustering: it is not a failed write, and writers must not update its file groups.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.storage import Storage
from lakeward.core.table_version import TimelineLayout, rules_for_layout
from lakeward.core.timeline import avro_plans
from lakeward.core.timeline.compaction_plan import CompactionOperation
from lakeward.core.timeline.instant import Action, Instant, State
from lakeward.core.timeline.metadata import CLUSTER
from lakeward.core.timeline.timeline import Timeline
from lakeward.core.timeline.transitions import read_commit_metadata, read_instant

EXECUTION_STRATEGY = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"
SORT_COLUMNS_KEY = "hoodie.clustering.plan.strategy.sort.columns"
PLAN_VERSION = 1


@dataclass(frozen=True)
class ClusteringGroup:
    """Input slices (as compaction operations: same fields) rewritten together into `num_output_file_groups` files."""

    slices: tuple[CompactionOperation, ...]
    num_output_file_groups: int = 1
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def partition_path(self) -> str:
        return self.slices[0].partition_path if self.slices else ""


@dataclass(frozen=True)
class ClusteringPlan:
    groups: tuple[ClusteringGroup, ...]
    sort_columns: tuple[str, ...] = ()
    strategy: str = EXECUTION_STRATEGY
    strategy_params: dict[str, str] = field(default_factory=dict)

    def file_groups(self) -> set[tuple[str, str]]:
        return {(op.partition_path, op.file_id) for g in self.groups for op in g.slices}

    def file_slices(self) -> list[FileSlice]:
        """The slices the plan rewrites, every group's in order."""
        return [op.file_slice() for g in self.groups for op in g.slices]

    def replaced(self) -> dict[str, list[str]]:
        """partition -> file ids this clustering replaces (`partitionToReplaceFileIds`)."""
        out: dict[str, list[str]] = {}
        for g in self.groups:
            for op in g.slices:
                out.setdefault(op.partition_path, []).append(op.file_id)
        return out

    def to_bytes(self, storage: Storage) -> bytes:
        def full(op: CompactionOperation, name: str) -> str:
            return storage.full_path(posixpath.join(op.partition_path, name) if op.partition_path else name)

        params = dict(self.strategy_params)
        if self.sort_columns:
            params[SORT_COLUMNS_KEY] = ",".join(self.sort_columns)
        plan = {
            "inputGroups": [
                {
                    "slices": [
                        {
                            "dataFilePath": full(op, op.base_file_name) if op.base_file_name else "",
                            "deltaFilePaths": [full(op, n) for n in op.log_file_names],
                            "fileId": op.file_id,
                            "partitionPath": op.partition_path,
                            "bootstrapFilePath": "",
                            "version": 1,
                        }
                        for op in g.slices
                    ],
                    "metrics": dict(g.metrics),
                    "numOutputFileGroups": g.num_output_file_groups,
                    "extraMetadata": None,
                    "version": 1,
                }
                for g in self.groups
            ],
            "strategy": {"strategyClassName": self.strategy, "strategyParams": params, "version": 1},
            "extraMetadata": {},
            "version": PLAN_VERSION,
            "preserveHoodieMetadata": True,
        }
        record = {"operationType": CLUSTER, "clusteringPlan": plan, "extraMetadata": {}, "version": 1}
        return avro_plans.serialize(avro_plans.REQUESTED_REPLACE_METADATA, record)

    @classmethod
    def from_record(cls, plan: dict[str, object], what: str) -> ClusteringPlan:
        groups = []
        for group in plan.get("inputGroups") or []:  # type: ignore[attr-defined]
            ops = [_operation(s, what) for s in group.get("slices") or []]
            groups.append(
                ClusteringGroup(
                    tuple(ops), int(group.get("numOutputFileGroups") or 1), dict(group.get("metrics") or {})
                )
            )
        strategy = plan.get("strategy") or {}
        params = dict(strategy.get("strategyParams") or {})  # type: ignore[attr-defined]
        sort = tuple(c.strip() for c in params.get(SORT_COLUMNS_KEY, "").split(",") if c.strip())
        name = strategy.get("strategyClassName") or EXECUTION_STRATEGY  # type: ignore[attr-defined]
        return cls(tuple(groups), sort, name, params)


def _operation(info: dict[str, object], what: str) -> CompactionOperation:
    partition = str(info.get("partitionPath") or "")
    file_id = str(info.get("fileId") or "")
    data = str(info.get("dataFilePath") or "")
    base = posixpath.basename(data) if data else None
    logs = tuple(posixpath.basename(str(p)) for p in info.get("deltaFilePaths") or [])  # type: ignore[attr-defined]
    if base is not None:
        parsed = parse_base_file_name(base)
        if parsed is None:
            raise CorruptTableError(f"{what} names an unparsable base file {base!r}")
        base_instant = parsed.instant_time
    elif logs:
        log = parse_log_file_name(logs[0])
        if log is None:
            raise CorruptTableError(f"{what} names an unparsable log file {logs[0]!r}")
        base_instant = log.base_instant_time
    else:
        raise CorruptTableError(f"{what} has a slice of file group {file_id} without files")
    return CompactionOperation(partition, file_id, base_instant, base, logs)


def clustering_action(layout: TimelineLayout) -> Action:
    """The action of a pending clustering: `replacecommit` (layout 1) or `clustering` (layout 2)."""
    return Action.CLUSTERING if rules_for_layout(layout).clustering_action else Action.REPLACE_COMMIT


def _requested(time: str, layout: TimelineLayout) -> Instant:
    return Instant(time, clustering_action(layout), State.REQUESTED, layout=layout)


def _clustering_plan_record(storage: Storage, time: str, layout: TimelineLayout) -> dict[str, Any] | None:
    """The `clusteringPlan` record of clustering `time`'s requested file; None when it is not a clustering."""
    requested = _requested(time, layout)
    try:
        data = read_instant(storage, requested)
    except (FileNotFoundError, OSError):
        return None
    if not data.strip():
        return None
    record = avro_plans.deserialize(data, requested.file_name)
    plan = record.get("clusteringPlan")
    if str(record.get("operationType") or "").upper() != CLUSTER or not isinstance(plan, dict):
        return None
    return plan


def was_clustering(storage: Storage, timeline: Timeline, time: str) -> bool:
    """Whether instant `time` of `timeline` is a clustering. On layout 2 its plan's file name says so
    (`clustering.requested`); on layout 1 a clustering is a replacecommit whose requested plan's
    operation type says so, read only for a replacecommit (a read per plain commit would cost a
    storage round trip for a file that is not there)."""
    replaces = [i for i in timeline.find(time) if i.action is Action.REPLACE_COMMIT]
    if timeline.layout is not TimelineLayout.V1:
        if _requested(time, timeline.layout).file_name in timeline.files:
            return True
        # archived into the LSM history (its plan file went with it): its commit metadata says
        archived = [i for i in replaces if i.archive_file is not None and i.is_completed]
        return any(read_commit_metadata(storage, i).operationType.upper() == CLUSTER for i in archived)
    if not replaces:
        return False
    return _clustering_plan_record(storage, time, timeline.layout) is not None


def clustering_plan_of(
    storage: Storage, time: str, layout: TimelineLayout = TimelineLayout.V1
) -> ClusteringPlan | None:
    """The clustering plan of instant `time` in the `layout` timeline, or None when it is not a clustering
    (a replacecommit of insert_overwrite) or has no requested file."""
    plan = _clustering_plan_record(storage, time, layout)
    if plan is None:
        return None
    return ClusteringPlan.from_record(plan, _requested(time, layout).file_name)


def pending_clustering_plans(storage: Storage, timeline: Timeline) -> dict[str, ClusteringPlan]:
    """Pending (requested or inflight) clusterings, by instant time, oldest first."""
    out: dict[str, ClusteringPlan] = {}
    for instant in timeline.pending(clustering_action(timeline.layout)):
        if instant.time not in out:
            plan = clustering_plan_of(storage, instant.time, timeline.layout)
            if plan is not None:
                out[instant.time] = plan
    return dict(sorted(out.items()))


def pending_clustering_file_groups(storage: Storage, timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, file id) -> instant time of the pending clustering that will replace it.

    Only the plan's (partition, file id) pairs are read, so a slice whose file names cannot
    be parsed still protects its file group (from writers, cleaning and other clusterings).
    """
    out: dict[tuple[str, str], str] = {}
    for instant in timeline.pending(clustering_action(timeline.layout)):
        plan = _clustering_plan_record(storage, instant.time, timeline.layout)
        for group in (plan or {}).get("inputGroups") or []:
            for s in group.get("slices") or []:
                out.setdefault((str(s.get("partitionPath") or ""), str(s.get("fileId") or "")), instant.time)
    return out


def slice_operation(file_slice: FileSlice) -> CompactionOperation:
    """A planned slice (the same fields as a compaction operation; metrics unused)."""
    op = CompactionOperation.of_slice(file_slice)
    return CompactionOperation(
        op.partition_path, op.file_id, op.base_instant_time, op.base_file_name, op.log_file_names
    )
