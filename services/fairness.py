"""The queue discipline: in which order a replica takes due work, so that no group of tables, and
no table, starves the others.

Every table belongs to a group (`Share.group`: its policy's label, else the discovery root that
found it, else `default`; `services/settings/scheduling.py`). `order_fairly` orders one cycle's
due work items:

1. **Starving tables first**: the items of tables whose last health score is below
   `scheduling.starving_score`, lowest score first.
2. **Groups by weighted fair share**: the next item comes from the group with the least
   *virtual time* -- runs started for it so far divided by its `priority` -- counting the items
   already placed ahead in this order; ties by group name. Two groups with priorities 3 and 1
   that both have work waiting get runs 3 to 1.
3. **Within a group**: rollbacks and cleans before long compactions (`ACTION_PRIORITY`); then
   the table whose turn it is -- its own virtual time (runs started / its `priority`) plus its
   items of that class already ahead / its `priority` -- so a table with a backlog waits behind
   every other table's first item; then oldest first; then table name.

The runner then takes the items in this order within its limits (`concurrency.max_running`,
the table's `max_concurrent_runs`, the group's `max_concurrent_runs`), skipping what a limit
refuses. `FairShareLedger` keeps the virtual times (one per replica, fed by every run started,
on-call triggers included); a group or table that had no work in the last cycle comes back
level with the least-served one that had, so it cannot claim the runs it did not ask for while
idle.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from lakeward.services.model import TableRef, WorkItem
from lakeward.services.settings import DEFAULT_GROUP, DaemonSettings


@dataclass(frozen=True)
class Share:
    """How one table is scheduled: its group, and the weights and limits of both."""

    group: str = DEFAULT_GROUP
    group_priority: int = 1
    #: Runs of the group's tables at once (None: no limit).
    group_max_runs: int | None = None
    priority: int = 1
    #: Runs on the table at once (None: the runner's `concurrency.max_running_per_table`).
    max_runs: int | None = None
    #: The setting `max_runs` comes from (reasons name it).
    max_runs_key: str = ""


DEFAULT_SHARE = Share()


def shares_for(
    settings: DaemonSettings, tables: Iterable[TableRef], found_under: Mapping[str, str]
) -> dict[str, Share]:
    """Each table's `Share` from the settings; `found_under`: table name -> the root that found it."""
    root_groups = {r.path: r.group_name() for r in settings.tables.roots}
    out: dict[str, Share] = {}
    for ref in tables:
        own = settings.policy_for(ref.name).scheduling
        root = found_under.get(ref.name)
        group = own.group or (root_groups.get(root, DEFAULT_GROUP) if root is not None else DEFAULT_GROUP)
        of_group = settings.scheduling.group(group)
        overridden = own.max_concurrent_runs is not None and ref.name in settings.policies.overrides
        where = f"policies.overrides.{ref.name}" if overridden else "policies.defaults"
        out[ref.name] = Share(
            group=group,
            group_priority=of_group.priority,
            group_max_runs=of_group.max_concurrent_runs,
            priority=own.priority,
            max_runs=own.max_concurrent_runs,
            max_runs_key=f"{where}.scheduling.max_concurrent_runs" if own.max_concurrent_runs is not None else "",
        )
    return out


@dataclass(frozen=True)
class Served:
    """Virtual times (runs started / priority) of the groups and tables with work, from the ledger."""

    groups: Mapping[str, float] = field(default_factory=dict)
    tables: Mapping[str, float] = field(default_factory=dict)


class FairShareLedger:
    """Runs started per group and per table, weighted by their priorities (module doc). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, float] = {}
        self._tables: dict[str, float] = {}
        self._active_groups: set[str] = set()
        self._active_tables: set[str] = set()

    def started(self, table: str, share: Share) -> None:
        """Count one run started on `table`."""
        with self._lock:
            self._groups[share.group] = self._groups.get(share.group, 0.0) + 1 / share.group_priority
            self._tables[table] = self._tables.get(table, 0.0) + 1 / share.priority

    def served(self, groups: Collection[str], tables: Collection[str]) -> Served:
        """The virtual times of the groups and tables that have work this cycle (module doc: one that
        had none last cycle is lifted to the least virtual time of those that had)."""
        with self._lock:
            return Served(
                _activate(self._groups, self._active_groups, groups),
                _activate(self._tables, self._active_tables, tables),
            )


def _activate(times: dict[str, float], active: set[str], now_active: Collection[str]) -> dict[str, float]:
    staying = [times.get(k, 0.0) for k in now_active if k in active]
    if staying:
        floor = min(staying)
        for key in now_active:
            if key not in active:
                times[key] = max(times.get(key, 0.0), floor)
    active.clear()
    active.update(now_active)
    return {k: times.get(k, 0.0) for k in now_active}


def order_fairly(
    items: Iterable[WorkItem],
    shares: Mapping[str, Share] | None = None,
    served: Served | None = None,
    scores: Mapping[str, float] | None = None,
    starving_below: float | None = None,
) -> list[WorkItem]:
    """The order to take `items` in (module doc). `shares`: table name -> Share (missing: the
    default group, priority 1); `served`: the ledger's virtual times (missing: 0); `scores`: table
    name -> last health score; `starving_below`: `scheduling.starving_score` (None: off)."""
    shares, served, scores = shares or {}, served or Served(), scores or {}

    def share(item: WorkItem) -> Share:
        return shares.get(item.table.name, DEFAULT_SHARE)

    queues: dict[str, list[tuple[tuple[int, float, str, str], WorkItem]]] = {}
    ahead: dict[tuple[str, int], int] = {}
    for item in sorted(items, key=lambda i: (i.priority, i.sort_instant, i.table.name)):
        name, s = item.table.name, share(item)
        n = ahead.get((name, item.priority), 0)
        ahead[(name, item.priority)] = n + 1
        turn = served.tables.get(name, 0.0) + n / s.priority
        queues.setdefault(s.group, []).append(((item.priority, turn, item.sort_instant, name), item))
    for queue in queues.values():
        queue.sort(key=lambda pair: pair[0])
    rank = {id(item): i for queue in queues.values() for i, (_, item) in enumerate(queue)}

    def starving(item: WorkItem) -> bool:
        score = scores.get(item.table.name)
        return starving_below is not None and score is not None and score < starving_below

    first = sorted(
        (item for queue in queues.values() for _, item in queue if starving(item)),
        key=lambda i: (scores[i.table.name], rank[id(i)], i.table.name),
    )
    picked = {g: 0 for g in queues}
    for item in first:
        picked[share(item).group] += 1
    rest = {g: [item for _, item in queue if not starving(item)] for g, queue in queues.items()}
    weight = {g: share(queue[0][1]).group_priority for g, queue in queues.items()}
    out = list(first)
    while True:
        waiting = [g for g, queue in rest.items() if queue]
        if not waiting:
            return out
        group = min(waiting, key=lambda g: (served.groups.get(g, 0.0) + picked[g] / weight[g], g))
        out.append(rest[group].pop(0))
        picked[group] += 1


__all__ = ["DEFAULT_SHARE", "FairShareLedger", "Served", "Share", "order_fairly", "shares_for"]
