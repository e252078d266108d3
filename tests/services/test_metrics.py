"""The daemon's Prometheus metrics, read back from the text exposition format."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from lakeward import Table
from lakeward.core.health import table_health
from lakeward.services.metrics import DaemonMetrics
from lakeward.services.model import Outcome, PendingPlan, ServiceAction, TableProblem, TableRef
from tests.core.metadata_table.test_lag import lagging_table

A, B = TableRef("a", "/t/a"), TableRef("b", "/t/b")


def _samples(metrics: DaemonMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_discovery_sets_pending_counts_ages_and_failing_tables() -> None:
    metrics = DaemonMetrics(render_max_age_s=0)  # read back twice: no cached rendering
    pending = [
        PendingPlan(A, ServiceAction.COMPACTION, "20260101000000000", "requested"),
        PendingPlan(A, ServiceAction.COMPACTION, "20260101000100000", "inflight"),
        PendingPlan(B, ServiceAction.CLEAN, "20260101000200000", "requested"),
    ]
    ages = {"20260101000000000": 600.0, "20260101000100000": 540.0, "20260101000200000": 5.0}
    metrics.observe_discovery([A, B], pending, [TableProblem(B, "corrupt")], 0.25, 1000.0, ages)
    s = _samples(metrics)
    assert s[("lakeward_pending_plans", (("action", "compaction"), ("table", "a")))] == 2
    assert s[("lakeward_pending_plans", (("action", "clean"), ("table", "b")))] == 1
    assert s[("lakeward_pending_plans", (("action", "clean"), ("table", "a")))] == 0
    assert s[("lakeward_oldest_pending_plan_age_seconds", (("action", "compaction"), ("table", "a")))] == 600
    assert s[("lakeward_tables", ())] == 2
    assert s[("lakeward_tables_failing_discovery", ())] == 1
    assert s[("lakeward_table_failing", (("table", "b"),))] == 1
    assert s[("lakeward_last_successful_discovery_timestamp_seconds", ())] == 1000.0
    assert s[("lakeward_discovery_cycle_seconds_count", ())] == 1
    # the next cycle replaces the gauges: plans that completed disappear
    metrics.observe_discovery([A, B], [], [], 0.1, 1010.0)
    s = _samples(metrics)
    assert s[("lakeward_pending_plans", (("action", "compaction"), ("table", "a")))] == 0
    assert s[("lakeward_tables_failing_discovery", ())] == 0


def test_runs_count_outcomes_durations_and_last_success() -> None:
    metrics = DaemonMetrics()
    metrics.observe_run(A, ServiceAction.COMPACTION, Outcome.SUCCEEDED, 12.0, 2000.0, records=10, bytes_written=4096)
    metrics.observe_run(A, ServiceAction.COMPACTION, Outcome.FAILED, 3.0, 2100.0)
    metrics.observe_claim("won")
    metrics.observe_claim("conflict")
    s = _samples(metrics)
    labels = (("action", "compaction"), ("outcome", "succeeded"), ("table", "a"))
    assert s[("lakeward_runs_total", labels)] == 1
    assert s[("lakeward_records_written_total", (("action", "compaction"), ("table", "a")))] == 10
    assert s[("lakeward_bytes_written_total", (("action", "compaction"), ("table", "a")))] == 4096
    assert s[("lakeward_run_duration_seconds_count", (("action", "compaction"), ("outcome", "failed")))] == 1
    assert s[("lakeward_last_successful_run_timestamp_seconds", (("action", "compaction"), ("table", "a")))] == 2000
    assert s[("lakeward_claim_attempts_total", (("result", "conflict"),))] == 1


def test_each_daemon_has_its_own_registry() -> None:
    first, second = DaemonMetrics(), DaemonMetrics()
    first.observe_claim("won")
    assert ("lakeward_claim_attempts_total", (("result", "won"),)) not in _samples(second)


def test_health_exports_the_metadata_table_lag_of_tables_with_one(tmp_path: Path) -> None:
    lagging = table_health(lagging_table(tmp_path / "lagging", 9)[0])
    plain = Table.create(str(tmp_path / "plain"), record_key="id", table_version=9)
    metrics = DaemonMetrics()
    metrics.observe_health({"lagging": lagging, "plain": table_health(plain)})
    s = _samples(metrics)
    assert s[("lakeward_table_metadata_lag_instants", (("table", "lagging"),))] == 2
    age = s[("lakeward_table_metadata_lag_seconds", (("table", "lagging"),))]
    assert age == lagging.snapshot.metadata_lag_seconds and age >= 0
    penalty = ("lakeward_table_health_factor_penalty", (("factor", "metadata_table"), ("table", "lagging")))
    assert s[penalty] == 0.5
    # a table without a metadata table: no lag series, no metadata_table factor
    assert not [k for k in s if dict(k[1]).get("table") == "plain" and "metadata" in k[0] + str(k[1])]


def test_per_cycle_gauges_keep_their_series_and_drop_the_ones_that_went_away() -> None:
    """A cycle sets the series it has and removes the ones that went away; the others are updated in
    place (never cleared and made again: a scrape in between saw them missing, and making a few hundred
    series per cycle cost CPU in the process that serves the API)."""
    metrics = DaemonMetrics()
    plan = PendingPlan(A, ServiceAction.COMPACTION, "20260101000000000", "requested")
    metrics.observe_discovery([A, B], [plan], [], 0.1, 1000.0)
    metrics.observe_quarantined(["a/compaction/20260101000000000", "b/clean/20260101000200000"])
    series = metrics.pending_plans.labels("a", "compaction")
    metrics.observe_discovery([A], [], [], 0.1, 1001.0)
    metrics.observe_quarantined(["a/compaction/20260101000000000"])
    assert metrics.pending_plans.labels("a", "compaction") is series
    s = _samples(metrics)
    assert s[("lakeward_pending_plans", (("action", "compaction"), ("table", "a")))] == 0
    assert not [k for k in s if ("table", "b") in k[1]], "series of table b, gone, are still exported"
    assert s[("lakeward_quarantined_plans", (("action", "compaction"), ("table", "a")))] == 1


def test_render_serves_the_same_bytes_within_its_max_age_then_renders_again() -> None:
    """`/metrics` renders at most once per `render_max_age_s`: a change shows after that bound, not before."""
    metrics = DaemonMetrics(render_max_age_s=0.5)
    metrics.observe_discovery([A, B], [], [], 0.1, 1000.0)
    first = metrics.render()
    metrics.observe_discovery([A], [], [], 0.1, 1001.0)
    assert metrics.render() is first, "rendered again within the max age"
    assert b"lakeward_tables 2.0" in first
    time.sleep(0.6)
    again = metrics.render()
    assert b"lakeward_tables 1.0" in again
    assert b"lakeward_last_successful_discovery_timestamp_seconds 1001.0" in again
