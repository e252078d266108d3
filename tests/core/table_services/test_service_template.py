"""The plan-execution template every planned table service shares, and the `table.services` namespaces.

- The same missing-schema case raises the same error from every service whose plan reads or
  writes records: a plan on a table nothing was ever written to.
- `table.services.<name>.schedule() / .execute() / .pending()` and the flat methods
  (`schedule_compaction`, `run_compaction`, `pending_compactions`, ...) give the same results.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.context import NO_SCHEMA_MESSAGE
from lakeward.core.exceptions import InstantExistsError, SchemaError
from lakeward.core.table import Table
from lakeward.core.table_services.registry import SERVICES
from lakeward.core.timeline import Action, State, Timeline
from lakeward.core.timeline.clustering_plan import ClusteringPlan
from lakeward.core.timeline.compaction_plan import CompactionPlan
from lakeward.core.timeline.transitions import create_requested

T = "20250101000000000"
MOR_CDC = {"hoodie.table.cdc.enabled": "true"}


def _empty_plan(table: Table, service: str) -> None:
    """Write an (empty) plan of `service` at T on `table`, as a scheduler would have."""
    plans: dict[str, tuple[Action, bytes]] = {
        "compaction": (Action.COMPACTION, CompactionPlan(()).to_bytes()),
        "clustering": (Action.REPLACE_COMMIT, ClusteringPlan(()).to_bytes(table.storage)),
        "change_tracking": (Action.CHANGE_TRACKING, json.dumps({"version": 1, "operations": []}).encode()),
    }
    action, content = plans[service]
    create_requested(table.storage, T, action, content)


@pytest.mark.parametrize("service", ["compaction", "clustering", "change_tracking"])
def test_service_execute_on_a_table_without_schema_raises_the_same_schema_error(tmp_path: Path, service: str) -> None:
    table = Table.create(str(tmp_path / service), record_key="id", table_type="MERGE_ON_READ", options=MOR_CDC)
    _empty_plan(table, service)
    assert table.services[service].pending() == [T]
    with pytest.raises(SchemaError, match=NO_SCHEMA_MESSAGE):
        table.services[service].execute(T)
    # claimed (inflight) before the schema was needed: a later run picks the plan up again
    assert any(i.time == T and i.state is State.INFLIGHT for i in Timeline.load(table.storage).pending())


def test_the_services_that_need_a_schema_are_the_ones_that_read_or_write_records() -> None:
    needing = {action for action, cls in SERVICES.items() if getattr(cls, "needs_schema", False)}
    assert needing == {"compaction", "clustering", "change_tracking"}


# -- the two public shapes ---------------------------------------------------------------------
FLAT: dict[str, tuple[str, str, str]] = {
    "change_tracking": ("schedule_change_tracking", "run_change_tracking", "pending_change_tracking"),
    "index_build": ("schedule_index_build", "run_index_build", "pending_index_builds"),
    "compaction": ("schedule_compaction", "run_compaction", "pending_compactions"),
    "clustering": ("schedule_clustering", "run_clustering", "pending_clustering"),
    "clean": ("schedule_clean", "run_clean", "pending_cleans"),
}
Shape = Callable[[Table, str], tuple[Callable[..., Any], Callable[..., Any], Callable[[], list[str]]]]


def _flat(table: Table, service: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable[[], list[str]]]:
    schedule, run, pending = FLAT[service]
    return getattr(table, schedule), getattr(table, run), getattr(table, pending)


def _namespace(table: Table, service: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable[[], list[str]]]:
    ns = getattr(table.services, service)
    return ns.schedule, ns.execute, ns.pending


def _batch(ids: range, version: int) -> pa.Table:
    return pa.table(
        {
            "id": [f"k{i:03d}" for i in ids],
            "city": ["sf" if i % 2 else "ny" for i in ids],
            "ts": [version] * len(ids),
            "name": [f"n{i}-{version}" for i in ids],
        }
    )


def _summary(result: Any) -> dict[str, Any]:
    """A result without what differs between two tables by construction (instant times, paths, sizes, timings)."""
    out: dict[str, Any] = {"type": type(result).__name__}
    for key, value in dataclasses.asdict(result).items():
        if key in ("instant_time", "seconds", "earliest_commit_to_retain", "bytes_written"):
            continue
        out[key] = len(value) if isinstance(value, (tuple, list)) else value
    return out


def _run_every_service(path: Path, shape: Shape) -> tuple[list[Any], list[dict[str, Any]]]:
    options = {**MOR_CDC, "hoodie.cleaner.commits.retained": "1", "hoodie.compact.inline.max.delta.commits": "1"}
    keys = {"record_key": "id", "partition_by": "city", "ordering_field": "ts"}
    table = Table.create(str(path), **keys, table_type="MERGE_ON_READ", options=options)
    table.bulk_insert(_batch(range(0, 20), 1))
    table.bulk_insert(_batch(range(20, 40), 1))
    table.upsert(_batch(range(0, 40, 3), 2))
    table.create_index("by_name", "name")
    steps: list[Any] = []
    for service in FLAT:
        schedule, execute, pending = shape(table, service)
        instant = schedule()
        steps.append((service, instant is not None))
        if instant is None:
            continue
        assert pending() == [instant]
        steps.append(_summary(execute(instant)))
        assert pending() == []
    rows = table.read(columns=["id", "city", "ts", "name"]).sort_by("id").to_pylist()
    return steps, rows


def test_service_namespaces_and_flat_methods_give_the_same_results(tmp_path: Path) -> None:
    flat_steps, flat_rows = _run_every_service(tmp_path / "flat", _flat)
    ns_steps, ns_rows = _run_every_service(tmp_path / "namespaces", _namespace)
    assert ns_steps == flat_steps
    assert ns_rows == flat_rows
    ran = [s[0] for s in flat_steps if isinstance(s, tuple) and s[1]]
    assert ran == ["change_tracking", "index_build", "compaction", "clustering", "clean"], flat_steps


def test_service_namespaces_cover_every_registered_service(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), record_key="id")
    assert sorted(table.services) == sorted(SERVICES)
    for action in SERVICES:
        assert table.services[action].action == action
        assert table.services[action].planned is SERVICES[action].planned


@pytest.mark.parametrize("version", [6, 9])
def test_a_plan_another_runner_completed_meanwhile_is_not_completed_again(tmp_path: Path, version: int) -> None:
    """Two runners of one compaction plan (`lakeward compact --instant` next to the daemon's run): on
    version 9 the second completed it again under a new completion time, two completed instants of one
    time (hudi-rs listed the commit twice), after rolling back and re-applying its metadata-table commit."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", table_version=version)
    table.upsert(pa.table({"id": [1, 2], "ts": [1, 1], "v": ["a", "b"]}))
    table.upsert(pa.table({"id": [1], "ts": [2], "v": ["c"]}))
    plan = table.schedule_compaction(force=True)
    assert plan is not None
    table.completion_check = lambda _: Table.open(path).run_compaction(plan)  # the other runner finishes first

    with pytest.raises(InstantExistsError, match="completed by another runner"):
        table.run_compaction(plan)

    completed = [i.time for i in Table.open(path).timeline().completed()]
    assert completed.count(plan) == 1
    assert Table.open(path).check().ok
    assert sorted(Table.open(path).read(columns=["id", "v"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "c"},
        {"id": 2, "v": "b"},
    ]
