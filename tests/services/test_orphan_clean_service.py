"""The `orphan_clean` daemon action: off by default, a dry run first (`orphan_clean.dry_run`), each
removal listed in the run's record, runs spaced by `orphan_clean.interval_s`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from lakeward.core.table import Table
from lakeward.services.api import create_app
from lakeward.services.daemon import Daemon
from lakeward.services.model import ServiceAction
from lakeward.services.settings import load_settings
from tests.core.test_orphans import _hashes, _rows, _stray_copy, _table
from tests.services.test_daemon import wait_for


def _daemon(path: Path, orphan_clean: str) -> Daemon:
    config = path.parent / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  static: [{{name: t, path: {path}}}]
  refresh_interval_s: 3600
policies:
  defaults:
    clean: {{enabled: false}}
    archival: {{enabled: false}}
    orphan_clean: {orphan_clean}
spark: {{engine: local}}
http: {{port: 0}}
log: {{format: text}}
"""
    )
    daemon = Daemon(load_settings(config, env={}))
    daemon.start()
    wait_for(lambda: daemon.ready)
    return daemon


def _finished(daemon: Daemon) -> list[Any]:
    return [r for r in daemon.runs() if r.action is ServiceAction.ORPHAN_CLEAN and r.state == "finished"]


def test_orphan_clean_is_off_by_default(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table(path)
    daemon = _daemon(path, "{}")
    try:
        decision = next(d for d in daemon.explain("t") if d.action is ServiceAction.ORPHAN_CLEAN)
        assert [r.code.value for r in decision.reasons] == ["policy_disabled"]
        assert decision.reasons[0].evidence["key"] == "policies.defaults.orphan_clean.enabled"
    finally:
        daemon.drain(5)


def test_orphan_clean_dry_run_by_policy_lists_and_changes_nothing_then_deletes_the_same(tmp_path: Path) -> None:
    path = tmp_path / "t"
    rows = _rows(_table(path))
    renamed, manual = _stray_copy(path)
    expected = {str(renamed.relative_to(path)), str(manual.relative_to(path))}
    before = _hashes(path)
    daemon = _daemon(path, "{enabled: true, older_than_s: 0.001}")  # dry_run: true by default
    try:
        run = wait_for(lambda: _finished(daemon))[0]  # the first cycle ran it by policy
        assert run.outcome.value == "succeeded" and set(run.files) == expected
        assert run.detail.startswith("dry run: 2 orphan file(s) would be removed")
        assert _hashes(path) == before
        record = TestClient(create_app(daemon)).get(f"/api/v1/runs/{run.run_id}").json()
        assert set(record["files"]) == expected
        # spaced by interval_s: the next cycle does not search again
        daemon.cycle()
        assert len(_finished(daemon)) == 1
        decision = next(d for d in daemon.explain("t") if d.action is ServiceAction.ORPHAN_CLEAN)
        assert [r.code.value for r in decision.reasons] == ["not_due"]
        assert "orphan_clean.interval_s=86400" in decision.reasons[0].message
    finally:
        daemon.drain(5)
    daemon = _daemon(path, "{enabled: true, older_than_s: 0.001, dry_run: false}")
    try:
        run = wait_for(lambda: _finished(daemon))[0]
        assert set(run.files) == expected and run.detail == "2 orphan file(s) removed"
        after = _hashes(path)
        assert set(before) - set(after) == expected and all(after[k] == before[k] for k in after)
        assert _rows(Table.open(str(path))) == rows
    finally:
        daemon.drain(5)
