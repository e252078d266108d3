"""`GET /api/v1/audit`: the mutating API calls of every replica, newest first (see `api/audit.py`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from lakeward.services.api.access import Access
from lakeward.services.api.models import AuditEntry
from lakeward.services.daemon import Daemon
from lakeward.services.names import API_PREFIX


def router(daemon: Daemon, access: Access) -> APIRouter:
    """The audit read of one replica, answering for the deployment."""
    routes = APIRouter(prefix=API_PREFIX, tags=["audit"], dependencies=[access.read])

    @routes.get("/audit", response_model=list[AuditEntry])
    def audit(
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        token: Annotated[str | None, Query(description="Only calls made with this token name.")] = None,
        target: Annotated[str | None, Query(description="Only calls about this table, run id or work item.")] = None,
    ) -> list[dict[str, Any]]:
        """Mutating API calls (trigger, pause, resume, cancel, release, ...) of every replica, newest first:
        who (the token's name), when, what, with which request and answer (status code). Kept under the
        `history.audit_*` retention."""
        filtered = token is not None or target is not None
        found = daemon.history.audit(daemon.settings.history.audit_max_count if filtered else limit)
        selected = [
            e for e in found if (token is None or e.get("token") == token) and (target in (None, e.get("target")))
        ]
        return selected[:limit]

    return routes
