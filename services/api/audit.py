"""The audit log of the API: every mutating call, recorded in the deployment's shared history.

A middleware records each call under the API prefix whose method changes something (POST,
PUT, PATCH, DELETE) -- trigger, pause, resume, cancel, release and whatever mutating route
is added later, refused ones included -- with the time, the replica that answered, the
name of the bearer token (`http.api_tokens`; never the token itself), the route and its
target (a table, a run id, a work item), the request body (shortened) and the status code.
`GET /api/v1/audit` and `lakeward audit` read it back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from lakeward.services.daemon import Daemon
from lakeward.services.names import API_PREFIX

log = logging.getLogger(__name__)

#: Methods whose calls are audited.
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Request bodies are kept up to this many characters.
REQUEST_CHARS = 500


def _target(path_params: dict[str, Any], body: bytes) -> str:
    """What the call is about: its path parameters (table name, run id), else the body's `key`."""
    if path_params:
        return ",".join(str(v) for v in path_params.values())
    try:
        parsed = json.loads(body or b"{}")
    except ValueError:
        return ""
    return str(parsed.get("key", "")) if isinstance(parsed, dict) else ""


def _token(request: Request, daemon: Daemon) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return daemon.settings.http.token_name(credentials.strip())


def install_audit(app: FastAPI, daemon: Daemon) -> None:
    """Record every mutating API call of `app` in `daemon`'s shared audit log (module doc)."""

    @app.middleware("http")
    async def audit(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.method not in MUTATING or not request.url.path.startswith(API_PREFIX):
            return await call_next(request)
        body = await request.body()
        response = await call_next(request)
        route = request.scope.get("route")
        entry = {
            "time": time.time(),
            "replica": daemon.replica_id,
            "token": _token(request, daemon),
            "method": request.method,
            "path": request.url.path,
            "route": getattr(route, "path", None),
            "target": _target(dict(request.scope.get("path_params") or {}), body),
            "request": body.decode("utf-8", "replace")[:REQUEST_CHARS],
            "status": response.status_code,
        }
        try:
            await run_in_threadpool(daemon.history.record_call, entry)
        except Exception:
            log.warning("could not write the audit entry %s", entry, exc_info=True)
        return response


__all__ = ["MUTATING", "install_audit"]
