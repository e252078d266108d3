"""Scheduling and executing index builds (`<t>.indexing`): plan under the lock, build per base file, complete.

- `schedule_index_build`: under the table lock, choose the latest base files by strategy
  (`INCREMENTAL`: those missing an index file of some index and not in a pending plan;
  `ALL`: every one), write the plan sidecar and `<t>.indexing.requested`.
- `run_index_build`: `<t>.indexing.inflight`, one engine task per base file writes its
  index files under `.hoodie/.index/<type>/<t>/`, then `<t>.indexing` completes the build
  and older index files of the same base files are removed. Running it again after a
  crash rewrites the same files and completes it; a base file cleaned meanwhile is skipped.
- `rollback_index_build`: a pending build is undone with a rollback instant; its index
  files go with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lakeward.core.config.table import TableConfig
from lakeward.core.context import HoldsTableContext
from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConfigError, InstantNotFoundError
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.index.secondary.build import IndexFileStat, build_base_file_indexes
from lakeward.core.index.secondary.definitions import IndexDefinition, load_definitions
from lakeward.core.index.secondary.storage import IndexCatalog, list_index_files, pending_index_builds
from lakeward.core.storage import Storage
from lakeward.core.table_services.index_build.plan import (
    INDEX_PLAN,
    IndexBuildPlan,
    IndexBuildStrategy,
    IndexBuildTask,
    planned_base_files,
    read_plan,
    write_plan,
)
from lakeward.core.table_services.rollback import RollbackResult, rollback_pending_instant
from lakeward.core.table_services.service import Completion, PlannedService, PlanRun, ServiceReport
from lakeward.core.timeline import Action, Instant, Timeline, avro_plans
from lakeward.core.timeline.transitions import create_requested

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexBuildResult:
    instant_time: str
    base_files: int
    files_written: tuple[str, ...]
    bytes_written: int
    rows_indexed: int
    seconds: float

    def __str__(self) -> str:
        return self.instant_time


def _select(
    storage: Storage,
    timeline: Timeline,
    definitions: Sequence[IndexDefinition],
    strategy: IndexBuildStrategy,
) -> list[IndexBuildTask]:
    view = FileSystemView.load(storage, timeline)
    catalog = IndexCatalog.load(storage, timeline)
    pending = planned_base_files([read_plan(storage, t) for t in pending_index_builds(timeline)])
    tasks = []
    for s in view.latest_file_slices():
        base = s.base_file
        if base is None:
            continue
        if strategy is IndexBuildStrategy.ALL:
            names = [d.name for d in definitions]
        else:
            names = [d.name for d in definitions if not catalog.indexed(d, base) and (base.path, d.name) not in pending]
        if names:
            tasks.append(IndexBuildTask(s.partition_path, s.file_id, base.path, tuple(names)))
    return tasks


def schedule_index_build(
    table: HoldsTableContext,
    strategy: str | IndexBuildStrategy = IndexBuildStrategy.INCREMENTAL,
    indexes: Sequence[str] | None = None,
) -> str | None:
    """Write an index build plan; its instant time, or None when no base file needs one (or no index exists)."""
    ctx = table.table_context
    storage = ctx.storage
    chosen = IndexBuildStrategy.parse(strategy)
    with ctx.lock:
        definitions = load_definitions(storage)
        if indexes is not None:
            unknown = sorted(set(indexes) - {d.name for d in definitions})
            if unknown:
                raise ConfigError(
                    f"no index named {unknown} on the table; its indexes: {[d.name for d in definitions]}"
                )
            definitions = [d for d in definitions if d.name in set(indexes)]
        if not definitions:
            log.info("no index build: the table has no secondary index")
            return None
        timeline = ctx.timeline()
        tasks = _select(storage, timeline, definitions, chosen)
        if not tasks:
            log.info("no index build: every base file is indexed (or planned)")
            return None
        instant_time = ctx.new_instant_time(timeline)
        latest = timeline.latest_completed_write()
        plan = IndexBuildPlan(
            instant_time,
            chosen,
            tuple(definitions),
            tuple(tasks),
            latest.time if latest else "",
            latest.action.value if latest else "",
        )
        write_plan(storage, plan)
        create_requested(
            storage, instant_time, Action.INDEXING, avro_plans.serialize(INDEX_PLAN, plan.hudi_plan()), ctx.layout
        )
        log.info("scheduled index build %s of %d base file(s) (%s)", instant_time, len(tasks), chosen.value)
        return instant_time


def _build_task(
    storage_uri: str,
    storage_options: tuple[tuple[str, str], ...],
    task: IndexBuildTask,
    definitions: tuple[IndexDefinition, ...],
    instant_time: str,
) -> list[IndexFileStat]:
    storage = Storage.for_uri(storage_uri, dict(storage_options))
    wanted = [d for d in definitions if d.name in task.indexes]
    return build_base_file_indexes(storage, task.base_file, wanted, instant_time)


class IndexBuildService(PlannedService[IndexBuildPlan, IndexBuildResult]):
    """Secondary index builds as a table service: plan the base files to index, then build their index files."""

    action = "index_build"
    noun, plural = "index build", "index builds"
    timeline_action = Action.INDEXING
    tolerates_completed_by_other = True

    @classmethod
    def pending_of(cls, storage: Storage, timeline: Timeline) -> list[str]:
        return pending_index_builds(timeline)

    @classmethod
    def unavailable_reason(cls, storage: Storage, config: TableConfig) -> str | None:
        if load_definitions(storage):
            return None
        return f"{config.name} has no secondary index to build; create one first (lakeward index create)"

    def schedule(
        self,
        *,
        force: bool = False,
        strategy: str | IndexBuildStrategy = IndexBuildStrategy.INCREMENTAL,
        indexes: Sequence[str] | None = None,
    ) -> str | None:
        """Plan a build of `indexes` (default: all) by `strategy`. `force` changes nothing: no due-policy."""
        return schedule_index_build(self.ctx, strategy, indexes)

    def load_plan(self, instant_time: str) -> IndexBuildPlan:
        return read_plan(self.ctx.storage, instant_time)

    def inflight_content(self, plan: IndexBuildPlan) -> bytes:
        return avro_plans.serialize(INDEX_PLAN, plan.hudi_plan())

    def run(self, run: PlanRun[IndexBuildPlan]) -> Completion[IndexBuildResult]:
        storage, instant_time, plan = run.storage, run.instant_time, run.plan
        current = {d.id for d in load_definitions(storage)}
        definitions = tuple(d for d in plan.definitions if d.id in current)  # dropped since the plan: not built
        uri, options = storage.uri, tuple(sorted(storage.options.items()))
        per_task: list[list[IndexFileStat]] = run.engine.map(
            lambda task: _build_task(uri, options, task, definitions, instant_time),
            list(plan.tasks) if definitions else [],
            f"index build {instant_time}",
        )
        stats = [s for task_stats in per_task for s in task_stats]
        result = IndexBuildResult(
            instant_time,
            len({s.base_file for s in stats}),
            tuple(s.path for s in stats),
            sum(s.size for s in stats),
            sum(s.num_rows for s in stats),
            time.monotonic() - run.started,
        )
        return Completion(plan.commit_metadata(), result, after=lambda: self._finished(run, result, stats))

    def _finished(self, run: PlanRun[IndexBuildPlan], result: IndexBuildResult, stats: list[IndexFileStat]) -> None:
        """Once completed: remove what only the run needed, and log it."""
        _remove_superseded(run.storage, run.instant_time, stats)
        log.info(
            "index build %s: %d index file(s) for %d base file(s) in %.2fs",
            run.instant_time,
            len(result.files_written),
            len(run.plan.tasks),
            result.seconds,
        )

    def report(self, result: IndexBuildResult) -> ServiceReport:
        return ServiceReport(
            result.instant_time,
            records=result.rows_indexed,
            bytes_written=result.bytes_written,
            detail=f"{len(result.files_written)} index file(s) for {result.base_files} base file(s)",
        )


def run_index_build(table: HoldsTableContext, instant_time: str, engine: Engine | None = None) -> IndexBuildResult:
    """Execute a pending index build plan (again, if an earlier run died) and complete `<t>.indexing`."""
    ctx = table.table_context
    return IndexBuildService(ctx).execute(instant_time, engine=engine)


def _remove_superseded(storage: Storage, instant_time: str, stats: Sequence[IndexFileStat]) -> None:
    """Older index files of the (index, base file) pairs this build wrote: never read again."""
    written = {(s.index_name, s.path.rsplit("/", 1)[-1]) for s in stats}
    for f in list_index_files(storage):
        name = f.path.rsplit("/", 1)[-1]
        if f.instant_time < instant_time and (f.index_name, name) in written:
            storage.delete_file(f.path)


def pending_index_build(timeline: Timeline, instant_time: str) -> Instant:
    """The pending index build `instant_time` on `timeline` (InstantNotFoundError: none)."""
    pending = [i for i in timeline.pending(Action.INDEXING) if i.time == instant_time]
    if not pending:
        raise InstantNotFoundError(
            f"no pending index build {instant_time}; pending index builds: {pending_index_builds(timeline)}"
        )
    return pending[0]


def rollback_index_build(table: HoldsTableContext, instant_time: str) -> RollbackResult:
    """Undo a pending index build: a rollback instant; its index files and plan are removed."""
    ctx = table.table_context
    storage = ctx.storage
    with ctx.lock:
        timeline = ctx.timeline()
        pending = pending_index_build(timeline, instant_time)
        result = rollback_pending_instant(storage, pending, ctx.new_instant_time(timeline))
    return result
