"""What to do next: pending plans to run and, by policy, new plans to schedule. Pure.

`plan_work` turns discovered `TableState`s into `WorkItem`s, ordered so that a replica
taking them in order is fair (`services/fairness.py`, the queue discipline: starving tables
first, groups of tables by weighted fair share, then within a group rollbacks and cleans
before long compactions, round-robin across tables, oldest first -- a pending plan by its
instant time, a new plan by the instant it has been due since).

Paused tables and tables lakeward only reads (`skip_reason`) produce nothing; items whose
key is already running are skipped; a new plan of an action is not proposed while a plan
of that action is pending on the table.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lakeward.core.instant_clock import instant_moment
from lakeward.core.table_services.archival import archival_outlook
from lakeward.core.table_version import table_version
from lakeward.core.timeline import Action
from lakeward.services.discovery import TableState
from lakeward.services.fairness import order_fairly
from lakeward.services.model import ACTION_PRIORITY, ServiceAction, TableRef, WorkItem
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
    #: archive when the active timeline holds more completed writes than this, down to the min
    archival_enabled: bool = _DEFAULTS.archival.enabled
    archival_max_instants: int = _DEFAULTS.archival.keep_max_commits
    archival_min_instants: int = _DEFAULTS.archival.keep_min_commits
    #: roll back writes pending longer than this whose writer is gone (heartbeat stopped); None: off
    repair_after: dt.timedelta | None = dt.timedelta(minutes=5)
    #: build secondary indexes of new base files, on tables with an index on one of these columns
    index_build_enabled: bool = _DEFAULTS.index_build.enabled
    index_build_columns: frozenset[str] = frozenset(_DEFAULTS.index_build.columns)
    #: look for orphan files (the daemon spaces the runs by `orphan_clean.interval_s`)
    orphan_clean_enabled: bool = _DEFAULTS.orphan_clean.enabled
    #: The table it applies to, when it comes from a per-table override (names config keys in reasons).
    table: str | None = None
    #: Who paused the table and why (explain shows it), when `paused`.
    pause_note: str = ""

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
        if not 0 < self.archival_min_instants < self.archival_max_instants:
            raise ValueError(
                f"archival_min_instants must be at least 1 and less than archival_max_instants "
                f"({self.archival_max_instants}), got {self.archival_min_instants}"
            )


DEFAULT_POLICY = Policy()


def policy_from_settings(
    settings: EffectivePolicy, paused: bool = False, pause_note: str = "", overridden: bool = False
) -> Policy:
    """The planning policy of a table from its effective settings (`paused`: paused by on-call, as
    `pause_note` says). `overridden`: the table has an override (config keys in reasons name it)."""
    if settings.paused and not paused:
        where = f"policies.overrides.{settings.table}" if overridden else "policies.defaults"
        pause_note = f"paused by policy: {where}.paused=true"
    return Policy(
        paused=paused or settings.paused,
        table=settings.table if overridden else None,
        pause_note=pause_note,
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
        archival_min_instants=settings.archival.keep_min_commits,
        index_build_enabled=settings.index_build.enabled,
        index_build_columns=frozenset(settings.index_build.columns),
        orphan_clean_enabled=settings.orphan_clean.enabled,
    )


def _aware(now: dt.datetime) -> dt.datetime:
    return now if now.tzinfo is not None else now.astimezone()


def _first_after(state: TableState, after: str | None, actions: Collection[Action] | None = None) -> str | None:
    """The first completed write after `after` (of `actions`, if given): when a new plan became due."""
    for i in state.timeline.completed_writes():
        if (after is None or i.time > after) and (actions is None or i.action in actions):
            return i.time
    return None


# -- decisions and their reasons -------------------------------------------------------------
class ReasonCode(str, enum.Enum):
    """Why work is not planned or run now; `REASON_ORDER` is the order they are listed in."""

    NOT_APPLICABLE = "not_applicable"
    POLICY_DISABLED = "policy_disabled"
    NOT_DUE = "not_due"
    PAUSED = "paused"
    QUARANTINED = "quarantined"
    CLAIMED = "claimed"
    BLOCKED = "blocked"
    LOCKED = "locked"
    READ_ONLY = "read_only"
    UNAVAILABLE = "unavailable"
    CONCURRENCY_LIMIT = "concurrency_limit"


REASON_ORDER: tuple[ReasonCode, ...] = tuple(ReasonCode)


@dataclass(frozen=True)
class Reason:
    """One reason, worded for on-call, with its evidence (instants, counts, config keys)."""

    code: ReasonCode
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, "evidence": dict(self.evidence)}


@dataclass(frozen=True)
class Decision:
    """What the planner decided for one action on one table.

    `item` is the work it proposes (a pending plan to run, or a new plan to schedule and
    run); None when there is nothing to propose. `reasons` say why that work does not
    run now (empty: it does), in `REASON_ORDER`.
    """

    table: TableRef
    action: ServiceAction
    item: WorkItem | None
    reasons: tuple[Reason, ...] = ()

    @property
    def runs(self) -> bool:
        return self.item is not None and not self.reasons

    def adding(self, reasons: Iterable[Reason]) -> Decision:
        """This decision with more reasons, kept in `REASON_ORDER`."""
        merged = sorted((*self.reasons, *reasons), key=lambda r: REASON_ORDER.index(r.code))
        return replace(self, reasons=tuple(merged))

    def summary(self) -> str:
        """One line for logs: the work, and every reason it does not run."""
        what = self.item.key if self.item is not None else f"{self.table.name}/{self.action.value}"
        return f"{what}: " + "; ".join(f"{r.code.value}: {r.message}" for r in self.reasons)

    def to_dict(self) -> dict[str, Any]:
        item = self.item
        return {
            "action": self.action.value,
            "instant": item.instant if item else None,
            "work": None if item is None else ("run pending plan" if item.instant else "schedule and run a new plan"),
            "why": item.reason if item else None,
            "would_run": self.runs,
            "reasons": [r.to_dict() for r in self.reasons],
        }


def _key(policy: Policy, path: str) -> str:
    """A policy setting's key as the settings name it (per-table overrides win over defaults)."""
    where = f"policies.overrides.{policy.table}" if policy.table else "policies.defaults"
    return f"{where}.{path}"


def _disabled(policy: Policy, action: ServiceAction, enabled: bool) -> list[Reason]:
    if enabled:
        return []
    key = _key(policy, f"{action.value}.enabled")
    return [Reason(ReasonCode.POLICY_DISABLED, f"{key}=false: not scheduled by policy", {"key": key})]


def _not_due(message: str, **evidence: Any) -> Reason:
    return Reason(ReasonCode.NOT_DUE, message, evidence)


def _pending_plan(state: TableState, action: ServiceAction) -> list[Reason]:
    pending = [p.instant for p in state.pending_plans if p.action is action]
    if not pending:
        return []
    message = f"{action.value} plan(s) {', '.join(pending)} pending: they run first, no new plan meanwhile"
    return [Reason(ReasonCode.BLOCKED, message, {"pending_plans": pending})]


def _pending_writes(state: TableState, action: ServiceAction) -> list[Reason]:
    """A compaction or clustering plan is not written while a write is pending (core's schedulers),
    except a compaction on table versions 8+ (`TableVersion.compacts_beside_pending_writes`)."""
    writes = [i.time for i in state.pending_writes]
    if not writes:
        return []
    if action is ServiceAction.COMPACTION and table_version(state.table_version).compacts_beside_pending_writes:
        return []
    message = (
        f"write(s) {', '.join(writes)} pending: no {action.value} plan is written while a write is pending "
        "(running, or failed and not rolled back yet)"
    )
    return [Reason(ReasonCode.BLOCKED, message, {"pending_writes": writes})]


def _count_due(policy: Policy, n: int, every: int, key_path: str, what: str) -> tuple[str, list[Reason]]:
    """`n` `what` against the threshold `every` (the setting `key_path`): (why it is due, []) or
    ("", [the not-due reason with the numbers])."""
    if n >= every:
        return f"{n} {what} (every {every})", []
    key = _key(policy, key_path)
    return "", [_not_due(f"{n} {what}, fewer than {key}={every}", count=n, key=key, threshold=every)]


@dataclass(frozen=True)
class _Consideration:
    """A new plan of one action: due since `since` because of `why`, unless `reasons` say otherwise."""

    action: ServiceAction
    since: str
    why: str
    reasons: list[Reason]


def _compaction(state: TableState, policy: Policy, now: dt.datetime) -> _Consideration:
    action = ServiceAction.COMPACTION
    if not state.is_merge_on_read:
        applies = Reason(
            ReasonCode.NOT_APPLICABLE, f"compaction applies to MERGE_ON_READ tables, not {state.table_type}"
        )
        return _Consideration(action, "", "", [applies])
    reasons = _disabled(policy, action, policy.compaction_enabled)
    since = _first_after(state, state.service_state.last_compaction, (Action.DELTA_COMMIT,))
    n, threshold = state.delta_commits_since_compaction, policy.compaction_delta_commits
    why = ""
    if n >= threshold:
        why = f"{n} delta commits since the last compaction (threshold {threshold})"
    elif n > 0 and policy.compaction_max_delta_age is not None and since is not None:
        age = _aware(now) - instant_moment(since, state.timeline_timezone)
        if age >= policy.compaction_max_delta_age:
            why = f"delta commit {since} is older than {policy.compaction_max_delta_age}, not compacted yet"
    if not why:
        key = _key(policy, "compaction.max_delta_commits")
        message = f"{n} delta commit(s) since the last compaction, fewer than {key}={threshold}"
        evidence: dict[str, Any] = {"delta_commits": n, "key": key, "threshold": threshold, "oldest": since}
        if policy.compaction_max_delta_age is not None and since is not None:
            age = _aware(now) - instant_moment(since, state.timeline_timezone)
            age_key = _key(policy, "compaction.max_delta_seconds")
            message += f"; the oldest, {since}, is {age} old, under {age_key}={policy.compaction_max_delta_age}"
            evidence.update(age_seconds=age.total_seconds(), age_key=age_key)
        reasons.append(_not_due(message, **evidence))
    reasons += _pending_plan(state, action) + _pending_writes(state, action)
    return _Consideration(action, since or "", why, reasons)


def _clean(state: TableState, policy: Policy, now: dt.datetime) -> _Consideration:
    action = ServiceAction.CLEAN
    reasons = _disabled(policy, action, policy.clean_enabled)
    since = _first_after(state, state.last_clean) or ""
    n, every = state.writes_since_clean, policy.clean_every_commits
    why = ""
    # A merge-on-read table whose writes since the last clean are all delta commits has (almost)
    # no old file slice to delete: its clean waits for a compaction or clustering, else no-op cleans
    # would take the slots its compactions need.
    if n == 0:
        last = state.last_clean or "none on the active timeline"
        reasons.append(_not_due(f"no completed write since the last clean ({last})", writes=0))
    elif state.is_merge_on_read and state.rewrites_since_clean == 0:
        reasons.append(
            _not_due(
                f"{n} write(s) since the last clean, all delta commits: no old file slice to delete "
                "until a compaction or clustering",
                writes=n,
                rewrites=0,
            )
        )
    else:
        why, not_due = _count_due(policy, n, every, "clean.min_commits_between", "write(s) since the last clean")
        reference = state.last_clean or (state.timeline.instants[0].time if state.timeline.instants else None)
        if not why and policy.clean_interval is not None and reference is not None:
            age = _aware(now) - instant_moment(reference, state.timeline_timezone)
            if age >= policy.clean_interval:
                what = "last clean" if state.last_clean else "first instant"
                why, not_due = f"{what} {reference} is older than {policy.clean_interval}", []
        reasons += not_due
    reasons += _pending_plan(state, action)
    return _Consideration(action, since, why, reasons)


def _clustering(state: TableState, policy: Policy, now: dt.datetime) -> _Consideration:
    action = ServiceAction.CLUSTERING
    reasons = _disabled(policy, action, policy.clustering_enabled)
    why, not_due = _count_due(
        policy,
        state.writes_since_replace,
        policy.clustering_every_commits,
        "clustering.every_n_commits",
        "write(s) since the last replacecommit",
    )
    reasons += not_due + _pending_plan(state, action) + _pending_writes(state, action)
    return _Consideration(action, _first_after(state, state.service_state.last_replace) or "", why, reasons)


def _change_tracking(state: TableState, policy: Policy, now: dt.datetime) -> _Consideration:
    action = ServiceAction.CHANGE_TRACKING
    if not (state.is_merge_on_read and state.cdc_enabled):
        message = "change tracking applies to MERGE_ON_READ tables with hoodie.table.cdc.enabled=true"
        return _Consideration(action, "", "", [Reason(ReasonCode.NOT_APPLICABLE, message)])
    reasons = _disabled(policy, action, policy.change_tracking_enabled)
    why, not_due = _count_due(
        policy,
        state.delta_commits_since_change_tracking,
        policy.change_tracking_every_commits,
        "change_tracking.every_n_commits",
        "delta commit(s) without persisted changes",
    )
    reasons += not_due + _pending_plan(state, action)
    since = _first_after(state, state.service_state.last_change_tracking, (Action.DELTA_COMMIT,)) or ""
    return _Consideration(action, since, why, reasons)


def _rollback(state: TableState, policy: Policy, now: dt.datetime) -> _Consideration:
    action = ServiceAction.ROLLBACK
    reasons: list[Reason] = []
    if policy.repair_after is None:
        reasons.append(Reason(ReasonCode.POLICY_DISABLED, "repair_after is off: pending writes are not rolled back"))
    oldest = state.pending_writes[0].time if state.pending_writes else None
    why = ""
    if oldest is None:
        reasons.append(_not_due("no pending write to roll back", pending_writes=0))
    elif policy.repair_after is not None:
        age = _aware(now) - instant_moment(oldest, state.timeline_timezone)
        if age >= policy.repair_after:
            why = f"write {oldest} pending over {policy.repair_after}: roll it back if its writer is gone"
        else:
            reasons.append(
                _not_due(
                    f"the oldest pending write, {oldest}, is {age} old, under repair_after={policy.repair_after}",
                    instant=oldest,
                    age_seconds=age.total_seconds(),
                )
            )
    reasons += _pending_plan(state, action)
    return _Consideration(action, oldest or "", why, reasons)


def _index_build(state: TableState, policy: Policy, now: dt.datetime) -> _Consideration:
    action = ServiceAction.INDEX_BUILD
    indexed = state.index_columns & policy.index_build_columns
    if not indexed:
        message = (
            f"no secondary index on the policy's index_build.columns {sorted(policy.index_build_columns)} "
            f"(the table's indexes cover {sorted(state.index_columns)})"
        )
        return _Consideration(action, "", "", [Reason(ReasonCode.NOT_APPLICABLE, message)])
    reasons = _disabled(policy, action, policy.index_build_enabled)
    n = state.writes_since_index_build
    why = f"{n} write(s) since the last index build (indexed columns {sorted(indexed)})" if n > 0 else ""
    if not why:
        reasons.append(_not_due("no write since the last index build", writes=0))
    reasons += _pending_plan(state, action)
    return _Consideration(action, _first_after(state, state.service_state.last_index_build) or "", why, reasons)


def _archival(state: TableState, policy: Policy, now: dt.datetime) -> _Consideration:
    action = ServiceAction.ARCHIVAL
    reasons = _disabled(policy, action, policy.archival_enabled)
    limit = policy.archival_max_instants
    trigger = policy.compaction_delta_commits if state.is_merge_on_read else None
    metadata = state.metadata_compaction
    bound = metadata.archival_bound if metadata is not None else None
    outlook = archival_outlook(state.timeline, policy.archival_min_instants, limit, trigger, bound, state.clean_retain)
    writes, why = outlook.writes, ""
    if writes <= limit:
        key = _key(policy, "archival.keep_max_commits")
        reasons.append(
            _not_due(f"{writes} completed write(s) on the active timeline, not more than {key}={limit}", key=key)
        )
    elif outlook.movable:
        why = f"{writes} completed writes on the active timeline (more than {limit})"
    else:  # a run would archive nothing: it would only take a slot
        held = outlook.held_back_by or f"{_key(policy, 'archival.keep_min_commits')}={policy.archival_min_instants}"
        message = f"{writes} completed writes on the active timeline, but {held} keeps every write from there on"
        reasons.append(Reason(ReasonCode.BLOCKED, message, {"held_back_by": held}))
    oldest = state.timeline.instants[0].time if state.timeline.instants else ""
    return _Consideration(action, oldest, why, reasons)


def _orphan_clean(state: TableState, policy: Policy, now: dt.datetime) -> _Consideration:
    """Orphan removal: due whenever enabled; the daemon spaces its runs (`orphan_clean.interval_s`)."""
    action = ServiceAction.ORPHAN_CLEAN
    reasons = _disabled(policy, action, policy.orphan_clean_enabled)
    why = "look for orphan files (orphan_clean enabled)" if policy.orphan_clean_enabled else ""
    return _Consideration(action, state.last_completed or "", why, reasons)


def _metadata_compaction(state: TableState, policy: Policy, now: dt.datetime) -> _Consideration:
    """The metadata table's compaction (then clean): due by its own delta-commit count (Hudi's
    `hoodie.metadata.compact.max.delta.commits`), held back by a pending data-table instant whose
    metadata delta commit completed (core's `MetadataCompactionCheck` says which)."""
    action = ServiceAction.METADATA_COMPACTION
    check = state.metadata_compaction
    if check is None:
        message = "metadata_compaction applies to tables with a metadata table (`files` partition)"
        return _Consideration(action, "", "", [Reason(ReasonCode.NOT_APPLICABLE, message)])
    why, reasons = "", _pending_plan(state, action)
    evidence = check.to_dict()
    if check.due:
        why = (
            f"{check.eligible} metadata delta commit(s) since the last metadata compaction "
            f"(hoodie.metadata.compact.max.delta.commits={check.threshold})"
        )
    elif check.blocked:
        reasons.append(Reason(ReasonCode.BLOCKED, check.reason, evidence))
    elif not check.pending:
        reasons.append(_not_due(check.reason, **evidence))
    return _Consideration(action, check.oldest or "", why, reasons)


#: How the planner considers a new plan of each action, in the order `plan_work` used to.
_CONSIDER = (
    _compaction,
    _clean,
    _clustering,
    _change_tracking,
    _rollback,
    _index_build,
    _archival,
    _orphan_clean,
    _metadata_compaction,
)


def skip_reason(state: TableState) -> str | None:
    """Why planning proposes nothing on a table, whatever its policy; None when it plans normally.

    A table the daemon does not serve (`TableVersion.read_only_reason`: a Hudi 1.x table with
    a metadata table) gets no work at all: neither new plans nor the pending plans Hudi
    scheduled on it (running them would leave its metadata table stale).
    """
    if state.read_only is not None:
        return f"{state.read_only}: lakeward does not plan or run table services on it"
    return None


def _table_reasons(state: TableState, policy: Policy) -> list[Reason]:
    """What stops every work item of the table: a pause, a table version lakeward only reads."""
    reasons = []
    if policy.paused:
        reasons.append(Reason(ReasonCode.PAUSED, policy.pause_note or "the table is paused", {"paused": True}))
    skip = skip_reason(state)
    if skip is not None:
        reasons.append(Reason(ReasonCode.READ_ONLY, skip, {"table_version": state.table_version}))
    return reasons


def decide(state: TableState, policy: Policy, now: dt.datetime) -> list[Decision]:
    """The planner's decision for every action on one table: its pending plans (run them) and a new
    plan per action (due or not, and why), each with every reason it does not run now."""
    table = _table_reasons(state, policy)
    out: list[Decision] = []
    for plan in state.pending_plans:
        why = f"pending {plan.action.value} plan ({plan.state})"
        item = WorkItem(
            ACTION_PRIORITY[plan.action], plan.instant, state.ref, plan.action, plan.instant, why, state.table_version
        )
        out.append(Decision(state.ref, plan.action, item).adding(table))
    for consider in _CONSIDER:
        c = consider(state, policy, now)
        item = (
            WorkItem(ACTION_PRIORITY[c.action], c.since, state.ref, c.action, None, c.why, state.table_version)
            if c.why
            else None
        )
        out.append(Decision(state.ref, c.action, item).adding([*c.reasons, *table]))
    return out


def _policy_of(policies: Mapping[str, Policy] | Policy | None, name: str) -> Policy:
    if isinstance(policies, Policy):
        return policies
    return (policies or {}).get(name, DEFAULT_POLICY)


def plan_decisions(
    states: Iterable[TableState],
    policies: Mapping[str, Policy] | Policy | None = None,
    now: dt.datetime | None = None,
) -> list[Decision]:
    """`decide` for every table (policies as in `plan_work`)."""
    moment = now if now is not None else dt.datetime.now(dt.UTC)
    return [d for state in states for d in decide(state, _policy_of(policies, state.ref.name), moment)]


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
    These are the items of `plan_decisions` that run.
    """
    running = set(running_keys)
    items = [d.item for d in plan_decisions(states, policies, now) if d.runs and d.item is not None]
    versions = {s.ref.name: table_version(s.table_version) for s in states}
    # Services lakeward does not run on a table's version yet (8, 9: orphan_clean).
    return order_fairly(
        i for i in items if i.key not in running and versions[i.table.name].runs_service(i.action.value)
    )


# -- admission: what the daemon knows beyond the table's state ---------------------------------
@dataclass(frozen=True)
class Gate:
    """What stops a planned item at claim time (the daemon fills it in): every check is a lookup
    returning the reason, or None when it does not apply."""

    #: quarantined work item key -> (failures, why, since, replica)
    quarantined: Mapping[str, Any] = field(default_factory=dict)
    #: item key -> (replica, since as epoch seconds or None) of a live claim on it
    claimed: Callable[[str], tuple[str, float | None] | None] = lambda key: None
    #: why a new run on the table cannot start (concurrency limit, draining), None if it can
    capacity: Callable[[TableRef], str | None] = lambda table: None
    #: why the action cannot run in this version, None if it can
    unavailable: Callable[[ServiceAction], str | None] = lambda action: None
    #: why the table lock cannot be had now (explain probes it; the cycle does not)
    lock: Callable[[TableRef], str | None] = lambda table: None
    #: why a new plan found not due by its last run is held back, None if it is not
    held_back: Callable[[WorkItem], str | None] = lambda item: None


def admit(decision: Decision, gate: Gate) -> Decision:
    """The decision with the reasons the daemon adds at claim time (in `REASON_ORDER`)."""
    item = decision.item
    if item is None:
        return decision
    reasons: list[Reason] = []
    held = gate.held_back(item)
    if held is not None:
        reasons.append(_not_due(held))
    entry = gate.quarantined.get(item.key)
    if entry is not None:
        since = dt.datetime.fromtimestamp(entry.since, dt.UTC).isoformat()
        message = (
            f"{item.key} is quarantined after {entry.failures} failure(s) since {since} (by {entry.replica}): "
            f"{entry.reason}; release it with `lakeward release {item.key}`"
        )
        evidence = {"key": item.key, "failures": entry.failures, "error": entry.reason, "since": since}
        reasons.append(Reason(ReasonCode.QUARANTINED, message, evidence))
    claim = gate.claimed(item.key)
    if claim is not None:
        replica, at = claim
        when = dt.datetime.fromtimestamp(at, dt.UTC).isoformat() if at is not None else None
        message = f"{item.key} is claimed by replica {replica}" + (f" since {when}" if when else "")
        reasons.append(Reason(ReasonCode.CLAIMED, message, {"key": item.key, "replica": replica, "since": when}))
    locked = gate.lock(item.table)
    if locked is not None:
        reasons.append(Reason(ReasonCode.LOCKED, locked))
    unavailable = gate.unavailable(item.action)
    if unavailable is not None:
        reasons.append(Reason(ReasonCode.UNAVAILABLE, unavailable))
    limit = gate.capacity(item.table)
    if limit is not None:
        reasons.append(Reason(ReasonCode.CONCURRENCY_LIMIT, limit))
    return decision.adding(reasons)


__all__ = [
    "DEFAULT_POLICY",
    "REASON_ORDER",
    "Decision",
    "Gate",
    "Policy",
    "Reason",
    "ReasonCode",
    "admit",
    "decide",
    "plan_decisions",
    "instant_moment",
    "order_fairly",
    "plan_work",
    "policy_from_settings",
    "skip_reason",
]
