"""A compaction killed mid-run leaves readers at the last completed instant; running the plan again completes it.

The killed compactor is a subprocess (`tests/core/scripts/crash_compactor.py`) that freezes
at a chosen point of `run_compaction` and is then killed with SIGKILL. The table has six
planned file slices over three partitions. Expected rows come from the input batches.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lakeward.core.table import Table
from lakeward.core.timeline import Action, State
from tests.core.table_services.compaction_helpers import (
    Scenario,
    base_files,
    base_files_of,
    commit_json,
    loaded,
    markers_of,
    planned_groups,
    read_optimized_mismatches,
)
from tests.interop.test_hudi_rs_mor_writes import as_tuples, hudi_read
from tests.support import crash


def run_and_kill(path: str, point: str, instant: str, timeout: float = 60.0) -> None:
    """Start the crash compactor, wait until it reports `point`, SIGKILL it."""
    crash.run_and_kill("crash_compactor.py", path, point, instant, timeout=timeout)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Scenario, str]:
    """Six file slices with log files in three partitions, and a requested compaction of all of them."""
    path = tmp_path_factory.mktemp("compaction-crash") / "table"
    s = loaded(path)
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    assert len(planned_groups(path, instant)) == 6
    assert len({p for p, _ in planned_groups(path, instant)}) == 3
    return path, s, instant


@pytest.fixture
def table(template: tuple[Path, Scenario, str], tmp_path: Path) -> tuple[Scenario, str]:
    """A fresh copy of the template, with its scenario (expected rows) pointed at the copy."""
    source, s, instant = template
    path = tmp_path / "table"
    shutil.copytree(source, path)
    model = dataclasses.replace(s.model, rows=dict(s.model.rows))
    return Scenario(str(path), Table.open(str(path)), model, random.Random("crash"), dict(s.states)), instant


# point: (base files of the compaction on disk, its markers)
POINTS: dict[str, tuple[Callable[[int], bool], Callable[[int], bool]]] = {
    "after_inflight": (lambda n: n == 0, lambda n: n == 0),
    "after_first_base_file": (lambda n: n == 1, lambda n: n == 1),
    "marker_without_file": (lambda n: n == 1, lambda n: n == 2),
    "before_complete": (lambda n: n == 6, lambda n: n == 6),
}


def _assert_killed(s: Scenario, instant: str, point: str, completed_before: list[str]) -> None:
    """Readers (lakeward and hudi-rs) see the last completed instant; the plan is still pending."""
    files_ok, markers_ok = POINTS[point]
    table = Table.open(s.path)
    timeline = table.timeline()
    assert [i.file_name for i in timeline.completed()] == completed_before
    assert timeline.state_of(instant, Action.COMPACTION) is State.INFLIGHT
    assert table.pending_compactions() == [instant]
    written = base_files_of(s.path, instant)
    assert files_ok(len(written)), f"{point}: base files of the compaction: {written}"
    assert markers_ok(len(markers_of(s.path, instant))), f"{point}: markers {markers_of(s.path, instant)}"
    s.assert_both_readers(f"after a kill at {point}")
    # Read-optimized reads still see the old base files only.
    assert as_tuples(table.read(read_optimized=True)) == as_tuples(hudi_read(s.path, read_optimized=True))
    assert as_tuples(table.read(read_optimized=True)) != s.expected()
    # The inflight plan still owns its slices: no second plan takes them.
    assert table.schedule_compaction(force=True) is None


def _assert_completed(s: Scenario, instant: str, groups: set[tuple[str, str]]) -> None:
    """Exactly one base file per planned group for the instant, nothing left of killed attempts, rows right."""
    table = Table.open(s.path)
    assert table.pending_compactions() == []
    assert table.timeline().state_of(instant, Action.COMPACTION) is State.COMPLETED
    written = base_files_of(s.path, instant)
    assert sorted((str(Path(p).parent), fid) for p, fid in written.items()) == sorted(groups)
    stats = [st for sts in commit_json(s.path, instant)["partitionToWriteStats"].values() for st in sts]
    assert sorted(st["path"] for st in stats) == sorted(written)
    assert markers_of(s.path, instant) == []
    assert not (Path(s.path) / ".hoodie" / ".temp" / instant).exists()
    s.assert_both_readers("after the compaction completed")
    assert read_optimized_mismatches(s.path, [i.time for i in table.timeline().completed_writes()]) == []


@pytest.mark.parametrize("point", list(POINTS))
def test_compactor_killed_then_plan_run_again(table: tuple[Scenario, str], point: str) -> None:
    s, instant = table
    groups = planned_groups(s.path, instant)
    completed_before = [i.file_name for i in Table.open(s.path).timeline().completed()]
    files_before = set(base_files(s.path))

    run_and_kill(s.path, point, instant)
    _assert_killed(s, instant, point, completed_before)

    result = Table.open(s.path).run_compaction(instant)
    assert result.file_slices == len(groups)
    _assert_completed(s, instant, groups)
    assert files_before <= set(base_files(s.path))
    # Nothing pending: every slice is compacted, read-optimized reads see all the data.
    assert as_tuples(Table.open(s.path).read(read_optimized=True)) == s.expected()


@pytest.mark.slow  # ~12 s: two killed compactor processes
def test_compactor_killed_twice_with_writes_in_between(table: tuple[Scenario, str]) -> None:
    """Killed, a write lands on the pending slices, killed again later in the run; the third run completes."""
    s, instant = table
    groups = planned_groups(s.path, instant)
    completed_before = [i.file_name for i in Table.open(s.path).timeline().completed()]

    run_and_kill(s.path, "after_first_base_file", instant)
    _assert_killed(s, instant, "after_first_base_file", completed_before)
    s.upsert([*range(0, 90, 5), 140], 3, "between", deleted=[25])  # appends to slices based on the compaction
    s.assert_lakeward("after a write onto the killed compaction's slices")
    run_and_kill(s.path, "before_complete", instant)
    assert Table.open(s.path).pending_compactions() == [instant]
    assert len(base_files_of(s.path, instant)) == len(groups)
    s.assert_lakeward("after the second kill")

    Table.open(s.path).run_compaction(instant)
    _assert_completed(s, instant, groups)
    # A second plan finds the logs written on top of the compaction.
    again = s.table.schedule_compaction(force=True)
    assert again is not None and planned_groups(s.path, again) <= groups
    s.table.run_compaction(again)
    s.assert_both_readers("after the next compaction")
    assert as_tuples(Table.open(s.path).read(read_optimized=True)) == s.expected()
