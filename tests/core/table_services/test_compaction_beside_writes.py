"""Compaction beside writes in flight on table versions 8 and 9 (Hudi 1.x's completion-time rules).

A log file of version 8+ names the delta commit that wrote it, and joins the newest slice whose
base instant is at or before that delta commit's completion time. So, as in Hudi 1.x, a
compaction may be planned while a write is in flight: the plan takes only the logs of delta
commits completed before it, and a write completing after the plan's instant lands in the
slice the compaction creates (Hudi's `BaseHoodieCompactionPlanGenerator`, `HoodieFileGroup.
getBaseInstantTime`). Every order of "writer starts", "plan", "writer completes" and "plan
runs" is played on a real table; lakeward and hudi-rs must read every row after each step
(hudi-rs once no compaction is pending). On version 6 the plan waits for the write
(test_compaction.py::test_no_plan_while_a_write_is_in_flight).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import lakeward.core.write.client as client_mod
from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.file_group.naming import parse_log_file_name
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.table import Table
from lakeward.core.timeline import Action
from lakeward.core.timeline.clustering_plan import pending_clustering_file_groups
from lakeward.core.timeline.compaction_plan import read_compaction_plan
from lakeward.core.timeline.transitions import read_commit_metadata
from tests.core.table_services.compaction_helpers import Background, Gate, Scenario, loaded
from tests.interop.test_hudi_rs_mor_writes import COLUMNS, as_tuples, hudi_read

#: Orders of: the writer starts (its files written, not completed), the compaction is planned,
#: the writer completes, the compaction runs.
ORDERS = {
    "start-plan-complete-run": ("start", "plan", "complete", "run"),
    "start-plan-run-complete": ("start", "plan", "run", "complete"),
    "plan-start-complete-run": ("plan", "start", "complete", "run"),
    "plan-start-run-complete": ("plan", "start", "run", "complete"),
    "start-complete-plan-run": ("start", "complete", "plan", "run"),
}


def _log_instants(s: Scenario, compaction: str) -> set[str]:
    plan = read_compaction_plan(s.table.storage, compaction, s.table.version.timeline_layout)
    out = set()
    for op in plan.operations:
        for name in op.log_file_names:
            parsed = parse_log_file_name(name)
            assert parsed is not None
            out.add(parsed.base_instant_time)
    return out


def _check_reads(s: Scenario, label: str) -> None:
    """lakeward reads the expected rows; hudi-rs too when no compaction is pending."""
    s.assert_lakeward(label)
    if not Table.open(s.path).timeline().pending(Action.COMPACTION):
        assert as_tuples(hudi_read(s.path, None)) == s.model.snapshot(), f"hudi-rs {label}"


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("order", list(ORDERS))
def test_compaction_beside_a_write_in_flight_reads_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, order: str
) -> None:
    s = loaded(tmp_path / "t", table_version=version)
    gate = Gate(monkeypatch, client_mod, "reconcile_markers")  # the writer holds before it completes
    writer = Table.open(s.path, options=dict(s.table.options))
    ids = range(0, 90, 3)  # updates in every file group, and keys the compaction also folds
    job: Background | None = None
    writing: str | None = None
    compaction: str | None = None
    for step in ORDERS[order]:
        if step == "start":
            job = Background(lambda: s.upsert(ids, 5, "beside", table=writer))
            gate.wait()
            [pending] = Table.open(s.path).timeline().pending_writes()
            writing = pending.time
        elif step == "plan":
            compaction = s.table.schedule_compaction(force=True)
            assert compaction is not None, "a write in flight does not hold a compaction back on version 8+"
            if writing is not None and job is not None and Table.open(s.path).timeline().pending_writes():
                assert writing not in _log_instants(s, compaction), "the plan took logs of a write in flight"
        elif step == "complete":
            assert job is not None
            gate.release()
            assert job.result() == writing
        else:
            assert compaction is not None
            s.table.run_compaction(compaction)
        _check_reads(s, f"after {step} ({order})")

    assert compaction is not None and writing is not None
    timeline = Table.open(s.path).timeline()
    assert timeline.pending() == []
    completion = timeline.completion_times()
    view = FileSystemView.load(s.table.storage, timeline)
    for group in view.file_groups():
        for file_slice in group.slices:
            for log in file_slice.log_files:
                # Each log sits in the slice of the newest base instant at or before its completion.
                done = completion[log.base_instant_time]
                assert file_slice.base_instant_time <= done
                later = [
                    sl.base_instant_time for sl in group.slices if sl.base_instant_time > file_slice.base_instant_time
                ]
                assert all(t > done for t in later), (log.name, file_slice.base_instant_time, later)
    if completion[writing] > compaction:
        # The write completed after the plan: its logs are not compacted but live on the new slice.
        assert writing not in _log_instants(s, compaction)
        latest = {sl.file_id: sl for sl in view.latest_file_slices()}
        on_new = [log for sl in latest.values() if sl.base_instant_time == compaction for log in sl.log_files]
        assert any(log.base_instant_time == writing for log in on_new)
    else:
        assert writing in _log_instants(s, compaction)
    s.assert_both_readers(f"at the end ({order})", time_travel=False)
    # Time travel to every write before the interleaving reads the same as before.
    for as_of in [t for t in s.states if t < min(writing, compaction)]:
        want = s.expected(as_of)
        assert as_tuples(Table.open(s.path).read(as_of=as_of)) == want, f"lakeward as of {as_of}"
        assert as_tuples(hudi_read(s.path, as_of)) == want, f"hudi-rs as of {as_of}"
    # One more write and compaction on top: nothing lost later either.
    s.upsert(range(1, 90, 5), 6, "after")
    again = s.table.schedule_compaction(force=True)
    assert again is not None
    s.table.run_compaction(again)
    s.assert_both_readers(f"after one more compaction ({order})", time_travel=False)


@pytest.mark.parametrize("version", [8, 9])
def test_file_groups_under_a_pending_clustering_are_not_compacted(tmp_path: Path, version: int) -> None:
    """Version 8+ clustering has its own pending action: its file groups stay out of a compaction plan."""
    s = loaded(tmp_path / "t", table_version=version)
    clustering = s.table.schedule_clustering()
    assert clustering is not None
    clustered = pending_clustering_file_groups(s.table.storage, s.table.timeline())
    assert clustered and set(clustered.values()) == {clustering}
    compaction = s.table.schedule_compaction(force=True)
    if compaction is not None:
        plan = read_compaction_plan(s.table.storage, compaction, s.table.version.timeline_layout)
        assert {(op.partition_path, op.file_id) for op in plan.operations}.isdisjoint(clustered)
        s.table.run_compaction(compaction)
    s.table.run_clustering(clustering)
    s.assert_both_readers(time_travel=False)


def _hudi_1x_expected(s: Scenario, as_of: str, writing: str, compaction: str, done: str, prior: str) -> list[tuple]:
    """The model's rows as of `as_of` under Hudi 1.x's file slicing, for the write `writing`
    (completed at `done`) beside the compaction `compaction` (its plan covers every file group
    the write touched, checked by the caller).

    The write is seen from its instant time on, except when it began before the plan and completed
    after it: its logs then belong to the compaction's slice, so a read as of a time before the
    plan does not see them (the slice before the plan is read alone).
    """
    moved = writing < compaction < done
    seen = writing <= as_of and not (moved and as_of < compaction)
    return s.expected(writing if seen else prior)


def _played(
    s: Scenario, monkeypatch: pytest.MonkeyPatch, steps: Sequence[str], ids: Sequence[int]
) -> Iterator[tuple[str, str | None, str | None]]:
    """Play `steps` (`ORDERS`) with a write of `ids` beside a compaction: after each step, (the step,
    the write's instant once started, the compaction's once planned)."""
    gate = Gate(monkeypatch, client_mod, "reconcile_markers")  # the writer holds before it completes
    writer = Table.open(s.path, options=dict(s.table.options))
    job: Background | None = None
    writing: str | None = None
    compaction: str | None = None
    for step in steps:
        if step == "start":
            job = Background(lambda: s.upsert(ids, 5, "beside", table=writer))
            gate.wait()
            [pending] = Table.open(s.path).timeline().pending_writes()
            writing = pending.time
        elif step == "plan":
            compaction = s.table.schedule_compaction(force=True)
        elif step == "complete":
            assert job is not None
            gate.release()
            assert job.result() == writing
        else:
            assert compaction is not None
            s.table.run_compaction(compaction)
        yield step, writing, compaction


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("order", list(ORDERS))
def test_time_travel_around_a_compaction_beside_a_write_follows_completion_time_slicing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, order: str
) -> None:
    """Time travel as of the write's instant, the plan's instant, the write's and the compaction's
    completion times, after every step: lakeward reads the model's rows, the same before and after
    the compaction completes; hudi-rs too once no compaction is pending (while one is, hudi-rs gives
    the pending compaction no slice of its own and reads the moved logs as of the write's instant)."""
    s = loaded(tmp_path / "t", table_version=version)
    prior = max(s.states)
    completed: set[str] = set()
    for step, writing, compaction in _played(s, monkeypatch, ORDERS[order], range(0, 90, 3)):
        completed |= {"complete": {"write"}, "run": {"compaction"}}.get(step, set())
        timeline = Table.open(s.path).timeline()
        times = timeline.completion_times()
        asked = [t for t in (writing, compaction, times.get(writing or ""), times.get(compaction or "")) if t]
        if "write" not in completed:
            # a read as of the write's instant or later could change when it completes: refused
            for as_of in [t for t in asked if writing is not None and t >= writing]:
                with pytest.raises(InstantNotFoundError, match="still in flight"):
                    Table.open(s.path).read(as_of=as_of)
            continue
        if compaction is None or writing is None:
            continue
        done = times[writing]
        if writing < compaction < done:
            plan = read_compaction_plan(s.table.storage, compaction, s.table.version.timeline_layout)
            planned = {(op.partition_path, op.file_id) for op in plan.operations}
            [written] = [i for i in timeline.completed_writes() if i.time == writing]
            stats = read_commit_metadata(s.table.storage, written).write_stats()
            touched = {(w.partitionPath, w.fileId) for w in stats}
            assert touched <= planned, "the model assumes the plan covers every file group the write touched"
        pending = bool(timeline.pending(Action.COMPACTION))
        for as_of in [*asked, prior]:
            want = _hudi_1x_expected(s, as_of, writing, compaction, done, prior)
            label = f"as of {as_of} after {step} ({order}; write {writing} done {done}, compaction {compaction})"
            assert as_tuples(Table.open(s.path).read(as_of=as_of)) == want, f"lakeward {label}"
            if not pending:
                assert as_tuples(hudi_read(s.path, as_of)) == want, f"hudi-rs {label}"


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("order", list(ORDERS))
def test_an_incremental_read_of_a_write_beside_a_compaction_returns_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, order: str
) -> None:
    """A write that began before a compaction plan and completed after it has its logs in the
    compaction's slice. The incremental read of its range took each file group's slice as of the
    write's instant time, the slice before the plan: once the compaction had run, it returned none
    of the write's rows, and a stream moved on past them. Found by a report-only exploration (a
    stream consumer beside three writers and a compaction service)."""
    s = loaded(tmp_path / "t", table_version=version)
    begin = max(s.table.timeline().completion_times().values())
    ids = range(0, 90, 3)
    for step, writing, _ in _played(s, monkeypatch, ORDERS[order], ids):
        done = Table.open(s.path).timeline().completion_times().get(writing or "")
        if done is None:
            continue
        want = [row for row in s.expected() if row[COLUMNS.index("v")].startswith("beside-")]
        assert len(want) == len(ids)
        for end in (done, None):
            got = as_tuples(Table.open(s.path).read_incremental(begin, end))
            assert got == want, f"incremental ({begin}, {end}] after {step} ({order})"
