"""What each service action does to a table, through core's public `Table` API only.

Two steps, as in core: `schedule` writes a new plan (under the table's lock) and returns
its instant, or None when nothing is due; `execute` runs a pending plan to completion
(idempotent: a plan that a dead replica half-ran is simply run again, core rolls back its
partial files). Actions without a plan on the timeline (archival; rollback, which
finishes interrupted rollbacks and rolls back writes whose writer is gone) only execute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lakeward.core.exceptions import LakewardError
from lakeward.core.table import Table
from lakeward.services.model import ServiceAction, TableRef

#: Actions whose work is a plan written on the timeline first (schedule, then execute it).
PLANNED_ACTIONS = frozenset(
    {
        ServiceAction.COMPACTION,
        ServiceAction.CLUSTERING,
        ServiceAction.CLEAN,
        ServiceAction.CHANGE_TRACKING,
        ServiceAction.INDEX_BUILD,
    }
)
#: Actions lakeward cannot run yet (their core table services have not landed).
UNAVAILABLE_ACTIONS: frozenset[ServiceAction] = frozenset()


class ActionUnavailableError(LakewardError):
    """The action exists in the model but this version cannot run it (or not on this table)."""


@dataclass(frozen=True)
class Execution:
    """What one execution did."""

    instant: str | None
    nothing_to_do: bool = False
    records: int = 0
    bytes_written: int = 0
    detail: str = ""


def open_table(
    ref: TableRef,
    options: Mapping[str, Any],
    engine: Any = None,
    completion_check: Callable[[str], None] | None = None,
) -> Table:
    """Open a table for the daemon: its `hoodie.*` options, the run's engine and the fencing check."""
    table = Table.open(ref.path, options=dict(options), engine=engine)
    table.completion_check = completion_check
    return table


def check_available(table: Table, action: ServiceAction) -> None:
    """Raise ActionUnavailableError when `action` cannot run on `table` (before claiming anything)."""
    if action in UNAVAILABLE_ACTIONS:
        raise ActionUnavailableError(f"{action.value} is not available in this version of lakeward")
    if action is ServiceAction.COMPACTION and table.config.table_type.value != "MERGE_ON_READ":
        raise ActionUnavailableError(
            f"compaction applies to MERGE_ON_READ tables; {table.name} is {table.config.table_type.value}"
        )
    if action is ServiceAction.CHANGE_TRACKING and (
        table.config.table_type.value != "MERGE_ON_READ" or not table.config.cdc_enabled
    ):
        raise ActionUnavailableError(
            f"change tracking applies to MERGE_ON_READ tables with hoodie.table.cdc.enabled=true; {table.name} is "
            f"{table.config.table_type.value} with CDC {'on' if table.config.cdc_enabled else 'off'}"
        )
    if action is ServiceAction.INDEX_BUILD and not table.indexes():
        raise ActionUnavailableError(
            f"{table.name} has no secondary index to build; create one first (lakeward index create)"
        )


def schedule(table: Table, action: ServiceAction, *, force: bool = False) -> str | None:
    """Write a new plan of `action`; its instant time, or None when nothing is due.

    `force` (compaction only): plan even below the delta-commit threshold (an on-call trigger).
    """
    check_available(table, action)
    if action is ServiceAction.COMPACTION:
        return table.schedule_compaction(force=force)
    if action is ServiceAction.CLUSTERING:
        return table.schedule_clustering()
    if action is ServiceAction.CLEAN:
        return table.schedule_clean()
    if action is ServiceAction.CHANGE_TRACKING:
        return table.schedule_change_tracking()
    if action is ServiceAction.INDEX_BUILD:
        return table.schedule_index_build()
    raise ActionUnavailableError(f"{action.value} has no plan to schedule; it runs directly")


def pending_of(table: Table, action: ServiceAction) -> list[str]:
    """Pending plans of `action` on the table, oldest first."""
    if action is ServiceAction.COMPACTION:
        return table.pending_compactions()
    if action is ServiceAction.CLUSTERING:
        return table.pending_clustering()
    if action is ServiceAction.CLEAN:
        return table.pending_cleans()
    if action is ServiceAction.CHANGE_TRACKING:
        return table.pending_change_tracking()
    if action is ServiceAction.INDEX_BUILD:
        return table.pending_index_builds()
    return []


def _bytes_of(table: Table, paths: tuple[str, ...]) -> int:
    total = 0
    for path in paths:
        try:
            total += table.storage.size(path)
        except (OSError, LakewardError):
            continue
    return total


def execute(table: Table, action: ServiceAction, instant: str | None, engine: Any = None) -> Execution:
    """Run the pending plan `instant` of `action` (or the direct action) to completion."""
    check_available(table, action)
    if action is ServiceAction.COMPACTION:
        assert instant is not None
        compacted = table.run_compaction(instant, engine=engine)
        return Execution(
            instant,
            records=compacted.records_written,
            bytes_written=_bytes_of(table, compacted.files_written),
            detail=f"{compacted.file_slices} file slice(s) compacted",
        )
    if action is ServiceAction.CLUSTERING:
        assert instant is not None
        clustered = table.run_clustering(instant, engine=engine)
        return Execution(
            instant,
            records=clustered.records_written,
            bytes_written=_bytes_of(table, clustered.files_written),
            detail=f"{clustered.groups} group(s), {clustered.file_groups_replaced} file group(s) replaced",
        )
    if action is ServiceAction.CLEAN:
        assert instant is not None
        cleaned = table.run_clean(instant)
        return Execution(instant, detail=f"{cleaned.files_deleted} file(s) deleted")
    if action is ServiceAction.CHANGE_TRACKING:
        assert instant is not None
        tracked = table.run_change_tracking(instant, engine=engine)
        return Execution(
            instant,
            bytes_written=tracked.bytes_written,
            detail=f"{tracked.delta_commits} delta commit(s) persisted in {len(tracked.files_written)} file(s)",
        )
    if action is ServiceAction.INDEX_BUILD:
        assert instant is not None
        built = table.run_index_build(instant, engine=engine)
        return Execution(
            instant,
            records=built.rows_indexed,
            bytes_written=built.bytes_written,
            detail=f"{len(built.files_written)} index file(s) for {built.base_files} base file(s)",
        )
    if action is ServiceAction.ARCHIVAL:
        archived = table.archive()
        return Execution(
            None, nothing_to_do=not archived.archived, detail=f"{len(archived.archived)} instant(s) archived"
        )
    if action is ServiceAction.ROLLBACK:
        rolled_back = table.repair()
        return Execution(
            None, nothing_to_do=not rolled_back, detail=f"rolled back {rolled_back}" if rolled_back else ""
        )
    raise ActionUnavailableError(f"{action.value} is not available in this version of lakeward")


__all__ = [
    "PLANNED_ACTIONS",
    "UNAVAILABLE_ACTIONS",
    "ActionUnavailableError",
    "Execution",
    "check_available",
    "execute",
    "open_table",
    "pending_of",
    "schedule",
]
