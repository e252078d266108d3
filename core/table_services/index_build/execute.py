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
from typing import TYPE_CHECKING

from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConfigError, InstantExistsError, InstantNotFoundError
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
from lakeward.core.timeline import Action, Instant, State, Timeline, avro_plans, new_instant_time
from lakeward.core.timeline.transitions import complete, create_requested, transition_to_inflight

if TYPE_CHECKING:
    from lakeward.core.write.client import WriteClient

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
    client: WriteClient,
    strategy: str | IndexBuildStrategy = IndexBuildStrategy.INCREMENTAL,
    indexes: Sequence[str] | None = None,
) -> str | None:
    """Write an index build plan; its instant time, or None when no base file needs one (or no index exists)."""
    storage, config = client.storage, client.config
    chosen = IndexBuildStrategy.parse(strategy)
    with client.lock:
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
        timeline = Timeline.load(storage)
        tasks = _select(storage, timeline, definitions, chosen)
        if not tasks:
            log.info("no index build: every base file is indexed (or planned)")
            return None
        instant_time = new_instant_time(timeline.latest_time(), config.timeline_timezone)
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
        create_requested(storage, instant_time, Action.INDEXING, avro_plans.serialize(INDEX_PLAN, plan.hudi_plan()))
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


def run_index_build(client: WriteClient, instant_time: str, engine: Engine | None = None) -> IndexBuildResult:
    """Execute a pending index build plan (again, if an earlier run died) and complete `<t>.indexing`."""
    storage = client.storage
    started = time.monotonic()
    timeline = Timeline.load(storage)
    state = timeline.state_of(instant_time, Action.INDEXING)
    if state is State.COMPLETED:
        raise InstantExistsError(f"index build {instant_time} is already completed")
    if state is None:
        raise InstantNotFoundError(
            f"no index build plan {instant_time}; pending index builds: {pending_index_builds(timeline)}"
        )
    plan = read_plan(storage, instant_time)
    requested = Instant(instant_time, Action.INDEXING, State.REQUESTED)
    inflight = requested.with_state(State.INFLIGHT)
    content = avro_plans.serialize(INDEX_PLAN, plan.hudi_plan())
    if state is State.REQUESTED:
        transition_to_inflight(storage, requested, content)
    else:
        log.info("index build %s was started before: running its plan again", instant_time)
    current = {d.id for d in load_definitions(storage)}
    definitions = tuple(d for d in plan.definitions if d.id in current)  # dropped since the plan: not built
    runner = engine or client.engine
    uri, options = storage.uri, tuple(sorted(storage.options.items()))
    per_task: list[list[IndexFileStat]] = runner.map(
        lambda task: _build_task(uri, options, task, definitions, instant_time),
        list(plan.tasks) if definitions else [],
        f"index build {instant_time}",
    )
    stats = [s for task_stats in per_task for s in task_stats]
    client.check_completion(instant_time)
    try:
        complete(storage, inflight, plan.commit_metadata())
    except InstantExistsError:
        log.info("index build %s was completed by another runner", instant_time)
    _remove_superseded(storage, instant_time, stats)
    elapsed = time.monotonic() - started
    log.info(
        "index build %s: %d index file(s) for %d base file(s) in %.2fs",
        instant_time,
        len(stats),
        len(plan.tasks),
        elapsed,
    )
    return IndexBuildResult(
        instant_time,
        len({s.base_file for s in stats}),
        tuple(s.path for s in stats),
        sum(s.size for s in stats),
        sum(s.num_rows for s in stats),
        elapsed,
    )


def _remove_superseded(storage: Storage, instant_time: str, stats: Sequence[IndexFileStat]) -> None:
    """Older index files of the (index, base file) pairs this build wrote: never read again."""
    written = {(s.index_name, s.path.rsplit("/", 1)[-1]) for s in stats}
    for f in list_index_files(storage):
        name = f.path.rsplit("/", 1)[-1]
        if f.instant_time < instant_time and (f.index_name, name) in written:
            storage.delete_file(f.path)


def rollback_index_build(client: WriteClient, instant_time: str) -> RollbackResult:
    """Undo a pending index build: a rollback instant; its index files and plan are removed."""
    storage = client.storage
    with client.lock:
        timeline = Timeline.load(storage)
        pending = [i for i in timeline.pending() if i.action is Action.INDEXING and i.time == instant_time]
        if not pending:
            raise InstantNotFoundError(
                f"no pending index build {instant_time}; pending index builds: {pending_index_builds(timeline)}"
            )
        result = rollback_pending_instant(
            storage, pending[0], new_instant_time(timeline.latest_time(), client.config.timeline_timezone)
        )
    return result
