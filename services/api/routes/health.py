"""`/healthz` (liveness), `/readyz` (readiness, 503 with reasons) and `/metrics` (Prometheus): always open."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from lakeward.services.api.models import Health, Readiness
from lakeward.services.daemon import Daemon
from lakeward.services.metrics import CONTENT_TYPE


def router(daemon: Daemon) -> APIRouter:
    """The health routes of one replica."""
    routes = APIRouter(tags=["health"])

    @routes.get("/healthz", response_model=Health)
    async def healthz() -> dict[str, Any]:
        """Liveness: the process answers."""
        return {"status": "ok", "replica": daemon.replica_id}

    @routes.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
    def readyz() -> JSONResponse:
        """Readiness: 200 while this replica takes new work, else 503 with the reasons.

        503 while starting or draining, and while ZooKeeper cannot be reached for claims or
        table locks (connection down or session lost); 200 again once it reconnects.
        """
        reasons = daemon.readiness_problems()
        body = {"ready": not reasons, "replica": daemon.replica_id, "reasons": reasons}
        return JSONResponse(body, status_code=200 if not reasons else 503)

    @routes.get("/metrics")
    def metrics() -> Response:
        """Prometheus metrics of this replica (text exposition format; rendered at most once a second, so values
        are at most 1 s old)."""
        return Response(daemon.metrics.render(), media_type=CONTENT_TYPE)

    return routes
