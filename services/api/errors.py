"""How errors answer: unknown tables 404, refused triggers and table errors 409, bad input 422,
ZooKeeper unreachable for a read of the claims 503."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lakeward.core.exceptions import LakewardError
from lakeward.services.claims import CoordinatorError
from lakeward.services.daemon import TriggerError, UnknownTableError
from lakeward.services.names import API_PREFIX


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error as `{"detail": ...}` with a message that says what to do."""

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

    @app.exception_handler(CoordinatorError)
    async def _claims_unreachable(request: Request, exc: CoordinatorError) -> JSONResponse:
        return JSONResponse(
            {"detail": f"{exc}; retry once ZooKeeper is reachable (GET /readyz says when)"},
            status_code=503,
            headers={"Retry-After": "5"},
        )

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


#: An `input` echoed in a 422 answer is cut to this many characters (a 2 MB pause reason came back whole).
ECHO_MAX_CHARS = 200


def _echo(value: Any) -> Any:
    """The caller's input as a 422 answer repeats it: long texts (and large values) cut, saying how long."""
    text = value if isinstance(value, str) else None
    if text is None and not isinstance(value, int | float | bool | type(None)):
        text = str(value)
    if text is None or len(text) <= ECHO_MAX_CHARS:
        return jsonable(value)
    return f"{text[:ECHO_MAX_CHARS]}... ({len(text)} characters)"


def jsonable(value: Any) -> Any:
    """Validation error details made JSON-safe (they may hold exceptions and bytes); inputs cut (`_echo`)."""
    if isinstance(value, dict):
        return {k: _echo(v) if k == "input" else jsonable(v) for k, v in value.items() if k != "ctx"}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
