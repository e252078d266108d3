"""The health snapshot: what a health report needs from a table, taken without reading data files.

`take_snapshot(table, now)` lists the table once (the file-system view), reads the
timeline (and the metadata table's, for its lag), the plans of pending instants, the commit
metadata the view and the cleaner's planner read anyway, and the heartbeat files of pending
writes. It never opens a base or log file. The snapshot is small and plain (numbers, instant times, ages), so that the
daemon can take it at discovery and score it with any policy (`health_report`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING

from lakeward.core.config.table import TableType
from lakeward.core.config.write import WriteConfig, parse_write_config
from lakeward.core.file_group.integrity import listing_problems
from lakeward.core.file_group.metadata_listing import metadata_partitions
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.instant_clock import aware, in_timeline_zone, instant_moment
from lakeward.core.locks import LOCK_OPTION_KEYS
from lakeward.core.metadata_table.lag import metadata_table_lag
from lakeward.core.table_services.clean import plan_clean
from lakeward.core.timeline import WRITE_ACTIONS, Action, Instant, Timeline
from lakeward.core.timeline.clustering_plan import CLUSTER, pending_clustering_plans
from lakeward.core.timeline.transitions import instant_path, read_commit_metadata
from lakeward.core.write.heartbeat import last_heartbeat_ms

if TYPE_CHECKING:
    from lakeward.core.storage import Storage
    from lakeward.core.table import Table

#: The table services whose last completion a report shows.
SERVICES = ("compaction", "clean", "clustering")


class HeartbeatState(str, Enum):
    """A pending write's heartbeat: refreshed recently (`live`), too long ago (`expired`), or absent."""

    LIVE = "live"
    EXPIRED = "expired"
    MISSING = "missing"


@dataclass(frozen=True)
class PendingPlan:
    """A pending table-service instant (compaction, clustering, clean, rollback, ...)."""

    action: str
    instant_time: str
    state: str
    age_seconds: float


@dataclass(frozen=True)
class PendingWrite:
    """A pending write instant and what its heartbeat says about its writer."""

    action: str
    instant_time: str
    age_seconds: float
    heartbeat: HeartbeatState
    #: Seconds since the heartbeat file was last refreshed (None: no file).
    heartbeat_age_seconds: float | None


@dataclass(frozen=True)
class HealthSnapshot:
    """Everything a health report is computed from (`health_report(snapshot, policy)`)."""

    table_name: str
    table_path: str
    table_version: int
    table_type: str
    #: Whether lakeward runs table services on this version (False: versions 8, 9 for now).
    services_writable: bool
    taken_at: dt.datetime
    #: Per live file group (latest slice): number of log files and their bytes.
    log_files_per_group: tuple[int, ...]
    log_bytes_per_group: tuple[int, ...]
    #: Sizes of the latest base files.
    base_file_sizes: tuple[int, ...]
    #: `hoodie.parquet.small.file.limit` of the table's write options (or Hudi's default).
    small_file_limit: int
    pending_plans: tuple[PendingPlan, ...]
    pending_writes: tuple[PendingWrite, ...]
    #: Service -> seconds since it last completed (None: never, on the active timeline).
    seconds_since_last: dict[str, float | None]
    #: Files the cleaner would delete now under the table's cleaner policy (None: not computed).
    cleanable_files: int | None
    cleaner_policy: str
    #: The retention setting of that policy, as `key=value`.
    cleaner_retention: str
    #: Files of the latest slices (base and log files): what the cleaner keeps at least.
    live_files: int
    #: Completed commits (commit, deltacommit, replacecommit) on the active timeline.
    active_commits: int
    active_instants: int
    keep_min_commits: int
    keep_max_commits: int
    #: Completed data-table instants the metadata table does not reflect (`core/metadata_table/lag.py`);
    #: None: the table has no metadata table.
    metadata_lag_instants: int | None = None
    #: The oldest of them, and seconds since it completed.
    metadata_lag_oldest: str | None = None
    metadata_lag_seconds: float | None = None
    #: Completed data-table instants not yet compacted in the metadata table (its own compaction), and
    #: the pending data-table instant that holds that compaction back (None: nothing does).
    metadata_uncompacted_instants: int | None = None
    metadata_compaction_blocked_by: str | None = None
    #: Live files the completed instants recorded that are missing or cut short
    #: (`file_group.integrity.listing_problems`, from the listing and commit metadata: no data
    #: file is read), as `kind: path (instant): detail`.
    damaged_files: tuple[str, ...] = ()
    #: Why lakeward runs no table service on the table (`Table.read_only_reason`; None: it runs them).
    read_only_reason: str | None = None

    def aged_to(self, now: dt.datetime) -> HealthSnapshot:
        """The snapshot as of `now` for a table that did not change since it was taken: every age (since
        the last service, of pending plans and writes, of the metadata table's lag) grows by the time
        passed since it was taken; the listing and counts stand. Heartbeat ages stay: a live writer
        refreshes its own. Call it on the snapshot as taken (its ages are as of `taken_at`)."""
        passed = (now - self.taken_at).total_seconds()
        if passed <= 0:
            return self

        def grow(seconds: float | None) -> float | None:
            return None if seconds is None else seconds + passed

        return replace(
            self,
            seconds_since_last={k: grow(v) for k, v in self.seconds_since_last.items()},
            pending_plans=tuple(replace(p, age_seconds=p.age_seconds + passed) for p in self.pending_plans),
            pending_writes=tuple(replace(w, age_seconds=w.age_seconds + passed) for w in self.pending_writes),
            metadata_lag_seconds=grow(self.metadata_lag_seconds),
        )


def table_write_config(table: Table) -> WriteConfig:
    """The write options the table was opened with (defaults for keys not given)."""
    return parse_write_config(table.options, extra_known=LOCK_OPTION_KEYS)


def _pending_plans(storage: Storage, timeline: Timeline, age: _Ages) -> tuple[list[PendingPlan], list[Instant]]:
    """Pending table-service plans, and the pending writes (a replacecommit without a clustering plan)."""
    clustering = set(pending_clustering_plans(storage, timeline)) if timeline.pending() else set()
    plans, writes = [], []
    for instant in timeline.pending():
        if instant.action is Action.REPLACE_COMMIT and instant.time in clustering:
            plans.append(PendingPlan("clustering", instant.time, instant.state.value, age.of(instant.time)))
        elif instant.action in WRITE_ACTIONS:
            writes.append(instant)
        else:
            plans.append(PendingPlan(instant.action.value, instant.time, instant.state.value, age.of(instant.time)))
    return plans, writes


def _heartbeat(storage: Storage, instant: Instant, wc: WriteConfig, age: _Ages) -> PendingWrite:
    last = last_heartbeat_ms(storage, instant.time)
    if last is None:
        state, beat_age = HeartbeatState.MISSING, None
    else:
        beat_age = age.now.timestamp() - last / 1000
        limit = wc.heartbeat_interval_ms * wc.heartbeat_tolerable_misses / 1000
        state = HeartbeatState.EXPIRED if beat_age > limit else HeartbeatState.LIVE
    return PendingWrite(instant.action.value, instant.time, age.of(instant.time), state, beat_age)


@dataclass(frozen=True)
class _Ages:
    now: dt.datetime
    timezone: str

    def of(self, instant_time: str) -> float:
        return (self.now - instant_moment(instant_time, self.timezone)).total_seconds()


def _completed_at(storage: Storage, instant: Instant, age: _Ages) -> float:
    """Seconds since a completed instant completed: its completion time (v8+), else its file's mtime."""
    if instant.completion_time is not None:
        return age.of(instant.completion_time)
    if instant.archive_file is None:
        try:
            return (age.now - storage.modified_time(instant_path(instant))).total_seconds()
        except FileNotFoundError:
            pass
    return age.of(instant.time)


def _service_of(storage: Storage, timeline: Timeline, instant: Instant) -> str | None:
    if instant.action is Action.CLEAN:
        return "clean"
    if instant.action is Action.COMMIT and timeline.was_compaction(instant.time):
        return "compaction"
    if instant.action is Action.REPLACE_COMMIT:
        meta = read_commit_metadata(storage, instant)
        return "clustering" if meta.operationType.upper() == CLUSTER else None
    return None


def _last_services(storage: Storage, timeline: Timeline, age: _Ages) -> dict[str, float | None]:
    """Seconds since each service last completed, newest instants first (stops once all are found)."""
    found: dict[str, float | None] = dict.fromkeys(SERVICES)
    for instant in reversed(timeline.active()):
        if all(v is not None for v in found.values()):
            break
        if not instant.is_completed:
            continue
        service = _service_of(storage, timeline, instant)
        if service is not None and found[service] is None:
            found[service] = _completed_at(storage, instant, age)
    return found


def _retention(wc: WriteConfig) -> str:
    if wc.cleaner_policy == "KEEP_LATEST_FILE_VERSIONS":
        return f"hoodie.cleaner.fileversions.retained={wc.cleaner_file_versions_retained}"
    if wc.cleaner_policy == "KEEP_LATEST_BY_HOURS":
        return f"hoodie.cleaner.hours.retained={wc.cleaner_hours_retained}"
    return f"hoodie.cleaner.commits.retained={wc.cleaner_commits_retained}"


def take_snapshot(table: Table, now: dt.datetime | None = None) -> HealthSnapshot:
    """What `health_report` needs from `table`, as of `now` (default: the current time).

    `now` may be naive (taken as local time) or aware. Reads the timeline, the file
    listing, plans and commit metadata, and heartbeat files; never a data file.
    """
    storage, config = table.storage, table.config
    wc = table_write_config(table)
    timeline = table.timeline()
    age = _Ages(aware(now), config.timeline_timezone)
    view = FileSystemView.load(storage, timeline)
    slices = view.latest_file_slices()
    plans, writes = _pending_plans(storage, timeline, age)
    cleanable = None
    if not view.from_metadata_table:
        in_zone = in_timeline_zone(age.now, config.timeline_timezone)
        plan = plan_clean(storage, timeline, view, wc, config.timeline_timezone, in_zone)
        cleanable = plan.file_count
    active = timeline.active()
    lag = metadata_table_lag(storage, timeline) if metadata_partitions(config.to_properties()) else None
    oldest = lag.oldest if lag is not None else None
    return HealthSnapshot(
        table_name=table.name,
        table_path=table.path,
        table_version=table.version.number,
        table_type=config.table_type.value,
        services_writable=(read_only := table.read_only_reason()) is None,
        read_only_reason=read_only,
        taken_at=age.now,
        log_files_per_group=tuple(len(s.log_files) for s in slices),
        log_bytes_per_group=tuple(sum(f.size for f in s.log_files) for s in slices),
        base_file_sizes=tuple(s.base_file.size for s in slices if s.base_file is not None),
        small_file_limit=wc.small_file_limit,
        pending_plans=tuple(plans),
        pending_writes=tuple(_heartbeat(storage, i, wc, age) for i in writes),
        seconds_since_last=_last_services(storage, timeline, age),
        cleanable_files=cleanable,
        cleaner_policy=wc.cleaner_policy,
        cleaner_retention=_retention(wc),
        live_files=sum(len(s.log_files) + (s.base_file is not None) for s in slices),
        active_commits=sum(1 for i in active if i.is_completed and i.action in WRITE_ACTIONS),
        active_instants=len(active),
        keep_min_commits=wc.keep_min_commits,
        keep_max_commits=wc.keep_max_commits,
        metadata_lag_instants=lag.instants if lag is not None else None,
        metadata_lag_oldest=oldest.time if oldest is not None else None,
        metadata_lag_seconds=_completed_at(storage, oldest, age) if oldest is not None else None,
        metadata_uncompacted_instants=len(lag.not_compacted) if lag is not None else None,
        metadata_compaction_blocked_by=lag.blocking.time if lag is not None and lag.blocking else None,
        damaged_files=tuple(str(p) for p in listing_problems(storage, timeline, view)),
    )


def is_merge_on_read(snapshot: HealthSnapshot) -> bool:
    return snapshot.table_type == TableType.MERGE_ON_READ.value
