"""Pending plans (per table and across tables) and the quarantine of work items held back."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from lakeward.services.api.access import Access
from lakeward.services.api.models import PlanStatus, QuarantineInfo
from lakeward.services.daemon import Daemon, plan_dict
from lakeward.services.names import API_PREFIX


def router(daemon: Daemon, access: Access) -> APIRouter:
    """The plan reads of one replica."""
    routes = APIRouter(prefix=API_PREFIX, tags=["plans"], dependencies=[access.read])

    def plans_of(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        quarantined = daemon.control.quarantined()
        running = {r.key: r.run_id for r in daemon.runs() if r.state != "finished"}
        anywhere = {
            r["key"]: r
            for r in daemon.deployment_runs(daemon.RUNS_SCANNED)
            if r["state"] in ("running", "waiting_retry")
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

    @routes.get("/tables/{name}/plans", response_model=list[PlanStatus])
    def table_plans(name: str) -> list[dict[str, Any]]:
        """Pending plans of one table, oldest first, with their quarantine state."""
        return plans_of(daemon.table(name).to_dict()["pending_plans"])

    @routes.get("/plans", response_model=list[PlanStatus])
    def all_plans() -> list[dict[str, Any]]:
        """Pending plans of every table, oldest first, with their quarantine state."""
        found: list[dict[str, Any]] = []
        for view in daemon.tables():
            if view.state is not None:
                found.extend(plan_dict(p) for p in view.state.pending_plans)
        return plans_of(found)

    @routes.get("/quarantine", response_model=list[QuarantineInfo])
    def quarantine() -> list[dict[str, Any]]:
        """Work items held back after repeated failures or an on-call cancel."""
        return [vars(q) for q in sorted(daemon.control.quarantined().values(), key=lambda q: q.since)]

    return routes
