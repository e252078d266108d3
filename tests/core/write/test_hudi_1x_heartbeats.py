"""Heartbeats and concurrent writers on table versions 8 and 9, as Hudi 1.x keeps them.

Hudi 1.x's `HoodieHeartbeatClient` keeps the heartbeat of an instant in flight at
`<base>/.hoodie/.heartbeat/<requested time>` (`HoodieTableMetaClient.getHeartbeatFolderPath`:
`.hoodie/.heartbeat`, not under the layout-2 timeline folder `.hoodie/timeline/`), an empty
file rewritten every interval; readers judge it by its modification time only. lakeward
writes the same file in the same place (holding its writer identity, which Hudi never reads),
and judges a Hudi 1.x writer's empty heartbeat by its modification time, as Hudi does.

Also here: a writer's key lookup and a read never open the log files of a write still in flight
on these versions (their names carry the writing instant), so a rollback of that write by
another process, deleting them, cannot fail them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakeward.core.write.client as client_mod
from lakeward.core.exceptions import ConcurrentWriteError
from lakeward.core.file_group.reader import read_file_slices
from lakeward.core.file_group.slice_keys import CommittedInstants, log_record_keys
from lakeward.core.table import Table
from lakeward.core.table_services.rollback import rollback_pending_instant
from lakeward.core.timeline import Action
from lakeward.core.timeline.instant_time import new_instant_time
from lakeward.core.timeline.transitions import create_requested, transition_to_inflight
from lakeward.core.write.heartbeat import HEARTBEAT_FOLDER, heartbeat_path
from tests.core.table_services.compaction_helpers import Background, Gate, loaded, log_files
from tests.interop.test_hudi_rs_mor_writes import as_tuples

LAZY = {
    "hoodie.cleaner.policy.failed.writes": "LAZY",
    "hoodie.client.heartbeat.interval_in_ms": 200,
    "hoodie.client.heartbeat.tolerable.misses": 2,
}
VERSIONS = [8, 9]


def _table(path: Path, version: int) -> Table:
    return Table.create(
        str(path), record_key="id", partition_by="part", ordering_field="ts", options=LAZY, table_version=version
    )


def _batch(ids: list[str], v: str) -> pa.Table:
    return pa.table({"id": ids, "part": ["a"] * len(ids), "ts": [0] * len(ids), "v": [v] * len(ids)})


@pytest.mark.parametrize("version", VERSIONS)
def test_the_heartbeat_of_a_write_is_where_hudi_1x_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    path = tmp_path / "t"
    table = _table(path, version)
    table.upsert(_batch(["a1"], "first"))
    seen: dict[str, Any] = {}
    original = client_mod.reconcile_markers

    def spy(storage: Any, instant_time: str, *args: Any, **kwargs: Any) -> Any:
        seen["instant"] = instant_time
        seen["files"] = sorted(p.name for p in (path / ".hoodie" / ".heartbeat").iterdir())
        seen["timeline_heartbeats"] = (path / ".hoodie" / "timeline" / ".heartbeat").exists()
        return original(storage, instant_time, *args, **kwargs)

    monkeypatch.setattr(client_mod, "reconcile_markers", spy)
    result = table.upsert(_batch(["a1", "a2"], "second"))
    assert HEARTBEAT_FOLDER == ".hoodie/.heartbeat"
    # Named by the instant's requested time, as Hudi 1.x names it; none under `.hoodie/timeline/`.
    assert seen["files"] == [result.instant_time] == [seen["instant"]]
    assert seen["timeline_heartbeats"] is False
    assert not (path / heartbeat_path(result.instant_time)).exists(), "deleted once the write completed"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_hudi_1x_writers_empty_heartbeat_is_judged_by_its_modification_time(tmp_path: Path, version: int) -> None:
    """A Hudi 1.x writer in flight: its deltacommit pending in `.hoodie/timeline/`, its empty heartbeat
    file fresh. `repair` leaves it alone while the file is fresh and rolls it back once stale."""
    path = tmp_path / "t"
    table = _table(path, version)
    table.upsert(_batch(["a1"], "first"))
    layout = table.version.timeline_layout
    instant = new_instant_time(table.timeline().latest_time())
    heartbeat = path / heartbeat_path(instant)
    heartbeat.parent.mkdir(parents=True, exist_ok=True)
    heartbeat.write_bytes(b"")  # as HoodieHeartbeatClient.updateHeartbeat: create, close
    transition_to_inflight(table.storage, create_requested(table.storage, instant, Action.COMMIT, b"", layout))
    assert list((path / ".hoodie" / "timeline").glob(f"{instant}*inflight")), "pending on the layout-2 timeline"

    assert table.repair() == [], "a fresh heartbeat: the Hudi writer is alive"
    assert [i.time for i in table.timeline().pending_writes()] == [instant]
    stale = time.time() - 10  # far past interval * tolerable misses
    os.utime(heartbeat, (stale, stale))
    assert table.repair() == [instant]
    assert table.timeline().pending_writes() == []
    assert {r["id"]: r["v"] for r in table.read(columns=["id", "v"]).to_pylist()} == {"a1": "first"}


@pytest.mark.parametrize("version", VERSIONS)
def test_writers_and_readers_never_open_the_logs_of_a_write_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """A write in flight holds (its log files written) while a read and a key lookup are planned
    (their slices list its logs); another process then rolls it back, deleting those logs. The
    planned read and key lookup still run: they never open the logs of an instant not completed."""
    # readers listing storage (no metadata table, which lists no file of a write in flight at all)
    s = loaded(tmp_path / "t", {"hoodie.metadata.enable": "false"}, table_version=version)
    gate = Gate(monkeypatch, client_mod, "reconcile_markers")
    held = Table.open(s.path, options=dict(s.table.options))
    job = Background(lambda: s.upsert(range(0, 90, 3), 5, "held", table=held))
    gate.wait()
    [pending] = s.table.timeline().pending_writes()
    logs = [Path(s.path, rel) for rel, (_, instant, _) in log_files(s.path).items() if instant == pending.time]
    assert logs, "the held write wrote log files"
    plan = Table.open(s.path).scan().plan()
    assert any(f.base_instant_time == pending.time for sl in plan.slices for f in sl.log_files)
    committed = CommittedInstants.of(plan.timeline)

    tz = s.table.config.timeline_timezone
    rollback_pending_instant(s.table.storage, pending, new_instant_time(s.table.timeline().latest_time()), tz)
    assert not any(log.exists() for log in logs), "the rollback deleted the held write's logs"
    rows = read_file_slices(s.table.storage, plan.slices, plan.schema, instants=plan.instants, merge=plan.merge)
    assert as_tuples(rows) == s.model.snapshot()
    keys = {k for sl in plan.slices for k in log_record_keys(s.table.storage, sl.log_files, committed).to_pylist()}
    assert keys, "the committed logs' keys are found"

    gate.release()
    with pytest.raises(ConcurrentWriteError, match="rolled back by another writer"):
        job.result()
    s.upsert(range(1, 90, 3), 6, "next")
    s.assert_both_readers(time_travel=False)
