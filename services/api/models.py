"""The HTTP API's request bodies and response models: the shapes the OpenAPI schema documents.

Responses mirror the dictionaries the daemon builds (`TableView.to_dict`, `RunRecord.to_dict`,
`plan_dict`), key for key, so declaring them changes no answer; they name and type every field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lakeward.services.model import ServiceAction
from lakeward.services.planning import ReasonCode

# ------------------------------------------------------------------------------------------ requests


class TriggerBody(BaseModel):
    """What to do now on a table."""

    model_config = ConfigDict(extra="forbid")

    action: ServiceAction = Field(description="compaction, clean, clustering, archival, rollback, ...")
    mode: Literal["schedule_and_run", "schedule", "run"] = Field(
        default="schedule_and_run",
        description="schedule_and_run: write a new plan (forced) and run it; schedule: only write it; "
        "run: run a pending plan (`instant`, default the oldest).",
    )
    instant: str | None = Field(default=None, description="The pending plan to run (mode run).")
    dry_run: bool = Field(
        default=False,
        description="Change nothing: answer at once with a finished run whose `files` and `detail` say what "
        "the action would delete or change now (clean, archival, orphan_clean).",
    )


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", max_length=500, description="Why (shown in the API and logs).")


class ReleaseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=5, description="The quarantined work item: table/action/instant.")


# ----------------------------------------------------------------------------------------- responses


class Health(BaseModel):
    """Liveness: the process answers."""

    status: str
    replica: str


class Readiness(BaseModel):
    """Readiness of this replica, with the reasons it does not take new work (if any)."""

    ready: bool
    replica: str
    reasons: list[str]


class PlanInfo(BaseModel):
    """A pending plan on a table's timeline (requested or inflight)."""

    table: str
    action: ServiceAction
    instant: str
    state: str = Field(description="requested or inflight.")
    key: str = Field(description="The work item: table/action/instant.")


class PlanStatus(PlanInfo):
    """A pending plan with what the daemon does about it."""

    quarantined: bool
    running_here: str | None = Field(description="The run id when this replica runs it now.")
    run_id: str | None = Field(description="The run id when any replica runs it now.")
    running_on: str | None = Field(description="The replica that runs it now, if any.")


class RunInfo(BaseModel):
    """One run of a work item, on the replica named in `replica`."""

    run_id: str
    table: str
    action: ServiceAction
    instant: str | None
    key: str
    trigger: str
    mode: str
    replica: str
    state: str = Field(
        description="running, waiting_retry, finished, or lost (its replica died or restarted while running it)."
    )
    phase: str
    progress: str
    attempts: int
    outcome: str | None
    started_at: float
    ended_at: float | None
    duration_s: float
    error: str | None
    detail: str
    files: list[str] = Field(
        default_factory=list, description="Files the run deleted, or would delete in a dry run (orphan removal)."
    )
    records_written: int
    bytes_written: int
    pid: int | None = Field(default=None, description="The child process running the attempt now (local engine).")
    peak_rss_mb: float | None = Field(
        default=None, description="Peak resident memory of the run's child processes, MiB (local engine)."
    )


class TableInfo(BaseModel):
    """A table with its state: pending plans, problems, pause."""

    name: str
    path: str
    state_known: bool = Field(
        description="False until a discovery cycle has read the table and while the last one could not "
        "(`problem` says why): its type, counts and pending lists are then unknown, not empty."
    )
    table_type: str | None
    table_version: int | None
    read_only: str | None
    paused: bool
    paused_by: str | None = Field(description="policy or on-call.")
    pause_reason: str | None
    paused_via: str | None = Field(description="The replica that took the on-call pause.")
    paused_since: str | None
    healthy: bool
    problem: str | None
    last_completed_instant: str | None
    pending_plans: list[PlanInfo]
    pending_writes: list[str]
    delta_commits_since_compaction: int | None
    writes_since_clean: int | None
    completed_instants: int | None


class TableDetail(TableInfo):
    """A table with its recent runs on any replica (newest first, at most 20)."""

    runs: list[RunInfo]


class QuarantineInfo(BaseModel):
    """A work item held back until on-call releases it."""

    key: str
    reason: str
    failures: int
    since: float
    replica: str


class ClaimEvent(BaseModel):
    """One line of the claim log: `event` is claimed, conflict, released, lost or invalid."""

    time: float
    key: str
    owner: str
    event: str


class DeploymentClaim(BaseModel):
    """A claim held now, by any replica."""

    key: str
    replica: str
    host: str


class Claims(BaseModel):
    """Every claim held in the deployment, and this replica's claim log and the claims it holds."""

    replica: str
    held: list[str]
    log: list[ClaimEvent]
    deployment: list[DeploymentClaim]


class AuditEntry(BaseModel):
    """One mutating API call, on any replica."""

    time: float
    replica: str = Field(description="The replica that answered the call.")
    token: str | None = Field(description="The name of the bearer token (None: no valid token was given).")
    method: str
    path: str
    route: str | None = Field(description="The route called, e.g. /api/v1/tables/{name}/trigger.")
    target: str = Field(description="What the call was about: a table, a run id or a work item.")
    request: str = Field(description="The request body, shortened.")
    status: int = Field(description="The HTTP status code of the answer.")


class PauseResult(BaseModel):
    table: str
    #: Whether the table is paused now, by either kind of pause (a resume leaves a pause by policy).
    paused: bool
    #: policy (`policies.*.paused`, which only the settings change) or on-call; null when not paused.
    paused_by: str | None = None
    #: Whether the call changed the on-call pause.
    changed: bool


class CancelResult(BaseModel):
    run_id: str
    cancelling: bool
    #: The replica that runs the run and stops it.
    replica: str | None = None


class ReleaseResult(BaseModel):
    key: str
    released: bool


# -------------------------------------------------------------------------------------------- health


class HealthFindingInfo(BaseModel):
    """One health finding: its factor, severity, a stable code, the numbers, and what to do."""

    factor: str
    severity: Literal["info", "warning", "critical"]
    code: str
    message: str
    action: str


class DistributionInfo(BaseModel):
    """p50 / p99 / max of a per-file-group number."""

    p50: float
    p99: float
    max: float


class PendingPlanAge(BaseModel):
    action: str
    instant_time: str
    state: str
    age_seconds: float


class PendingWriteHealth(BaseModel):
    action: str
    instant_time: str
    age_seconds: float
    heartbeat: Literal["live", "expired", "missing"]
    heartbeat_age_seconds: float | None


class TableHealthInfo(BaseModel):
    """A table's health as of the daemon's last discovery cycle (docs/health.md).

    `score` is None (and `error` says why) when the table could not be scored; the other
    fields are then absent.
    """

    table: str
    score: int | None = Field(description="0-100; None when the table could not be scored.")
    error: str | None = None
    table_name: str | None = None
    table_path: str | None = None
    table_version: int | None = None
    table_type: str | None = None
    services_writable: bool | None = None
    taken_at: str | None = Field(default=None, description="When the snapshot was taken (ISO 8601).")
    factors: dict[str, float] = Field(default_factory=dict, description="Factor -> penalty (0, 0.5 or 1).")
    findings: list[HealthFindingInfo] = Field(default_factory=list, description="Worst first.")
    log_files: DistributionInfo | None = None
    log_bytes: DistributionInfo | None = None
    small_files: int | None = None
    small_file_share: float | None = None
    small_file_limit: int | None = None
    oldest_pending_plans: dict[str, PendingPlanAge] = Field(default_factory=dict)
    pending_writes: list[PendingWriteHealth] = Field(default_factory=list)
    seconds_since_last: dict[str, float | None] = Field(
        default_factory=dict, description="Seconds since the last completed compaction, clean, clustering."
    )
    cleanable_files: int | None = None
    cleaner_policy: str | None = None
    cleaner_retention: str | None = None
    live_files: int | None = None
    active_commits: int | None = None
    active_instants: int | None = None
    keep_min_commits: int | None = None
    keep_max_commits: int | None = None
    metadata_lag_instants: int | None = Field(
        default=None,
        description="Completed data-table instants the metadata table does not reflect; None: no metadata table.",
    )
    metadata_lag_oldest: str | None = Field(default=None, description="The oldest of them (instant time).")
    metadata_lag_seconds: float | None = Field(default=None, description="Seconds since the oldest of them completed.")
    metadata_uncompacted_instants: int | None = Field(
        default=None,
        description="Completed data-table instants the metadata table holds only in log files (not yet compacted).",
    )
    metadata_compaction_blocked_by: str | None = Field(
        default=None,
        description="The pending data-table instant that holds the metadata table's compaction back (None: none).",
    )
    damaged_files: list[str] = Field(
        default_factory=list,
        description="Files completed instants recorded that are missing or cut short (the score is then 0).",
    )


# ------------------------------------------------------------------------------------------- explain


class ReasonInfo(BaseModel):
    """One reason the work does not run now, with its evidence (instants, counts, config keys)."""

    code: ReasonCode
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)


class DecisionInfo(BaseModel):
    """What the daemon would do now for one action (one entry per pending plan, or the new plan)."""

    action: ServiceAction
    instant: str | None = Field(description="The pending plan it would run (None: a new plan).")
    work: str | None = Field(description="`run pending plan`, `schedule and run a new plan`, or None: nothing due.")
    why: str | None = Field(description="Why the planner proposes it (None when it proposes nothing).")
    would_run: bool = Field(description="True: the daemon would plan or run it now.")
    reasons: list[ReasonInfo] = Field(description="Every reason it does not run now, in the planner's order.")


class ExplainInfo(BaseModel):
    """Why each action runs, or does not run, on a table now (docs/health.md, "Explain")."""

    table: str
    at: str = Field(description="When the decision was made (ISO 8601, UTC).")
    actions: list[DecisionInfo]


class TimelineInstant(BaseModel):
    """One instant of a table's active timeline."""

    instant: str = Field(description="The instant time.")
    action: str = Field(description="commit, deltacommit, compaction, clean, replacecommit, rollback, ...")
    state: Literal["requested", "inflight", "completed"]
    completion_time: str | None = Field(description="When it completed (table versions 8+; None on version 6).")
