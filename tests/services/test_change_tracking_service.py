"""The daemon runs change tracking (CDC) like any planned service: by policy, on trigger, and
only on merge-on-read tables with CDC on; the persisted changes answer CDC queries unchanged."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.services.daemon import Daemon
from lakeward.services.execution import ActionUnavailableError, check_available
from lakeward.services.model import ServiceAction
from lakeward.services.settings import load_settings
from tests.services.test_daemon import outcomes, wait_for


def cdc_mor(path, delta_commits: int, version: int = 6) -> Table:
    table = Table.create(
        str(path),
        table_version=version,
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        options={"hoodie.table.cdc.enabled": "true", "hoodie.table.cdc.supplemental.logging.mode": "KEY_OP"},
    )
    table.bulk_insert(pa.table({"id": list(range(10)), "v": [0] * 10, "ts": [0] * 10}))
    for i in range(1, delta_commits + 1):
        table.upsert(pa.table({"id": [1, 2], "v": [i, i], "ts": [i, i]}))
    return table


@pytest.mark.parametrize("version", [6, 9])
def test_the_daemon_persists_changes_by_policy(tmp_path, version):
    table = cdc_mor(tmp_path / "busy", 2, version)
    Table.create(str(tmp_path / "idle"), record_key="id", table_type="MERGE_ON_READ")
    expected = table.read_changes("earliest")
    config = tmp_path / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static:
    - path: {tmp_path / "busy"}
    - path: {tmp_path / "idle"}
  refresh_interval_s: 0.2
policies:
  defaults:
    compaction: {{enabled: false}}
    clean: {{enabled: false}}
    archival: {{enabled: false}}
  overrides:
    busy:
      change_tracking: {{enabled: true, every_n_commits: 2}}
spark: {{engine: local}}
log: {{format: text}}
drain_time_s: 0.5
"""
    )
    daemon = Daemon(load_settings(config, env={}))
    daemon.start()
    try:
        wait_for(lambda: ("change_tracking", "succeeded") in outcomes(daemon, "busy"))
        tracked = [i for i in Table.open(table.path).completed_instants() if i.action.value == "changetracking"]
        assert len(tracked) == 1
        assert Table.open(table.path).read_changes("earliest").equals(expected)
        assert not [o for o in outcomes(daemon, "idle") if o[0] == "change_tracking"]
    finally:
        daemon.drain()


def test_change_tracking_applies_only_to_merge_on_read_tables_with_cdc(tmp_path):
    cow = Table.create(str(tmp_path / "cow"), record_key="id", options={"hoodie.table.cdc.enabled": "true"})
    plain = Table.create(str(tmp_path / "plain"), record_key="id", table_type="MERGE_ON_READ")
    for table, why in ((cow, "COPY_ON_WRITE with CDC on"), (plain, "MERGE_ON_READ with CDC off")):
        with pytest.raises(ActionUnavailableError, match=why):
            check_available(table, ServiceAction.CHANGE_TRACKING)
    check_available(cdc_mor(tmp_path / "mor", 1), ServiceAction.CHANGE_TRACKING)
