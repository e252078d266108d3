"""What a table's services have to do, read from its timeline: `ServiceState` (`Table.service_state()`).

The daemon decides what to run and schedule from this summary (its discovery fills a
`TableState` from it; its planner compares the counts with a policy), so that only core
reads timeline files and tells plans from writes:

- pending table-service plans, by the plan's action: a pending compaction, log compaction,
  clean, rollback, restore, index build or change tracking is a plan; a pending
  replacecommit is a clustering plan only when its requested file holds a clustering plan
  (else it is an insert overwrite in flight, a pending write);
- pending writes (commit, deltacommit, insert-overwrite replacecommit: ingestion in flight,
  or failed);
- the last completed compaction, clean, replacecommit, change tracking and index build, and
  how many completed writes each left behind.

A pure function of the timeline (and of the clustering test, which reads a plan file), so
that a caller holding a timeline already (the daemon lists `.hoodie/` once per cycle) does
not load it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lakeward.core.timeline import Action, Instant, Timeline

#: Pending timeline actions that are table-service plans (a pending replacecommit may be one too).
PLAN_ACTIONS = frozenset(
    {
        Action.COMPACTION,
        Action.LOG_COMPACTION,
        Action.CLEAN,
        Action.ROLLBACK,
        Action.RESTORE,
        Action.INDEXING,
        Action.CHANGE_TRACKING,
        #: Pending clustering on table versions 8+ (its own action there).
        Action.CLUSTERING,
    }
)
_WRITES = (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT)


@dataclass(frozen=True)
class PendingServicePlan:
    """A requested or inflight table-service plan on the timeline.

    `action` is the plan's action (`compaction`, `clean`, ...); a clustering plan (a pending
    replacecommit on table version 6, a `clustering` instant on 8+) is `Action.CLUSTERING`.
    """

    action: Action
    instant: Instant


@dataclass(frozen=True)
class ServiceState:
    """A table's pending plans and what accumulated since each service last ran (instant times as strings)."""

    #: `hoodie.table.version` (6, 8, 9).
    table_version: int
    #: Pending plans, oldest first.
    pending_plans: tuple[PendingServicePlan, ...]
    #: Pending commits, delta commits and insert-overwrite replacecommits, oldest first.
    pending_writes: tuple[Instant, ...]
    #: The latest completed instant of any action.
    last_completed: str | None
    last_compaction: str | None
    last_clean: str | None
    #: The latest completed replacecommit (a clustering or an insert overwrite).
    last_replace: str | None
    #: The later of the last change-tracking run and the last compaction (both persist changes).
    last_change_tracking: str | None
    last_index_build: str | None
    delta_commits_since_compaction: int
    writes_since_clean: int
    #: Completed commits and replacecommits since the last clean: what makes old file slices.
    rewrites_since_clean: int
    writes_since_replace: int
    delta_commits_since_change_tracking: int
    #: Completed writes (new base files) since the last completed index build.
    writes_since_index_build: int
    #: Something odd but not fatal (an unreadable replacecommit plan); the rest is still right.
    error: str | None = None

    def pending(self, action: Action) -> list[Instant]:
        """The pending plans of one action (`Action.CLUSTERING` for clustering), oldest first."""
        return [p.instant for p in self.pending_plans if p.action is action]


def _after(times: list[str], since: str | None) -> int:
    return sum(1 for t in times if since is None or t > since)


def service_state(timeline: Timeline, table_version: int, is_clustering: Callable[[str], bool]) -> ServiceState:
    """The `ServiceState` of `timeline` (the active timeline).

    `is_clustering(instant_time)`: whether a pending replacecommit holds a clustering plan
    (`clustering_plan_of(storage, t) is not None`, possibly cached); when it raises, the
    instant is left out and `error` says why.
    """
    plans: list[PendingServicePlan] = []
    pending_writes: list[Instant] = []
    error = None
    for instant in timeline.pending():
        action: Action | None = instant.action if instant.action in PLAN_ACTIONS else None
        if action is None and instant.action is Action.REPLACE_COMMIT:
            try:
                if is_clustering(instant.time):
                    action = Action.CLUSTERING
            except Exception as exc:  # a corrupt plan: report, keep the rest of the state
                error = f"cannot read replacecommit plan {instant.time}: {exc}"
                continue
        if action is not None:
            plans.append(PendingServicePlan(action, instant))
        elif instant.action in _WRITES:
            pending_writes.append(instant)
    writes = timeline.completed_writes()
    write_times = [i.time for i in writes]
    delta_times = [i.time for i in writes if i.action is Action.DELTA_COMMIT]
    last_compaction = max((t for t in write_times if timeline.was_compaction(t)), default=None)
    last_clean = _last(timeline.completed(Action.CLEAN))
    last_replace = _last(timeline.completed(Action.REPLACE_COMMIT))
    tracked = _last(timeline.completed(Action.CHANGE_TRACKING))
    last_tracked = max([t for t in (last_compaction, tracked) if t], default=None)
    last_build = _last(timeline.completed(Action.INDEXING))
    return ServiceState(
        table_version=table_version,
        pending_plans=tuple(plans),
        pending_writes=tuple(pending_writes),
        last_completed=_last(timeline.completed()),
        last_compaction=last_compaction,
        last_clean=last_clean,
        last_replace=last_replace,
        last_change_tracking=last_tracked,
        last_index_build=last_build,
        delta_commits_since_compaction=_after(delta_times, last_compaction),
        writes_since_clean=_after(write_times, last_clean),
        rewrites_since_clean=_after([i.time for i in writes if i.action is not Action.DELTA_COMMIT], last_clean),
        writes_since_replace=_after(write_times, last_replace),
        delta_commits_since_change_tracking=_after(delta_times, last_tracked),
        writes_since_index_build=_after(write_times, last_build),
        error=error,
    )


def _last(instants: list[Instant]) -> str | None:
    return instants[-1].time if instants else None


__all__ = ["PLAN_ACTIONS", "PendingServicePlan", "ServiceState", "service_state"]
