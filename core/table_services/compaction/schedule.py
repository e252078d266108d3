"""Scheduling a compaction: which file slices, and when a compaction is due."""

from __future__ import annotations

import logging
from dataclasses import replace

from lakeward.core.config.table import TableType
from lakeward.core.context import HoldsTableContext
from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.integrity import verify_before_planning
from lakeward.core.file_group.reader import VisibleInstants
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.timeline import Action, Timeline
from lakeward.core.timeline.clustering_plan import pending_clustering_file_groups
from lakeward.core.timeline.compaction_plan import CompactionOperation, CompactionPlan, pending_compaction_instants
from lakeward.core.timeline.transitions import create_requested

log = logging.getLogger(__name__)
STRATEGY_PACKAGE = "org.apache.hudi.table.action.compact.strategy"


def pending_compactions(timeline: Timeline) -> list[str]:
    """Instant times of compactions planned (requested or inflight) but not completed, oldest first."""
    return [i.time for i in pending_compaction_instants(timeline)]


def delta_commits_since_last_compaction(timeline: Timeline) -> int:
    last = max((i.time for i in timeline.completed_writes() if timeline.was_compaction(i.time)), default=None)
    return sum(1 for i in timeline.completed(Action.DELTA_COMMIT) if last is None or i.time > last)


def completed_logs_only(file_slice: FileSlice, completed: VisibleInstants) -> FileSlice:
    """The slice with only the log files of completed (or archived) delta commits (table versions 8+).

    A log file of version 8+ names the delta commit that wrote it. One still in flight when a
    plan is written completes after the plan's instant; its logs then belong to the slice the
    compaction creates, never to the plan (Hudi's `BaseHoodieCompactionPlanGenerator` filters
    with `CompletionTimeQueryView.isCompletedBefore` the same way).
    """
    logs = tuple(f for f in file_slice.log_files if completed.is_visible(f.base_instant_time))
    return file_slice if len(logs) == len(file_slice.log_files) else replace(file_slice, log_files=logs)


def select_slices(slices: list[FileSlice], strategy: str, log_size_threshold: int) -> list[FileSlice]:
    """The slices a plan takes, in the order the strategy ranks them (only slices with log files)."""
    with_logs = [s for s in slices if s.log_files]
    if strategy == "UnBoundedCompactionStrategy":
        return with_logs
    # LogFileSizeBasedCompactionStrategy: logs at least the threshold, the most log bytes first.
    chosen = [s for s in with_logs if sum(f.size for f in s.log_files) >= log_size_threshold]
    return sorted(chosen, key=lambda s: -sum(f.size for f in s.log_files))


def schedule_compaction(table: HoldsTableContext, force: bool = False) -> str | None:
    """Write a compaction plan and return its instant time; None when nothing is due or there is nothing to compact.

    Due means `hoodie.compact.inline.max.delta.commits` delta commits completed since the
    last compaction; `force=True` skips that check. File groups under a pending compaction or
    clustering are left out.

    Table version 6: while a write is pending no plan is written (its log files, named with
    the slice's base instant, could miss the plan); try again when it completes. That holds
    for a pending write of another process too: it may be running (the scheduler cannot
    tell), so it is never rolled back here. A write that failed is rolled back by the next
    write. Versions 8+ (`TableVersion.compacts_beside_pending_writes`): the plan is written
    beside pending writes and takes only the logs of completed delta commits (Hudi 1.x's rule).
    """
    ctx = table.table_context
    config, storage, wc = ctx.config, ctx.storage, ctx.write_config
    if config.table_type is not TableType.MERGE_ON_READ:
        raise ConfigError(
            f"compaction applies to MERGE_ON_READ tables; the table at {storage.uri} is {config.table_type.value}"
        )
    with ctx.lock:
        ctx.check_version("schedule a compaction")  # a plan under the old version's rules would be lost or wrong
        # No rollback of failed writes here: a pending write of another process may still be
        # running, and rolling it back would delete log files it then commits (lost updates).
        timeline = ctx.timeline()
        in_flight = [i.time for i in timeline.pending_writes()]
        beside_writes = config.version.compacts_beside_pending_writes
        if in_flight and not beside_writes:
            log.info(
                "not scheduling a compaction: write(s) %s pending (running, or failed and not rolled back yet)",
                in_flight,
            )
            return None
        due = delta_commits_since_last_compaction(timeline)
        if not force and due < wc.compact_max_delta_commits:
            log.info(
                "no compaction due: %d delta commit(s) since the last one, hoodie.compact.inline.max.delta.commits=%d",
                due,
                wc.compact_max_delta_commits,
            )
            return None
        view = FileSystemView.load(storage, timeline)
        clustering = pending_clustering_file_groups(storage, timeline)
        free = view.unplanned_file_slices(clustering)
        if beside_writes:
            completed = VisibleInstants.from_timeline(timeline)
            free = [completed_logs_only(s, completed) for s in free]
        chosen = select_slices(free, wc.compaction_strategy, wc.compaction_log_size_threshold)
        if not chosen:
            log.info("nothing to compact: no file slice with log files qualifies")
            return None
        verify_before_planning(storage, timeline, view, chosen)  # never fold a slice without a lost file's rows
        instant_time = ctx.new_instant_time(timeline)
        plan = CompactionPlan(
            tuple(CompactionOperation.of_slice(s) for s in chosen), f"{STRATEGY_PACKAGE}.{wc.compaction_strategy}"
        )
        create_requested(storage, instant_time, Action.COMPACTION, plan.to_bytes(), ctx.layout)
        log.info("scheduled compaction %s of %d file slice(s)", instant_time, len(chosen))
        return instant_time
