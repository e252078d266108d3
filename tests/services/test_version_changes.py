"""No silent version changes in the daemon: it exposes each table's version, alerts when it changes
between discovery cycles, and never runs work planned under one version against a table now at another.

Real tables upgraded with `Table.upgrade`, the in-process coordinator, the real daemon and runner.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.timeline import Action
from lakeward.services.daemon import Daemon
from lakeward.services.discovery import DiscoveryCache, discover
from lakeward.services.model import ACTION_PRIORITY, Outcome, ServiceAction, TableRef, WorkItem, version_changes
from lakeward.services.settings import load_settings
from tests.services.test_runner import in_process, make_runner, sample  # noqa: F401 (fixture)
from tests.support.crash import run_and_kill
from tests.support.waiting import wait_until


def _mor(path: Path) -> Table:
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    table.bulk_insert(pa.table({"id": list(range(20)), "v": [0] * 20, "ts": [0] * 20}))
    table.upsert(pa.table({"id": [1, 2], "v": [1, 1], "ts": [1, 1]}))
    return table


def test_version_changes_lists_tables_read_in_both_cycles_whose_version_differs():
    changes = version_changes({"a": 6, "b": 6, "gone": 6}, {"a": 9, "b": 6, "new": 8})
    assert [(c.table, c.before, c.after) for c in changes] == [("a", 6, 9)]


def test_a_run_planned_under_version_6_fails_on_the_upgraded_table_and_writes_nothing(tmp_path, in_process):  # noqa: F811
    table = _mor(tmp_path / "t")
    # discovery planned a compaction while the table was at version 6 ...
    work = WorkItem(
        ACTION_PRIORITY[ServiceAction.COMPACTION],
        "",
        TableRef(table.name, table.path),
        ServiceAction.COMPACTION,
        None,
        "due",
        table_version=6,
    )
    Table.open(table.path).upgrade(to=9)  # ... then the table was upgraded
    Table.open(table.path).upsert(pa.table({"id": [3], "v": [2], "ts": [2]}))  # logs to compact again
    before = [str(i) for i in Table.open(table.path).timeline()]
    runner = make_runner(in_process)

    submitted = runner.submit(work, force=True)
    assert submitted.run is not None, submitted.reason
    assert runner.wait_idle(60)
    run = runner.get(submitted.run.run_id)

    assert run is not None and run.outcome is Outcome.FAILED
    assert run.attempts == 1, "not retried: the next cycle plans under the new version"
    assert "TableVersionChangedError" in (run.error or "")
    assert "planned under table version 6" in (run.error or "") and "now at table version 9" in (run.error or "")
    assert [str(i) for i in Table.open(table.path).timeline()] == before, "nothing scheduled or written"
    runner.close()


def test_a_run_planned_under_the_current_version_runs(tmp_path, in_process):  # noqa: F811
    table = _mor(tmp_path / "t")
    table.upgrade(to=9)
    Table.open(table.path).upsert(pa.table({"id": [3], "v": [2], "ts": [2]}))
    ref = TableRef(table.name, table.path)
    work = WorkItem(ACTION_PRIORITY[ServiceAction.COMPACTION], "", ref, ServiceAction.COMPACTION, None, "due", 9)
    runner = make_runner(in_process)
    submitted = runner.submit(work, force=True)
    assert submitted.run is not None and runner.wait_idle(60)
    run = runner.get(submitted.run.run_id)
    assert run is not None and run.outcome is Outcome.SUCCEEDED, run
    assert Table.open(table.path).timeline().completed(Action.COMMIT)
    runner.close()


def test_the_daemon_alerts_when_a_table_version_changes_between_cycles(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    table = _mor(tmp_path / "orders")
    other = _mor(tmp_path / "other")
    config = tmp_path / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static:
    - {{name: orders, path: {table.path}}}
    - {{name: other, path: {other.path}}}
  refresh_interval_s: 3600
policies:
  defaults:
    compaction: {{enabled: false}}
    clean: {{enabled: false}}
spark: {{engine: local}}
http: {{port: 0}}
log: {{format: text}}
"""
    )
    daemon = Daemon(load_settings(config, env={}))
    daemon.start()
    try:
        wait_until(lambda: daemon.ready, 30, "the daemon to be ready")
        daemon.cycle()
        metric = daemon.metrics.registry.get_sample_value
        assert metric("lakeward_table_version", {"table": "orders"}) == 6
        assert (metric("lakeward_table_version_changes_total", {"table": "orders"}) or 0) == 0

        Table.open(table.path).upgrade(to=9)
        with caplog.at_level(logging.WARNING, logger="lakeward.services.daemon"):
            daemon.cycle()

        assert metric("lakeward_table_version", {"table": "orders"}) == 9
        assert metric("lakeward_table_version_changes_total", {"table": "orders"}) == 1
        assert (metric("lakeward_table_version_changes_total", {"table": "other"}) or 0) == 0
        assert any(
            "table orders changed from table version 6 to 9 since the last discovery cycle" in r.getMessage()
            for r in caplog.records
        ), [r.getMessage() for r in caplog.records]
        daemon.cycle()  # no further change: no further alert
        assert metric("lakeward_table_version_changes_total", {"table": "orders"}) == 1
    finally:
        daemon.drain(5)


def test_discovery_reads_the_old_timeline_while_an_upgrade_is_half_done(tmp_path: Path):
    table = _mor(tmp_path / "t")
    pending = table.schedule_compaction(force=True)
    ref = TableRef("t", table.path)
    before = discover([ref], cache=DiscoveryCache(), workers=1).states[0]

    run_and_kill("crash_upgrader.py", table.path, "timeline_copied", "9")  # `.hoodie/timeline/` exists, version 6

    state = discover([ref], cache=DiscoveryCache(), workers=1).states[0]
    assert (Path(table.path) / ".hoodie" / "timeline").is_dir()
    assert state.table_version == 6
    assert [str(i) for i in state.timeline] != [str(i) for i in before.timeline]  # the plan ran first (upgrade)
    assert state.timeline.layout == before.timeline.layout
    assert pending in [i.time for i in state.timeline.completed()]
    assert state.completed_count == len(Table.open(table.path).timeline().completed())
