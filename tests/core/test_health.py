"""Table health: each finding on a real table built into the state it describes, the score, the policy."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.exceptions import ConfigError
from lakeward.core.health import (
    HealthPolicy,
    HeartbeatState,
    Severity,
    health_report,
    parse_health_policy,
    table_health,
    take_snapshot,
)
from lakeward.core.table import Table
from lakeward.core.timeline import Action, new_instant_time
from lakeward.core.timeline.transitions import create_requested, transition_to_inflight
from lakeward.core.write.heartbeat import heartbeat_path, this_process
from tests.support.fixture_tables import UNMAINTAINED_PARTITION, with_unmaintained_index

HOUR = dt.timedelta(hours=1)


def _rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"id": ids, "ts": [ts] * len(ids), "v": [f"v{i}-{ts}" for i in ids]})


def _table(path: Path, table_type: str = "COPY_ON_WRITE", options: dict[str, Any] | None = None) -> Table:
    return Table.create(str(path), record_key="id", ordering_field="ts", table_type=table_type, options=options or {})


def _codes(report: Any) -> dict[str, Any]:
    return {f.code: f for f in report.findings}


def test_health_healthy_table_scores_100_without_findings(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    for ts in range(3):
        table.upsert(_rows([1, 2, 3], ts))
    report = table_health(table)
    assert report.score == 100
    assert report.findings == ()
    assert set(report.factors.values()) == {0.0}
    snap = report.snapshot
    assert (snap.table_version, snap.table_type, snap.active_commits) == (6, "COPY_ON_WRITE", 3)
    assert snap.pending_plans == () and snap.pending_writes == ()


def test_health_mor_with_many_log_files_finds_compaction_behind(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", "MERGE_ON_READ")
    table.upsert(_rows([1, 2], 0))
    for ts in range(1, 13):  # 12 delta commits on one file group: 12 log files
        table.upsert(_rows([1], ts))
    report = table_health(table)
    assert report.log_files.max == 12 and report.log_files.p50 == 12
    assert report.log_bytes.max > 0
    finding = _codes(report)["compaction_behind"]
    assert finding.severity is Severity.CRITICAL  # the only file group: share 1 >= 0.25
    assert "1 file group(s) of 1 have > 10 log files (max 12)" in finding.message
    assert "no completed compaction" in finding.message
    assert report.factors["compaction"] == 1.0
    assert report.score == 79  # weight 25 of 120 lost (the metadata table's factor, 20, counts: it has one)

    # a compaction plan pending for 2 h is named with its age
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    later = table_health(table, now=dt.datetime.now(dt.UTC) + 2 * HOUR)
    message = _codes(later)["compaction_behind"].message
    assert f"plan {instant} pending since 2 h" in message
    assert instant in _codes(later)["compaction_behind"].action

    # once compacted, the finding goes and the last compaction is shown as recent
    table.run_compaction(instant)
    after = table_health(table)
    assert "compaction_behind" not in _codes(after)
    assert after.snapshot.seconds_since_last["compaction"] is not None
    assert after.snapshot.seconds_since_last["compaction"] < 600


def test_health_many_small_base_files_are_a_finding(tmp_path: Path) -> None:
    path = tmp_path / "t"
    writer = _table(path, options={"hoodie.parquet.small.file.limit": 0})  # no packing: a file per insert
    for i in range(12):
        writer.insert(_rows([i], i))
    table = Table.open(str(path))  # the default limit, 100 MiB: every file is small
    report = table_health(table)
    assert report.small_files == 12 and report.small_file_share == 1.0
    finding = _codes(report)["small_files"]
    assert finding.severity is Severity.CRITICAL
    assert "12 of 12 base files (100%) are under hoodie.parquet.small.file.limit=104857600" in finding.message
    # under the limit the files were written with, none is small
    assert "small_files" not in _codes(table_health(writer))


def _pending_write(table: Table) -> str:
    time_ = new_instant_time(table.timeline().latest_time(), table.config.timeline_timezone)
    transition_to_inflight(table.storage, create_requested(table.storage, time_, Action.COMMIT))
    return time_


def test_health_stale_pending_write_by_heartbeat_state(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    table.upsert(_rows([1], 0))
    expired = _pending_write(table)
    table.storage.write_bytes(heartbeat_path(expired), this_process().to_bytes())
    old = time.time() - 3600  # last refreshed an hour ago: past 60 s x 2 misses
    os.utime(table.storage.full_path(heartbeat_path(expired)), (old, old))
    live = _pending_write(table)
    table.storage.write_bytes(heartbeat_path(live), this_process().to_bytes())
    missing = _pending_write(table)

    report = table_health(table)
    states = {w.instant_time: w.heartbeat for w in report.snapshot.pending_writes}
    assert states == {expired: HeartbeatState.EXPIRED, live: HeartbeatState.LIVE, missing: HeartbeatState.MISSING}
    stale = [f for f in report.findings if f.code == "stale_pending_write"]
    assert len(stale) == 1 and expired in stale[0].message and stale[0].severity is Severity.CRITICAL
    assert "its heartbeat expired 1 h ago" in stale[0].message
    # a write without heartbeat is a warning only once it is as old as a plan would be
    assert "pending_write_without_heartbeat" not in _codes(report)
    later = table_health(table, now=dt.datetime.now(dt.UTC) + 2 * HOUR)
    without = _codes(later)["pending_write_without_heartbeat"]
    assert missing in without.message and without.severity is Severity.WARNING
    # two hours on, the live heartbeat is expired too
    assert {w.heartbeat for w in later.snapshot.pending_writes} == {HeartbeatState.EXPIRED, HeartbeatState.MISSING}


def test_health_pending_plan_ages_into_warning_then_critical(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", "MERGE_ON_READ")
    table.upsert(_rows([1, 2], 0))
    table.upsert(_rows([1], 1))
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    now = dt.datetime.now(dt.UTC)
    assert "pending_plan_aging" not in _codes(table_health(table, now=now))
    warning = _codes(table_health(table, now=now + 2 * HOUR))["pending_plan_aging"]
    assert warning.severity is Severity.WARNING
    assert f"1 compaction plan(s) pending; the oldest, {instant} (requested), since 2 h" == warning.message
    critical = table_health(table, now=now + 7 * HOUR)
    assert _codes(critical)["pending_plan_aging"].severity is Severity.CRITICAL
    assert critical.oldest_pending_plans["compaction"].instant_time == instant
    assert critical.score == 88  # weight 15 of 120 lost
    data = json.loads(json.dumps(critical.to_json_dict()))
    assert data["score"] == 88 and data["factors"]["pending_plans"] == 1.0
    assert data["findings"][0]["severity"] == "critical" and data["findings"][0]["code"] == "pending_plan_aging"
    assert data["oldest_pending_plans"]["compaction"]["instant_time"] == instant
    assert data["snapshot"]["taken_at"].startswith(str((now + 7 * HOUR).year))


def test_health_cleaner_backlog_counts_versions_beyond_retention(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", options={"hoodie.cleaner.commits.retained": 1})
    for ts in range(14):  # every upsert rewrites the one base file: 14 versions
        table.upsert(_rows([1, 2], ts))
    report = table_health(table)
    assert report.snapshot.cleanable_files == 12  # all but the latest and the one a read as of it needs
    finding = _codes(report)["cleaner_backlog"]
    assert finding.severity is Severity.CRITICAL
    assert "12 file(s) beyond retention (KEEP_LATEST_COMMITS, hoodie.cleaner.commits.retained=1)" in finding.message
    assert "no completed clean" in finding.message
    table.clean()
    after = table_health(table)
    assert "cleaner_backlog" not in _codes(after)
    assert after.snapshot.seconds_since_last["clean"] is not None


def test_health_archival_backlog_against_keep_max_commits(tmp_path: Path) -> None:
    options = {"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3}
    table = _table(tmp_path / "t", options=options)
    for ts in range(7):
        table.upsert(_rows([ts], ts))
    finding = _codes(table_health(table))["archival_backlog"]
    assert finding.severity is Severity.CRITICAL  # 7 / 3 >= 2
    assert "7 completed commits on the active timeline (7 instants) exceed hoodie.keep.max.commits=3" in (
        finding.message
    )
    table.archive()
    after = table_health(table)
    assert after.snapshot.active_commits == 2
    assert "archival_backlog" not in _codes(after)


def test_health_v9_fixture_reads_without_writing(fixture_table: Any) -> None:
    path = with_unmaintained_index(fixture_table("mor/avro", "v9_txns_simple_meta"))
    before = sorted((p, p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file())
    report = table_health(Table.open(str(path)))
    assert report.snapshot.table_version == 9
    assert report.snapshot.active_commits > 0
    finding = _codes(report)["services_read_only"]
    assert finding.severity is Severity.INFO
    assert UNMAINTAINED_PARTITION in finding.message  # the reason, not only "not yet" (it said to upgrade lakeward)
    assert before == sorted((p, p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file())


def test_health_score_follows_configured_weights(tmp_path: Path) -> None:
    options = {"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3}
    table = _table(tmp_path / "t", options=options)
    for ts in range(7):
        table.upsert(_rows([ts], ts))
    snapshot = take_snapshot(table)
    assert health_report(snapshot).score == 88  # weight 15 of 120 lost (with the metadata table's 20)
    heavy_archival = parse_health_policy({"weights": {"archival": 50, "compaction": 50, "small_files": 0}})
    assert health_report(snapshot, heavy_archival).score == 70  # 50 of 165 lost
    lenient = parse_health_policy({"thresholds": {"archival_critical_ratio": 3}})
    assert health_report(snapshot, lenient).score == 94  # a warning: half of 15, of 120


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"weights": {"compaction": -1}}, "weights.compaction"),
        ({"weights": {"compation": 1}}, "weights.compation"),
        ({"thresholds": {"max_log_files": 0}}, "thresholds.max_log_files"),
        ({"thresholds": {"pending_plan_warning_age": "soon"}}, "thresholds.pending_plan_warning_age"),
        ({"thresholds": {"cleaner_warning_ratio": 5}}, "thresholds.cleaner_warning_ratio"),
        ({"weights": {"compaction": float("inf")}}, "weights.compaction"),
        ({"weights": {"small_files": float("nan")}}, "weights.small_files"),
        ({"thresholds": {"cleaner_critical_ratio": float("inf")}}, "thresholds.cleaner_critical_ratio"),
        ({"thresholds": {"pending_plan_critical_age": float("inf")}}, "thresholds.pending_plan_critical_age"),
        (
            {
                "weights": dict.fromkeys(
                    ("compaction", "small_files", "pending_plans", "pending_writes", "cleaner", "archival"), 0
                )
            },
            "weights",
        ),
    ],
)
def test_health_policy_errors_name_the_key(values: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_health_policy(values)


def test_health_policy_defaults_and_durations() -> None:
    policy = parse_health_policy({"thresholds": {"pending_plan_warning_age": 600}})
    assert policy.thresholds.pending_plan_warning_age == dt.timedelta(minutes=10)
    assert HealthPolicy().weights.compaction == 25


@pytest.fixture
def new_york_time(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The process's local zone is five hours behind UTC for the test (so UTC and local differ)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_health_ages_on_a_utc_timeline(tmp_path: Path, new_york_time: None) -> None:
    """Instant times of a `hoodie.table.timeline.timezone=UTC` table are read as UTC, not local time."""
    table = _table(tmp_path / "t", "MERGE_ON_READ", options={"hoodie.table.timeline.timezone": "UTC"})
    table.upsert(_rows([1, 2], 0))
    table.upsert(_rows([1], 1))
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    later = table_health(table, now=dt.datetime.now(dt.UTC) + 2 * HOUR)
    (plan,) = later.snapshot.pending_plans
    assert abs(plan.age_seconds - 7200) < 120
    assert _codes(later)["pending_plan_aging"].message.endswith("since 2 h")


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_health_a_table_with_damaged_data_files_scores_0(tmp_path: Path, damage: str) -> None:
    """A table whose completed commits name files that are missing or cut short cannot be read: its
    score is 0 with a critical finding naming the file, not 100 (its timeline alone looked healthy)."""
    table = _table(tmp_path / "t")
    for ts in range(3):
        table.upsert(_rows([1, 2, 3], ts))
    assert table_health(table).score == 100
    # the latest base file (names end with `_<instant>.parquet`)
    base = max((p for p in (tmp_path / "t").iterdir() if p.suffix == ".parquet"), key=lambda p: p.name.rsplit("_")[-1])
    if damage == "truncated":
        base.write_bytes(base.read_bytes()[:100])
    else:
        base.unlink()
    report = table_health(Table.open(str(tmp_path / "t")))
    assert report.score == 0
    finding = _codes(report)["damaged_files"]
    assert finding.severity is Severity.CRITICAL and finding.factor == "integrity"
    assert base.name in finding.message and ("missing" if damage == "deleted" else "size") in finding.message
    assert "lakeward show --check" in finding.action
    assert report.snapshot.damaged_files and base.name in report.snapshot.damaged_files[0]
