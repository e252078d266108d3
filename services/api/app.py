"""The FastAPI application over a started `Daemon` (OpenAPI at `/openapi.json`, docs at `/docs`).

- `/healthz` (liveness: the process answers), `/readyz` (readiness: takes new work; 503
  while starting or draining or without ZooKeeper), `/metrics` (Prometheus) are open.
- Reads under `/api/v1` are open unless `http.protect_reads` is set; every mutating call
  (trigger, pause, resume, cancel, release) needs `Authorization: Bearer <token>` with one
  of `http.api_tokens`.
- Every mutating call is recorded in the audit log (`GET /api/v1/audit`), with its token's name.
- Runs, claims, plans and quarantine are the deployment's, whichever replica answers.
- The web UI (`/ui`, module `ui`) shows the same reads as pages; its buttons call the API with a token.
- Tables are named as the daemon names them (`GET /api/v1/tables`); a name or a path that
  is not one of its tables is refused with 404, so the API cannot reach other data.

Every route but `/healthz` is a plain function: Starlette runs it on its thread pool, so the
event loop keeps accepting and answering while one request waits on ZooKeeper (runs, claims,
quarantine and the audit log live there) or renders the metrics. An `async` route doing that
work held up every other request behind it.

The routes live in `routes/` (one module per concern), their response models in `models`,
the token guards in `access` and the error answers in `errors`.
"""

from __future__ import annotations

from fastapi import FastAPI

from lakeward.services.api.access import access_for
from lakeward.services.api.audit import install_audit
from lakeward.services.api.docs import mount_docs
from lakeward.services.api.errors import install_error_handlers
from lakeward.services.api.routes import audit, explain, health, plans, runs, table_health, tables, triggers
from lakeward.services.api.ui import mount_ui
from lakeward.services.daemon import Daemon
from lakeward.services.names import API_PREFIX


def create_app(daemon: Daemon) -> FastAPI:
    """The API of one replica."""
    app = FastAPI(
        title="lakeward daemon",
        version="1",
        description="Table services for Hudi tables: inspect tables, plans and runs; trigger, pause, cancel.",
        docs_url=None,  # served by mount_docs from packaged files (no CDN)
        redoc_url=None,
    )
    mount_docs(app)
    install_error_handlers(app)
    install_audit(app, daemon)
    access = access_for(daemon.settings.http)
    app.include_router(health.router(daemon))
    for module in (tables, plans, runs, triggers, audit, table_health, explain):
        app.include_router(module.router(daemon, access))
    mount_ui(app, daemon)
    return app


__all__ = ["API_PREFIX", "create_app"]
