"""The health report: numbers, findings and a score, computed purely from a `HealthSnapshot`.

Each finding belongs to one factor (`FACTORS`); a factor's penalty is that of its worst
finding (warning 0.5, critical 1, info 0), and the score is
`round(100 * (1 - sum(weight * penalty) / sum(weights)))` over the factors that apply to the
table (`metadata_table` only where there is a metadata table). A table with damaged data
files (files its completed instants recorded, missing or cut short) scores 0 whatever the
weights: it cannot be read. The rules and defaults are listed in docs/health.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from lakeward.core.health.policy import CONDITIONAL_FACTORS, FACTORS, HealthPolicy, HealthThresholds
from lakeward.core.health.snapshot import HealthSnapshot, HeartbeatState, PendingPlan, is_merge_on_read
from lakeward.core.instant_clock import json_ready


class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def penalty(self) -> float:
        return _PENALTY[self]


_PENALTY = {Severity.INFO: 0.0, Severity.WARNING: 0.5, Severity.CRITICAL: 1.0}


@dataclass(frozen=True)
class Finding:
    """One problem: its factor, severity, a stable code, the numbers, and what to do about it."""

    factor: str
    severity: Severity
    code: str
    message: str
    action: str


@dataclass(frozen=True)
class Distribution:
    """p50 / p99 / max of a per-file-group number (nearest-rank percentiles; 0 with no groups)."""

    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[int]) -> Distribution:
        ordered = sorted(values)
        if not ordered:
            return cls(0, 0, 0)

        def rank(q: float) -> float:
            return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])

        return cls(rank(0.5), rank(0.99), float(ordered[-1]))


@dataclass(frozen=True)
class HealthReport:
    """A table's health: the snapshot it was computed from, derived numbers, findings and score."""

    snapshot: HealthSnapshot
    score: int
    #: Factor -> penalty (0, 0.5 or 1), in `FACTORS` order; only the factors that apply to the table
    #: (`metadata_table` on tables with a metadata table).
    factors: dict[str, float]
    findings: tuple[Finding, ...]
    log_files: Distribution
    log_bytes: Distribution
    small_files: int
    small_file_share: float

    def to_json_dict(self) -> dict[str, Any]:
        """The report as plain JSON values (datetimes ISO, enums their values), for the API and CLI."""
        out = json_ready(self)
        assert isinstance(out, dict)
        out["oldest_pending_plans"] = json_ready(self.oldest_pending_plans)
        return out

    @property
    def oldest_pending_plans(self) -> dict[str, PendingPlan]:
        """Action -> its oldest pending plan."""
        return oldest_plans(self.snapshot)


def oldest_plans(snapshot: HealthSnapshot) -> dict[str, PendingPlan]:
    out: dict[str, PendingPlan] = {}
    for plan in snapshot.pending_plans:
        if plan.action not in out or plan.instant_time < out[plan.action].instant_time:
            out[plan.action] = plan
    return out


def format_age(seconds: float | None) -> str:
    """`3 h`, `12 min`, `40 s`, `2 d` (None: `never`)."""
    if seconds is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _since(snapshot: HealthSnapshot, service: str) -> str:
    value = snapshot.seconds_since_last.get(service)
    return f"last {service} {format_age(value)} ago" if value is not None else f"no completed {service}"


def _graded(factor: str, code: str, critical: bool, message: str, action: str) -> Finding:
    """A warning, or a critical finding once its number reached the critical threshold."""
    return Finding(factor, Severity.CRITICAL if critical else Severity.WARNING, code, message, action)


def _compaction(s: HealthSnapshot, t: HealthThresholds) -> list[Finding]:
    if not is_merge_on_read(s) or not s.log_files_per_group:
        return []
    over = sum(1 for n in s.log_files_per_group if n > t.max_log_files)
    if not over:
        return []
    share = over / len(s.log_files_per_group)
    parts = [
        f"{over} file group(s) of {len(s.log_files_per_group)} have > {t.max_log_files} log files "
        f"(max {max(s.log_files_per_group)}): compaction is behind",
        _since(s, "compaction"),
    ]
    pending = oldest_plans(s).get("compaction")
    if pending is not None:
        parts.append(f"plan {pending.instant_time} pending since {format_age(pending.age_seconds)}")
    action = (
        f"run the pending compaction {pending.instant_time}"
        if pending is not None
        else "schedule and run a compaction (Table.schedule_compaction + run_compaction, or the daemon)"
    )
    critical = share >= t.log_files_critical_share
    return [_graded("compaction", "compaction_behind", critical, "; ".join(parts), action)]


def _small_files(s: HealthSnapshot, t: HealthThresholds) -> list[Finding]:
    small = sum(1 for size in s.base_file_sizes if size < s.small_file_limit)
    share = small / len(s.base_file_sizes) if s.base_file_sizes else 0.0
    if small < t.small_files_min_count or share < t.small_files_warning_share:
        return []
    message = (
        f"{small} of {len(s.base_file_sizes)} base files ({share:.0%}) are under "
        f"hoodie.parquet.small.file.limit={s.small_file_limit} bytes; {_since(s, 'clustering')}"
    )
    action = "schedule and run a clustering (Table.schedule_clustering + run_clustering, or the daemon)"
    return [_graded("small_files", "small_files", share >= t.small_files_critical_share, message, action)]


def _pending_plans(s: HealthSnapshot, t: HealthThresholds) -> list[Finding]:
    findings = []
    for action, plan in sorted(oldest_plans(s).items()):
        if plan.age_seconds < t.pending_plan_warning_age.total_seconds():
            continue
        critical = plan.age_seconds >= t.pending_plan_critical_age.total_seconds()
        count = sum(1 for p in s.pending_plans if p.action == action)
        message = (
            f"{count} {action} plan(s) pending; the oldest, {plan.instant_time} ({plan.state}), "
            f"since {format_age(plan.age_seconds)}"
        )
        fix = f"run {action} {plan.instant_time}, or roll it back if it cannot complete"
        findings.append(_graded("pending_plans", "pending_plan_aging", critical, message, fix))
    return findings


def _pending_writes(s: HealthSnapshot, t: HealthThresholds) -> list[Finding]:
    findings = []
    for w in s.pending_writes:
        if w.heartbeat is HeartbeatState.EXPIRED:
            message = (
                f"pending {w.action} {w.instant_time} (since {format_age(w.age_seconds)}): its heartbeat "
                f"expired {format_age(w.heartbeat_age_seconds)} ago, its writer is gone"
            )
            fix = "roll it back (Table.repair(), or Table.rollback(instant))"
            findings.append(Finding("pending_writes", Severity.CRITICAL, "stale_pending_write", message, fix))
        elif w.heartbeat is HeartbeatState.MISSING and w.age_seconds >= t.pending_plan_warning_age.total_seconds():
            message = (
                f"pending {w.action} {w.instant_time} (since {format_age(w.age_seconds)}) has no heartbeat "
                "file: its writer cannot be told alive or gone"
            )
            fix = f"if no writer runs it, roll it back (Table.rollback('{w.instant_time}'))"
            findings.append(
                Finding("pending_writes", Severity.WARNING, "pending_write_without_heartbeat", message, fix)
            )
    return findings


def _cleaner(s: HealthSnapshot, t: HealthThresholds) -> list[Finding]:
    if s.cleanable_files is None or s.cleanable_files < t.cleaner_min_files:
        return []
    ratio = s.cleanable_files / max(1, s.live_files)
    if ratio < t.cleaner_warning_ratio:
        return []
    message = (
        f"{s.cleanable_files} file(s) beyond retention ({s.cleaner_policy}, {s.cleaner_retention}) "
        f"next to {s.live_files} live file(s); {_since(s, 'clean')}"
    )
    fix = "run a clean (Table.clean(), or the daemon's clean)"
    return [_graded("cleaner", "cleaner_backlog", ratio >= t.cleaner_critical_ratio, message, fix)]


def _archival(s: HealthSnapshot, t: HealthThresholds) -> list[Finding]:
    if s.active_commits <= s.keep_max_commits:
        return []
    ratio = s.active_commits / s.keep_max_commits
    message = (
        f"{s.active_commits} completed commits on the active timeline ({s.active_instants} instants) "
        f"exceed hoodie.keep.max.commits={s.keep_max_commits}: archival is behind"
    )
    fix = (
        "run archival (Table.archive()); a pending instant, savepoint or clean retention may hold it back, and on "
        "merge-on-read tables the delta commits a compaction waits for (hoodie.compact.inline.max.delta.commits)"
    )
    return [_graded("archival", "archival_backlog", ratio >= t.archival_critical_ratio, message, fix)]


def _metadata_table(s: HealthSnapshot, t: HealthThresholds) -> list[Finding]:
    if not s.metadata_lag_instants:
        return []
    age = s.metadata_lag_seconds or 0.0
    message = (
        f"metadata table is {s.metadata_lag_instants} instant(s) behind since {s.metadata_lag_oldest} "
        f"(completed {format_age(age)} ago): readers that list through it miss files"
    )
    fix = (
        "find the writer that does not maintain the metadata table and configure it to; then rebuild the "
        "metadata table (disable it with hoodie.metadata.enable=false in a Hudi writer, and enable it again)"
    )
    critical = age >= t.metadata_lag_critical_age.total_seconds()
    return [_graded("metadata_table", "metadata_table_lag", critical, message, fix)]


def applicable_factors(snapshot: HealthSnapshot) -> tuple[str, ...]:
    """The factors that count for this table: every one but `metadata_table` on tables without one."""
    has_mdt = snapshot.metadata_lag_instants is not None
    return tuple(f for f in FACTORS if f not in CONDITIONAL_FACTORS or has_mdt)


def _version(s: HealthSnapshot) -> list[Finding]:
    if s.services_writable:
        return []
    why = s.read_only_reason or "lakeward does not run table services on this version yet"
    message = f"table version {s.table_version}: lakeward reads the table but runs no table service on it: {why}"
    fix = "run table services with Apache Hudi, or upgrade lakeward when it supports what the table uses"
    return [Finding("version", Severity.INFO, "services_read_only", message, fix)]


def _integrity(s: HealthSnapshot) -> list[Finding]:
    if not s.damaged_files:
        return []
    more = f" (and {len(s.damaged_files) - 1} more)" if len(s.damaged_files) > 1 else ""
    message = f"{len(s.damaged_files)} data file(s) of completed instants damaged: {s.damaged_files[0]}{more}"
    fix = (
        f"run `lakeward show --check {s.table_path}` for every problem; restore the files from a copy, or "
        "restore the table to a savepoint before the instants that wrote them (reads and writes fail until then)"
    )
    return [Finding("integrity", Severity.CRITICAL, "damaged_files", message, fix)]


def health_report(snapshot: HealthSnapshot, policy: HealthPolicy | None = None) -> HealthReport:
    """Findings and score of a snapshot under `policy` (default: `HealthPolicy()`). Pure."""
    policy = policy or HealthPolicy()
    t = policy.thresholds
    findings = [
        *_compaction(snapshot, t),
        *_small_files(snapshot, t),
        *_pending_plans(snapshot, t),
        *_pending_writes(snapshot, t),
        *_cleaner(snapshot, t),
        *_archival(snapshot, t),
        *_metadata_table(snapshot, t),
        *_version(snapshot),
        *_integrity(snapshot),
    ]
    counted = applicable_factors(snapshot)
    factors = {f: max((x.severity.penalty for x in findings if x.factor == f), default=0.0) for f in counted}
    weights = policy.weights
    total = sum(weights.of(f) for f in counted)
    lost = sum(weights.of(f) * p for f, p in factors.items())
    small = sum(1 for size in snapshot.base_file_sizes if size < snapshot.small_file_limit)
    rank = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return HealthReport(
        snapshot=snapshot,
        score=0 if snapshot.damaged_files else round(100 * (1 - lost / total)),
        factors=factors,
        findings=tuple(sorted(findings, key=lambda f: rank[f.severity])),
        log_files=Distribution.of(snapshot.log_files_per_group),
        log_bytes=Distribution.of(snapshot.log_bytes_per_group),
        small_files=small,
        small_file_share=small / len(snapshot.base_file_sizes) if snapshot.base_file_sizes else 0.0,
    )
