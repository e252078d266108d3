"""The daemon's execution is a lookup in core's table-service registry.

Every action the daemon can run is a registered table service, and `schedule`, `pending_of`,
`check_available` and `execute` dispatch through the registry: registering a service under
an action is all it takes for the daemon to run it.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.table import TableConfig
from lakeward.core.engine import Engine
from lakeward.core.storage import Storage
from lakeward.core.table_services.registry import SERVICES
from lakeward.core.table_services.service import DirectService, ServiceReport
from lakeward.services import execution
from lakeward.services.model import ServiceAction, TableRef


def test_every_action_the_daemon_can_run_is_a_registered_service() -> None:
    assert {a.value for a in ServiceAction} <= set(SERVICES)
    assert execution.UNAVAILABLE_ACTIONS == frozenset()
    assert execution.PLANNED_ACTIONS == {
        ServiceAction.COMPACTION,
        ServiceAction.CLUSTERING,
        ServiceAction.CLEAN,
        ServiceAction.CHANGE_TRACKING,
        ServiceAction.INDEX_BUILD,
        ServiceAction.METADATA_COMPACTION,
    }
    for action in ServiceAction:
        assert SERVICES[action.value].action == action.value


class _Recording(DirectService[str]):
    """A service registered by the test: records what the daemon asked of it."""

    action = "archival"
    calls: ClassVar[list[tuple[str | None, Engine | None]]] = []
    reason: ClassVar[str | None] = None

    @classmethod
    def unavailable_reason(cls, storage: Storage, config: TableConfig) -> str | None:
        return cls.reason

    def execute(self, instant_time: str | None = None, *, engine: Engine | None = None) -> str:
        self.calls.append((instant_time, engine))
        return f"ran on {self.ctx.storage.uri}"

    def report(self, result: str) -> ServiceReport:
        return ServiceReport(None, records=7, bytes_written=11, detail=result)


@pytest.fixture
def table(tmp_path: Path) -> Table:
    t = Table.create(str(tmp_path / "t"), record_key="id")
    t.bulk_insert(pa.table({"id": [1, 2, 3]}))
    return execution.open_table(TableRef("t", t.path), {})


def test_execution_dispatches_through_the_registry(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SERVICES, "archival", _Recording)
    monkeypatch.setattr(_Recording, "calls", [])
    done = execution.execute(table, ServiceAction.ARCHIVAL, None)
    assert done == execution.Execution(None, records=7, bytes_written=11, detail=f"ran on {table.path}")
    assert [instant for instant, _ in _Recording.calls] == [None]
    assert execution.pending_of(table, ServiceAction.ARCHIVAL) == []
    with pytest.raises(execution.ActionUnavailableError, match="no plan to schedule"):
        execution.schedule(table, ServiceAction.ARCHIVAL)

    monkeypatch.setattr(_Recording, "reason", "not on this table")
    with pytest.raises(execution.ActionUnavailableError, match="not on this table"):
        execution.check_available(table, ServiceAction.ARCHIVAL)
    with pytest.raises(execution.ActionUnavailableError, match="not on this table"):
        execution.execute(table, ServiceAction.ARCHIVAL, None)
    assert len(_Recording.calls) == 1  # refused before anything ran


def test_a_planned_action_is_scheduled_and_run_by_its_registered_service(tmp_path: Path) -> None:
    created = Table.create(str(tmp_path / "mor"), record_key="id", table_type="MERGE_ON_READ")
    created.bulk_insert(pa.table({"id": [1, 2, 3], "v": [0, 0, 0]}))
    created.upsert(pa.table({"id": [1, 2], "v": [1, 1]}))
    table = execution.open_table(TableRef("mor", created.path), {})
    instant = execution.schedule(table, ServiceAction.COMPACTION, force=True)
    assert instant is not None
    assert execution.pending_of(table, ServiceAction.COMPACTION) == table.services.compaction.pending() == [instant]
    done = execution.execute(table, ServiceAction.COMPACTION, instant)
    assert (done.instant, done.records, done.detail) == (instant, 3, "1 file slice(s) compacted")
    assert done.bytes_written > 0
    assert execution.pending_of(table, ServiceAction.COMPACTION) == []
    with pytest.raises(execution.ActionUnavailableError, match="MERGE_ON_READ"):
        execution.check_available(Table.create(str(tmp_path / "cow"), record_key="id"), ServiceAction.COMPACTION)
