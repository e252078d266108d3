"""What to do next: pending plans to run and, by policy, new plans to schedule. Pure.

`plan_work` turns discovered `TableState`s into `WorkItem`s, ordered so that a replica
taking them in order is fair:

1. by `ACTION_PRIORITY` (rollbacks and cleans before long compactions);
2. oldest first: a pending plan by its instant time, a new plan by the instant it has
   been due since (e.g. the first delta commit since the last compaction);
3. round-robin across tables when ages tie (a table's second item waits behind every
   other table's first);
4. table name, for a stable order.

Paused tables and tables lakeward only reads (`skip_reason`) produce nothing; items whose
key is already running are skipped; a new plan of an action is not proposed while a plan
of that action is pending on the table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from lakeward.core.table_version import table_version
from lakeward.core.timeline import Action
from lakeward.services.discovery import TableState
from lakeward.services.model import ACTION_PRIORITY, ServiceAction, WorkItem
from lakeward.services.settings import EffectivePolicy

#: The settings' default policy: the planner's defaults are read from it, so there is one set of them.
_DEFAULTS = EffectivePolicy()


def _seconds(value: float | None) -> dt.timedelta | None:
    return dt.timedelta(seconds=value) if value is not None else None


@dataclass(frozen=True)
class Policy:
    """When to schedule new plans on a table. Built from the daemon's settings (per table or default).

    Every default is the settings model's (:class:`~lakeward.services.settings.PolicySettings`),
    except the two knobs the settings do not have (``clean_interval``, ``repair_after``).
    """

    paused: bool = _DEFAULTS.paused
    #: merge-on-read: schedule a compaction once this many delta commits completed since the last one
    compaction_enabled: bool = _DEFAULTS.compaction.enabled
    compaction_delta_commits: int = _DEFAULTS.compaction.max_delta_commits
    #: ... or once the oldest delta commit since the last compaction is this old (None: off)
    compaction_max_delta_age: dt.timedelta | None = _seconds(_DEFAULTS.compaction.max_delta_seconds)
    #: schedule a clean every N completed writes since the last clean ...
    clean_enabled: bool = _DEFAULTS.clean.enabled
    clean_every_commits: int = _DEFAULTS.clean.min_commits_between
    #: ... or when the last clean is older than this (and something was written since); None: commits only
    clean_interval: dt.timedelta | None = None
    clustering_enabled: bool = _DEFAULTS.clustering.enabled
    clustering_every_commits: int = _DEFAULTS.clustering.every_n_commits
    #: merge-on-read with CDC: persist changes once this many delta commits have none (change tracking)
    change_tracking_enabled: bool = _DEFAULTS.change_tracking.enabled
    change_tracking_every_commits: int = _DEFAULTS.change_tracking.every_n_commits
    #: archive when the active timeline holds more completed instants than this
    archival_enabled: bool = _DEFAULTS.archival.enabled
    archival_max_instants: int = _DEFAULTS.archival.keep_max_commits
    #: roll back writes pending longer than this whose writer is gone (heartbeat stopped); None: off
    repair_after: dt.timedelta | None = dt.timedelta(minutes=5)
    #: build secondary indexes of new base files, on tables with an index on one of these columns
    index_build_enabled: bool = _DEFAULTS.index_build.enabled
    index_build_columns: frozenset[str] = frozenset(_DEFAULTS.index_build.columns)

    def __post_init__(self) -> None:
        for name in (
            "compaction_delta_commits",
            "clean_every_commits",
            "clustering_every_commits",
            "change_tracking_every_commits",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.archival_max_instants < 1:
            raise ValueError(f"archival_max_instants must be at least 1, got {self.archival_max_instants}")


DEFAULT_POLICY = Policy()


def policy_from_settings(settings: EffectivePolicy, paused: bool = False) -> Policy:
    """The planning policy of a table from its effective settings (`paused`: paused by on-call)."""
    return Policy(
        paused=paused or settings.paused,
        compaction_enabled=settings.compaction.enabled,
        compaction_delta_commits=settings.compaction.max_delta_commits,
        compaction_max_delta_age=_seconds(settings.compaction.max_delta_seconds),
        clean_enabled=settings.clean.enabled,
        clean_every_commits=settings.clean.min_commits_between,
        clustering_enabled=settings.clustering.enabled,
        clustering_every_commits=settings.clustering.every_n_commits,
        change_tracking_enabled=settings.change_tracking.enabled,
        change_tracking_every_commits=settings.change_tracking.every_n_commits,
        archival_enabled=settings.archival.enabled,
        archival_max_instants=settings.archival.keep_max_commits,
        index_build_enabled=settings.index_build.enabled,
        index_build_columns=frozenset(settings.index_build.columns),
    )


def instant_moment(instant_time: str, timezone: str = "LOCAL") -> dt.datetime:
    """An instant time (yyyyMMddHHmmss[SSS]) as an aware datetime in the table's timeline timezone."""
    moment = dt.datetime.strptime(instant_time[:14], "%Y%m%d%H%M%S")
    if len(instant_time) >= 17:
        moment = moment.replace(microsecond=int(instant_time[14:17]) * 1000)
    if timezone.upper() == "UTC":
        return moment.replace(tzinfo=dt.UTC)
    return moment.astimezone()  # naive local time -> aware


def _aware(now: dt.datetime) -> dt.datetime:
    return now if now.tzinfo is not None else now.astimezone()


def _first_after(state: TableState, after: str | None, actions: Collection[Action] | None = None) -> str | None:
    """The first completed write after `after` (of `actions`, if given): when a new plan became due."""
    for i in state.timeline.completed_writes():
        if (after is None or i.time > after) and (actions is None or i.action in actions):
            return i.time
    return None


def _new_plans(state: TableState, policy: Policy, now: dt.datetime) -> list[tuple[ServiceAction, str, str]]:
    """(action, due since, reason) for every new plan the policy wants on this table."""
    out: list[tuple[ServiceAction, str, str]] = []
    pending = {p.action for p in state.pending_plans}
    service = state.service_state
    if (
        policy.compaction_enabled
        and state.is_merge_on_read
        and ServiceAction.COMPACTION not in pending
        and state.delta_commits_since_compaction > 0
    ):
        since = _first_after(state, service.last_compaction, (Action.DELTA_COMMIT,))
        n = state.delta_commits_since_compaction
        reason = None
        if n >= policy.compaction_delta_commits:
            reason = f"{n} delta commits since the last compaction (threshold {policy.compaction_delta_commits})"
        elif policy.compaction_max_delta_age is not None and since is not None:
            age = _aware(now) - instant_moment(since, state.timeline_timezone)
            if age >= policy.compaction_max_delta_age:
                reason = f"delta commit {since} is older than {policy.compaction_max_delta_age}, not compacted yet"
        if reason:
            out.append((ServiceAction.COMPACTION, since or "", reason))
    # A merge-on-read table whose writes since the last clean are all delta commits has (almost)
    # no old file slice to delete: its clean waits for a compaction or clustering, else no-op cleans
    # would take the slots its compactions need.
    can_clean = state.rewrites_since_clean > 0 or not state.is_merge_on_read
    if policy.clean_enabled and ServiceAction.CLEAN not in pending and state.writes_since_clean > 0 and can_clean:
        since = _first_after(state, state.last_clean) or ""
        reason = None
        if state.writes_since_clean >= policy.clean_every_commits:
            reason = f"{state.writes_since_clean} writes since the last clean (every {policy.clean_every_commits})"
        elif policy.clean_interval is not None:
            reference = state.last_clean or (state.timeline.instants[0].time if state.timeline.instants else None)
            if reference is not None:
                age = _aware(now) - instant_moment(reference, state.timeline_timezone)
                if age >= policy.clean_interval:
                    what = "last clean" if state.last_clean else "first instant"
                    reason = f"{what} {reference} is older than {policy.clean_interval}"
        if reason:
            out.append((ServiceAction.CLEAN, since, reason))
    if (
        policy.clustering_enabled
        and ServiceAction.CLUSTERING not in pending
        and state.writes_since_replace >= policy.clustering_every_commits
    ):
        since = _first_after(state, service.last_replace) or ""
        out.append(
            (
                ServiceAction.CLUSTERING,
                since,
                f"{state.writes_since_replace} writes since the last replacecommit "
                f"(every {policy.clustering_every_commits})",
            )
        )
    untracked = state.delta_commits_since_change_tracking
    if (
        policy.change_tracking_enabled
        and state.is_merge_on_read
        and state.cdc_enabled
        and ServiceAction.CHANGE_TRACKING not in pending
        and untracked >= policy.change_tracking_every_commits
    ):
        since = _first_after(state, service.last_change_tracking, (Action.DELTA_COMMIT,)) or ""
        reason = f"{untracked} delta commit(s) without persisted changes (every {policy.change_tracking_every_commits})"
        out.append((ServiceAction.CHANGE_TRACKING, since, reason))
    if policy.repair_after is not None and ServiceAction.ROLLBACK not in pending and state.pending_writes:
        oldest_write = state.pending_writes[0].time
        if _aware(now) - instant_moment(oldest_write, state.timeline_timezone) >= policy.repair_after:
            out.append(
                (
                    ServiceAction.ROLLBACK,
                    oldest_write,
                    f"write {oldest_write} pending over {policy.repair_after}: roll it back if its writer is gone",
                )
            )
    indexed = state.index_columns & policy.index_build_columns
    if policy.index_build_enabled and indexed and ServiceAction.INDEX_BUILD not in pending:
        if state.writes_since_index_build > 0:
            since = _first_after(state, service.last_index_build) or ""
            out.append(
                (
                    ServiceAction.INDEX_BUILD,
                    since,
                    f"{state.writes_since_index_build} write(s) since the last index build "
                    f"(indexed columns {sorted(indexed)})",
                )
            )
    completed = state.completed_count
    if policy.archival_enabled and completed > policy.archival_max_instants:
        oldest = state.timeline.instants[0].time if state.timeline.instants else ""
        out.append(
            (
                ServiceAction.ARCHIVAL,
                oldest,
                f"{completed} completed instants on the active timeline (more than {policy.archival_max_instants})",
            )
        )
    return out


def skip_reason(state: TableState) -> str | None:
    """Why planning proposes nothing on a table, whatever its policy; None when it plans normally.

    A table the daemon does not serve (`TableVersion.read_only_reason`: a Hudi 1.x table with
    a metadata table) gets no work at all: neither new plans nor the pending plans Hudi
    scheduled on it (running them would leave its metadata table stale).
    """
    if state.read_only is not None:
        return f"{state.read_only}: lakeward does not plan or run table services on it"
    return None


def plan_work(
    states: Iterable[TableState],
    policies: Mapping[str, Policy] | Policy | None = None,
    now: dt.datetime | None = None,
    running_keys: Collection[str] = frozenset(),
) -> list[WorkItem]:
    """Every pending plan as a WorkItem (run it), plus new plans due by policy, in the order to take them.

    `policies`: one Policy for every table, or a mapping table name -> Policy (missing names
    get the default Policy). `now` decides time-based policies (default: the current time).
    `running_keys`: `WorkItem.key`s already running (claimed here or elsewhere), skipped.
    """
    now = now if now is not None else dt.datetime.now(dt.UTC)
    running = set(running_keys)
    items: list[WorkItem] = []
    for state in states:
        if isinstance(policies, Policy):
            policy = policies
        else:
            policy = (policies or {}).get(state.ref.name, DEFAULT_POLICY)
        if policy.paused or skip_reason(state) is not None:
            continue
        for plan in state.pending_plans:
            items.append(
                WorkItem(
                    ACTION_PRIORITY[plan.action],
                    plan.instant,
                    state.ref,
                    plan.action,
                    plan.instant,
                    f"pending {plan.action.value} plan ({plan.state})",
                )
            )
        for action, since, reason in _new_plans(state, policy, now):
            items.append(WorkItem(ACTION_PRIORITY[action], since, state.ref, action, None, reason))
    versions = {s.ref.name: table_version(s.table_version) for s in states}
    # Services lakeward does not run on a table's version yet (8, 9: change tracking, index builds).
    items = [i for i in items if i.key not in running and versions[i.table.name].runs_service(i.action.value)]
    return order_fairly(items)


def order_fairly(items: Iterable[WorkItem]) -> list[WorkItem]:
    """Sort by (priority, age), then round-robin across tables on ties, then by table name."""
    by_age = sorted(items, key=lambda i: (i.priority, i.sort_instant, i.table.name))
    ordinal: dict[str, int] = {}
    keyed = []
    for item in by_age:
        n = ordinal.get(item.table.name, 0)
        ordinal[item.table.name] = n + 1
        keyed.append(((item.priority, item.sort_instant, n, item.table.name), item))
    keyed.sort(key=lambda pair: pair[0])
    return [item for _, item in keyed]


__all__ = [
    "DEFAULT_POLICY",
    "Policy",
    "instant_moment",
    "order_fairly",
    "plan_work",
    "policy_from_settings",
    "skip_reason",
]
