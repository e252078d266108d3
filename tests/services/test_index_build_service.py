"""The daemon and secondary index builds: discovery sees the indexes, planning proposes builds by
policy, execution schedules and runs them, and the HTTP trigger works for `index_build`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from lakeward import Table
from lakeward.services import execution
from lakeward.services.api import create_app
from lakeward.services.daemon import Daemon
from lakeward.services.discovery import DiscoveryCache, load_state
from lakeward.services.model import ServiceAction, TableRef
from lakeward.services.planning import Policy, plan_work
from tests.services.test_api import AUTH, make_tables, settings_for, wait_for

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
QUIET = dict(compaction_enabled=False, clean_enabled=False, archival_enabled=False, repair_after=None)


def _table(tmp_path: Path, version: int = 6) -> Table:
    table = Table.create(str(tmp_path / "t"), record_key="id", partition_by="p", table_version=version)
    table.bulk_insert(pa.table({"id": list(range(40)), "p": ["a", "b"] * 20, "k": [i % 4 for i in range(40)]}))
    return table


@pytest.mark.parametrize("version", [6, 9])
def test_discovery_and_planning_propose_index_builds_for_new_base_files(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version)
    ref = TableRef("t", table.path)
    cache = DiscoveryCache()
    policy = Policy(**QUIET, index_build_enabled=True, index_build_columns=frozenset({"k"}))
    state = load_state(ref, cache)
    assert state.index_columns == frozenset() and plan_work([state], policy, NOW) == []
    table.create_index("by_k", "k")
    state = load_state(ref, cache)  # the definitions changed, the timeline did not: not a stale cache hit
    assert state.index_columns == {"k"} and state.writes_since_index_build == 1
    items = plan_work([state], policy, NOW)
    assert [(i.action, i.instant) for i in items] == [(ServiceAction.INDEX_BUILD, None)]
    assert "since the last index build" in items[0].reason
    assert plan_work([state], Policy(**QUIET), NOW) == []  # policy off
    other_columns = Policy(**QUIET, index_build_enabled=True, index_build_columns=frozenset({"x"}))
    assert plan_work([state], other_columns, NOW) == []

    opened = execution.open_table(ref, {})
    instant = execution.schedule(opened, ServiceAction.INDEX_BUILD)
    assert instant is not None and execution.pending_of(opened, ServiceAction.INDEX_BUILD) == [instant]
    state = load_state(ref, cache)
    pending = plan_work([state], policy, NOW)
    assert [(i.action, i.instant) for i in pending] == [(ServiceAction.INDEX_BUILD, instant)]
    done = execution.execute(opened, ServiceAction.INDEX_BUILD, instant)
    assert done.records == 40 and done.bytes_written > 0 and "2 index file(s)" in done.detail
    state = load_state(ref, cache)
    assert state.writes_since_index_build == 0 and plan_work([state], policy, NOW) == []
    assert execution.schedule(opened, ServiceAction.INDEX_BUILD) is None  # nothing new to index


def test_index_build_unavailable_without_an_index(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with pytest.raises(execution.ActionUnavailableError, match="no secondary index"):
        execution.check_available(table, ServiceAction.INDEX_BUILD)


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    orders, _ = make_tables(tmp_path)
    orders.create_index("by_v", "v")
    d = Daemon(settings_for(tmp_path))
    d.start()
    wait_for(lambda: d.ready)
    yield d
    d.drain(5)


def test_api_trigger_builds_the_index(daemon: Daemon, tmp_path: Path) -> None:
    client = TestClient(create_app(daemon))
    started = client.post("/api/v1/tables/orders/trigger", json={"action": "index_build"}, headers=AUTH)
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    done = wait_for(lambda: (r := client.get(f"/api/v1/runs/{run_id}").json())["state"] == "finished" and r)
    assert done["outcome"] == "succeeded", done
    orders = Table.open(str(tmp_path / "orders"))
    assert done["instant"] in [i.time for i in orders.completed_instants()]
    assert orders.index_status().missing() == []
    assert orders.explain([("v", "=", 1)]).uses_index
