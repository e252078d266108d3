"""`/docs` renders from files the daemon serves (no CDN: air-gapped clusters)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from lakeward.services.api.app import create_app
from lakeward.services.daemon import Daemon
from lakeward.services.settings import load_settings


def _client(tmp_path: Path) -> TestClient:
    config = tmp_path / "lakeward.yaml"
    config.write_text("tables: {static: []}\nspark: {engine: local}\nhttp: {port: 0}\nlog: {format: text}\n")
    return TestClient(create_app(Daemon(load_settings(config, env={}))))


def test_docs_page_loads_every_asset_from_the_daemon(tmp_path: Path) -> None:
    client = _client(tmp_path)
    page = client.get("/docs")
    assert page.status_code == 200
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']|url: ?["']([^"']+)["']""", page.text)
    referenced = [u for pair in urls for u in pair if u]
    assert referenced, page.text
    assert not [u for u in referenced if u.startswith(("http:", "https:", "//"))], referenced
    for url in referenced:
        got = client.get(url)
        assert got.status_code == 200, url
    bundle = client.get("/docs-assets/swagger-ui-bundle.js")
    assert "SwaggerUIBundle" in bundle.text
    assert re.search(r'"5\.\d+\.\d+"', bundle.text)  # Swagger UI 5: renders OpenAPI 3.1
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
