"""Swagger UI at `/docs`, from files the daemon serves itself, so it renders in an air-gapped cluster.

FastAPI's default page loads Swagger UI from a public CDN. The assets here come from the PyPI package
`fastapi-offline` (its `static/` folder: Swagger UI 5, which renders the OpenAPI 3.1 schema FastAPI
writes; `swagger-ui-bundle` on PyPI ships Swagger UI 4, which does not). Only its files are used.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

#: Where the assets are served.
ASSETS_URL = "/docs-assets"
#: The packaged Swagger UI files.
ASSETS_DIR = Path(str(files("fastapi_offline") / "static"))
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png")


def mount_docs(app: FastAPI) -> None:
    """Add `/docs` (Swagger UI over `app.openapi_url`) with locally served assets; create `app` with docs_url=None."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    redirect_url = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - API docs",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            oauth2_redirect_url=redirect_url,
        )

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()


__all__ = ["ASSETS", "ASSETS_DIR", "ASSETS_URL", "mount_docs"]
