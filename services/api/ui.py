"""The web UI at `/ui`: server-rendered pages over the same reads as the JSON API.

Pages: the tables (health score, a sparkline of the last runs), one table (state, health and
file-group numbers, pending plans, explain, timeline, recent runs with their errors), the runs of
every replica, and the quarantine. Their data comes from `reads` and the daemon's health, exactly
what `/api/v1` answers. The buttons (trigger, pause, resume, cancel, release) post to the JSON API
from the browser (`static/ui.js`) with the API token the user typed, kept in the browser's local
storage and sent as `Authorization: Bearer`; the page shows the API's answer as it came.

Everything is served by the daemon (Jinja2 templates and two static files packaged with it): no
CDN, no JavaScript build. The pages are read without a token, so they are off (403) while
`http.protect_reads` is set.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from lakeward.services.api import reads
from lakeward.services.daemon import Daemon, TableUnreadableError, TriggerError
from lakeward.services.model import ServiceAction
from lakeward.services.names import API_PREFIX

#: Where the pages are served.
UI_PREFIX = "/ui"
_HERE = Path(__file__).resolve().parent
TEMPLATES_DIR = _HERE / "templates"
STATIC_DIR = _HERE / "static"
#: Runs drawn in a table's sparkline (the newest, oldest on the left).
SPARK_RUNS = 20
#: Instants shown on a table's page (the newest).
TIMELINE_INSTANTS = 30


@dataclass(frozen=True)
class SparkBar:
    """One run in a sparkline: a bar whose height is the run's duration relative to the longest shown."""

    x: int
    height: int
    outcome: str
    title: str


def sparkline(runs: list[dict[str, Any]], height: int = 20, width: int = 5) -> list[SparkBar]:
    """Bars for the newest `SPARK_RUNS` runs of a table (given newest first), oldest on the left.

    The height is the duration against the longest of them (at least 3 px, so a quick run shows);
    the outcome (succeeded, failed, ..., or `running`) colours the bar.
    """
    shown = sorted(runs[:SPARK_RUNS], key=lambda r: float(r["started_at"]))
    longest = max((float(r["duration_s"]) for r in shown), default=0.0) or 1.0
    bars = []
    for i, run in enumerate(shown):
        outcome = run["outcome"] or run["state"]
        h = max(3, round(height * float(run["duration_s"]) / longest))
        title = f"{run['action']} {run['instant'] or ''} {outcome} in {float(run['duration_s']):.1f}s"
        bars.append(SparkBar(x=i * (width + 1), height=h, outcome=outcome, title=title))
    return bars


def _when(epoch_s: float | None) -> str:
    if epoch_s is None:
        return ""
    return dt.datetime.fromtimestamp(float(epoch_s), dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d"


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
    templates.env.filters["when"] = _when
    templates.env.filters["age"] = _age
    templates.env.globals.update(api=API_PREFIX, ui=UI_PREFIX, actions=[a.value for a in ServiceAction])
    return templates


def mount_ui(app: FastAPI, daemon: Daemon) -> None:
    """Serve the pages under `/ui` and their static files under `/ui/static` (module doc)."""
    templates = _templates()

    def reads_open() -> None:
        if daemon.settings.http.protect_reads:
            raise HTTPException(
                403, "the web UI is off while http.protect_reads is set (its pages are read without a token)"
            )

    def page(request: Request, name: str, title: str, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(
            request, name, {"title": title, "replica": daemon.replica_id, "page": name, **context}
        )

    routes = APIRouter(prefix=UI_PREFIX, include_in_schema=False, dependencies=[Depends(reads_open)])

    @routes.get("", response_class=HTMLResponse)
    def tables(request: Request) -> HTMLResponse:
        health = {h["table"]: h for h in (t.to_dict() for t in daemon.healths())}
        recent = reads.runs(daemon, limit=daemon.RUNS_SCANNED)
        rows = []
        for view in daemon.tables():
            info = view.to_dict()
            mine = [r for r in recent if r["table"] == info["name"]]
            rows.append({**info, "health": health.get(info["name"], {}), "spark": sparkline(mine), "runs": mine})
        return page(request, "tables.html", "Tables", tables=rows)

    @routes.get("/tables/{name}", response_class=HTMLResponse)
    def table(request: Request, name: str) -> HTMLResponse:
        detail = reads.table_detail(daemon, name)
        try:  # its plans and timeline are unknown, not empty, when the last cycle could not read it
            reads.check_readable(daemon, name)
            unreadable = None
        except TableUnreadableError as exc:
            unreadable = str(exc)
        try:
            explained: dict[str, Any] | None = reads.explain(daemon, name)
            explain_error = None
        except TriggerError as exc:  # not started yet, or the table cannot be read now
            explained, explain_error = None, str(exc)
        return page(
            request,
            "table.html",
            name,
            table=detail,
            health=daemon.health(name).to_dict(),
            plans=reads.table_plans(daemon, name),
            explain=explained,
            explain_error=explain_error,
            timeline=reads.timeline(daemon, name, TIMELINE_INSTANTS),
            unreadable=unreadable,
        )

    @routes.get("/runs", response_class=HTMLResponse)
    def runs(request: Request, state: reads.RunState = Query("all")) -> HTMLResponse:
        return page(request, "runs.html", "Runs", runs=reads.runs(daemon, state), state=state)

    @routes.get("/quarantine", response_class=HTMLResponse)
    def quarantine(request: Request) -> HTMLResponse:
        return page(request, "quarantine.html", "Quarantine", items=reads.quarantine(daemon))

    app.include_router(routes)
    app.mount(f"{UI_PREFIX}/static", StaticFiles(directory=STATIC_DIR), name="ui-static")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse(UI_PREFIX)


__all__ = ["STATIC_DIR", "TEMPLATES_DIR", "UI_PREFIX", "SparkBar", "mount_ui", "sparkline"]
