"""The FastAPI application over a started `Daemon` (OpenAPI at `/openapi.json`, docs at `/docs`).

- `/healthz` (liveness: the process answers), `/readyz` (readiness: takes new work; 503
  while starting or draining or without ZooKeeper), `/metrics` (Prometheus) are open.
- Reads under `/api/v1` are open unless `http.protect_reads` is set; every mutating call
  (trigger, pause, resume, cancel, release) needs `Authorization: Bearer <token>` with one
  of `http.api_tokens`.
- Tables are named as the daemon names them (`GET /api/v1/tables`); a name or a path that
  is not one of its tables is refused with 404, so the API cannot reach other data.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from lakeward.core.exceptions import LakewardError
from lakeward.services.api.docs import mount_docs
from lakeward.services.daemon import Daemon, TriggerError, UnknownTableError, plan_dict
from lakeward.services.metrics import CONTENT_TYPE
from lakeward.services.model import ServiceAction
from lakeward.services.names import API_PREFIX

_bearer = HTTPBearer(auto_error=False)


class TriggerBody(BaseModel):
    """What to do now on a table."""

    model_config = ConfigDict(extra="forbid")

    action: ServiceAction = Field(description="compaction, clean, clustering, archival, rollback, ...")
    mode: Literal["schedule_and_run", "schedule", "run"] = Field(
        default="schedule_and_run",
        description="schedule_and_run: write a new plan (forced) and run it; schedule: only write it; "
        "run: run a pending plan (`instant`, default the oldest).",
    )
    instant: str | None = Field(default=None, description="The pending plan to run (mode run).")


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", max_length=500, description="Why (shown in the API and logs).")


class ReleaseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=5, description="The quarantined work item: table/action/instant.")


def create_app(daemon: Daemon) -> FastAPI:
    """The API of one replica."""
    http = daemon.settings.http
    app = FastAPI(
        title="lakeward daemon",
        version="1",
        description="Table services for Hudi tables: inspect tables, plans and runs; trigger, pause, cancel.",
        docs_url=None,  # served by mount_docs from packaged files (no CDN)
        redoc_url=None,
    )
    mount_docs(app)

    def token_of(credentials: HTTPAuthorizationCredentials | None) -> str | None:
        return credentials.credentials if credentials is not None else None

    def require_token(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if not http.api_tokens:
            raise HTTPException(403, "mutating calls are disabled: no http.api_tokens are configured")
        if credentials is None:
            raise HTTPException(401, "this call needs 'Authorization: Bearer <token>'", {"WWW-Authenticate": "Bearer"})
        if not http.token_ok(token_of(credentials)):
            raise HTTPException(403, "the bearer token is not one of http.api_tokens")

    def reads_allowed(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if http.protect_reads:
            require_token(credentials)

    Read = Depends(reads_allowed)
    Write = Depends(require_token)

    @app.exception_handler(UnknownTableError)
    async def _unknown_table(request: Request, exc: UnknownTableError) -> JSONResponse:
        name = exc.args[0] if exc.args else "?"
        return JSONResponse(
            {
                "detail": f"unknown table {name!r}: not one of the tables this daemon looks after "
                f"(GET {API_PREFIX}/tables)"
            },
            status_code=404,
        )

    @app.exception_handler(TriggerError)
    async def _bad_trigger(request: Request, exc: TriggerError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.exception_handler(LakewardError)
    async def _lakeward_error(request: Request, exc: LakewardError) -> JSONResponse:
        return JSONResponse({"detail": f"{type(exc).__name__}: {exc}"}, status_code=409)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail
        if exc.status_code == 404 and detail == "Not Found":  # no route matched
            detail = (
                f"no such endpoint: {request.method} {request.url.path} (tables are named, not given as paths; "
                "see /docs)"
            )
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            problems.append(f"{where}: {err.get('msg', 'invalid')}")
        return JSONResponse({"detail": "; ".join(problems), "errors": jsonable(exc.errors())}, status_code=422)

    # -- health ---------------------------------------------------------------------------------
    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, Any]:
        """Liveness: the process answers."""
        return {"status": "ok", "replica": daemon.replica_id}

    @app.get("/readyz", tags=["health"])
    async def readyz() -> JSONResponse:
        """Readiness: 200 while this replica takes new work, else 503 with the reasons.

        503 while starting or draining, and while ZooKeeper cannot be reached for claims or
        table locks (connection down or session lost); 200 again once it reconnects.
        """
        reasons = daemon.readiness_problems()
        body = {"ready": not reasons, "replica": daemon.replica_id, "reasons": reasons}
        return JSONResponse(body, status_code=200 if not reasons else 503)

    @app.get("/metrics", tags=["health"])
    async def metrics() -> Response:
        return Response(daemon.metrics.render(), media_type=CONTENT_TYPE)

    # -- reads ----------------------------------------------------------------------------------
    @app.get(f"{API_PREFIX}/tables", tags=["tables"], dependencies=[Read])
    async def tables() -> list[dict[str, Any]]:
        """Every table with its state: pending plans, problems, pause."""
        return [t.to_dict() for t in daemon.tables()]

    @app.get(f"{API_PREFIX}/tables/{{name}}", tags=["tables"], dependencies=[Read])
    async def table(name: str) -> dict[str, Any]:
        view = daemon.table(name).to_dict()
        view["runs"] = [daemon.run_dict(r) for r in daemon.runs() if r.table.name == name][:20]
        return view

    @app.get(f"{API_PREFIX}/tables/{{name}}/plans", tags=["plans"], dependencies=[Read])
    async def table_plans(name: str) -> list[dict[str, Any]]:
        """Pending plans of one table, oldest first, with their quarantine state."""
        return plans_of(daemon.table(name).to_dict()["pending_plans"])

    @app.get(f"{API_PREFIX}/plans", tags=["plans"], dependencies=[Read])
    async def all_plans() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for view in daemon.tables():
            if view.state is not None:
                found.extend(plan_dict(p) for p in view.state.pending_plans)
        return plans_of(found)

    def plans_of(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        quarantined = daemon.control.quarantined()
        running = {r.key: r.run_id for r in daemon.runs() if r.state != "finished"}
        return [{**p, "quarantined": p["key"] in quarantined, "running_here": running.get(p["key"])} for p in found]

    @app.get(f"{API_PREFIX}/runs", tags=["runs"], dependencies=[Read])
    async def runs(
        state: Annotated[Literal["running", "finished", "all"], Query()] = "all",
        table: Annotated[str | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        """Runs of this replica: running ones first, then recent ones, newest first."""
        if table is not None:
            daemon.table_ref(table)
        selected = [
            r
            for r in daemon.runs()
            if (state == "all" or (state == "running") == (r.state != "finished"))
            and (table is None or r.table.name == table)
        ]
        return [daemon.run_dict(r) for r in selected[:limit]]

    @app.get(f"{API_PREFIX}/runs/{{run_id}}", tags=["runs"], dependencies=[Read])
    async def run(run_id: str) -> dict[str, Any]:
        found = daemon.runner.get(run_id) if daemon.runner else None
        if found is None:
            raise HTTPException(404, f"no run {run_id!r} on this replica ({daemon.replica_id})")
        return daemon.run_dict(found)

    @app.get(f"{API_PREFIX}/quarantine", tags=["plans"], dependencies=[Read])
    async def quarantine() -> list[dict[str, Any]]:
        """Work items held back after repeated failures or an on-call cancel."""
        return [vars(q) for q in sorted(daemon.control.quarantined().values(), key=lambda q: q.since)]

    @app.get(f"{API_PREFIX}/claims", tags=["runs"], dependencies=[Read])
    async def claims(limit: Annotated[int, Query(ge=1, le=10_000)] = 1000) -> dict[str, Any]:
        """This replica's claim log (claimed, conflict, released, lost), oldest first, and the claims it holds."""
        log = daemon.coordinator.claim_log[-limit:]
        return {
            "replica": daemon.replica_id,
            "held": [c.key for c in daemon.coordinator.held_claims()],
            "log": [vars(e) for e in log],
        }

    # -- actions ----------------------------------------------------------------------------------
    @app.post(f"{API_PREFIX}/tables/{{name}}/trigger", tags=["actions"], status_code=202, dependencies=[Write])
    def trigger(name: str, body: TriggerBody) -> dict[str, Any]:
        """Schedule and/or run an action on a table now (claims and limits apply)."""
        submitted = daemon.trigger(name, body.action, body.mode, body.instant)
        if submitted.run is None:
            raise HTTPException(409, f"not started: {submitted.reason}")
        return daemon.run_dict(submitted.run)

    @app.post(f"{API_PREFIX}/tables/{{name}}/pause", tags=["actions"], dependencies=[Write])
    def pause(name: str, body: PauseBody | None = None) -> dict[str, Any]:
        """Nothing new is scheduled or started on the table, on every replica (running plans go on)."""
        changed = daemon.set_paused(name, True, body.reason if body else "")
        return {"table": name, "paused": True, "changed": changed}

    @app.post(f"{API_PREFIX}/tables/{{name}}/resume", tags=["actions"], dependencies=[Write])
    def resume(name: str) -> dict[str, Any]:
        changed = daemon.set_paused(name, False)
        return {"table": name, "paused": False, "changed": changed}

    @app.post(f"{API_PREFIX}/runs/{{run_id}}/cancel", tags=["actions"], dependencies=[Write])
    def cancel(run_id: str) -> dict[str, Any]:
        """Cancel a running run of this replica; its plan stays pending and is quarantined until released."""
        if not daemon.cancel(run_id):
            raise HTTPException(404, f"no running run {run_id!r} on this replica ({daemon.replica_id})")
        return {"run_id": run_id, "cancelling": True}

    @app.post(f"{API_PREFIX}/quarantine/release", tags=["actions"], dependencies=[Write])
    def release(body: ReleaseBody) -> dict[str, Any]:
        if not daemon.release(body.key):
            raise HTTPException(404, f"{body.key!r} is not quarantined (GET {API_PREFIX}/quarantine)")
        return {"key": body.key, "released": True}

    return app


def jsonable(value: Any) -> Any:
    """Validation error details made JSON-safe (they may hold exceptions and bytes)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items() if k != "ctx"}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


__all__ = ["API_PREFIX", "create_app"]
