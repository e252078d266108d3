"""The audit log of the API: every mutating call, recorded in the deployment's shared history.

A middleware records each call under the API prefix whose method changes something (POST,
PUT, PATCH, DELETE) -- trigger, pause, resume, cancel, release and whatever mutating route
is added later, refused ones included -- with the time, the replica that answered, the
name of the bearer token (`http.api_tokens`; never the token itself), the route and its
target (a table, a run id, a work item), the request body (shortened) and the status code.
The entry is written before the answer goes out: a call its client saw answered is in the
log. `GET /api/v1/audit` and `lakeward audit` read it back. Calls refused for want of a
valid token (401) go to the daemon's log only: anyone could otherwise push every real entry
out of the capped audit log. Request bodies over `MAX_BODY_BYTES` are refused (413) unread.

The middleware is plain ASGI: a read passes straight through to the app. (Starlette's
`@app.middleware("http")` wrapped every request, reads included, in a task, memory streams
and a streamed response: about a third of the API's CPU time at 200 requests/s.)
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lakeward.services.daemon import Daemon
from lakeward.services.names import API_PREFIX

log = logging.getLogger(__name__)

#: Methods whose calls are audited.
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Request bodies are kept up to this many characters.
REQUEST_CHARS = 500
#: The largest request body a mutating call may send (the API's bodies are a few hundred bytes of JSON).
MAX_BODY_BYTES = 1024 * 1024


class _BodyTooLarge(Exception):
    pass


def _target(path_params: dict[str, Any], body: bytes) -> str:
    """What the call is about: its path parameters (table name, run id), else the body's `key`."""
    if path_params:
        return ",".join(str(v) for v in path_params.values())
    try:
        parsed = json.loads(body or b"{}")
    except ValueError:
        return ""
    return str(parsed.get("key", "")) if isinstance(parsed, dict) else ""


def _token(scope: Scope, daemon: Daemon) -> str | None:
    headers = dict(scope.get("headers") or [])
    scheme, _, credentials = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return daemon.settings.http.token_name(credentials.strip())


async def _read_body(receive: Receive) -> bytes:
    """The whole request body (every `http.request` message until the last one); _BodyTooLarge past
    `MAX_BODY_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _declared_size(scope: Scope) -> int:
    for name, value in scope.get("headers") or []:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


class AuditMiddleware:
    """Records each mutating call under the API prefix in the daemon's audit log (module doc)."""

    def __init__(self, app: ASGIApp, daemon: Daemon):
        self.app = app
        self.daemon = daemon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in MUTATING or not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return
        try:
            if _declared_size(scope) > MAX_BODY_BYTES:
                raise _BodyTooLarge
            body = await _read_body(receive)
        except _BodyTooLarge:
            too_large = JSONResponse({"detail": f"request body over {MAX_BODY_BYTES} bytes"}, status_code=413)
            await too_large(scope, receive, send)
            return
        replayed = False
        recorded = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send_status(message: Message) -> None:
            nonlocal recorded
            if message["type"] == "http.response.start":
                # before the answer: a call the client saw answered is in the log (and readable at once)
                recorded = True
                await self._record(scope, body, int(message["status"]))
            await send(message)

        try:
            await self.app(scope, replay, send_status)
        finally:
            if not recorded:  # the app raised before answering
                await self._record(scope, body, 500)

    async def _record(self, scope: Scope, body: bytes, status: int) -> None:
        route = scope.get("route")  # set by the router on this same scope
        token = _token(scope, self.daemon)
        if status == 401 and token is None:
            log.info("refused %s %s: no valid token (not in the audit log)", scope["method"], scope["path"])
            return
        entry = {
            "time": time.time(),
            "replica": self.daemon.replica_id,
            "token": token,
            "method": scope["method"],
            "path": scope["path"],
            "route": getattr(route, "path", None),
            "target": _target(dict(scope.get("path_params") or {}), body),
            "request": body.decode("utf-8", "replace")[:REQUEST_CHARS],
            "status": status,
        }
        try:
            await run_in_threadpool(self.daemon.history.record_call, entry)
        except Exception:
            log.warning("could not write the audit entry %s", entry, exc_info=True)


def install_audit(app: FastAPI, daemon: Daemon) -> None:
    """Record every mutating API call of `app` in `daemon`'s shared audit log (module doc)."""
    app.add_middleware(AuditMiddleware, daemon=daemon)


__all__ = ["MAX_BODY_BYTES", "MUTATING", "AuditMiddleware", "install_audit"]
