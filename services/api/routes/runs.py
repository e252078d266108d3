"""Runs of the whole deployment (live from this replica's runner, the others' from the shared history) and claims."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from lakeward.services.api import reads
from lakeward.services.api.access import Access
from lakeward.services.api.models import Claims, RunInfo
from lakeward.services.daemon import Daemon
from lakeward.services.names import API_PREFIX


def router(daemon: Daemon, access: Access) -> APIRouter:
    """The run reads of one replica, answering for the deployment."""
    routes = APIRouter(prefix=API_PREFIX, tags=["runs"], dependencies=[access.read])

    @routes.get("/runs", response_model=list[RunInfo])
    def runs(
        state: Annotated[reads.RunState, Query()] = "all",
        table: Annotated[str | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        """Runs of every replica (each with the replica that ran it): running ones first, then the
        others, newest first. A run whose replica died while running it shows with state `lost`."""
        return reads.runs(daemon, state, table, limit)

    @routes.get("/runs/{run_id}", response_model=RunInfo)
    def run(run_id: str) -> dict[str, Any]:
        """One run of any replica (404 when no replica knows it: never ran, or pruned from the history)."""
        found = daemon.deployment_run(run_id)
        if found is None:
            raise HTTPException(404, f"no run {run_id!r} in the deployment's run history")
        return found

    @routes.get("/claims", response_model=Claims)
    def claims(limit: Annotated[int, Query(ge=1, le=10_000)] = 1000) -> dict[str, Any]:
        """Every claim held in the deployment (`deployment`, with its replica); this replica's claim log
        (claimed, conflict, released, lost), oldest first, and the claims it holds (503 while
        ZooKeeper cannot be reached: the deployment's claims are there)."""
        log = daemon.coordinator.claim_log[-limit:]
        return {
            "replica": daemon.replica_id,
            "held": [c.key for c in daemon.coordinator.held_claims()],
            "log": [vars(e) for e in log],
            "deployment": daemon.deployment_claims(),
        }

    return routes
