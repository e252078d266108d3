"""`GET /api/v1/health` and `GET /api/v1/tables/{name}/health`: table health as of the last discovery cycle."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from lakeward.services.api.access import Access
from lakeward.services.api.models import TableHealthInfo
from lakeward.services.daemon import Daemon
from lakeward.services.names import API_PREFIX


def router(daemon: Daemon, access: Access) -> APIRouter:
    """The health reads of one replica."""
    routes = APIRouter(prefix=API_PREFIX, tags=["health"], dependencies=[access.read])

    @routes.get("/health", response_model=list[TableHealthInfo])
    def health_of_tables() -> list[dict[str, Any]]:
        """Every table's health score and findings (a table that could not be scored has `error`)."""
        return [h.to_dict() for h in daemon.healths()]

    @routes.get("/tables/{name}/health", response_model=TableHealthInfo)
    def table_health(name: str) -> dict[str, Any]:
        """One table's health report: score, each factor's penalty, findings with suggested actions, numbers."""
        return daemon.health(name).to_dict()

    return routes
