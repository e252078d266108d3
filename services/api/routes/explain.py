"""`GET /api/v1/tables/{name}/explain[?action=]`: what the daemon would do now on a table, and why not."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from lakeward.services.api import reads
from lakeward.services.api.access import Access
from lakeward.services.api.models import ExplainInfo
from lakeward.services.daemon import Daemon
from lakeward.services.model import ServiceAction
from lakeward.services.names import API_PREFIX


def router(daemon: Daemon, access: Access) -> APIRouter:
    """The explain read of one replica."""
    routes = APIRouter(prefix=API_PREFIX, tags=["explain"], dependencies=[access.read])

    @routes.get("/tables/{name}/explain", response_model=ExplainInfo)
    def explain(
        name: str, action: ServiceAction | None = Query(None, description="only this action")
    ) -> dict[str, Any]:
        """For each action: whether the daemon would plan or run it now and, if not, every reason, in order
        (policy disabled, not due, paused, quarantined, claimed, blocked, lock held, read-only, concurrency
        limit), with the evidence. Read from the table's current timeline."""
        return reads.explain(daemon, name, action)

    return routes
