"""What the read routes answer, as functions of a started `Daemon`.

The JSON API (`routes/`) and the web UI (`ui`) both call these, so a page shows exactly what
the API answers: one place gathers a table's detail, its plans with their run and quarantine
state, the deployment's runs, the quarantine, the explain decisions and the timeline.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from lakeward.services.daemon import Daemon, TableUnreadableError, plan_dict
from lakeward.services.history import LOST
from lakeward.services.model import ServiceAction

#: The run states each `state` filter of `GET /runs` selects.
RUN_STATES = {"running": {"running", "waiting_retry"}, "finished": {"finished"}, "lost": {LOST}}
RunState = Literal["running", "finished", "lost", "all"]
#: Recent runs shown with a table (newest first).
TABLE_RUNS = 20


def table_detail(daemon: Daemon, name: str) -> dict[str, Any]:
    """One table with its state and its recent runs on any replica (newest first, at most `TABLE_RUNS`)."""
    view = daemon.table(name).to_dict()
    recent = daemon.deployment_runs(daemon.RUNS_SCANNED)
    view["runs"] = [r for r in recent if r["table"] == name][:TABLE_RUNS]
    return view


def plan_statuses(daemon: Daemon, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pending plans (`plan_dict`s) with their quarantine state and the run (and replica) running them now."""
    if not found:  # no plan: no run to look up (a few hundred run records per call otherwise)
        return []
    quarantined = daemon.control.quarantined()
    running = {r.key: r.run_id for r in daemon.runs() if r.state != "finished"}
    anywhere = {
        r["key"]: r for r in daemon.deployment_runs(daemon.RUNS_SCANNED) if r["state"] in ("running", "waiting_retry")
    }
    return [
        {
            **p,
            "quarantined": p["key"] in quarantined,
            "running_here": running.get(p["key"]),
            "run_id": anywhere[p["key"]]["run_id"] if p["key"] in anywhere else None,
            "running_on": anywhere[p["key"]]["replica"] if p["key"] in anywhere else None,
        }
        for p in found
    ]


def check_readable(daemon: Daemon, name: str) -> None:
    """TableUnreadableError when the last discovery cycle could not read the table: its plans and timeline
    are unknown, which an empty answer would hide (`lakeward plans NAME` said "no pending plans")."""
    view = daemon.table(name)
    if view.state is None and view.problem is not None:
        raise TableUnreadableError(f"{name} cannot be read: {view.problem}")


def table_plans(daemon: Daemon, name: str) -> list[dict[str, Any]]:
    """Pending plans of one table, oldest first, with their quarantine and run state."""
    return plan_statuses(daemon, daemon.table(name).to_dict()["pending_plans"])


def all_plans(daemon: Daemon) -> list[dict[str, Any]]:
    """Pending plans of every table, oldest first, with their quarantine and run state."""
    found: list[dict[str, Any]] = []
    for view in daemon.tables():
        if view.state is not None:
            found.extend(plan_dict(p) for p in view.state.pending_plans)
    return plan_statuses(daemon, found)


def runs(daemon: Daemon, state: RunState = "all", table: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Runs of every replica, running ones first, then newest first; filtered by state and table."""
    if table is not None:
        daemon.table_ref(table)
    filtered = state != "all" or table is not None
    found = daemon.deployment_runs(daemon.settings.history.runs_max_count if filtered else limit)
    selected = [
        r
        for r in found
        if (state == "all" or r["state"] in RUN_STATES[state]) and (table is None or r["table"] == table)
    ]
    return selected[:limit]


def quarantine(daemon: Daemon) -> list[dict[str, Any]]:
    """Work items held back after repeated failures or an on-call cancel, oldest first."""
    return [vars(q) for q in sorted(daemon.control.quarantined().values(), key=lambda q: q.since)]


def explain(daemon: Daemon, name: str, action: ServiceAction | None = None) -> dict[str, Any]:
    """For each action (or one): whether the daemon would plan or run it now and, if not, every reason."""
    at = dt.datetime.now(dt.UTC).isoformat()
    return {"table": name, "at": at, "actions": [d.to_dict() for d in daemon.explain(name, action)]}


def timeline(daemon: Daemon, name: str, limit: int = 50) -> list[dict[str, Any]]:
    """The newest `limit` instants of a table's active timeline as of the last discovery cycle, newest first
    (empty when no cycle has read the table yet)."""
    state = daemon.table(name).state
    if state is None:
        return []
    instants = sorted(state.timeline, key=lambda i: (i.time, i.action.value), reverse=True)[:limit]
    return [
        {
            "instant": i.time,
            "action": i.action.value,
            "state": i.state.value,
            "completion_time": i.completion_time,
        }
        for i in instants
    ]


__all__ = [
    "RUN_STATES",
    "TABLE_RUNS",
    "RunState",
    "all_plans",
    "explain",
    "plan_statuses",
    "quarantine",
    "runs",
    "table_detail",
    "check_readable",
    "table_plans",
    "timeline",
]
