"""A log compaction Apache Hudi planned (`<t>.logcompaction.requested`, `hoodie.log.compaction.enable`
on a Hudi writer) and left pending: lakeward does not run log compaction, so it neither runs that
plan as a compaction (the daemon used to, failing every cycle) nor plans its file groups into a
compaction or clustering of its own (Hudi's planners leave them out too: a compaction of such a
group would be followed by a log block the log compaction writes on top of the new base, merging
older records over it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeward.core.table import Table
from lakeward.core.timeline.compaction_plan import read_compaction_plan
from lakeward.services.discovery import discover
from lakeward.services.model import ServiceAction, TableRef
from tests.core.table_services.compaction_helpers import Scenario


def _as_hudi_log_compaction(table: Table, instant: str) -> None:
    """Turn lakeward's requested compaction `instant` into a requested log compaction of the same
    slices: Hudi's log compaction plan is the same `HoodieCompactionPlan` record."""
    folder = Path(table.path) / (".hoodie/timeline" if table.version.number >= 8 else ".hoodie")
    (folder / f"{instant}.compaction.requested").rename(folder / f"{instant}.logcompaction.requested")


def _planned_partitions(table: Table, instant: str) -> set[str]:
    plan = read_compaction_plan(table.storage, instant, table.version.timeline_layout)
    return {op.partition_path for op in plan.operations}


@pytest.mark.parametrize("version", [6, 9])
def test_a_pending_hudi_log_compaction_is_not_run_and_its_file_groups_stay_out_of_new_plans(
    tmp_path: Path, version: int
) -> None:
    s = Scenario.create(tmp_path / "t", table_version=version)
    s.insert(range(0, 60), 1, "load")
    s.upsert(range(0, 60, 3), 2, "sf")  # ids divisible by 3: all in sf
    log_compaction = s.table.schedule_compaction(force=True)
    assert log_compaction is not None and _planned_partitions(s.table, log_compaction) == {"city=sf"}
    _as_hudi_log_compaction(s.table, log_compaction)
    s.upsert([*range(0, 60, 3), *range(1, 60, 3)], 3, "sf-and-nyc")

    table = Table.open(s.path)
    assert table.pending_compactions() == []
    compaction = table.schedule_compaction(force=True)
    assert compaction is not None and _planned_partitions(table, compaction) == {"city=nyc"}
    table.run_compaction(compaction)
    s.assert_both_readers("beside a pending Hudi log compaction")

    state = discover([TableRef("t", s.path)]).states[0]
    assert not [p for p in state.pending_plans if p.action is ServiceAction.COMPACTION]
    assert state.error is not None and f"log compaction {log_compaction}" in state.error
