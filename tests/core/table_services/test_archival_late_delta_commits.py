"""A delta commit requested before a compaction plan and completed after it (versions 8+ plan beside
writes): slicing by completion time puts its log in the compaction's new file slice.

- lakeward's archival keeps such a delta commit active while its log is on storage: hudi-rs, which
  does not read the LSM history, places the log of an archived instant by its instant time, in the
  slice before, and would read the stale row.
- When another archiver (Java Hudi's rules) moved it into the history anyway, lakeward's services
  read its completion time from there: the next compaction takes the log and the clean keeps it
  (they placed it in the old slice, which the compaction left out and the cleaner deleted: an
  acknowledged write lost).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakeward.core.table_services.archival as archival
import lakeward.core.write.client as client_module
from lakeward.core.table import Table
from tests.interop.compare import hudi_snapshot, hudi_table

OPTIONS = {"hoodie.cleaner.commits.retained": "2", "hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "4"}


def rows(path: Path) -> list[tuple[str, str]]:
    table = Table.open(str(path)).read(columns=["id", "v"], engine="local")
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))


def hudi_rs_rows(path: Path) -> list[tuple[str, str]]:
    table = pa.Table.from_batches(hudi_snapshot(hudi_table(str(path))))
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))


def upsert(table: Table, key: str, ts: int, value: str) -> str:
    return table.upsert(pa.table({"id": [key], "ts": pa.array([ts], pa.int64()), "v": [value]})).instant_time


def late_delta_commit(path: Path, version: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Table, str]:
    """A table whose delta commit "A" (key a) was requested before a compaction plan and completed after
    it; the compaction then ran and six more delta commits followed."""
    table = Table.create(
        str(path),
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        table_version=version,
        options=OPTIONS,
    )
    table.upsert(pa.table({"id": ["a", "b", "c"], "ts": pa.array([1, 1, 1], pa.int64()), "v": ["init"] * 3}))
    upsert(table, "b", 2, "b2")  # a log: the compaction has work
    written, resume = threading.Event(), threading.Event()
    reconcile = client_module.reconcile_markers

    def paused(*args: Any) -> Any:  # writer A: its log is written, it has not completed
        if threading.current_thread().name == "A":
            written.set()
            assert resume.wait(60)
        return reconcile(*args)

    monkeypatch.setattr(client_module, "reconcile_markers", paused)
    done: list[str] = []
    writer = threading.Thread(
        target=lambda: done.append(upsert(Table.open(str(path), options=OPTIONS), "a", 5, "A")), name="A"
    )
    writer.start()
    assert written.wait(60)
    plan = table.schedule_compaction(force=True)
    resume.set()
    writer.join(60)
    assert done and plan is not None and done[0] < plan
    completed = {i.time: i.completion_time for i in table.timeline().completed()}
    assert completed[done[0]] > plan  # requested before the plan, completed after it
    table.run_compaction(plan)
    for i in range(6):
        upsert(table, "c", 10 + i, f"c{i}")
    return table, done[0]


def compact_and_clean(table: Table) -> None:
    plan = table.schedule_compaction(force=True)
    assert plan is not None
    table.run_compaction(plan)
    for i in range(3):
        upsert(table, "c", 20 + i, f"c{20 + i}")
    table.clean()


@pytest.mark.parametrize("version", [8, 9])
def test_archival_keeps_a_late_delta_commit_active_while_its_log_is_live(tmp_path, version, monkeypatch):
    path = tmp_path / "t"
    table, late = late_delta_commit(path, version, monkeypatch)
    table.clean()
    table.archive()
    assert late in {i.time for i in table.timeline().active()}
    expected = [("a", "A"), ("b", "b2"), ("c", "c5")]
    assert rows(path) == expected
    assert hudi_rs_rows(path) == expected
    compact_and_clean(table)
    expected = [("a", "A"), ("b", "b2"), ("c", "c22")]
    assert rows(path) == expected
    assert hudi_rs_rows(path) == expected


@pytest.mark.parametrize("version", [8, 9])
def test_services_place_the_log_of_an_archived_late_delta_commit_by_its_completion_time(tmp_path, version, monkeypatch):
    path = tmp_path / "t"
    table, late = late_delta_commit(path, version, monkeypatch)
    table.clean()
    with monkeypatch.context() as archiver:  # an archiver without lakeward's rule (Java Hudi's)
        archiver.setattr(archival, "_late_logs_remain", lambda *args: False)
        table.archive()
    assert late not in {i.time for i in table.timeline().active()}
    assert rows(path) == [("a", "A"), ("b", "b2"), ("c", "c5")]
    compact_and_clean(table)
    expected = [("a", "A"), ("b", "b2"), ("c", "c22")]
    assert rows(path) == expected
    assert hudi_rs_rows(path) == expected
