"""The HTTP API's shape: every path and method stays in the OpenAPI schema, each with a response model."""

from __future__ import annotations

from pathlib import Path

from lakeward.services.api import create_app
from lakeward.services.daemon import Daemon
from lakeward.services.settings import load_settings

#: Every route of the API (path -> methods). A route may be added; none may disappear.
ROUTES = {
    "/healthz": {"get"},
    "/readyz": {"get"},
    "/metrics": {"get"},
    "/api/v1/tables": {"get"},
    "/api/v1/tables/{name}": {"get"},
    "/api/v1/tables/{name}/plans": {"get"},
    "/api/v1/plans": {"get"},
    "/api/v1/runs": {"get"},
    "/api/v1/runs/{run_id}": {"get"},
    "/api/v1/quarantine": {"get"},
    "/api/v1/claims": {"get"},
    "/api/v1/audit": {"get"},
    "/api/v1/tables/{name}/trigger": {"post"},
    "/api/v1/tables/{name}/pause": {"post"},
    "/api/v1/tables/{name}/resume": {"post"},
    "/api/v1/runs/{run_id}/cancel": {"post"},
    "/api/v1/quarantine/release": {"post"},
    "/api/v1/health": {"get"},
    "/api/v1/tables/{name}/health": {"get"},
    "/api/v1/tables/{name}/explain": {"get"},
    "/api/v1/tables/{name}/timeline": {"get"},
}


def _spec(tmp_path: Path) -> dict:
    config = tmp_path / "lakeward.yaml"
    config.write_text("tables: {static: []}\nspark: {engine: local}\nhttp: {port: 0}\nlog: {format: text}\n")
    return create_app(Daemon(load_settings(config, env={}))).openapi()


def test_openapi_schema_keeps_every_path_and_method(tmp_path: Path) -> None:
    paths = _spec(tmp_path)["paths"]
    assert {path: set(methods) for path, methods in paths.items()} == ROUTES


def test_every_json_route_documents_a_named_response_model(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    untyped = []
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            if path == "/metrics":  # Prometheus text, not JSON
                continue
            ok = next(code for code in operation["responses"] if code.startswith("2"))
            schema = operation["responses"][ok]["content"]["application/json"]["schema"]
            if "$ref" not in schema and "$ref" not in schema.get("items", {}):
                untyped.append(f"{method.upper()} {path}: {schema}")
    assert not untyped, untyped
    assert {"TableInfo", "TableDetail", "RunInfo", "PlanStatus", "Claims", "TableHealthInfo", "ExplainInfo"} <= set(
        spec["components"]["schemas"]
    )
