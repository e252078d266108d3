"""The change-tracking service: persist the changes of merge-on-read delta commits (plan + execute).

Delta commits append to logs and persist no change data; a CDC query infers their
changes from the log (LOG_FILE), which costs a fold over the file slice per query. This
service persists them ahead of time, like a compaction but without rewriting data: a
plan (`<t>.changetracking.requested`, JSON) lists, per file slice, the completed delta
commits whose changes are not persisted yet and the `.cdc` file to write; executing it
writes those files (one block per delta commit) and completes `<t>.changetracking`
with their `cdcStats` and the delta commits each holds. CDC queries then read them as
they are (AS_IS), whether or not a compaction happened since.

`changetracking` is lakeward's own action: Apache Hudi and hudi-rs skip timeline files
they do not know, and `.cdc` files are not part of any slice's data for them either.
Executing a plan twice writes the same files (names are fixed in the plan).
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lakeward.core.cdc.extract import (
    PERSISTED_KEY,
    UNCHANGED_KEY,
    persisted_changes,
    persisted_instants,
    slice_with_log,
)
from lakeward.core.cdc.persist import persist_slice_changes
from lakeward.core.config.cdc import CDC_ENABLED_KEY
from lakeward.core.config.table import TableConfig, TableType
from lakeward.core.context import HoldsTableContext, TableContext
from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConfigError, CorruptTableError
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.reader import MergeSettings, VisibleInstants
from lakeward.core.file_group.view import FileSystemView, replaced_file_groups
from lakeward.core.storage import Storage
from lakeward.core.table_services.service import Completion, PlannedService, PlanRun, ServiceReport
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import Action, CommitMetadata, Instant, State, Timeline, WriteStat
from lakeward.core.timeline.transitions import create_requested, read_commit_metadata, read_instant
from lakeward.core.write.handles import WriteContext

log = logging.getLogger(__name__)
OPERATION = "CHANGE_TRACKING"


@dataclass(frozen=True)
class TrackingOperation:
    """Persist the changes of `instants` (delta commits) to one file slice into one `.cdc` file."""

    partition_path: str
    file_id: str
    base_instant_time: str
    instants: tuple[str, ...]
    cdc_version: int
    write_token: str

    def to_json(self) -> dict[str, object]:
        return {
            "partitionPath": self.partition_path,
            "fileId": self.file_id,
            "baseInstantTime": self.base_instant_time,
            "deltaCommits": list(self.instants),
            "cdcLogVersion": self.cdc_version,
            "writeToken": self.write_token,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> TrackingOperation:
        try:
            return cls(
                str(data["partitionPath"]),
                str(data["fileId"]),
                str(data["baseInstantTime"]),
                tuple(str(t) for t in data["deltaCommits"]),  # type: ignore[attr-defined]
                int(data["cdcLogVersion"]),  # type: ignore[call-overload]
                str(data["writeToken"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptTableError(f"change-tracking plan operation is malformed: {exc!r}") from exc


@dataclass(frozen=True)
class ChangeTrackingResult:
    instant_time: str
    file_groups: int
    delta_commits: int
    bytes_written: int
    files_written: tuple[str, ...]

    def __str__(self) -> str:
        return self.instant_time


def _plan_bytes(operations: list[TrackingOperation]) -> bytes:
    return json.dumps({"version": 1, "operations": [o.to_json() for o in operations]}, indent=2).encode()


def read_change_tracking_plan(
    storage: Storage, instant_time: str, layout: TimelineLayout = TimelineLayout.V1
) -> list[TrackingOperation]:
    data = read_instant(storage, Instant(instant_time, Action.CHANGE_TRACKING, State.REQUESTED, layout=layout))
    try:
        raw = json.loads(data)
        return [TrackingOperation.from_json(o) for o in raw["operations"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptTableError(f"change-tracking plan {instant_time} cannot be read: {exc!r}") from exc


def pending_change_tracking(timeline: Timeline) -> list[str]:
    """Instant times of change-tracking plans not completed yet, oldest first."""
    return sorted({i.time for i in timeline.pending(Action.CHANGE_TRACKING)})


def unavailable_reason(storage: Storage, config: TableConfig) -> str | None:
    """Why change tracking does not apply to the table (None: it does): MERGE_ON_READ with CDC on."""
    if config.table_type is not TableType.MERGE_ON_READ or not config.cdc_enabled:
        return (
            f"change tracking applies to MERGE_ON_READ tables with {CDC_ENABLED_KEY}=true; {config.name} is "
            f"{config.table_type.value} with CDC {'on' if config.cdc_enabled else 'off'}"
        )
    return None


def _check_applies(ctx: TableContext) -> None:
    config = ctx.config
    if config.table_type is not TableType.MERGE_ON_READ:
        raise ConfigError(
            f"change tracking applies to MERGE_ON_READ tables (copy-on-write writes persist their changes as "
            f"they write); the table at {ctx.storage.uri} is {config.table_type.value}"
        )
    if not config.cdc_enabled:
        raise ConfigError(f"change tracking needs CDC: the table at {ctx.storage.uri} has {CDC_ENABLED_KEY}=false")


def untracked_delta_commits(
    storage: Storage, timeline: Timeline, since: str | None, planned: Sequence[TrackingOperation] = ()
) -> dict[tuple[str, str], dict[str, str]]:
    """(partition, file id) -> {delta commit: log file it wrote} for completed delta commits whose
    changes are neither persisted nor in a `planned` operation, in file groups no completed
    replacecommit replaced (a clustering or overwrite): a `.cdc` file written into a replaced group
    could land after the clean that deletes the group, which then never deletes it, and archival
    waits for the group's last file for good. Queries infer those changes until the group is cleaned."""
    persisted = persisted_changes(storage, timeline)
    taken = {(op.partition_path, op.file_id, d) for op in planned for d in op.instants}
    replaced = replaced_file_groups(storage, timeline)
    out: dict[tuple[str, str], dict[str, str]] = {}
    for instant in timeline.completed_writes():
        if instant.action is not Action.DELTA_COMMIT or (since is not None and instant.time <= since):
            continue
        for stat in read_commit_metadata(storage, instant).write_stats():
            if not stat.is_delta or not stat.fileId or (stat.partitionPath, stat.fileId) in replaced:
                continue
            key = (stat.partitionPath, stat.fileId, instant.time)
            if key not in persisted and key not in taken:
                out.setdefault((stat.partitionPath, stat.fileId), {})[instant.time] = posixpath.basename(stat.path)
    return out


def schedule_change_tracking(table: HoldsTableContext) -> str | None:
    """Plan the persisting of every untracked delta commit's changes; None when there are none."""
    ctx = table.table_context
    _check_applies(ctx)
    storage = ctx.storage
    with ctx.lock:
        timeline = ctx.timeline()
        planned = [
            op for t in pending_change_tracking(timeline) for op in read_change_tracking_plan(storage, t, ctx.layout)
        ]
        wanted = untracked_delta_commits(storage, timeline, ctx.config.cdc_since, planned)
        if not wanted:
            log.info("no change tracking due: every delta commit's changes are persisted")
            return None
        instant_time = ctx.new_instant_time(timeline)
        view = FileSystemView.load(storage, timeline, partitions={partition for partition, _ in wanted})
        planned_versions: dict[tuple[str, str, str], list[int]] = {}
        for op in planned:
            planned_versions.setdefault((op.partition_path, op.file_id, op.base_instant_time), []).append(
                op.cdc_version
            )
        operations: list[TrackingOperation] = []
        for group in view.file_groups():
            deltas = wanted.get((group.partition_path, group.file_id))
            if not deltas:
                continue
            by_slice: dict[str, tuple[FileSlice, list[str]]] = {}
            for delta, log_name in deltas.items():
                file_slice = slice_with_log(group, log_name)
                if file_slice is not None:  # None: cleaned, no longer queryable
                    by_slice.setdefault(file_slice.base_instant_time, (file_slice, []))[1].append(delta)
            for base_instant, (file_slice, logged) in sorted(by_slice.items()):
                key = (group.partition_path, group.file_id, base_instant)
                taken = [f.version for f in file_slice.cdc_files if f.base_instant_time == base_instant]
                version = max([0, *taken, *planned_versions.get(key, [])]) + 1
                operations.append(
                    TrackingOperation(
                        group.partition_path,
                        group.file_id,
                        base_instant,
                        tuple(sorted(logged)),
                        version,
                        f"{len(operations)}-0-0",
                    )
                )
        if not operations:
            return None
        create_requested(storage, instant_time, Action.CHANGE_TRACKING, _plan_bytes(operations), ctx.layout)
        log.info(
            "scheduled change tracking %s: %d delta commit(s) over %d file slice(s)",
            instant_time,
            len({d for o in operations for d in o.instants}),
            len(operations),
        )
        return instant_time


def _instants_in(stat: WriteStat | None, persisted: dict[str, list[str]]) -> set[str]:
    """The delta commits whose changes the `.cdc` file of `stat` holds (none without one)."""
    return {t for path in (stat.cdcStats or {} if stat is not None else {}) for t in persisted.get(path, ())}


class ChangeTrackingService(PlannedService[list[TrackingOperation], ChangeTrackingResult]):
    """Change tracking as a table service: plan the untracked delta commits, then persist their changes."""

    action = "change_tracking"
    noun, plural = "change tracking", "change tracking plans"
    timeline_action = Action.CHANGE_TRACKING
    needs_schema = True

    @classmethod
    def pending_of(cls, storage: Storage, timeline: Timeline) -> list[str]:
        return pending_change_tracking(timeline)

    @classmethod
    def unavailable_reason(cls, storage: Storage, config: TableConfig) -> str | None:
        return unavailable_reason(storage, config)

    def check_applies(self) -> None:
        _check_applies(self.ctx)

    def schedule(self, *, force: bool = False) -> str | None:
        """`force` changes nothing: change tracking has no due-policy, only untracked delta commits or none."""
        return schedule_change_tracking(self.ctx)

    def load_plan(self, instant_time: str) -> list[TrackingOperation]:
        return read_change_tracking_plan(self.ctx.storage, instant_time, self.ctx.layout)

    def run(self, run: PlanRun[list[TrackingOperation]]) -> Completion[ChangeTrackingResult]:
        storage, instant_time, config = run.storage, run.instant_time, self.ctx.config
        assert run.schema is not None  # needs_schema
        ctx = WriteContext.of(self.ctx, instant_time, run.schema)
        mode = config.cdc_mode
        settings = MergeSettings.from_config(config)
        visible = VisibleInstants.from_timeline(run.timeline)
        view = FileSystemView.load(storage, run.timeline, partitions={op.partition_path for op in run.plan})
        slices = {(s.partition_path, s.file_id, s.base_instant_time): s for g in view.file_groups() for s in g.slices}

        def track(op: TrackingOperation) -> tuple[TrackingOperation, WriteStat | None] | None:
            """The operation and the `.cdc` file it wrote (None: its delta commits changed nothing); None
            when its slice is gone."""
            file_slice = slices.get((op.partition_path, op.file_id, op.base_instant_time))
            if view.is_replaced(op.partition_path, op.file_id):
                log.warning(
                    "change tracking %s: file group %s was replaced (clustered or overwritten) since the plan; "
                    "queries infer the changes of its delta commits until it is cleaned, skipping",
                    instant_time,
                    op.file_id,
                )
                return None
            if file_slice is None:
                log.warning(
                    "change tracking %s: slice %s of file group %s is gone (cleaned); its delta commits are "
                    "no longer queryable, skipping",
                    instant_time,
                    op.base_instant_time,
                    op.file_id,
                )
                return None
            written = persist_slice_changes(
                ctx.storage,
                file_slice,
                visible,
                ctx.full_schema,
                settings,
                mode,
                ctx.avro_schema_with_meta,
                keep=lambda t: True,
                base_instant_time=op.base_instant_time,
                write_token=op.write_token,
                instants=op.instants,
                version=op.cdc_version,
            )
            if written is None:
                return op, None
            path, size, _ = written
            return op, WriteStat(
                fileId=op.file_id,
                path="",
                cdcStats={path: size},
                prevCommit=op.base_instant_time,
                partitionPath=op.partition_path,
                totalWriteBytes=size,
            )

        tracked = [t for t in run.engine.map(track, run.plan, f"change tracking {instant_time}") if t is not None]
        stats = [stat for _, stat in tracked if stat is not None]
        metadata = CommitMetadata(operationType=OPERATION)
        for stat in stats:
            metadata.partitionToWriteStats.setdefault(stat.partitionPath, []).append(stat)
        persisted = persisted_instants(storage, stats)
        metadata.extraMetadata[PERSISTED_KEY] = json.dumps(persisted, sort_keys=True)
        # delta commits that changed nothing in their group are tracked too (else planned again every time)
        unchanged = sorted(
            [op.partition_path, op.file_id, t]
            for op, held in ((op, _instants_in(stat, persisted)) for op, stat in tracked)
            for t in op.instants
            if t not in held
        )
        if unchanged:
            metadata.extraMetadata[UNCHANGED_KEY] = json.dumps(unchanged)
        result = ChangeTrackingResult(
            instant_time,
            len(stats),
            len({t for ts in persisted.values() for t in ts}),
            sum(s.totalWriteBytes for s in stats),
            tuple(sorted(persisted)),
        )
        return Completion(
            metadata.to_bytes(run.ctx.config.version.metadata_encoding),
            result,
            after=lambda: self._finished(run, result),
        )

    def _finished(self, run: PlanRun[list[TrackingOperation]], result: ChangeTrackingResult) -> None:
        """Once completed: remove what only the run needed, and log it."""
        log.info(
            "change tracking %s: %d file(s) for %d delta commit(s) in %.2fs",
            run.instant_time,
            len(result.files_written),
            result.delta_commits,
            time.monotonic() - run.started,
        )

    def report(self, result: ChangeTrackingResult) -> ServiceReport:
        return ServiceReport(
            result.instant_time,
            bytes_written=result.bytes_written,
            detail=f"{result.delta_commits} delta commit(s) persisted in {len(result.files_written)} file(s)",
        )


def run_change_tracking(
    table: HoldsTableContext, instant_time: str, engine: Engine | None = None
) -> ChangeTrackingResult:
    """Execute a change-tracking plan (again, if an earlier run died) and complete it."""
    ctx = table.table_context
    return ChangeTrackingService(ctx).execute(instant_time, engine=engine)
