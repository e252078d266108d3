"""`Table.service_state()`: pending plans and what accumulated since each service last ran,
on version-6 copy-on-write and merge-on-read tables and on Hudi 1.x (versions 8, 9) fixtures.
The daemon's discovery builds its `TableState` from the same summary."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.table import Table
from lakeward.core.table_services.state import PLAN_ACTIONS, ServiceState
from lakeward.core.timeline import Action
from lakeward.services.discovery import _PLAN_ACTIONS, DiscoveryCache, load_state
from lakeward.services.model import ServiceAction, TableRef
from tests.support.fixture_tables import all_fixtures

V8_V9 = [(kind, name) for kind, name in all_fixtures() if name.startswith(("v8", "v9"))]
OPTIONS = {"hoodie.cleaner.commits.retained": 1}


def _upsert(table: Table, n: int) -> str:
    return table.upsert(pa.table({"id": [n % 2], "ts": [n], "v": [f"v{n}"]})).instant_time


def _same_as_discovery(table: Table, state: ServiceState) -> None:
    """Discovery (its own listing of `.hoodie/`) reports what `service_state()` says."""
    found = load_state(TableRef("t", table.path), DiscoveryCache())
    plans = [(p.action, p.instant, p.state) for p in found.pending_plans]
    service_of = {**_PLAN_ACTIONS, Action.CLUSTERING: ServiceAction.CLUSTERING}
    want = [(service_of[p.action], p.instant.time, p.instant.state.value) for p in state.pending_plans]
    assert plans == want
    assert found.table_version == state.table_version
    assert found.pending_writes == state.pending_writes
    for name in (
        "delta_commits_since_compaction",
        "writes_since_clean",
        "rewrites_since_clean",
        "writes_since_replace",
        "last_completed",
        "last_clean",
        "delta_commits_since_change_tracking",
        "writes_since_index_build",
    ):
        assert getattr(found, name) == getattr(state, name), name
    assert found.service_state == state  # what planning reads, rebuilt from discovery's state


def test_plan_actions_are_the_services_discovery_knows() -> None:
    # every plan but a Hudi log compaction, which lakeward leaves to Hudi's writer (test_log_compaction_plans)
    assert set(_PLAN_ACTIONS) == PLAN_ACTIONS - {Action.LOG_COMPACTION}
    assert {f.name for f in fields(ServiceState)} >= {"pending_plans", "table_version", "last_compaction"}


def test_copy_on_write_counts_writes_since_clean_and_lists_pending_plans(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "cow"), record_key="id", ordering_field="ts", options=OPTIONS)
    empty = table.service_state()
    assert (empty.table_version, empty.pending_plans, empty.last_completed, empty.writes_since_clean) == (
        6,
        (),
        None,
        0,
    )
    times = [_upsert(table, n) for n in range(3)]
    state = table.service_state()
    assert (state.writes_since_clean, state.rewrites_since_clean, state.last_completed) == (3, 3, times[-1])
    assert state.delta_commits_since_compaction == 0 and state.last_compaction is None
    clean = table.schedule_clean()
    assert clean is not None
    state = table.service_state()
    assert [i.time for i in state.pending(Action.CLEAN)] == [clean]
    assert [(p.action, p.instant.time) for p in state.pending_plans] == [(Action.CLEAN, clean)]
    _same_as_discovery(table, state)
    table.run_clean(clean)
    state = table.service_state()
    assert (state.pending_plans, state.last_clean, state.writes_since_clean) == ((), clean, 0)
    _upsert(table, 3)
    assert table.service_state().writes_since_clean == 1
    _same_as_discovery(table, table.service_state())


def test_merge_on_read_counts_delta_commits_since_compaction(tmp_path: Path) -> None:
    table = Table.create(
        str(tmp_path / "mor"), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", options=OPTIONS
    )
    _upsert(table, 0)
    deltas = [_upsert(table, n) for n in range(1, 4)]
    state = table.service_state()
    assert state.delta_commits_since_compaction == 4
    assert state.rewrites_since_clean == 0  # delta commits only: little to clean
    compaction = table.schedule_compaction(force=True)
    assert compaction is not None
    state = table.service_state()
    assert [i.time for i in state.pending(Action.COMPACTION)] == [compaction]
    _same_as_discovery(table, state)
    table.run_compaction(compaction)
    state = table.service_state()
    assert (state.last_compaction, state.delta_commits_since_compaction) == (compaction, 0)
    assert state.last_change_tracking == compaction  # a compaction persists changes too
    assert deltas[-1] < compaction
    _upsert(table, 9)
    assert table.service_state().delta_commits_since_compaction == 1
    _same_as_discovery(table, table.service_state())


def test_pending_write_is_not_a_plan(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts", options=OPTIONS)
    _upsert(table, 0)
    (tmp_path / "t" / ".hoodie" / "20990101000000000.commit.requested").write_bytes(b"")
    state = table.service_state()
    assert state.pending_plans == ()
    assert [i.time for i in state.pending_writes] == ["20990101000000000"]


@pytest.mark.parametrize(("kind", "name"), V8_V9)
def test_hudi_1x_tables(fixture_table, kind: str, name: str) -> None:
    table = Table.open(fixture_table(kind, name))
    state = table.service_state()
    active = [i for i in table.timeline().completed() if not i.is_archived]
    assert state.table_version == table.version.number in (8, 9)
    assert state.last_completed == active[-1].time
    writes = [i for i in active if i.action in (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT)]
    assert state.writes_since_clean == sum(1 for i in writes if state.last_clean is None or i.time > state.last_clean)
    _same_as_discovery(table, state)
