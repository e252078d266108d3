"""Pending plans (per table and across tables) and the quarantine of work items held back."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from lakeward.services.api import reads
from lakeward.services.api.access import Access
from lakeward.services.api.models import PlanStatus, QuarantineInfo
from lakeward.services.daemon import Daemon
from lakeward.services.names import API_PREFIX


def router(daemon: Daemon, access: Access) -> APIRouter:
    """The plan reads of one replica."""
    routes = APIRouter(prefix=API_PREFIX, tags=["plans"], dependencies=[access.read])

    @routes.get("/tables/{name}/plans", response_model=list[PlanStatus])
    def table_plans(name: str) -> list[dict[str, Any]]:
        """Pending plans of one table, oldest first, with their quarantine state (409 when it cannot be read)."""
        reads.check_readable(daemon, name)
        return reads.table_plans(daemon, name)

    @routes.get("/plans", response_model=list[PlanStatus])
    def all_plans() -> list[dict[str, Any]]:
        """Pending plans of every table, oldest first, with their quarantine state."""
        return reads.all_plans(daemon)

    @routes.get("/quarantine", response_model=list[QuarantineInfo])
    def quarantine() -> list[dict[str, Any]]:
        """Work items held back after repeated failures or an on-call cancel."""
        return reads.quarantine(daemon)

    return routes
