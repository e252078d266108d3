"""`GET /api/v1/tables`, `GET /api/v1/tables/{name}` and `.../timeline`: the tables the daemon looks after."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from lakeward.services.api import reads
from lakeward.services.api.access import Access
from lakeward.services.api.models import TableDetail, TableInfo, TimelineInstant
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
        return reads.table_detail(daemon, name)

    @routes.get("/tables/{name}/timeline", response_model=list[TimelineInstant])
    def timeline(name: str, limit: Annotated[int, Query(ge=1, le=10_000)] = 50) -> list[dict[str, Any]]:
        """The newest instants of the table's active timeline (newest first), as of the last discovery cycle
        (409 when it cannot be read)."""
        reads.check_readable(daemon, name)
        return reads.timeline(daemon, name, limit)

    return routes
