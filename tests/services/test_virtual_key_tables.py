"""The daemon serves tables written without meta fields (`hoodie.populate.meta.fields=false`).

Virtual-key tables were read-only for the daemon while lakeward did not write them. Now that
writes and every table service work on them, the daemon plans and runs services on them like
on any table: a real daemon (in-process coordinator, local engine) over a merge-on-read v8
virtual-key table lakeward writes and the copy-on-write Hudi 1.x fixture without meta fields.
Every run succeeds, the rows stay those hudi-rs reads, and a manual trigger is accepted.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from lakeward import Table
from lakeward.services.api import create_app
from lakeward.services.daemon import Daemon
from lakeward.services.discovery import discover
from lakeward.services.model import TableRef
from lakeward.services.planning import plan_work, skip_reason
from tests.interop.compare import fail_on, snapshot_mismatches
from tests.services.test_read_only_tables import EAGER, TOKEN, daemon, wait_for  # noqa: F401 (the daemon fixture)
from tests.support.fixture_tables import unzip_table


@pytest.fixture
def tables(tmp_path: Path) -> dict[str, Path]:
    """A v8 merge-on-read virtual-key table with delta commits to compact, and the v8 fixture without meta fields."""
    mor = Table.create(
        str(tmp_path / "events"),
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        table_version=8,
        options={"hoodie.populate.meta.fields": "false"},
    )
    mor.bulk_insert(pa.table({"id": list(range(10)), "v": [0] * 10, "ts": [0] * 10}))
    mor.upsert(pa.table({"id": [1, 2], "v": [1, 1], "ts": [1, 1]}))
    mor.upsert(pa.table({"id": [2, 3], "v": [2, 2], "ts": [2, 2]}))
    fixture = unzip_table("cow", "v8_simplekeygen_hivestyle_no_metafields", tmp_path / "fixtures")
    return {"events": tmp_path / "events", "no_meta": fixture}


def test_planning_proposes_services_on_virtual_key_tables(tables: dict[str, Path]) -> None:
    states = discover([TableRef(name, str(path)) for name, path in tables.items()], workers=1).states
    assert all(s.read_only is None and skip_reason(s) is None for s in states)
    items = plan_work(states, EAGER, dt.datetime.now(dt.UTC))
    assert "compaction" in {i.action.value for i in items if i.table.name == "events"}, items


def _finished_runs(client: TestClient) -> list[dict[str, Any]] | None:
    """The daemon's runs once every one has reported its outcome (None until then)."""
    runs = client.get("/api/v1/runs").json()
    return runs if all(r["outcome"] for r in runs) else None


def test_the_daemon_runs_services_on_virtual_key_tables(daemon: Daemon, tables: dict[str, Path]) -> None:  # noqa: F811
    expected = {name: Table.open(str(path)).read().sort_by("id").to_pylist() for name, path in tables.items()}
    for _ in range(3):
        daemon.cycle()
    wait_for(lambda: daemon.runner is not None and not daemon.runner.running_keys())
    client = TestClient(create_app(daemon))
    shown = {t["name"]: t for t in client.get("/api/v1/tables").json()}
    assert shown["events"]["read_only"] is None and shown["no_meta"]["read_only"] is None
    runs = wait_for(lambda: _finished_runs(client))
    assert {r["outcome"] for r in runs} <= {"succeeded", "nothing_to_do"}, runs
    assert any(r["table"] == "events" and r["action"] == "compaction" and r["outcome"] == "succeeded" for r in runs)
    assert Table.open(str(tables["events"])).timeline().completed("commit"), "the compaction completed"

    def trigger_clean() -> Any:
        """The trigger's answer; None while a run the daemon's own cycle started holds the table (409)."""
        answer = client.post(
            "/api/v1/tables/no_meta/trigger", json={"action": "clean"}, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        return None if answer.status_code == 409 and "concurrency limit" in answer.text else answer

    accepted = wait_for(trigger_clean)
    assert accepted.status_code < 300, accepted.text
    wait_for(lambda: not daemon.runner.running_keys())
    for name, path in tables.items():
        assert Table.open(str(path)).read().sort_by("id").to_pylist() == expected[name], name
        fail_on(snapshot_mismatches(str(path)))
