"""The daemon and the metadata table's compaction: discovery sees the metadata timeline, planning
proposes a compaction once enough metadata delta commits completed (or says why not: not due, or
held back by a pending data-table instant, with that instant), and execution plans and runs it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.metadata_table.compaction import mdt_timeline
from lakeward.core.timeline import Action
from lakeward.services import execution
from lakeward.services.discovery import DiscoveryCache, TableState, load_state
from lakeward.services.model import ServiceAction, TableRef
from lakeward.services.planning import Decision, Policy, ReasonCode, decide, plan_work
from tests.interop.compare import both_readers
from tests.support import crash

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
QUIET = dict(compaction_enabled=False, clean_enabled=False, archival_enabled=False, repair_after=None)
SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])
#: The writer does not compact the metadata table inline: the daemon does.
NO_INLINE = {"hoodie.metadata.compact.max.delta.commits": 1000}
OFF = {"hoodie.metadata.enable": "false"}


def _batch(ids: range, ts: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": f"k{i:03d}", "part": f"p{i % 3}", "ts": ts, "val": i} for i in ids], schema=SCHEMA
    )


def _table(tmp_path: Path, writes: int, version: int = 9) -> Table:
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=version)
    # the first data is written before the metadata table exists: the delta-commit counts start at its bootstrap
    table = Table.open(path, options=NO_INLINE | OFF)
    table.insert(_batch(range(12), 1))
    table = Table.open(path, options=NO_INLINE)
    table.initialize_metadata_table()
    table = Table.open(path, options=NO_INLINE)
    for n in range(writes):
        table.upsert(_batch(range(n % 3, 12, 3), n + 2))
    return table


def _decision(state: TableState) -> Decision:
    """The planner's decision on a new metadata compaction (not a pending plan's)."""
    decisions = decide(state, Policy(**QUIET), NOW)
    return next(
        d
        for d in decisions
        if d.action is ServiceAction.METADATA_COMPACTION and (d.item is None or d.item.instant is None)
    )


@pytest.mark.parametrize("version", [6, 9])
def test_discovery_plans_and_the_daemon_runs_a_due_metadata_compaction(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, 5, version)  # 6 metadata delta commits: under Hudi's 10
    ref, cache = TableRef("t", table.path), DiscoveryCache()
    state = load_state(ref, cache)
    assert state.metadata_compaction is not None and state.metadata_compaction.delta_commits == 6
    [reason] = _decision(state).reasons
    assert reason.code is ReasonCode.NOT_DUE and "fewer than hoodie.metadata.compact.max.delta.commits=10" in (
        reason.message
    )
    assert plan_work([state], Policy(**QUIET), NOW) == []

    for n in range(4):
        table.upsert(_batch(range(n, 12, 4), 20 + n))
    state = load_state(ref, cache)  # the data timeline changed: not a stale cache hit
    items = plan_work([state], Policy(**QUIET), NOW)
    assert [(i.action, i.instant) for i in items] == [(ServiceAction.METADATA_COMPACTION, None)]
    assert "10 metadata delta commit(s)" in items[0].reason

    opened = execution.open_table(ref, {})
    instant = execution.schedule(opened, ServiceAction.METADATA_COMPACTION)
    assert instant is not None and execution.pending_of(opened, ServiceAction.METADATA_COMPACTION) == [instant]
    state = load_state(ref, cache)  # only the metadata timeline changed: seen too
    assert [(i.action, i.instant) for i in plan_work([state], Policy(**QUIET), NOW)] == [
        (ServiceAction.METADATA_COMPACTION, instant)
    ]
    done = execution.execute(opened, ServiceAction.METADATA_COMPACTION, instant)
    assert done.instant == instant and done.records > 0 and "metadata table compacted" in done.detail
    assert [i.time for i in mdt_timeline(opened.storage).completed(Action.COMMIT)] == [instant]
    mine, theirs = both_readers(table.path)
    assert sorted(map(repr, mine)) == sorted(map(repr, theirs))
    assert compare_files_partition(opened.storage).ok
    state = load_state(ref, cache)
    assert plan_work([state], Policy(**QUIET), NOW) == []


def test_explain_names_the_pending_data_instant_that_holds_the_metadata_compaction_back(tmp_path: Path) -> None:
    table = _table(tmp_path, 8)  # 9 metadata delta commits, the killed write's makes 10: due but for it
    batch_file = tmp_path / "crash.parquet"
    pq.write_table(_batch(range(0, 12, 2), 50), batch_file)
    crash.run_and_kill("crash_writer.py", table.path, "before_complete", str(batch_file))
    [killed] = Table.open(table.path).timeline().pending()
    state = load_state(TableRef("t", table.path), DiscoveryCache())
    check = state.metadata_compaction
    assert check is not None and check.blocked and check.blocked_by is not None
    decision = _decision(state)
    [blocked] = [r for r in decision.reasons if r.code is ReasonCode.BLOCKED]
    assert killed.time in blocked.message and "pending while its metadata delta commit completed" in blocked.message
    assert blocked.evidence["blocked_by"] == killed.time
    assert not decision.runs
    as_dict = decision.to_dict()
    assert as_dict["action"] == "metadata_compaction" and as_dict["reasons"][0]["code"] == "blocked"


def test_metadata_compaction_is_not_applicable_without_a_metadata_table(tmp_path: Path) -> None:
    table = Table.create(  # a table written without a metadata table: what this test is about
        str(tmp_path / "t"), record_key="id", partition_by="part", ordering_field="ts", options=OFF
    )
    table.insert(_batch(range(3), 1))
    state = load_state(TableRef("t", table.path), DiscoveryCache())
    assert state.metadata_compaction is None
    [reason] = _decision(state).reasons
    assert reason.code is ReasonCode.NOT_APPLICABLE
