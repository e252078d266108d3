"""Runs of this replica and its claim log."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from lakeward.services.api.access import Access
from lakeward.services.api.models import Claims, RunInfo
from lakeward.services.daemon import Daemon
from lakeward.services.names import API_PREFIX


def router(daemon: Daemon, access: Access) -> APIRouter:
    """The run reads of one replica."""
    routes = APIRouter(prefix=API_PREFIX, tags=["runs"], dependencies=[access.read])

    @routes.get("/runs", response_model=list[RunInfo])
    async def runs(
        state: Annotated[Literal["running", "finished", "all"], Query()] = "all",
        table: Annotated[str | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        """Runs of this replica: running ones first, then recent ones, newest first."""
        if table is not None:
            daemon.table_ref(table)
        selected = [
            r
            for r in daemon.runs()
            if (state == "all" or (state == "running") == (r.state != "finished"))
            and (table is None or r.table.name == table)
        ]
        return [daemon.run_dict(r) for r in selected[:limit]]

    @routes.get("/runs/{run_id}", response_model=RunInfo)
    async def run(run_id: str) -> dict[str, Any]:
        """One run of this replica (404 for a run of another replica)."""
        found = daemon.runner.get(run_id) if daemon.runner else None
        if found is None:
            raise HTTPException(404, f"no run {run_id!r} on this replica ({daemon.replica_id})")
        return daemon.run_dict(found)

    @routes.get("/claims", response_model=Claims)
    async def claims(limit: Annotated[int, Query(ge=1, le=10_000)] = 1000) -> dict[str, Any]:
        """This replica's claim log (claimed, conflict, released, lost), oldest first, and the claims it holds."""
        log = daemon.coordinator.claim_log[-limit:]
        return {
            "replica": daemon.replica_id,
            "held": [c.key for c in daemon.coordinator.held_claims()],
            "log": [vars(e) for e in log],
        }

    return routes
