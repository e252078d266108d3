"""What each service action does to a table: a lookup of core's table-service registry.

Each action is a table service registered in `lakeward.core.table_services.registry`; this
module looks it up through `Table.services` and turns its typed result into an `Execution`,
so a new service needs no change here.

Two steps, as in core: `schedule` writes a new plan (under the table's lock) and returns
its instant, or None when nothing is due; `execute` runs a pending plan to completion
(idempotent: a plan that a dead replica half-ran is simply run again, core rolls back its
partial files). Actions without a plan on the timeline (archival; rollback, which
finishes interrupted rollbacks and rolls back writes whose writer is gone) only execute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeAlias

from lakeward.core.exceptions import LakewardError, TableVersionChangedError
from lakeward.core.orphans import remove_orphans
from lakeward.core.table import Table
from lakeward.core.table_services.archival import archive
from lakeward.core.table_services.clean.execute import preview_clean
from lakeward.core.table_services.orphan_clean import orphan_clean_settings
from lakeward.core.table_services.registry import SERVICES
from lakeward.core.table_services.service import ServiceReport
from lakeward.services.model import ServiceAction, TableRef

#: Actions whose work is a plan written on the timeline first (schedule, then execute it).
PLANNED_ACTIONS = frozenset(a for a in ServiceAction if a.value in SERVICES and SERVICES[a.value].planned)
#: Actions lakeward cannot run yet (no table service is registered for them in core).
UNAVAILABLE_ACTIONS: frozenset[ServiceAction] = frozenset(a for a in ServiceAction if a.value not in SERVICES)


class ActionUnavailableError(LakewardError):
    """The action exists in the model but this version cannot run it (or not on this table)."""


#: What one execution did: a table service's report (instant, nothing to do, counts, detail).
Execution: TypeAlias = ServiceReport


def open_table(
    ref: TableRef,
    options: Mapping[str, Any],
    engine: Any = None,
    completion_check: Callable[[str], None] | None = None,
    completion_scope: Callable[[str], AbstractContextManager[None]] | None = None,
) -> Table:
    """Open a table for the daemon: its `hoodie.*` options, the run's engine, the fencing check and the
    completion scope (`lakeward.services.attempt`)."""
    table = Table.open(ref.path, options=dict(options), engine=engine)
    table.completion_check = completion_check
    table.completion_scope = completion_scope
    return table


def check_planned_version(table: Table, planned_under: int | None) -> None:
    """Raise TableVersionChangedError when the table is no longer at the version its work was planned under
    (`WorkItem.table_version`): the table was upgraded between discovery and the run, and a plan (or a
    decision to schedule one) made under one version's rules must not run against another's."""
    if planned_under is not None and table.version.number != planned_under:
        raise TableVersionChangedError(
            f"not run: planned under table version {planned_under}, but the table is now at table version "
            f"{table.version.number} (upgraded meanwhile); the next discovery cycle plans under the new version",
            planned_under,
            table.version.number,
        )


def check_available(table: Table, action: ServiceAction) -> None:
    """Raise ActionUnavailableError when `action` cannot run on `table` (before claiming anything)."""
    if action in UNAVAILABLE_ACTIONS:
        raise ActionUnavailableError(f"{action.value} is not available in this version of lakeward")
    reason = table.services[action.value].unavailable_reason()
    if reason is not None:
        raise ActionUnavailableError(reason)


def schedule(table: Table, action: ServiceAction, *, force: bool = False) -> str | None:
    """Write a new plan of `action`; its instant time, or None when nothing is due.

    `force`: plan even when the service's due-policy says nothing is due (compaction's
    delta-commit threshold; an on-call trigger). Services without one ignore it.
    """
    check_available(table, action)
    if action not in PLANNED_ACTIONS:
        raise ActionUnavailableError(f"{action.value} has no plan to schedule; it runs directly")
    return table.services[action.value].schedule(force=force)


def pending_of(table: Table, action: ServiceAction) -> list[str]:
    """Pending plans of `action` on the table, oldest first."""
    if action in UNAVAILABLE_ACTIONS:
        return []
    return table.services[action.value].pending()


def _clean_dry_run(table: Table) -> Execution:
    preview = preview_clean(table.preview_context("clean"))
    pending = f" (pending clean(s) {', '.join(preview.pending)} first)" if preview.pending else ""
    detail = f"dry run: {len(preview.files)} file(s) would be deleted under {preview.policy}{pending}"
    return Execution(None, nothing_to_do=not preview.files, detail=detail, files=preview.files)


def _archival_dry_run(table: Table) -> Execution:
    result = archive(table.preview_context("archival"), dry_run=True)
    detail = f"dry run: {len(result.archived)} instant(s) would be archived: {', '.join(result.archived) or 'none'}"
    return Execution(None, nothing_to_do=not result.archived, detail=detail, files=result.instant_files)


def _orphan_clean_dry_run(table: Table) -> Execution:
    older_than, _ = orphan_clean_settings(table.options)
    return table.services[ServiceAction.ORPHAN_CLEAN.value].report(remove_orphans(table, older_than, dry_run=True))


#: Actions that can show what they would delete or change without doing it (`dry_run`).
DRY_RUNS: dict[ServiceAction, Callable[[Table], Execution]] = {
    ServiceAction.CLEAN: _clean_dry_run,
    ServiceAction.ARCHIVAL: _archival_dry_run,
    ServiceAction.ORPHAN_CLEAN: _orphan_clean_dry_run,
}


def dry_run(table: Table, action: ServiceAction) -> Execution:
    """What `action` would delete or change on the table now (`files`, `detail`), changing nothing."""
    check_available(table, action)
    run = DRY_RUNS.get(action)
    if run is None:
        raise ActionUnavailableError(
            f"{action.value} has no dry run on the daemon; dry runs: {', '.join(a.value for a in DRY_RUNS)}"
        )
    return run(table)


def execute(table: Table, action: ServiceAction, instant: str | None, engine: Any = None) -> Execution:
    """Run the pending plan `instant` of `action` (or the direct action) to completion."""
    check_available(table, action)
    service = table.services[action.value]
    if service.planned:
        assert instant is not None
    return service.report(service.execute(instant, engine=engine))


__all__ = [
    "PLANNED_ACTIONS",
    "UNAVAILABLE_ACTIONS",
    "ActionUnavailableError",
    "Execution",
    "DRY_RUNS",
    "check_available",
    "check_planned_version",
    "dry_run",
    "execute",
    "open_table",
    "pending_of",
    "schedule",
]
