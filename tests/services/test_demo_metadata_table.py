"""The daemon's demo tables get a metadata table (`hoodie.metadata.enable` defaults to true), discovery
reads its timeline, and the planner proposes `metadata_compaction` for them once it is due."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from lakeward import Table
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.services.demo import create_demo_tables
from lakeward.services.discovery import DiscoveryCache, load_state
from lakeward.services.model import ServiceAction, TableRef
from lakeward.services.planning import Policy, ReasonCode, decide, plan_work

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
QUIET = dict(compaction_enabled=False, clean_enabled=False, archival_enabled=False, repair_after=None)


def test_demo_tables_have_a_metadata_table_and_metadata_compaction_is_planned(tmp_path: Path) -> None:
    tables = create_demo_tables(tmp_path)
    cache = DiscoveryCache()
    for table in tables:
        assert (Path(table.path) / ".hoodie" / "metadata" / "files").is_dir()
        assert compare_files_partition(table.storage).ok
        state = load_state(TableRef(table.name, table.path), cache)
        assert state.metadata_compaction is not None
        [decision] = [
            d
            for d in decide(state, Policy(**QUIET), NOW)
            if d.action is ServiceAction.METADATA_COMPACTION and (d.item is None or d.item.instant is None)
        ]
        assert [r.code for r in decision.reasons] == [ReasonCode.NOT_DUE]

    orders = Table.open(tables[0].path, options={"hoodie.metadata.compact.max.delta.commits": 1000})
    rows = orders.read().drop_columns([c for c in orders.read().column_names if c.startswith("_hoodie")])
    for n in range(10):  # Hudi's default threshold: 10 metadata delta commits since the last compaction
        orders.upsert(rows.slice(n * 5, 5))
    state = load_state(TableRef(orders.name, orders.path), cache)
    items = plan_work([state], Policy(**QUIET), NOW)
    assert [(i.action, i.instant) for i in items] == [(ServiceAction.METADATA_COMPACTION, None)]
    assert create_demo_tables(tmp_path)[0].read().num_rows == rows.num_rows  # reopened, not created again
