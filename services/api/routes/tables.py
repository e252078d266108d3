"""`GET /api/v1/tables` and `GET /api/v1/tables/{name}`: the tables the daemon looks after, with their state."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from lakeward.services.api.access import Access
from lakeward.services.api.models import TableDetail, TableInfo
from lakeward.services.daemon import Daemon
from lakeward.services.names import API_PREFIX

#: Response header of `GET /tables` naming the `policies.overrides` that match no table (comma-separated).
UNMATCHED_HEADER = "X-Lakeward-Unmatched-Overrides"


def router(daemon: Daemon, access: Access) -> APIRouter:
    """The table reads of one replica."""
    routes = APIRouter(prefix=API_PREFIX, tags=["tables"], dependencies=[access.read])

    @routes.get(
        "/tables",
        response_model=list[TableInfo],
        responses={
            200: {
                "headers": {
                    UNMATCHED_HEADER: {
                        "description": "Names under policies.overrides that match no table (typos), comma-separated; "
                        "absent when every override names a table.",
                        "schema": {"type": "string"},
                    }
                }
            }
        },
    )
    def tables(response: Response) -> list[dict[str, Any]]:
        """Every table with its state: pending plans, problems, pause. Per-table `policies.overrides`
        that match no table are named in the `X-Lakeward-Unmatched-Overrides` header (the list of
        tables keeps its shape)."""
        unmatched = daemon.unmatched_overrides()
        if unmatched:
            response.headers[UNMATCHED_HEADER] = ",".join(unmatched)
        return [t.to_dict() for t in daemon.tables()]

    @routes.get("/tables/{name}", response_model=TableDetail)
    def table(name: str) -> dict[str, Any]:
        """One table with its state and its recent runs on any replica (newest first, at most 20)."""
        view = daemon.table(name).to_dict()
        recent = daemon.deployment_runs(daemon.RUNS_SCANNED)
        view["runs"] = [r for r in recent if r["table"] == name][:20]
        return view

    return routes
