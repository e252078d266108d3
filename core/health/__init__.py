"""Table health: a report of what an operator needs to know about a table, and a score.

`table_health(table, now=...)` takes a `HealthSnapshot` (timeline, file listing, plans,
heartbeats; no data file is read) and computes a `HealthReport` under a `HealthPolicy`
(weights and thresholds): numbers per factor, findings with severity and a suggested
action, and a score from 0 to 100. `take_snapshot` and `health_report` are the two
halves, for callers (the daemon) that take the snapshot at discovery and score it later.
See docs/health.md.
"""

from __future__ import annotations

import datetime as dt

from lakeward.core.health.policy import FACTORS, HealthPolicy, HealthThresholds, HealthWeights, parse_health_policy
from lakeward.core.health.report import Distribution, Finding, HealthReport, Severity, format_age, health_report
from lakeward.core.health.snapshot import (
    HealthSnapshot,
    HeartbeatState,
    PendingPlan,
    PendingWrite,
    take_snapshot,
)
from lakeward.core.table import Table

__all__ = [
    "FACTORS",
    "Distribution",
    "Finding",
    "HealthPolicy",
    "HealthReport",
    "HealthSnapshot",
    "HealthThresholds",
    "HealthWeights",
    "HeartbeatState",
    "PendingPlan",
    "PendingWrite",
    "Severity",
    "format_age",
    "health_report",
    "parse_health_policy",
    "table_health",
    "take_snapshot",
]


def table_health(table: Table, *, now: dt.datetime | None = None, policy: HealthPolicy | None = None) -> HealthReport:
    """The health report of `table` as of `now` (default: the current time); reads no data file."""
    return health_report(take_snapshot(table, now), policy)
