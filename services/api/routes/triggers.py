"""On-call actions (each needs a bearer token): trigger, pause, resume, cancel a run, release a quarantined item."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from lakeward.services.api.access import Access
from lakeward.services.api.models import (
    CancelResult,
    PauseBody,
    PauseResult,
    ReleaseBody,
    ReleaseResult,
    RunInfo,
    TriggerBody,
)
from lakeward.services.daemon import Daemon
from lakeward.services.execution import DRY_RUNS
from lakeward.services.names import API_PREFIX


def router(daemon: Daemon, access: Access) -> APIRouter:
    """The mutating calls of one replica."""
    routes = APIRouter(prefix=API_PREFIX, tags=["actions"], dependencies=[access.write])

    @routes.post("/tables/{name}/trigger", status_code=202, response_model=RunInfo)
    def trigger(name: str, body: TriggerBody) -> dict[str, Any]:
        """Schedule and/or run an action on a table now (claims and limits apply); `dry_run` changes nothing
        and answers with what the action would delete or change."""
        if body.dry_run and body.action not in DRY_RUNS:  # the caller's mistake whatever the table: 422
            dry_runs = ", ".join(a.value for a in DRY_RUNS)
            raise HTTPException(422, f"dry_run: {body.action.value} has no dry run on the daemon; dry runs: {dry_runs}")
        submitted = daemon.trigger(name, body.action, body.mode, body.instant, dry_run=body.dry_run)
        if submitted.run is None:
            raise HTTPException(409, f"not started: {submitted.reason}")
        return daemon.run_dict(submitted.run)

    @routes.post("/tables/{name}/pause", response_model=PauseResult)
    def pause(name: str, body: PauseBody | None = None) -> dict[str, Any]:
        """Nothing new is scheduled or started on the table, on every replica (running plans go on)."""
        changed = daemon.set_paused(name, True, body.reason if body else "")
        return {"table": name, **daemon.pause_state(name), "changed": changed}

    @routes.post("/tables/{name}/resume", response_model=PauseResult)
    def resume(name: str) -> dict[str, Any]:
        """Undo an on-call pause: the table is scheduled again, unless its policy pauses it (that pause
        stays: the answer then says `paused: true, paused_by: policy`). `changed`: there was an on-call pause."""
        changed = daemon.set_paused(name, False)
        return {"table": name, **daemon.pause_state(name), "changed": changed}

    @routes.post("/runs/{run_id}/cancel", response_model=CancelResult)
    def cancel(run_id: str) -> dict[str, Any]:
        """Cancel a running run of the deployment (the replica that runs it stops it, within about a second
        when that is another one); its plan stays pending and is quarantined until released."""
        replica = daemon.cancel(run_id)
        if replica is None:
            raise HTTPException(404, f"no running run {run_id!r} in the deployment (asked {daemon.replica_id})")
        return {"run_id": run_id, "cancelling": True, "replica": replica}

    @routes.post("/quarantine/release", response_model=ReleaseResult)
    def release(body: ReleaseBody) -> dict[str, Any]:
        """Let a quarantined work item run again; its failure count starts over."""
        if not daemon.release(body.key):
            raise HTTPException(404, f"{body.key!r} is not quarantined (GET {API_PREFIX}/quarantine)")
        return {"key": body.key, "released": True}

    return routes
