"""Prometheus metrics of the daemon: one class holds every metric, on its own registry.

Names follow Prometheus conventions (`lakeward_` prefix, base units, `_total` counters).
The daemon serves `render()` at `/metrics`; tests and the API read the same objects.
Rendering the text costs about 10 ms of CPU with a few hundred series, in the process that
serves the API, so `render()` keeps the bytes it made for `RENDER_MAX_AGE_S`: scrapes within
that time get the same bytes (values at most that old), however many scrapers there are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from lakeward.core.health import HealthReport, Severity
from lakeward.services.model import Outcome, PendingPlan, ServiceAction, TableProblem, TableRef

#: Buckets for table-service run durations: seconds to hours.
RUN_SECONDS_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, float("inf"))
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: How long `DaemonMetrics.render()` serves the bytes it rendered (seconds): a scrape sees values
#: at most this old. Prometheus scrapes every 15 s or so; the bound only matters to many scrapers.
RENDER_MAX_AGE_S = 1.0


class DaemonMetrics:
    """Every metric the daemon exports. Create one per daemon (tests create their own)."""

    def __init__(self, registry: CollectorRegistry | None = None, render_max_age_s: float = RENDER_MAX_AGE_S):
        self.registry = registry or CollectorRegistry()
        self.render_max_age_s = render_max_age_s
        #: (monotonic time rendered, bytes) of the last `render()`.
        self._rendered: tuple[float, bytes] | None = None
        self._render_lock = threading.Lock()
        #: The label sets each per-cycle gauge holds now (`_set_series`).
        self._series: dict[Gauge, set[tuple[str, ...]]] = {}
        self._series_lock = threading.Lock()
        r = self.registry
        self.pending_plans = Gauge(
            "lakeward_pending_plans", "Pending (requested or inflight) plans", ["table", "action"], registry=r
        )
        self.oldest_pending_age = Gauge(
            "lakeward_oldest_pending_plan_age_seconds",
            "Age of the oldest pending plan, from its instant time",
            ["table", "action"],
            registry=r,
        )
        self.runs = Counter("lakeward_runs", "Plan runs by outcome", ["table", "action", "outcome"], registry=r)
        self.run_seconds = Histogram(
            "lakeward_run_duration_seconds",
            "Duration of plan runs",
            ["action", "outcome"],
            buckets=RUN_SECONDS_BUCKETS,
            registry=r,
        )
        self.records_written = Counter(
            "lakeward_records_written", "Records written by table services", ["table", "action"], registry=r
        )
        self.bytes_written = Counter(
            "lakeward_bytes_written", "Bytes written by table services", ["table", "action"], registry=r
        )
        self.claim_attempts = Counter("lakeward_claim_attempts", "Attempts to claim a plan", ["result"], registry=r)
        self.discovery_seconds = Histogram(
            "lakeward_discovery_cycle_seconds",
            "Duration of one discovery cycle over all tables",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, float("inf")),
            registry=r,
        )
        self.last_discovery = Gauge(
            "lakeward_last_successful_discovery_timestamp_seconds", "When the last discovery cycle ended", registry=r
        )
        self.tables = Gauge("lakeward_tables", "Tables the daemon looks after", registry=r)
        self.tables_by_version = Gauge(
            "lakeward_tables_by_version",
            "Tables read in the last cycle, by hoodie.table.version and whether lakeward runs no table service on them",
            ["version", "read_only"],
            registry=r,
        )
        self.table_version = Gauge(
            "lakeward_table_version", "hoodie.table.version of each table read in the last cycle", ["table"], registry=r
        )
        self.table_version_changes = Counter(
            "lakeward_table_version_changes",
            "Changes of a table's hoodie.table.version seen between two discovery cycles (an upgrade or downgrade)",
            ["table"],
            registry=r,
        )
        self.tables_failing = Gauge(
            "lakeward_tables_failing_discovery", "Tables that could not be read in the last cycle", registry=r
        )
        self.table_failing = Gauge(
            "lakeward_table_failing", "1 when this table could not be read in the last cycle", ["table"], registry=r
        )
        self.zookeeper_connected = Gauge(
            "lakeward_zookeeper_connected", "1 while the ZooKeeper session is connected", registry=r
        )
        self.running = Gauge("lakeward_running_plans", "Plans running now", ["action"], registry=r)
        self.quarantined = Gauge(
            "lakeward_quarantined_plans", "Plans quarantined after repeated failures", ["table", "action"], registry=r
        )
        self.last_success = Gauge(
            "lakeward_last_successful_run_timestamp_seconds",
            "When a run of this action last succeeded on this table",
            ["table", "action"],
            registry=r,
        )
        self.ready = Gauge("lakeward_ready", "1 while the replica takes new work", registry=r)
        self.health_score = Gauge(
            "lakeward_table_health_score", "Health score of the table, 0-100 (docs/health.md)", ["table"], registry=r
        )
        self.health_penalty = Gauge(
            "lakeward_table_health_factor_penalty",
            "Penalty of one health factor: 0 (fine), 0.5 (warning) or 1 (critical)",
            ["table", "factor"],
            registry=r,
        )
        self.health_findings = Gauge(
            "lakeward_table_health_findings", "Health findings by severity", ["table", "severity"], registry=r
        )
        self.metadata_lag = Gauge(
            "lakeward_table_metadata_lag_instants",
            "Completed data-table instants the table's metadata table does not reflect (tables with one)",
            ["table"],
            registry=r,
        )
        self.metadata_lag_age = Gauge(
            "lakeward_table_metadata_lag_seconds",
            "Seconds since the oldest data-table instant the metadata table does not reflect completed (0: no lag)",
            ["table"],
            registry=r,
        )
        self.metadata_uncompacted = Gauge(
            "lakeward_table_metadata_uncompacted_instants",
            "Completed data-table instants the metadata table holds only in log files, not yet compacted "
            "into its base file (tables with one)",
            ["table"],
            registry=r,
        )
        self.run_peak_rss = Histogram(
            "lakeward_run_peak_rss_bytes",
            "Peak resident memory of a run's child process (local engine) or of the Spark driver's process tree "
            "while the run executed (Spark engine); process isolation",
            ["action"],
            buckets=tuple(2**20 * mb for mb in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)) + (float("inf"),),
            registry=r,
        )

    # -- updates ------------------------------------------------------------------------------
    def observe_discovery(
        self,
        tables: Iterable[TableRef],
        pending: Iterable[PendingPlan],
        problems: Iterable[TableProblem],
        seconds: float,
        now: float,
        instant_age: dict[str, float] | None = None,
    ) -> None:
        """One discovery cycle: pending plans per table and action, their oldest age, failing tables.

        `instant_age` maps an instant time to its age in seconds (the caller knows the timeline's
        time zone); plans without an entry report age 0.
        """
        ages = instant_age or {}
        table_list = list(tables)
        counts: dict[tuple[str, str], int] = {}
        oldest: dict[tuple[str, str], float] = {}
        for plan in pending:
            key = (plan.table.name, plan.action.value)
            counts[key] = counts.get(key, 0) + 1
            oldest[key] = max(oldest.get(key, 0.0), ages.get(plan.instant, 0.0))
        names = [table.name for table in table_list]
        keys = [(name, action.value) for name in names for action in ServiceAction]
        self._set_series(self.pending_plans, {key: counts.get(key, 0) for key in keys})
        self._set_series(self.oldest_pending_age, {key: oldest.get(key, 0.0) for key in keys})
        failing = {p.table.name for p in problems}
        self._set_series(self.table_failing, {(name,): 1 if name in failing else 0 for name in names})
        self.tables.set(len(table_list))
        self.tables_failing.set(len(failing))
        self.discovery_seconds.observe(seconds)
        self.last_discovery.set(now)

    def observe_table_versions(self, versions: Iterable[tuple[int, bool]]) -> None:
        """Tables per table version from one discovery cycle: (version, read-only) of each table read."""
        counts: dict[tuple[int, bool], int] = {}
        for version, read_only in versions:
            counts[(version, read_only)] = counts.get((version, read_only), 0) + 1
        self._set_series(
            self.tables_by_version,
            {(str(version), "true" if read_only else "false"): n for (version, read_only), n in counts.items()},
        )

    def observe_quarantined(self, keys: Iterable[str]) -> None:
        """The quarantined plans (`table/action/instant` keys), counted per table and action."""
        counts: dict[tuple[str, ...], float] = {}
        for key in keys:
            table, action, _ = key.rsplit("/", 2)
            counts[(table, action)] = counts.get((table, action), 0) + 1
        self._set_series(self.quarantined, counts)

    def observe_versions_by_table(self, versions: dict[str, int], changed: Iterable[str]) -> None:
        """Each table's version from one discovery cycle, and the tables whose version changed since the last."""
        self.table_version.clear()
        for table, version in sorted(versions.items()):
            self.table_version.labels(table).set(version)
        for table in changed:
            self.table_version_changes.labels(table).inc()

    def observe_health(self, reports: dict[str, HealthReport | None]) -> None:
        """One cycle's health reports by table name; a table without a report (it failed) has no series."""
        scored = {table: report for table, report in reports.items() if report is not None}
        self._set_series(self.health_score, {(table,): report.score for table, report in scored.items()})
        self._set_series(
            self.health_penalty,
            {(t, factor): penalty for t, r in scored.items() for factor, penalty in r.factors.items()},
        )
        self._set_series(
            self.health_findings,
            {
                (t, severity.value): sum(1 for f in r.findings if f.severity is severity)
                for t, r in scored.items()
                for severity in Severity
            },
        )
        lagging = {t: r.snapshot for t, r in scored.items() if r.snapshot.metadata_lag_instants is not None}
        self._set_series(self.metadata_lag, {(t,): float(s.metadata_lag_instants or 0) for t, s in lagging.items()})
        self._set_series(self.metadata_lag_age, {(t,): s.metadata_lag_seconds or 0.0 for t, s in lagging.items()})
        self._set_series(
            self.metadata_uncompacted, {(t,): float(s.metadata_uncompacted_instants or 0) for t, s in lagging.items()}
        )

    def _set_series(self, gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
        """Set `gauge` to exactly these series: each label set to its value, the label sets that went
        away removed. Series are never cleared and made again: that cost a few hundred object
        constructions per discovery cycle in the process that serves the API, and a scrape between
        the clear and the sets saw them missing."""
        with self._series_lock:
            for labels, value in values.items():
                gauge.labels(*labels).set(value)
            for labels in self._series.get(gauge, set()) - values.keys():
                gauge.remove(*labels)
            self._series[gauge] = set(values)

    def observe_run(
        self,
        table: TableRef,
        action: ServiceAction,
        outcome: Outcome,
        seconds: float,
        now: float,
        records: int = 0,
        bytes_written: int = 0,
    ) -> None:
        """One finished run of a plan."""
        self.runs.labels(table.name, action.value, outcome.value).inc()
        self.run_seconds.labels(action.value, outcome.value).observe(seconds)
        if records:
            self.records_written.labels(table.name, action.value).inc(records)
        if bytes_written:
            self.bytes_written.labels(table.name, action.value).inc(bytes_written)
        if outcome in (Outcome.SUCCEEDED, Outcome.NOTHING_TO_DO):
            self.last_success.labels(table.name, action.value).set(now)

    def observe_run_memory(self, action: ServiceAction, peak_rss_bytes: int) -> None:
        """The peak resident memory of one finished run's child process."""
        self.run_peak_rss.labels(action.value).observe(peak_rss_bytes)

    def observe_claim(self, result: str) -> None:
        """One claim attempt: `won`, `conflict` (another run holds it) or `unavailable` (the claims
        service, e.g. ZooKeeper, could not be reached)."""
        self.claim_attempts.labels(result).inc()

    def render(self) -> bytes:
        """The text exposition format for `/metrics`, rendered at most once per `render_max_age_s`
        (module doc). Concurrent scrapes wait for one render rather than each making their own."""
        with self._render_lock:
            now = time.monotonic()
            if self._rendered is None or now - self._rendered[0] >= self.render_max_age_s:
                self._rendered = (now, generate_latest(self.registry))
            return self._rendered[1]


__all__ = ["CONTENT_TYPE", "RENDER_MAX_AGE_S", "DaemonMetrics"]
